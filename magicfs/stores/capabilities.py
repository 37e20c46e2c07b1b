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

__all__ = ["Capabilities", "capabilities", "is_local", "protocols", "speaks_s3"]

from .binding import DeferredStoreSpec
from .deferred import protocols
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


def speaks_s3(fs: Any) -> bool:
    """Does ``fs`` speak S3's API (s3fs), so :class:`~.s3.store.S3Store` can serve it?

    For the callers that send S3's own requests (the CLI's reads, the staging
    committer) or refuse S3 (the manifest committer needs rename): a question of which
    store, asked of the registry, not a capability.
    """
    spec = deferred_store_for(fs)
    return spec is not None and spec.name == "s3"


def is_local(fs: Any) -> bool:
    """Is ``fs`` the local disk (fsspec's ``file``/``local`` filesystem)?"""
    return bool(protocols(fs) & _LOCAL)
