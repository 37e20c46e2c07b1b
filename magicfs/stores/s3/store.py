"""The S3 operations magicfs needs, over an s3fs filesystem's own client.

Going through s3fs (rather than a second boto3 client) means one set of credentials,
endpoint and retry settings: whatever the user configured for ``s3://`` applies to
the multipart calls too. s3fs's helpers are not used where they fall short for a
committer: its upload listing is neither paged nor prefix-scoped, and its bulk
delete ignores per-key errors.

Every call goes through one retry policy (:mod:`.retry`). Every error it ends in is a
:class:`~magicfs.errors.StoreCallError` naming the operation, the object, the HTTP status
and the S3 error code (:mod:`.failures`), of the class s3fs would have raised
(``FileNotFoundError`` for ``NoSuchKey``/``NoSuchUpload``, ``PermissionError``...), with
s3fs's error and botocore's ``ClientError`` behind it as causes; :func:`error_code` reads
the S3 error code back.

What does not go through here: the s3fs methods the committers call for tree-shaped
work (``fs.ls``/``fs.find`` of a job's tree and destination, ``fs.cat_file`` of a marker
in ``magicfs jobs``, ``fs.open`` of task files). Their errors are s3fs's own; the layers
that call them name the path (and a missing bucket: :mod:`magicfs.committers.jobs`).
Rewriting them would mean wrapping s3fs's methods one by one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast

from fsspec.asyn import sync

from ...errors import MissingBucketError
from . import checksums
from .failures import answer, is_not_connected, store_error
from .rate import RateControl
from .retry import (
    DEFAULT_POLICY,
    THROTTLING_CODES,
    RetryPolicy,
    describe,
    error_code,
    is_transient,
)

__all__ = ["DELETE_BATCH", "PendingUpload", "S3Store", "error_code"]

log = logging.getLogger("magicfs.s3.store")

_T = TypeVar("_T")

#: Keys per DeleteObjects request (the S3 maximum).
DELETE_BATCH = 1000


@dataclass(frozen=True)
class PendingUpload:
    """One entry of ListMultipartUploads."""

    key: str
    upload_id: str
    initiated: datetime | None


class S3Store:
    """Typed S3 calls through ``fs`` (an ``s3fs.S3FileSystem``)."""

    def __init__(
        self, fs: Any, policy: RetryPolicy = DEFAULT_POLICY, max_rate: float | None = None
    ):
        self.fs = fs
        self.policy = policy
        #: Seconds waited before retries so far, by every call (``RetryPolicy.budget``).
        self.retry_waits = 0.0
        #: Requests the store answered with throttling (``SlowDown``, 503), retries included.
        self.throttled = 0
        #: When calls start: adaptive to throttling, capped at ``max_rate``; see :mod:`.rate`.
        self.rate = RateControl(max_rate)
        self._watched: set[int] = set()
        #: Has the endpoint ever answered this store (any HTTP reply, errors included)?
        self.answered = False

    def split(self, path: str) -> tuple[str, str]:
        """``bucket/key`` (with or without ``s3://``) -> ``(bucket, key)``.

        The key is taken literally. (s3fs's ``split_path`` reads ``?versionId=...`` in a
        name as a version selector, so a file named ``q?versionId=1.bin`` would land at
        ``q``; names of task files must round-trip exactly.)
        """
        bucket, _, key = self.fs._strip_protocol(path).lstrip("/").partition("/")
        return bucket, key

    # -- plumbing -----------------------------------------------------------------------

    def call(self, operation: str, **params: Any) -> dict[str, Any]:
        """Run one S3 operation and wait for it (retried: :mod:`.retry`)."""
        return cast(dict[str, Any], sync(self.fs.loop, self.acall, operation, **params))

    async def acall(self, operation: str, **params: Any) -> dict[str, Any]:
        """:meth:`call` for coroutines running on s3fs's IO loop.

        A failure is raised as a :class:`~magicfs.errors.StoreCallError` naming the
        operation, the object and the store's answer (:mod:`.failures`). It is retried
        only while transient (:mod:`.retry`), and a connection that cannot be made before
        the endpoint ever answered this store is not retried at all: a wrong endpoint
        or a store that is down fails the job in the S3 client's own attempts.
        """
        retry = 0
        while True:
            await self.rate.acquire()
            try:
                await self._watch_throttling()
                response: dict[str, Any] = await self.fs._call_s3(operation, **params)
                self.answered = True
                return response
            except Exception as error:
                if not is_transient(error) or (not self.answered and is_not_connected(error)):
                    wrapped = store_error(operation, params, error, attempts=retry + 1, fs=self.fs)
                    if wrapped is error:  # not the store's answer: a bad parameter, a bug
                        raise
                    raise wrapped from error
                retry += 1
                delay = self.policy.delay(retry)
                budget = self.policy.budget
                spent = budget is not None and self.retry_waits + delay > budget
                if retry >= self.policy.attempts or spent:
                    why = (
                        f"; the retry budget of {budget:g} s for this job is spent"
                        if spent and retry < self.policy.attempts
                        else ""
                    )
                    gave_up = f"failed {retry} times (each with the S3 client's own retries){why}"
                    raise store_error(
                        operation, params, error, attempts=retry, gave_up=gave_up, fs=self.fs
                    ) from error
                self.retry_waits += delay
                log.info(
                    "%s: %s; retry %d in %.2fs",
                    describe(operation, params),
                    answer(error, params.get("Bucket"), self.fs),
                    retry,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _watch_throttling(self) -> None:
        """Count every throttled reply, including those botocore retries by itself."""
        client = getattr(self.fs, "_s3", None)  # the client s3fs made (cheaper than asking)
        if client is not None and id(client) in self._watched:
            return
        client = await self.fs.set_session()
        if id(client) in self._watched:
            return
        self._watched.add(id(client))
        client.meta.events.register("needs-retry.s3", self._on_reply)

    def _on_reply(self, response: Any = None, **_: Any) -> None:
        if response is None:
            return
        self.answered = True
        http, parsed = response
        code = (parsed or {}).get("Error", {}).get("Code")
        if code in THROTTLING_CODES or getattr(http, "status_code", None) == 503:
            self.throttled += 1
            self.rate.throttled_call()

    def run_background(self, coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Run ``coroutine`` on s3fs's IO loop; returns at once with a future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.fs.loop)

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on s3fs's IO loop and wait for its result."""
        return cast(_T, sync(self.fs.loop, lambda: coroutine))

    def submit(self, operation: str, **params: Any) -> concurrent.futures.Future[dict[str, Any]]:
        """Start one S3 operation in the background; returns at once with a future."""
        return self.run_background(self.acall(operation, **params))

    # -- objects --------------------------------------------------------------------------

    async def aread(self, bucket: str, key: str, limit: int) -> bytes:
        """The first ``limit + 1`` bytes of an object, at most (one ranged GET)."""
        try:
            response = await self.acall(
                "get_object", Bucket=bucket, Key=key, Range=f"bytes=0-{limit}"
            )
        except OSError as e:
            if error_code(e) == "InvalidRange":  # a zero-byte object has no byte 0
                return b""
            raise
        try:
            data: bytes = await response["Body"].read()
            return data
        finally:
            response["Body"].close()

    # -- small records (the RecordIO of magicfs.protocol.journal) -------------------------

    def read(self, path: str, limit: int) -> bytes | None:
        """At most ``limit + 1`` bytes of the object at ``path``; ``None`` if there is none."""
        try:
            return self.submit_read(*self.split(path), limit).result()
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        """One PUT: readers see the old object or the new one, never half."""
        self.put_object(*self.split(path), data)

    @staticmethod
    def display(path: str) -> str:
        return path if "://" in path else f"s3://{path}"

    def submit_read(self, bucket: str, key: str, limit: int) -> concurrent.futures.Future[bytes]:
        """:meth:`aread` in the background; the future's result is the bytes."""
        return self.run_background(self.aread(bucket, key, limit))

    def put_object(
        self,
        bucket: str,
        key: str,
        body: bytes,
        metadata: dict[str, str] | None = None,
        if_none_match: bool = False,
    ) -> dict[str, Any]:
        """One PUT, waited for (:meth:`aput_object`)."""
        return self.submit_put(bucket, key, body, metadata, if_none_match).result()

    def submit_put(
        self,
        bucket: str,
        key: str,
        body: bytes,
        metadata: dict[str, str] | None = None,
        if_none_match: bool = False,
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """:meth:`aput_object` in the background; returns at once with a future."""
        return self.run_background(self.aput_object(bucket, key, body, metadata, if_none_match))

    async def aput_object(
        self,
        bucket: str,
        key: str,
        body: bytes,
        metadata: dict[str, str] | None = None,
        if_none_match: bool = False,
    ) -> dict[str, Any]:
        """PUT ``body`` at ``key`` (``if_none_match``: only if no object is there), then
        forget what s3fs's listing cache knew of it."""
        params: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": body}
        params.update(await checksums.aheader(self.fs, body))  # a header, not a trailer
        if metadata:
            params["Metadata"] = metadata
        if if_none_match:
            params["IfNoneMatch"] = "*"
        result = await self.acall("put_object", **params)
        self.fs.invalidate_cache(f"{bucket}/{key}")
        return result

    def head_object(self, bucket: str, key: str) -> dict[str, Any] | None:
        """The object's headers, or ``None`` when it does not exist."""
        return cast(dict[str, Any] | None, sync(self.fs.loop, self.ahead_object, bucket, key))

    async def ahead_object(self, bucket: str, key: str) -> dict[str, Any] | None:
        """:meth:`head_object` for coroutines running on s3fs's IO loop."""
        try:
            return await self.acall("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None

    def delete_object(self, bucket: str, key: str) -> None:
        """Delete one object (none there is fine)."""
        self.call("delete_object", Bucket=bucket, Key=key)
        self.fs.invalidate_cache(f"{bucket}/{key}")

    async def adelete_object(self, bucket: str, key: str) -> None:
        """Delete one object (none there is fine)."""
        await self.acall("delete_object", Bucket=bucket, Key=key)
        self.fs.invalidate_cache(f"{bucket}/{key}")

    async def adelete_objects(self, bucket: str, keys: Sequence[str]) -> int:
        """:meth:`delete_objects` for coroutines on s3fs's IO loop (batches of 1,000)."""
        deleted = 0
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start : start + DELETE_BATCH]
            result = await self.acall(
                "delete_objects",
                Bucket=bucket,
                Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
            )
            errors = result.get("Errors") or []
            if errors:
                first = errors[0]
                raise OSError(
                    f"could not delete {len(errors)} of {len(batch)} objects in s3://{bucket}; "
                    f"first: {first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )
            deleted += len(batch)
        for key in keys:
            self.fs.invalidate_cache(f"{bucket}/{key}")
        return deleted

    def delete_objects(self, bucket: str, keys: Sequence[str]) -> int:
        """Delete ``keys`` in batches of 1,000; any per-key failure raises ``OSError``."""
        deleted = 0
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start : start + DELETE_BATCH]
            result = self.call(
                "delete_objects",
                Bucket=bucket,
                Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
            )
            errors = result.get("Errors") or []
            if errors:
                first = errors[0]
                raise OSError(
                    f"could not delete {len(errors)} of {len(batch)} objects in s3://{bucket}; "
                    f"first: {first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )
            deleted += len(batch)
        for key in keys:
            self.fs.invalidate_cache(f"{bucket}/{key}")
        return deleted

    # -- multipart uploads -----------------------------------------------------------------

    def create_upload(
        self,
        bucket: str,
        key: str,
        metadata: dict[str, str] | None = None,
        checksum_algorithm: str | None = None,
    ) -> str:
        """Start an upload (``checksum_algorithm``: its parts' checksums, :mod:`.checksums`)."""
        params: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if metadata:
            params["Metadata"] = metadata
        if checksum_algorithm:
            params["ChecksumAlgorithm"] = checksum_algorithm
        upload_id: str = self.call("create_multipart_upload", **params)["UploadId"]
        return upload_id

    async def acreate_upload(
        self,
        bucket: str,
        key: str,
        metadata: dict[str, str] | None = None,
        checksum_algorithm: str | None = None,
    ) -> str:
        """Start an upload; returns its UploadId (:meth:`create_upload` on the IO loop)."""
        params: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if metadata:
            params["Metadata"] = metadata
        if checksum_algorithm:
            params["ChecksumAlgorithm"] = checksum_algorithm
        upload_id: str = (await self.acall("create_multipart_upload", **params))["UploadId"]
        return upload_id

    async def aupload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        number: int,
        body: bytes,
        checksum: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """Upload part ``number``; the reply has its ``ETag`` (``checksum``: (algorithm,
        base64 value) sent as a header; without one, a CRC32 header where botocore would
        add one itself)."""
        if checksum is not None:
            header = {checksums.parameter(checksum[0]): checksum[1]}
        else:
            header = await checksums.aheader(self.fs, body)  # a header, not a trailer
        return await self.acall(
            "upload_part",
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=body,
            **header,
        )

    def submit_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        number: int,
        body: bytes,
        checksum: tuple[str, str] | None = None,
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Upload part ``number`` in the background; the future's result has its ``ETag``.

        ``checksum`` (algorithm, base64 value) goes with it as a header, for the store to
        verify; without one, a CRC32 header where botocore would add one itself.
        """

        async def part() -> dict[str, Any]:
            if checksum is not None:
                header = {checksums.parameter(checksum[0]): checksum[1]}
            else:
                header = await checksums.aheader(self.fs, body)  # a header, not a trailer
            return await self.acall(
                "upload_part",
                Bucket=bucket,
                Key=key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,
                **header,
            )

        return self.run_background(part())

    async def acomplete_upload(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        etags: Sequence[str],
        *,
        length: int | None = None,
        if_none_match: bool = False,
        part_checksums: tuple[str, Sequence[str]] | None = None,
    ) -> dict[str, Any]:
        """Make the upload visible at ``key``: part ``n`` is ``etags[n-1]``.

        ``length`` is sent as ``MpuObjectSize``: S3 then refuses to complete an
        upload whose parts do not add up to the length the writer recorded.
        ``part_checksums`` (algorithm, one per part) go with the parts: a store that
        verifies them refuses parts whose bytes are not those (:mod:`.checksums`).
        """
        parts: list[dict[str, Any]] = [
            {"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, 1)
        ]
        if part_checksums is not None:
            algorithm, values = part_checksums
            for part, value in zip(parts, values, strict=True):
                part[checksums.parameter(algorithm)] = value
        params: dict[str, Any] = {
            "Bucket": bucket,
            "Key": key,
            "UploadId": upload_id,
            "MultipartUpload": {"Parts": parts},
        }
        if length is not None:
            params["MpuObjectSize"] = length
        if if_none_match:
            params["IfNoneMatch"] = "*"
        result = await self.acall("complete_multipart_upload", **params)
        self.fs.invalidate_cache(f"{bucket}/{key}")
        return result

    def complete_upload(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        etags: Sequence[str],
        *,
        length: int | None = None,
        if_none_match: bool = False,
    ) -> dict[str, Any]:
        """:meth:`acomplete_upload`, waited for."""
        result: dict[str, Any] = sync(
            self.fs.loop,
            self.acomplete_upload,
            bucket,
            key,
            upload_id,
            etags,
            length=length,
            if_none_match=if_none_match,
        )
        return result

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> bool:
        """:meth:`aabort_upload`, waited for."""
        return self.submit_abort(bucket, key, upload_id).result()

    def submit_abort(
        self, bucket: str, key: str, upload_id: str
    ) -> concurrent.futures.Future[bool]:
        """:meth:`aabort_upload` in the background; returns at once with a future."""
        return self.run_background(self.aabort_upload(bucket, key, upload_id))

    async def aabort_upload(self, bucket: str, key: str, upload_id: str) -> bool:
        """Abort an upload; ``False`` if it no longer exists (already aborted or completed:
        ``NoSuchUpload``; or its bucket is gone). Every abort in magicfs goes through here."""
        try:
            await self.acall("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
        except (FileNotFoundError, MissingBucketError):
            return False
        return True

    def list_uploads(self, bucket: str, prefix: str = "") -> Iterator[PendingUpload]:
        """Every pending upload whose key starts with ``prefix``, page by page."""
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        while True:
            page = self.call("list_multipart_uploads", **params)
            for entry in page.get("Uploads") or []:
                yield PendingUpload(entry["Key"], entry["UploadId"], entry.get("Initiated"))
            if not page.get("IsTruncated"):
                return
            params["KeyMarker"] = page.get("NextKeyMarker", "")
            params["UploadIdMarker"] = page.get("NextUploadIdMarker", "")

    async def alist_uploads(self, bucket: str, prefix: str = "") -> AsyncIterator[PendingUpload]:
        """Every pending upload whose key starts with ``prefix``, page by page."""
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        while True:
            page = await self.acall("list_multipart_uploads", **params)
            for entry in page.get("Uploads") or []:
                yield PendingUpload(entry["Key"], entry["UploadId"], entry.get("Initiated"))
            if not page.get("IsTruncated"):
                return
            params["KeyMarker"] = page.get("NextKeyMarker", "")
            params["UploadIdMarker"] = page.get("NextUploadIdMarker", "")

    async def alist_keys(
        self, bucket: str, prefix: str = "", delimiter: str | None = None
    ) -> AsyncIterator[str]:
        """``bucket/key`` of every object under ``prefix``, page by page, uncached
        (:meth:`list_keys`, for coroutines)."""
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if delimiter:
            params["Delimiter"] = delimiter
        while True:
            page = await self.acall("list_objects_v2", **params)
            for entry in page.get("Contents") or []:
                yield f"{bucket}/{entry['Key']}"
            if not page.get("IsTruncated"):
                return
            params["ContinuationToken"] = page["NextContinuationToken"]

    def list_keys(
        self, bucket: str, prefix: str = "", delimiter: str | None = None
    ) -> Iterator[str]:
        """``bucket/key`` of every object under ``prefix``, page by page (1,000 per request).

        With a ``delimiter``, only the objects directly under ``prefix``. Unlike s3fs's
        listings, nothing is cached: a job's tree of a million entries is streamed once.
        """
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if delimiter:
            params["Delimiter"] = delimiter
        while True:
            page = self.call("list_objects_v2", **params)
            for entry in page.get("Contents") or []:
                yield f"{bucket}/{entry['Key']}"
            if not page.get("IsTruncated"):
                return
            params["ContinuationToken"] = page["NextContinuationToken"]

    def list_parts(self, bucket: str, key: str, upload_id: str) -> list[dict[str, Any]]:
        """All parts of an upload (``PartNumber``, ``ETag``, ``Size``), page by page."""
        parts: list[dict[str, Any]] = []
        params: dict[str, Any] = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
        while True:
            page = self.call("list_parts", **params)
            parts.extend(page.get("Parts") or [])
            if not page.get("IsTruncated"):
                return parts
            params["PartNumberMarker"] = page["NextPartNumberMarker"]
