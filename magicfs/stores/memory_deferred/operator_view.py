"""The in-process store's operator view (:mod:`magicfs.stores.operator_view`): each
pending upload with its staged parts and bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..operator_view import OperatorView, Pending

if TYPE_CHECKING:
    from .adapter import MemoryDeferred


class MemoryOperatorView(OperatorView):
    """Uploads staged in this process's memory, measured where they are held."""

    def __init__(self, adapter: MemoryDeferred):
        super().__init__(adapter)
        self.fs = adapter.fs

    async def ameasure(self, pending: Pending) -> tuple[int, int] | None:
        with self.fs.lock:
            upload = self.fs.uploads.get(pending.upload_id)
            if upload is None:
                return None
            return len(upload.parts), sum(len(part) for part in upload.parts.values())
