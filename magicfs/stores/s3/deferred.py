"""S3's deferred writes (:mod:`magicfs.stores.deferred`): multipart uploads.

* **publish**: CompleteMultipartUpload (``If-None-Match: *`` for files opened ``xb``). A
  completion answered with ``NoSuchUpload`` counts as done when the destination object
  exists with this job's id in its metadata and the recorded length: a retried job
  commit finding its own earlier work (real S3 forgets completed upload ids; moto
  answers a repeated completion with success).
* **published?** that same test (one HEAD), which roll-back uses: it needs nothing but
  the commits, so it works after an in-process failure and after a driver died.
* **delete**: DeleteObjects, per bucket. **discard**: AbortMultipartUpload.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from ...errors import InvalidCommitData
from ...records import SinglePendingCommit
from .store import S3Store, error_code
from .sweep import abort_uploads, uploads_of
from .tracking import META_JOB_ID

log = logging.getLogger("magicfs.s3.commit")

T = TypeVar("T")

#: ``extraData`` key of a record whose file was opened ``xb`` (complete only if absent).
IF_NONE_MATCH_KEY = "magicfs.if-none-match"


class S3Deferred:
    """Multipart uploads of job ``job_id`` through ``store``."""

    def __init__(self, store: S3Store, job_id: str):
        self.store = store
        self.job_id = job_id

    @property
    def throttled(self) -> int:
        return self.store.throttled

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.store.run_background(call)

    def url(self, path: str) -> str:
        return f"s3://{path}"

    def check(self, commit: SinglePendingCommit, source: str) -> None:
        if commit.is_block_list:
            raise InvalidCommitData(
                source, "extraData", "an Azure block list, not an S3 multipart upload"
            )

    async def apublish(self, commit: SinglePendingCommit) -> None:
        try:
            await self.store.acomplete_upload(
                commit.bucket,
                commit.destination_key,
                commit.upload_id,
                commit.etags,
                length=commit.length,
                if_none_match=commit.extra_data.get(IF_NONE_MATCH_KEY) == "*",
            )
        except OSError as e:
            if error_code(e) == "NoSuchUpload" and await self.apublished(commit):
                log.info("s3://%s was completed by an earlier attempt", commit.destination)
                return
            raise

    async def apublished(self, commit: SinglePendingCommit) -> bool:
        head = await self.store.ahead_object(commit.bucket, commit.destination_key)
        return (
            head is not None
            and head.get("ContentLength") == commit.length
            and (head.get("Metadata") or {}).get(META_JOB_ID) == self.job_id
        )

    def delete(self, commits: list[SinglePendingCommit]) -> int:
        by_bucket: dict[str, list[str]] = {}
        for commit in commits:
            by_bucket.setdefault(commit.bucket, []).append(commit.destination_key)
        for bucket, keys in by_bucket.items():
            self.store.delete_objects(bucket, keys)
        return len(commits)

    def discard(self, commits: Iterable[SinglePendingCommit]) -> int:
        return abort_uploads(self.store, uploads_of(commits))
