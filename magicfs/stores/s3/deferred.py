"""S3's deferred writes (:mod:`magicfs.stores.deferred`): multipart uploads.

* **publish**: CompleteMultipartUpload. A completion answered with ``NoSuchUpload``
  counts as done when the destination object exists with this job's id in its metadata
  and the recorded length: a retried job commit finding its own earlier work (real S3
  forgets completed upload ids; moto answers a repeated completion with success).
* **files opened ``xb``** must not replace an object: the completion carries
  ``If-None-Match: *`` where the store honours it, and is preceded by a HEAD of the
  destination where it does not (learned by a probe, once per process and bucket, the
  first time a job commits such a file: :mod:`.conditional`, which states the costs and
  the HEAD's race window). Either way an existing object fails the job, naming the file.
  Where ``PutObject``'s condition is honoured, the job first claims the file's name (a
  conditional PUT under ``_magicfs/claims/create/``, deleted once the file is complete:
  :mod:`.create_claims`), so of jobs racing for one name exactly one publishes even where
  the completion's check is not atomic (SeaweedFS) or not made (RGW: the HEAD).
* **checksums** recorded by the writer are checked before anything is published and
  passed to the completion, for the store to verify (:mod:`.checksums`).
* **published?** that same test (one HEAD), which roll-back uses: it needs nothing but
  the commits, so it works after an in-process failure and after a driver died.
* **delete**: DeleteObjects, per bucket. **discard**: AbortMultipartUpload.
  **list pending**: ListMultipartUploads.
* **records** (markers, ``.pending``, ``.pendingset``, ``_SUCCESS``, the journal): GET
  (ranged), PUT, HEAD, ListObjectsV2 (paged, uncached), DeleteObjects — every one through
  :class:`~.store.S3Store`, retried and rate-controlled.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from ...errors import InvalidCommitData
from ...job_context import JobContext
from ...records import SinglePendingCommit
from ..create_only import is_create_only
from ..deferred import (
    DeferredCapabilities,
    DeferredStoreBase,
    PendingWrite,
)
from . import checksums, create_claims
from .conditional import aconditional_support
from .retry import DEFAULT_POLICY, RetryPolicy
from .store import S3Store, error_code
from .sweep import RecordedUpload, abort_uploads, uploads_of
from .tracking import META_JOB_ID

log = logging.getLogger("magicfs.s3.commit")

T = TypeVar("T")


CAPABILITIES = DeferredCapabilities(
    discards_pending=True,
    lists_pending=True,
    counts_throttling=True,
    deletes_batch_at_once=True,  # DeleteObjects
)


class S3Deferred(DeferredStoreBase):
    """Multipart uploads and records of job ``job_id`` through ``store``.

    ``scratch_dir()`` names a directory (``bucket/key``) in the job's own hidden tree
    where the conditional-write probe may write its throw-away key.
    """

    capabilities = CAPABILITIES

    def __init__(self, store: S3Store, job_id: str, scratch_dir: Callable[[], str]):
        self.store = store
        self.job_id = job_id
        self.scratch_dir = scratch_dir

    @classmethod
    def for_job(
        cls,
        fs: Any,
        job_id: str,
        scratch_dir: Callable[[], str],
        *,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
        max_request_rate: float | None = None,
        context: JobContext | None = None,
        **_: Any,
    ) -> S3Deferred:
        """The adapter factory the registry declares (:class:`~..deferred.AdapterFactory`);
        ``context``: the job's (:mod:`magicfs.job_context`), whose rate control and retry
        budget the job's writers in this process share."""
        store = S3Store(fs, retry_policy, max_request_rate, context)
        return cls(store, job_id, scratch_dir)

    @property
    def throttled(self) -> int:
        return self.store.throttled

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.store.run_background(call)

    def split(self, path: str) -> tuple[str, str]:
        return self.store.split(path)

    def url(self, path: str) -> str:
        return path if "://" in path else f"s3://{path}"

    # -- records ----------------------------------------------------------------------------

    async def aread_record(self, path: str, limit: int) -> bytes | None:
        try:
            return await self.store.aread(*self.split(path), limit)
        except FileNotFoundError:
            return None

    async def awrite_record(self, path: str, data: bytes) -> None:
        await self.store.aput_object(*self.split(path), data)

    async def arecord_info(self, path: str) -> dict[str, Any] | None:
        head = await self.store.ahead_object(*self.split(path))
        if head is None:
            return None
        return {"size": head.get("ContentLength", 0), "metadata": head.get("Metadata") or {}}

    async def alist_records(self, directory: str, recursive: bool = True) -> AsyncIterator[str]:
        bucket, key = self.split(directory.rstrip("/"))
        prefix = f"{key}/" if key else ""
        async for path in self.store.alist_keys(bucket, prefix, None if recursive else "/"):
            yield path

    async def alist_prefixed(self, prefix: str) -> AsyncIterator[str]:
        async for path in self.store.alist_keys(*self.split(prefix)):
            yield path

    async def adelete_record(self, path: str) -> None:
        await self.store.adelete_object(*self.split(path))

    async def adelete_records(self, paths: Sequence[str]) -> int:
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, key = self.split(path)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            await self.store.adelete_objects(bucket, keys)
        return len(paths)

    def check(self, commit: SinglePendingCommit, source: str) -> None:
        if commit.store is not None:
            raise InvalidCommitData(
                source,
                "extraData",
                f"a record of the store {commit.store!r} (magicfs.store), "
                "not an S3 multipart upload",
            )
        checksums.check_record(commit, source)

    async def apublish(self, commit: SinglePendingCommit) -> None:
        if not is_create_only(commit):
            return await self._acomplete(commit, False)
        support = await aconditional_support(self.store, commit.bucket, self.scratch_dir())
        if not support.put:  # no atomic PutObject either: the store's own check is all
            return await self._apublish_create_only(commit)
        bucket, key = commit.bucket, commit.destination_key
        holder = await create_claims.atake(self.store, bucket, key, self.job_id)
        if holder is not None:
            raise self._claimed(commit, holder)
        try:
            await self._apublish_create_only(commit)
        except BaseException:
            with contextlib.suppress(Exception):  # the failure says more; roll-back retries
                await create_claims.arelease(self.store, bucket, key, self.job_id)
            raise
        await create_claims.arelease(self.store, bucket, key, self.job_id)

    async def _apublish_create_only(self, commit: SinglePendingCommit) -> None:
        asked = await self._acreate_only(commit)
        if asked is None:
            return  # completed by an earlier attempt of this job commit
        await self._acomplete(commit, asked)

    async def arolled_back(self, commit: SinglePendingCommit) -> None:
        """The create-only file's claim goes, if this job holds it (a job killed between
        its claim and its delete: :mod:`.create_claims`). One GET."""
        await create_claims.arelease(self.store, commit.bucket, commit.destination_key, self.job_id)

    def _claimed(self, commit: SinglePendingCommit, holder: str) -> FileExistsError:
        claim = f"s3://{commit.bucket}/{create_claims.claim_key(commit.destination_key)}"
        return FileExistsError(
            f"{self.url(commit.destination)} is being created by job {holder} at this "
            f"moment and the file was opened 'xb' (create only): that job holds its claim "
            f"({claim}), so this job may not publish it. If that job is dead, roll it back "
            f"(magicfs jobs rollback --job {holder} DEST), which releases the claim"
        )

    async def _acomplete(self, commit: SinglePendingCommit, if_none_match: bool) -> None:
        try:
            reply = await self.store.acomplete_upload(
                commit.bucket,
                commit.destination_key,
                commit.upload_id,
                commit.etags,
                length=commit.length,
                if_none_match=if_none_match,
                part_checksums=checksums.recorded(commit),
            )
        except OSError as e:
            code = error_code(e)
            if code in ("NoSuchUpload", "PreconditionFailed") and await self.apublished(commit):
                log.info("s3://%s was completed by an earlier attempt", commit.destination)
                return
            if code == "PreconditionFailed":
                why = "the store refused to complete the upload over it (412 PreconditionFailed)"
                raise self._exists(commit, why) from e
            raise
        checksums.check_reply(commit, reply)

    async def _acreate_only(self, commit: SinglePendingCommit) -> bool | None:
        """Before completing a create-only file: ``True`` to send ``If-None-Match`` (the
        store honours it); else, after the fallback's HEAD, ``False`` (nothing there) or
        ``None`` (this job's own object: done). Anyone else's object raises."""
        support = await aconditional_support(self.store, commit.bucket, self.scratch_dir())
        if support.complete:
            return True
        head = await self.store.ahead_object(commit.bucket, commit.destination_key)
        if head is None:
            return False
        if self._is_ours(head, commit):
            return None
        why = f"{support.limitation('CompleteMultipartUpload')} and refuses to replace it"
        raise self._exists(commit, why)

    def _exists(self, commit: SinglePendingCommit, why: str) -> FileExistsError:
        return FileExistsError(
            f"{self.url(commit.destination)} already exists and the file was opened 'xb' "
            f"(create only): {why}. Write to another name, or delete the object first"
        )

    async def apublished(self, commit: SinglePendingCommit) -> bool:
        head = await self.store.ahead_object(commit.bucket, commit.destination_key)
        return head is not None and self._is_ours(head, commit)

    def _is_ours(self, head: dict[str, Any], commit: SinglePendingCommit) -> bool:
        return (
            head.get("ContentLength") == commit.length
            and (head.get("Metadata") or {}).get(META_JOB_ID) == self.job_id
        )

    async def adelete_published(self, commits: Sequence[SinglePendingCommit]) -> int:
        await self.adelete_records([commit.destination for commit in commits])
        return len(commits)

    async def adiscard(self, writes: Sequence[PendingWrite]) -> int:
        uploads = [RecordedUpload(*self.split(w.path), w.upload_id, "") for w in writes]
        # The sweep's aborts (bounded, counted, each failure reported) wait on the
        # store's loop, so they run on a worker thread, not on the loop itself.
        return await asyncio.to_thread(abort_uploads, self.store, uploads)

    def discard(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Abort the commits' uploads, naming each one's record if it fails."""
        return abort_uploads(self.store, uploads_of(commits))

    async def alist_pending(self, prefix: str) -> AsyncIterator[PendingWrite]:
        bucket, key = self.split_prefix(prefix)
        async for upload in self.store.alist_uploads(bucket, key):
            yield PendingWrite(f"{bucket}/{upload.key}", upload.upload_id)

    def split_prefix(self, prefix: str) -> tuple[str, str]:
        """:meth:`split` of a listing's prefix, keeping its trailing ``/`` (s3fs's path
        stripping drops it): ``bkt/data/`` never matches ``bkt/data10/``."""
        bucket, key = self.split(prefix)
        if prefix.endswith("/") and key:
            key += "/"
        return bucket, key
