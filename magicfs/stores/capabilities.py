"""What a store can do, probed once from its fsspec filesystem.

Everything in magicfs that behaves differently per store asks this module, never a
protocol name of its own:

* ``deferred_store``: the deferred store (:mod:`.registry`) the filesystem belongs to,
  if any: a write can target its final name and stay invisible until one request
  publishes it (S3 multipart uploads, Azure block lists); ``deferred_writes`` says
  whether there is one;
* ``atomic_rename``: a rename is one atomic operation (local disks); elsewhere a rename
  is a copy then a delete;
* ``needs_directories``: files need their parent directories to exist (local disks);
* ``etag_preserved_in_rename``: a renamed file keeps its etag (where rename is real);
* ``appends``: ``open(path, "ab")`` appends to a file it wrote (local disks, memory).
  Object stores cannot: adlfs fails on a blob written with ``"wb"`` and gcsfs silently
  *replaces* the object — so magicfs refuses ``"ab"`` on their task paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Capabilities", "capabilities", "has_block_lists", "is_local", "is_s3", "protocols"]

from .deferred import DeferredStoreSpec, protocols
from .registry import deferred_store_for

_LOCAL = {"file", "local"}
_MEMORY = {"memory"}


@dataclass(frozen=True)
class Capabilities:
    deferred_store: DeferredStoreSpec | None
    atomic_rename: bool
    needs_directories: bool
    etag_preserved_in_rename: bool
    appends: bool

    @property
    def deferred_writes(self) -> bool:
        """Writes can stay invisible on their final names until published (any deferred
        store: S3, Azure block lists, ...)."""
        return self.deferred_store is not None


def capabilities(fs: Any) -> Capabilities:
    """Probe ``fs`` (an fsspec filesystem)."""
    names = protocols(fs)
    local = bool(names & _LOCAL)
    return Capabilities(
        deferred_store=deferred_store_for(fs),
        atomic_rename=local,
        needs_directories=local,
        etag_preserved_in_rename=local,
        appends=local or bool(names & _MEMORY),
    )


def is_s3(fs: Any) -> bool:
    """Is ``fs`` S3's (s3fs), served by the S3 adapter? For the callers that need S3's
    own requests (the CLI's upload listing, the staging committer): a question of which
    store, asked of the registry, not a capability."""
    return _deferred_store_name(fs) == "s3"


def has_block_lists(fs: Any) -> bool:
    """Is ``fs`` Azure Blob's (adlfs), served by the block-list adapter?"""
    return _deferred_store_name(fs) == "azure-block-list"


def _deferred_store_name(fs: Any) -> str | None:
    spec = deferred_store_for(fs)
    return None if spec is None else spec.name


def is_local(fs: Any) -> bool:
    """Is ``fs`` the local disk (fsspec's ``file``/``local`` filesystem)?"""
    return bool(protocols(fs) & _LOCAL)
