"""What a store can do, probed once from its fsspec filesystem.

Everything in magicfs that behaves differently per store asks this module, never a
protocol name of its own:

* ``deferred_writes``: a write can target its final name and stay invisible until it
  is made visible in one request (S3 multipart uploads: the magic committer's store);
* ``block_lists``: the same through Azure block lists (Put Block stages invisible
  blocks on the final name, Put Block List publishes them in one request: adlfs);
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

_S3 = {"s3", "s3a"}
_LOCAL = {"file", "local"}
_MEMORY = {"memory"}
_AZURE = {"abfs", "az", "abfss"}


def protocols(fs: Any) -> set[str]:
    """The protocol names an fsspec filesystem (class or instance) answers to."""
    protocol = fs.protocol
    return set(protocol if isinstance(protocol, (tuple, list)) else (protocol,))


@dataclass(frozen=True)
class Capabilities:
    deferred_writes: bool
    block_lists: bool
    atomic_rename: bool
    needs_directories: bool
    etag_preserved_in_rename: bool
    appends: bool


def capabilities(fs: Any) -> Capabilities:
    """Probe ``fs`` (an fsspec filesystem)."""
    names = protocols(fs)
    # s3fs and its subclasses (and magicfs's own installed wrappers do not count: they
    # have no ``call_s3``): what matters is the multipart upload API.
    deferred = bool(names & _S3) and hasattr(fs, "call_s3")
    local = bool(names & _LOCAL)
    # adlfs's AzureBlobFileSystem or a subclass (its block-blob client), not a wrapper
    # that merely answers to "abfs".
    cls = fs if isinstance(fs, type) else type(fs)
    adlfs = any(c.__module__.startswith("adlfs.") for c in cls.__mro__)
    block_lists = bool(names & _AZURE) and adlfs
    return Capabilities(
        deferred_writes=deferred,
        block_lists=block_lists,
        atomic_rename=local,
        needs_directories=local,
        etag_preserved_in_rename=local,
        appends=local or bool(names & _MEMORY),
    )


def is_s3(fs: Any) -> bool:
    """Does ``fs`` speak S3 multipart uploads (an s3fs filesystem)?"""
    return capabilities(fs).deferred_writes


def has_block_lists(fs: Any) -> bool:
    """Does ``fs`` stage and publish Azure block lists (an adlfs filesystem)?"""
    return capabilities(fs).block_lists


def is_local(fs: Any) -> bool:
    """Is ``fs`` the local disk (fsspec's ``file``/``local`` filesystem)?"""
    return bool(protocols(fs) & _LOCAL)
