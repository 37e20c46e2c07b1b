"""``magicfs.install()``: make plain store URLs magic-aware, for code that cannot change URLs.

After ``install()``, ``fsspec.filesystem("s3", ...)`` and ``fsspec.open("s3://...")``
build the store's own class with task paths made safe (:mod:`.installed`: a subclass of
s3fs's ``S3FileSystem``, adlfs's, gcsfs's...): paths without a magic element behave
exactly as before, writes under magic paths are deferred. ``uninstall()`` puts the
original classes back.

Committers are unaffected, whenever ``install()`` is called (before or after a job is
set up): they build and judge their store from the class ``install()`` replaced
(:mod:`.originals`), so S3 keeps the magic committer (no rename, no copy) and every
other store its own.

pandas caveat: given an ``s3://`` URL and *no* ``storage_options``, pandas writes
Parquet with Arrow's own S3 client and never asks fsspec. Pass ``storage_options``
(even ``{}``) or ``filesystem=``, or use ``magic::s3://`` URLs.
"""

from __future__ import annotations

import fsspec

from .installed import installed_class
from .originals import ORIGINALS as _originals

DEFAULT_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "file", "local", "memory")


def install(protocols: tuple[str, ...] = DEFAULT_PROTOCOLS) -> list[str]:
    """Register magic-aware classes for ``protocols``; returns those newly installed.

    Protocols whose library is not installed (e.g. ``gs`` without gcsfs) are skipped.
    """
    installed = []
    for protocol in protocols:
        if protocol in _originals:
            continue
        try:
            original = fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError):
            continue
        _originals[protocol] = original
        fsspec.register_implementation(protocol, installed_class(original), clobber=True)
        installed.append(protocol)
    return installed


def uninstall() -> None:
    """Restore the filesystem classes ``install()`` replaced."""
    for protocol, original in _originals.items():
        fsspec.register_implementation(protocol, original, clobber=True)
    _originals.clear()


def installed_protocols() -> list[str]:
    return sorted(_originals)
