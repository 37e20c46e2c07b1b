"""Azure's deferred writes (:mod:`magicfs.stores.deferred`): block lists.

* **publish**: Put Block List of the record's ids. Publishing the same list again is
  harmless; a list whose blocks are gone (``InvalidBlockList``) counts as done only when
  the blob's committed list already is the record's (an earlier attempt of this job
  commit published it and the reply was lost).
* **published?** the blob's committed block list equals the record's ids (ids are
  random per writer, so no other writer's blob can match).
* **delete**: Delete Blob. **discard**: nothing — Azure has no request that deletes
  staged blocks alone; they stay invisible until the name is next published or Azure
  drops them 7 days after staging (docs/stores/azure.md).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from ...errors import InvalidCommitData
from ...records import SinglePendingCommit
from .blocks import BlockStore

T = TypeVar("T")


class BlockListDeferred:
    """Block lists of one job through ``blocks``."""

    throttled = 0  # the Azure SDK retries throttled calls itself and does not report them

    def __init__(self, blocks: BlockStore):
        self.blocks = blocks

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.blocks.submit(call)

    def url(self, path: str) -> str:
        return self.blocks.url(path)

    def check(self, commit: SinglePendingCommit, source: str) -> None:
        """A block list whose ids all belong to its writer and have one length."""
        if not commit.is_block_list:
            raise InvalidCommitData(
                source,
                "extraData",
                "not an Azure block list (magicfs.store is not azure-block-list)",
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

    def delete(self, commits: list[SinglePendingCommit]) -> int:
        return self.blocks.run(self.blocks.delete_many([c.destination for c in commits]))

    def discard(self, commits: Iterable[SinglePendingCommit]) -> int:
        return 0
