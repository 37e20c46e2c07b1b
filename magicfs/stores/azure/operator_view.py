"""Azure's operator view (:mod:`magicfs.stores.operator_view`): staged blocks.

Azure's counterpart of a parked multipart upload is a blob name holding staged
("uncommitted") blocks and no published blob: what a block-list job leaves when a task
attempt was aborted, superseded or killed. Such names are invisible to readers; the
listing (List Blobs with uncommitted blobs, :meth:`.blocks.BlockStore.staged_blobs`)
shows them with their staged blocks and bytes, which Azure bills for until they go.

Nothing can discard them (:data:`NO_DISCARD`): Azure has no request that deletes staged
blocks alone; they go 7 days after they were staged, or when the name is next published
(any Put Block List or Put Blob on it). The only way to force them out now is to publish
something at that name, which would make a file visible: magicfs never does that.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..operator_view import OperatorView, Pending

if TYPE_CHECKING:
    from .deferred import BlockListDeferred

NO_DISCARD = (
    "Azure has no request that deletes staged blocks alone: they expire 7 days after "
    "staging, or are discarded when the name is next written. Nothing was changed."
)


class BlockListOperatorView(OperatorView):
    """The names under a prefix holding staged blocks, each with its blocks and bytes."""

    part_noun = "staged block"
    cannot_discard = NO_DISCARD

    def __init__(self, adapter: BlockListDeferred):
        super().__init__(adapter)
        self.blocks = adapter.blocks

    async def alist_pending(self, prefix: str) -> AsyncIterator[Pending]:
        container, key = self.split(prefix)
        for entry in await self.blocks.staged_blobs(container, key):
            yield Pending(entry["name"], "", parts=entry["blocks"], bytes=entry["bytes"])
