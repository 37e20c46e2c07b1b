"""``magicfs.install()``: make plain store URLs magic-aware, for code that cannot change URLs.

After ``install()``, ``fsspec.filesystem("s3", ...)`` and ``fsspec.open("s3://...")``
build a :class:`~magicfs.filesystems.MagicFileSystem` around the usual s3fs filesystem:
paths without a magic element behave exactly as before, writes under magic paths are
deferred. ``uninstall()`` puts the original classes back.

Committers are unaffected, whenever ``install()`` is called (before or after a job is
set up): they build and judge their store from the class ``install()`` replaced
(:mod:`.originals`), so S3 keeps the magic committer (no rename, no copy) and every
other store its own.

pandas caveat: given an ``s3://`` URL and *no* ``storage_options``, pandas writes
Parquet with Arrow's own S3 client and never asks fsspec. Pass ``storage_options``
(even ``{}``) or ``filesystem=``, or use ``magic::s3://`` URLs.
"""

from __future__ import annotations

from typing import Any, cast

import fsspec

from ..stores.registry import store_keywords
from . import MagicFileSystem
from .originals import ORIGINALS as _originals

DEFAULT_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "file", "local", "memory")
#: MagicFileSystem's own keywords (attributes of the same names).
_GENERIC_OPTIONS = (
    "part_size",
    "parts_in_flight",
    "in_memory",
    "check_job_active",
    "background_close",
)
#: ... and the deferred stores' own, which it keeps in ``store_options``.
_MAGIC_OPTIONS = (*_GENERIC_OPTIONS, *sorted(store_keywords()))


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
        fsspec.register_implementation(protocol, _magic_class(original), clobber=True)
        installed.append(protocol)
    return installed


def uninstall() -> None:
    """Restore the filesystem classes ``install()`` replaced."""
    for protocol, original in _originals.items():
        fsspec.register_implementation(protocol, original, clobber=True)
    _originals.clear()


def installed_protocols() -> list[str]:
    return sorted(_originals)


def _magic_class(original: Any) -> type:
    class InstalledMagicFileSystem(MagicFileSystem):
        """``MagicFileSystem`` around ``original``, built from ``original``'s arguments."""

        protocol = original.protocol
        wrapped_class = original

        def __init__(self, *args: Any, **kwargs: Any):
            options = {key: kwargs.pop(key) for key in _MAGIC_OPTIONS if key in kwargs}
            super().__init__(fs=original(*args, **kwargs), **options)

        @classmethod
        def _strip_protocol(cls, path: Any) -> Any:
            return original._strip_protocol(path)

        @staticmethod
        def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
            return cast(dict[str, Any], original._get_kwargs_from_urls(path))

        def __reduce__(self) -> Any:
            # Unpickles as a plain MagicFileSystem: works where install() never ran.
            options = {key: getattr(self, key) for key in _GENERIC_OPTIONS}
            return _rebuild, (self.fs, {**options, **self.store_options})

    InstalledMagicFileSystem.__name__ = f"Magic{original.__name__}"
    InstalledMagicFileSystem.__qualname__ = InstalledMagicFileSystem.__name__
    return InstalledMagicFileSystem


def _rebuild(fs: Any, options: dict[str, Any]) -> MagicFileSystem:
    return MagicFileSystem(fs=fs, **options)
