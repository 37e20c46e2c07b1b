"""The in-process store's binding: its adapter, writers and operator view."""

from __future__ import annotations

from ..binding import DeferredStoreSpec
from .adapter import CAPABILITIES, MemoryDeferred
from .fs import MemoryDeferredFileSystem
from .operator_view import MemoryOperatorView
from .writer import STORE_NAME, MemoryWrites

SPEC = DeferredStoreSpec(
    name=STORE_NAME,
    recognises=lambda fs: (
        isinstance(fs, MemoryDeferredFileSystem)
        or (isinstance(fs, type) and issubclass(fs, MemoryDeferredFileSystem))
    ),
    adapter=MemoryDeferred.for_job,
    capabilities=CAPABILITIES,
    committer="magic-layout",
    writes=MemoryWrites,
    operator_view=MemoryOperatorView,
)
