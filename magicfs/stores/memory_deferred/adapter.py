"""The in-process store's commit side (:mod:`magicfs.stores.deferred`), and its ``SPEC``.

* **publish**: the upload's parts joined into the file in one step; an upload already
  gone counts as done when the file there is the one it published (a retried job
  commit). A create-only (``xb``) file is refused if a file is there, checked and
  published under one lock: no window between the two.
* **published?** the file there was published by the record's upload, with its length.
* **delete**: remove the files. **discard**: drop the uploads. **pending**: the uploads
  neither published nor discarded, by path (so a job's clean-up finds killed writers').
* **records**: plain memory files, read and written whole.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from ...errors import InvalidCommitData
from ...records import SinglePendingCommit
from ..create_only import is_create_only
from ..deferred import DeferredCapabilities, DeferredStoreBase, PendingWrite
from .fs import MemoryDeferredFileSystem
from .writer import STORE_NAME, run_background

T = TypeVar("T")

CAPABILITIES = DeferredCapabilities(
    discards_pending=True,
    lists_pending=True,
    counts_throttling=False,
    deletes_batch_at_once=True,  # in the order given, in this process
)


class MemoryDeferred(DeferredStoreBase):
    """Uploads of a ``mem-deferred`` filesystem, for one job."""

    capabilities = CAPABILITIES
    throttled = 0  # nothing throttles memory

    def __init__(self, fs: MemoryDeferredFileSystem):
        self.fs = fs

    @classmethod
    def for_job(
        cls, fs: Any, job_id: str, scratch_dir: Callable[[], str], **_: Any
    ) -> MemoryDeferred:
        return cls(fs)

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return run_background(call)

    def split(self, path: str) -> tuple[str, str]:
        bucket, _, key = self.fs._strip_protocol(path).partition("/")
        return bucket, key

    def url(self, path: str) -> str:
        return path if "://" in path else str(self.fs.unstrip_protocol(path))

    # -- records ----------------------------------------------------------------------------

    async def aread_record(self, path: str, limit: int) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(path, start=0, end=limit + 1))
        except FileNotFoundError:
            return None

    async def awrite_record(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)  # one dict entry replaced: old or new, never half

    async def arecord_info(self, path: str) -> dict[str, Any] | None:
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        if info["type"] != "file":
            return None
        return {"size": info["size"], "metadata": {}}

    async def alist_records(self, directory: str, recursive: bool = True) -> AsyncIterator[str]:
        directory = self.fs._strip_protocol(directory)
        try:
            if recursive:
                found = list(self.fs.find(directory))
            else:
                found = [e["name"] for e in self.fs.ls(directory) if e["type"] == "file"]
        except FileNotFoundError:
            return
        for path in found:
            yield path

    async def alist_prefixed(self, prefix: str) -> AsyncIterator[str]:
        prefix = self.fs._strip_protocol(prefix)
        async for path in self.alist_records(prefix.rsplit("/", 1)[0]):
            if path.startswith(prefix):
                yield path

    async def adelete_records(self, paths: Sequence[str]) -> int:
        for path in paths:
            if self.fs.isfile(path):
                self.fs.rm_file(path)
        return len(paths)

    # -- pending data -----------------------------------------------------------------------

    def check(self, commit: SinglePendingCommit, source: str) -> None:
        if commit.store != STORE_NAME:
            raise InvalidCommitData(
                source, "extraData", f"not an in-process upload (magicfs.store is not {STORE_NAME})"
            )
        if not commit.etags:  # as S3's, and Hadoop's loader asks it (the writer's PartRules)
            raise InvalidCommitData(source, "etags", "must list at least one part")

    async def apublish(self, commit: SinglePendingCommit) -> None:
        try:
            self.fs.publish(commit.upload_id, commit.etags, create_only=is_create_only(commit))
        except FileNotFoundError:
            if await self.apublished(commit):
                return  # published by an earlier attempt of this job commit
            raise
        except FileExistsError:
            if await self.apublished(commit):
                return
            raise FileExistsError(
                f"{self.url(commit.destination)} already exists and the file was opened 'xb' "
                "(create only). Write to another name, or delete the file first"
            ) from None

    async def apublished(self, commit: SinglePendingCommit) -> bool:
        if self.fs.published_by(commit.destination) != commit.upload_id:
            return False
        return bool(self.fs.size(commit.destination) == commit.length)

    async def adelete_published(self, commits: Sequence[SinglePendingCommit]) -> int:
        for commit in commits:
            if self.fs.isfile(commit.destination):
                self.fs.rm_file(commit.destination)
        return len(commits)

    async def adiscard(self, writes: Sequence[PendingWrite]) -> int:
        return sum(self.fs.discard(write.upload_id) for write in writes)

    async def alist_pending(self, prefix: str) -> AsyncIterator[PendingWrite]:
        for path, upload_id in self.fs.pending(prefix):
            yield PendingWrite(path, upload_id)
