"""The S3 operations magicfs needs, over an s3fs filesystem's own client.

Going through s3fs (rather than a second boto3 client) means one set of credentials,
endpoint and retry settings: whatever the user configured for ``s3://`` applies to
the multipart calls too. s3fs's helpers are not used where they fall short for a
committer: its upload listing is neither paged nor prefix-scoped, and its bulk
delete ignores per-key errors.

Each operation is written once, as a coroutine on s3fs's IO loop (``a``-prefixed).
Blocking code waits for one with :meth:`S3Store.run`, starts one in the background with
:meth:`S3Store.run_background` (a future), and walks a listing with :func:`iterate` (one
wait per page). Every request made here goes through :meth:`S3Store.acall`: one retry
policy (:mod:`.retry`) and the job's rate control (:mod:`.rate`), shared by every store
of the job in this process. Every error it ends in
is a :class:`~magicfs.errors.StoreCallError` naming the operation, the object, the HTTP
status and the S3 error code (:mod:`.failures`), of the class s3fs would have raised
(``FileNotFoundError`` for ``NoSuchKey``/``NoSuchUpload``, ``PermissionError``...), with
s3fs's error and botocore's ``ClientError`` behind it as causes; :func:`error_code` reads
the S3 error code back.

**Covered**: the multipart calls of the magic writer and the staging upload, job commit
(completions, roll-back checks and deletes), aborts and sweeps, task and job records
(reads, writes, deletes, listings of a job's tree), the journal (``read``/``write``), the
staging committer's partition checks, ``magicfs jobs`` (job trees, markers, task
records), ``magicfs uploads`` and ``magicfs success``/``inspect`` reads on S3.

**Not covered** (s3fs's own calls: botocore's and s3fs's retries only, no job budget,
no rate control), and why:

* the fsspec methods :mod:`magicfs.filesystems` hands to s3fs: reads of files
  (``open``/``cat_file``), ``pipe_file`` and ``copy`` outside task paths, ``ls``/
  ``find``/``info`` of task paths, ``makedirs`` (``fsspec.open``'s for a file opened by
  URL: s3fs probes the bucket) and ``SinglePendingCommit.load`` of a closed task file's
  size: they are the user's file-system calls, with s3fs's buffering and
  semantics (the multipart writes of task files are the magic writer's: covered);
* :mod:`magicfs.protocol.destination`'s ``_SUCCESS`` read (``cat_file``) and its listings
  of the destination (``ls``/``isdir``/``find``) for ``replace`` and visible files, and
  :mod:`magicfs.protocol.recovery`'s ``find`` of the destination: the protocol layer is
  written over any fsspec store, not over this one;
* the manifest and classic committers on S3 (:mod:`magicfs.stores.rename`: ``info``,
  ``find``, ``copy``...): written over any fsspec store; S3 jobs use the magic committer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Sequence,
)
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar, cast

from fsspec.asyn import sync

from ...errors import MissingBucketError
from ...job_context import JobContext
from . import checksums
from .body import PartBody
from .client import share_models
from .direct import DirectRequests
from .failures import answer, is_not_connected, store_error
from .rate import JobCalls
from .retry import (
    DEFAULT_POLICY,
    RetryPolicy,
    describe,
    error_code,
    is_transient,
)

__all__ = ["DELETE_BATCH", "PendingUpload", "S3Store", "error_code", "iterate"]

log = logging.getLogger("magicfs.s3.store")

_T = TypeVar("_T")

#: The job context's slot of S3's shared calls
#: (:meth:`~magicfs.job_context.JobContext.store_state`).
CALLS_STATE = "s3.calls"
#: The job's statistics (:attr:`~magicfs.job_context.JobContext.statistics`): calls
#: started through a store of the job (each of magicfs's own retries is one more; the
#: S3 client's retries inside a call are not counted), and magicfs's retries (Hadoop's
#: ``store_io_request``, ``store_io_retry``).
REQUESTS = "store_io_request"
RETRIES = "store_io_retry"

#: Keys per DeleteObjects request (the S3 maximum).
DELETE_BATCH = 1000


@dataclass(frozen=True)
class PendingUpload:
    """One entry of ListMultipartUploads."""

    key: str
    upload_id: str
    initiated: datetime | None


class S3Store:
    """Typed S3 calls through ``fs`` (an ``s3fs.S3FileSystem``).

    ``context``: the job the calls are for (:mod:`magicfs.job_context`). Every store of
    one job in this process shares its :class:`.rate.JobCalls`: one rate control (capped
    at the strictest ``max_rate`` any of them was given), one view of the replies, one
    retry budget. Without a context (the CLI's stores), the store has its own.
    """

    def __init__(
        self,
        fs: Any,
        policy: RetryPolicy = DEFAULT_POLICY,
        max_rate: float | None = None,
        context: JobContext | None = None,
    ):
        self.fs = fs
        share_models(fs)  # before its first request: one copy of botocore's models (.client)
        self.policy = policy
        self.max_rate = max_rate
        self.context = context
        self._share_calls()

    def _share_calls(self) -> None:
        if self.context is None:
            calls = JobCalls(self.max_rate)
        else:
            calls = self.context.store_state(CALLS_STATE, JobCalls)
            calls.rate.cap(self.max_rate)
        #: When calls start: adaptive to throttling, capped at ``max_rate``; see :mod:`.rate`.
        self.rate = calls.rate
        #: Every reply of s3fs's client, botocore's retries included (:class:`.rate.Replies`).
        self.replies = calls.replies
        #: The retry waits spent so far (``RetryPolicy.budget``), by the job's calls here.
        self.budget = calls.budget
        #: The small requests' cheaper way through the same client (:mod:`.direct`).
        self.direct = DirectRequests(self.replies.on_reply)

    def __getstate__(self) -> dict[str, Any]:
        # The shared parts hold locks and are per process: the new process's context
        # (a context unpickles as that process's context of the job) gives its own.
        keep = ("fs", "policy", "max_rate", "context")
        return {name: self.__dict__[name] for name in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._share_calls()

    def _count(self, counter: str) -> None:
        if self.context is not None:
            self.context.statistics.increment(counter)

    @property
    def retry_waits(self) -> float:
        """Seconds waited before retries so far, by the job's calls in this process."""
        return self.budget.waits

    @property
    def throttled(self) -> int:
        """Requests the store answered with throttling (``SlowDown``, 503), retries
        included: the job's in this process."""
        return self.replies.throttled

    def split(self, path: str) -> tuple[str, str]:
        """``bucket/key`` (with or without ``s3://``) -> ``(bucket, key)``.

        The key is taken literally. (s3fs's ``split_path`` reads ``?versionId=...`` in a
        name as a version selector, so a file named ``q?versionId=1.bin`` would land at
        ``q``; names of task files must round-trip exactly.)
        """
        bucket, _, key = self.fs._strip_protocol(path).lstrip("/").partition("/")
        return bucket, key

    # -- plumbing: one way to wait, one way to start in the background --------------------

    def run(self, awaitable: Awaitable[_T]) -> _T:
        """Run ``awaitable`` on s3fs's IO loop and wait for its result (blocking callers)."""
        return cast(_T, sync(self.fs.loop, lambda: awaitable))

    def run_background(self, coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Run ``coroutine`` on s3fs's IO loop; returns at once with a future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.fs.loop)

    async def acall(self, operation: str, **params: Any) -> dict[str, Any]:
        """Run one S3 operation, retried (:mod:`.retry`) and paced (:mod:`.rate`); a small
        one through the client's cheaper direct way where that way sends what the client
        would (:mod:`.direct`), else (and where botocore would send its failed attempt
        there again) through s3fs.

        A failure is raised as a :class:`~magicfs.errors.StoreCallError` naming the
        operation, the object and the store's answer (:mod:`.failures`). It is retried
        only while transient (:mod:`.retry`), and a connection that cannot be made before
        the endpoint ever answered this store is not retried at all: a wrong endpoint
        or a store that is down fails the job in the S3 client's own attempts.
        """
        retry = 0
        while True:
            try:
                # The client first (a new filesystem makes its client now, which can take
                # longer than many slots): a slot is taken just before its request is sent.
                await self.replies.watch(self.fs)
                await self.rate.acquire()
                self._count(REQUESTS)
                response = await self.direct.send(self.fs, operation, params)
                if response is None:  # not sent there, or its answer was not final
                    response = await self.fs._call_s3(operation, **params)
                self.replies.answered = True
                return response
            except Exception as error:
                if not is_transient(error) or (
                    not self.replies.answered and is_not_connected(error)
                ):
                    wrapped = store_error(operation, params, error, attempts=retry + 1, fs=self.fs)
                    if wrapped is error:  # not the store's answer: a bad parameter, a bug
                        raise
                    raise wrapped from error
                retry += 1
                delay, gave_up = self.budget.take(self.policy, retry)
                if not gave_up:
                    self._count(RETRIES)
                if gave_up:
                    raise store_error(
                        operation, params, error, attempts=retry, gave_up=gave_up, fs=self.fs
                    ) from error
                log.info(
                    "%s: %s; retry %d in %.2fs",
                    describe(operation, params),
                    answer(error, params.get("Bucket"), self.fs),
                    retry,
                    delay,
                )
                await asyncio.sleep(delay)

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
            return self.run(self.aread(*self.split(path), limit))
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        """One PUT: readers see the old object or the new one, never half."""
        self.run(self.aput_object(*self.split(path), data))

    @staticmethod
    def display(path: str) -> str:
        return path if "://" in path else f"s3://{path}"

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

    async def ahead_object(self, bucket: str, key: str) -> dict[str, Any] | None:
        """The object's headers, or ``None`` when it does not exist."""
        try:
            return await self.acall("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None

    async def adelete_object(self, bucket: str, key: str) -> None:
        """Delete one object (none there is fine)."""
        await self.acall("delete_object", Bucket=bucket, Key=key)
        self.fs.invalidate_cache(f"{bucket}/{key}")

    async def adelete_objects(self, bucket: str, keys: Sequence[str]) -> int:
        """Delete ``keys`` in batches of 1,000; any per-key failure raises ``OSError``."""
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start : start + DELETE_BATCH]
            objects = {"Objects": [{"Key": key} for key in batch], "Quiet": True}
            result = await self.acall("delete_objects", Bucket=bucket, Delete=objects)
            if errors := result.get("Errors") or []:
                first = errors[0]
                raise OSError(
                    f"could not delete {len(errors)} of {len(batch)} objects in s3://{bucket}; "
                    f"first: {first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )
        for key in keys:
            self.fs.invalidate_cache(f"{bucket}/{key}")
        return len(keys)

    # -- multipart uploads -----------------------------------------------------------------

    async def acreate_upload(
        self,
        bucket: str,
        key: str,
        metadata: dict[str, str] | None = None,
        checksum_algorithm: str | None = None,
    ) -> str:
        """Start an upload (``checksum_algorithm``: its parts' checksums, :mod:`.checksums`);
        returns its UploadId."""
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
        body: bytes | PartBody,
        checksum: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """Upload part ``number`` (``body``: a :class:`.body.PartBody` is sent without a
        copy); the reply has its ``ETag``.

        ``checksum`` (algorithm, base64 value) goes with it as a header, for the store to
        verify; without one, a CRC32 header where botocore would add one itself.
        """
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

    async def aabort_upload(self, bucket: str, key: str, upload_id: str) -> bool:
        """Abort an upload; ``False`` if it no longer exists (already aborted or completed:
        ``NoSuchUpload``; or its bucket is gone). Every abort in magicfs goes through here."""
        try:
            await self.acall("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload_id)
        except (FileNotFoundError, MissingBucketError):
            return False
        return True

    def alist_uploads(self, bucket: str, prefix: str = "") -> AsyncIterator[PendingUpload]:
        """Every pending upload whose key starts with ``prefix``, page by page."""
        params = {"Bucket": bucket, "Prefix": prefix}
        return _Listing(self, "list_multipart_uploads", params, _uploads_in, _after_uploads)

    def alist_keys(
        self, bucket: str, prefix: str = "", delimiter: str | None = None
    ) -> AsyncIterator[str]:
        """``bucket/key`` of every object under ``prefix``, page by page (1,000 per request).

        With a ``delimiter``, only the objects directly under ``prefix``. Unlike s3fs's
        listings, nothing is cached: a job's tree of a million entries is streamed once.
        """
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if delimiter:
            params["Delimiter"] = delimiter
        return _Listing(self, "list_objects_v2", params, partial(_keys_in, bucket), _continuation)

    def alist_prefixes(self, bucket: str, prefix: str = "") -> AsyncIterator[str]:
        """``bucket/prefix/`` of each "directory" directly under ``prefix`` (the
        ``CommonPrefixes`` of a ``/``-delimited listing), page by page."""
        params = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        found = partial(_prefixes_in, bucket)
        return _Listing(self, "list_objects_v2", params, found, _continuation)

    async def alist_parts(self, bucket: str, key: str, upload_id: str) -> list[dict[str, Any]]:
        """All parts of an upload (``PartNumber``, ``ETag``, ``Size``), page by page."""
        params = {"Bucket": bucket, "Key": key, "UploadId": upload_id}
        return [
            part async for part in _Listing(self, "list_parts", params, _parts_in, _after_parts)
        ]


def _uploads_in(page: dict[str, Any]) -> list[PendingUpload]:
    return [
        PendingUpload(u["Key"], u["UploadId"], u.get("Initiated"))
        for u in page.get("Uploads") or []
    ]


def _after_uploads(page: dict[str, Any]) -> dict[str, Any]:
    return {
        "KeyMarker": page.get("NextKeyMarker", ""),
        "UploadIdMarker": page.get("NextUploadIdMarker", ""),
    }


def _keys_in(bucket: str, page: dict[str, Any]) -> list[str]:
    return [f"{bucket}/{entry['Key']}" for entry in page.get("Contents") or []]


def _prefixes_in(bucket: str, page: dict[str, Any]) -> list[str]:
    return [f"{bucket}/{entry['Prefix']}" for entry in page.get("CommonPrefixes") or []]


def _parts_in(page: dict[str, Any]) -> list[dict[str, Any]]:
    return list(page.get("Parts") or [])


def _after_parts(page: dict[str, Any]) -> dict[str, Any]:
    return {"PartNumberMarker": page["NextPartNumberMarker"]}


def _continuation(page: dict[str, Any]) -> dict[str, Any]:
    return {"ContinuationToken": page["NextContinuationToken"]}


class _Listing(AsyncIterator[_T]):
    """The entries of one paged S3 listing; each page is requested once it is needed.

    ``entries`` reads a page's entries, ``cursor`` the parameters of the next request
    (asked only when the page says ``IsTruncated``). ``left``, the entries of the page
    at hand still to come, lets :func:`iterate` hand blocking code a page per wait.
    """

    def __init__(
        self,
        store: S3Store,
        operation: str,
        params: dict[str, Any],
        entries: Callable[[dict[str, Any]], list[_T]],
        cursor: Callable[[dict[str, Any]], dict[str, Any]],
    ):
        self.store, self.operation, self.entries, self.cursor = store, operation, entries, cursor
        self.params: dict[str, Any] | None = params
        self.page: deque[_T] = deque()

    @property
    def left(self) -> int:
        return len(self.page)

    async def __anext__(self) -> _T:
        while not self.page:
            if self.params is None:
                raise StopAsyncIteration
            page = await self.store.acall(self.operation, **self.params)
            self.page.extend(self.entries(page))
            more = page.get("IsTruncated")
            self.params = {**self.params, **self.cursor(page)} if more else None
        return self.page.popleft()


def iterate(store: S3Store, items: AsyncIterator[_T], chunk: int = 1000) -> Iterator[_T]:
    """A listing of ``store`` (:meth:`S3Store.alist_keys`...) for blocking code.

    One wait per page of the listing (at most ``chunk`` entries for other iterators),
    not per entry: a tree of a million keys streams, and a consumer that stops after
    the first entries has asked for the first page only. A listing left early is
    closed by asyncio on s3fs's loop, not by the thread that drops it.
    """

    async def take() -> list[_T]:
        taken: list[_T] = []
        async for item in items:
            taken.append(item)
            if len(taken) == chunk or getattr(items, "left", None) == 0:
                break
        return taken

    while batch := store.run(take()):
        yield from batch
