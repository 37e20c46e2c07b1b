"""The stores' own filesystem classes, whatever ``magicfs.install()`` registered over them.

``install()`` registers a magic-aware subclass in place of a store's class (``s3`` and
others), whose task paths go to a ``MagicFileSystem``. magicfs's own machinery must
never get that class where it needs the *store*: its task paths are not the store's own
(a committer's records and markers sit at task paths), and a ``MagicFileSystem`` around
it would route every task path twice. Everything in
magicfs that builds or judges a store goes through :func:`store_class`,
:func:`store_filesystem` or :func:`unwrapped`, so ``install()`` called before or after a
job is set up changes nothing about how the job commits.
"""

from __future__ import annotations

from typing import Any, cast

import fsspec

#: protocol -> the class ``install()`` replaced (filled and emptied by :mod:`.install`).
ORIGINALS: dict[str, type] = {}


#: protocol -> the magicfs extra that installs its fsspec filesystem.
EXTRAS = {"abfs": "azure", "abfss": "azure", "az": "azure", "gs": "gcs", "gcs": "gcs"}


def store_class(protocol: str) -> type:
    """The store's own filesystem class for ``protocol`` (never an installed wrapper).

    A store whose package is missing fails with fsspec's ImportError plus the magicfs
    extra that installs it (``pip install 'magicfs[azure]'``).
    """
    found = ORIGINALS.get(protocol)
    if found is not None:
        return found
    try:
        return cast(type, fsspec.get_filesystem_class(protocol))
    except ImportError as e:
        extra = EXTRAS.get(protocol)
        if not extra:
            raise
        raise ImportError(f"{e}: pip install 'magicfs[{extra}]'") from e


def store_filesystem(protocol: str, **options: Any) -> fsspec.AbstractFileSystem:
    """``fsspec.filesystem(protocol, **options)``, built from the store's own class."""
    return cast(fsspec.AbstractFileSystem, store_class(protocol)(**options))


def unwrapped(fs: Any) -> Any:
    """``fs`` itself, or, for an instance of an installed class, the private store instance
    its task paths are written through (``magicfs_store``, :mod:`.installed`).

    Installed classes are recognised by their ``wrapped_class`` attribute (set by
    :mod:`.installed`); a ``MagicFileSystem`` made on purpose is left as it is.
    """
    if getattr(type(fs), "wrapped_class", None) is not None:
        return fs.magicfs_store
    return fs


def store_of(url: str, fs: Any = None) -> Any:
    """The store ``url`` is on, for asking the registry which store it is: ``fs``
    unwrapped (:func:`unwrapped`) when given, else the store's own class for the URL's
    protocol (``file`` for a plain path); no filesystem is built."""
    store = unwrapped(fs)
    if store is None:
        store = store_class(fsspec.core.split_protocol(url)[0] or "file")
    return store


def unwrapped_class(cls: Any) -> Any:
    """A filesystem class, or the class an installed class stands for."""
    while getattr(cls, "wrapped_class", None) is not None:
        cls = cls.wrapped_class
    return cls
