"""Azure's deferred writes (:mod:`magicfs.stores.deferred`): block lists.

* **publish**: Put Block List of the record's ids. Publishing the same list again is
  harmless; a list whose blocks are gone (``InvalidBlockList``) counts as done only when
  the blob's committed list already is the record's (an earlier attempt of this job
  commit published it and the reply was lost).
* **published?** the blob's committed block list equals the record's ids (ids are
  random per writer, so no other writer's blob can match).
* **delete**: Delete Blob. **discard**: nothing — Azure has no request that deletes
  staged blocks alone; they stay invisible until the name is next published or Azure
  drops them 7 days after staging (docs/stores/azure.md). **list pending**: not offered
  to the committer (``magicfs uploads list`` lists staged blobs: :mod:`.operator_view`).
* **records**: Get Blob (ranged), Put Blob (atomic: no temporary name, no rename), Get
  Blob Properties, List Blobs, Delete Blob — adlfs's own client on its IO loop (the
  Azure SDK retries), with no :class:`~magicfs.stores.rename.RenameStore` in between.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from ...errors import InvalidCommitData
from ...records import SinglePendingCommit
from ..deferred import (
    DeferredCapabilities,
    DeferredStoreBase,
    PendingWrite,
)
from .blocks import BLOCK_LIST_STORE, BlockStore, _not_found

T = TypeVar("T")

CAPABILITIES = DeferredCapabilities(
    discards_pending=False,
    lists_pending=False,
    counts_throttling=False,
    deletes_batch_at_once=False,  # one request per blob, many at once
)


class BlockListDeferred(DeferredStoreBase):
    """Block lists and records of one job through ``blocks``."""

    capabilities = CAPABILITIES
    throttled = 0  # the Azure SDK retries throttled calls itself and does not report them

    def __init__(self, blocks: BlockStore):
        self.blocks = blocks

    @classmethod
    def for_job(
        cls, fs: Any, job_id: str, scratch_dir: Callable[[], str], **_: Any
    ) -> BlockListDeferred:
        """The adapter factory the registry declares (:class:`~..deferred.AdapterFactory`)."""
        return cls(BlockStore(fs))

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.blocks.submit(call)

    def split(self, path: str) -> tuple[str, str]:
        return self.blocks.split(path)

    def url(self, path: str) -> str:
        return path if "://" in path else self.blocks.url(path)

    def check_key(self, marker: str) -> tuple[str, str]:
        return self.blocks.check_key(marker)  # the writers' own (:meth:`BlockStore.check_key`)

    # -- records ----------------------------------------------------------------------------

    async def aread_record(self, path: str, limit: int) -> bytes | None:
        container, blob = self.split(path)
        async with self.blocks.fs.service_client.get_blob_client(container, blob) as client:
            try:
                stream = await client.download_blob(offset=0, length=limit + 1)
            except _not_found():
                return None
            except Exception as error:  # a zero-byte blob has no byte 0
                if getattr(error, "error_code", None) == "InvalidRange":
                    return b""
                raise
            return bytes(await stream.readall())

    async def awrite_record(self, path: str, data: bytes) -> None:
        await self.blocks.put(*self.split(path), data)

    async def arecord_info(self, path: str) -> dict[str, Any] | None:
        container, blob = self.split(path)
        async with self.blocks.fs.service_client.get_blob_client(container, blob) as client:
            try:
                properties = await client.get_blob_properties()
            except _not_found():
                return None
        return {"size": properties.size, "metadata": dict(properties.metadata or {})}

    async def alist_records(self, directory: str, recursive: bool = True) -> AsyncIterator[str]:
        container, key = self.split(directory.rstrip("/"))
        async for path, _ in self._blobs(container, f"{key}/" if key else "", walk=not recursive):
            yield path

    async def alist_prefixed(self, prefix: str) -> AsyncIterator[str]:
        async for path, _ in self._blobs(*self.split(prefix)):
            yield path

    async def alist_with_metadata(self, prefix: str) -> list[tuple[str, dict[str, str]]]:
        """Every blob whose path starts with ``prefix``, with its metadata (one paged
        listing): task commit matches writer records to markers by the writer nonce the
        markers carry."""
        return [found async for found in self._blobs(*self.split(prefix))]

    async def _blobs(
        self, container: str, prefix: str, walk: bool = False
    ) -> AsyncIterator[tuple[str, dict[str, str]]]:
        """``container/name`` and metadata of the blobs whose names start with ``prefix``,
        page by page (``walk``: directly under it), skipping directories (adlfs's marker
        blobs, a walk's prefixes)."""
        async with self.blocks.fs.service_client.get_container_client(container) as client:
            if walk:
                listing = client.walk_blobs(name_starts_with=prefix, include=["metadata"])
            else:
                listing = client.list_blobs(name_starts_with=prefix, include=["metadata"])
            async for item in listing:
                if item.name.endswith("/"):  # a walk's prefix (it has no metadata)
                    continue
                metadata = dict(item.metadata or {})
                if not metadata.get("hdi_isfolder"):
                    yield f"{container}/{item.name}", metadata

    async def adelete_records(self, paths: Sequence[str]) -> int:
        await self.blocks.delete_many(list(paths))
        return len(paths)

    # -- pending data -----------------------------------------------------------------------

    def check(self, commit: SinglePendingCommit, source: str) -> None:
        """A block list whose ids all belong to its writer and have one length."""
        if commit.store != BLOCK_LIST_STORE:
            raise InvalidCommitData(
                source,
                "extraData",
                f"not an Azure block list (magicfs.store is not {BLOCK_LIST_STORE})",
            )
        lengths = {len(block) for block in commit.etags}
        if len(lengths) > 1 or any(not b.startswith(commit.upload_id) for b in commit.etags):
            raise InvalidCommitData(
                source,
                "etags",
                f"block ids must all start with the writer's uploadId {commit.upload_id!r} "
                "and have one length (Azure refuses a list of mixed lengths)",
            )

    async def apublish(self, commit: SinglePendingCommit) -> None:
        try:
            await self.blocks.publish(commit.bucket, commit.destination_key, commit.etags)
        except Exception as error:
            if getattr(error, "error_code", None) == "InvalidBlockList" and (
                await self.apublished(commit)
            ):
                return
            raise

    async def apublished(self, commit: SinglePendingCommit) -> bool:
        ids = await self.blocks.committed_ids(commit.bucket, commit.destination_key)
        return ids == commit.etags

    async def adelete_published(self, commits: Sequence[SinglePendingCommit]) -> int:
        return await self.blocks.delete_many([c.destination for c in commits])

    async def adiscard(self, writes: Sequence[PendingWrite]) -> int:
        return 0  # no request deletes staged blocks (module docstring)

    async def alist_pending(self, prefix: str) -> AsyncIterator[PendingWrite]:
        return
        yield  # not listed (CAPABILITIES.lists_pending)
