"""Forget this process's cached listings of a destination once a job has changed it.

fsspec filesystems cache directory listings (``fs.dircache``), and fsspec keeps one
instance per class and set of options (its ``_Cached`` metaclass, ``cls._cache``), so
``pd.read_parquet(url, storage_options=opts)``, ``dd.read_parquet(...)`` and
``fsspec.filesystem("s3", **opts)`` all share the instance, and its listings, for as
long as the process lives. A job publishes, deletes and rolls back files with requests
of its own (raw S3 and Azure clients, or a store instance with other options), which
those caches never see: a reader would then list the files it saw before the job (and
open a deleted one, or miss a new one) until something invalidates its cache.

:func:`forget_listings` is that something, for one destination. It drops every cached
listing *at*, *under* (partition directories) and *above* (the parents that list the
destination itself) the destination in every live instance of this process that could
hold one: the instance given (the committer's store, which ``job.fs`` wraps) and every
instance in the instance caches of the store's class family — the class of that
instance, the classes registered for its protocols (an installed magic wrapper stands
for the class it wraps), and all their subclasses. magicfs's own wrappers
(``MagicFileSystem``, ``job.fs``) list through the store instance they wrap, so they
hold no listing of their own. The instances themselves stay cached and keep caching:
only the entries the job may have changed go.

Cost: no request (the next listing is fetched as the first one was) and work
proportional to the cached instances and their cached listings, never to the files a
job wrote. :func:`refreshes_listings` runs it when a job-level operation ends, whether
it returned or raised (:func:`refreshes_listings_of`: when a clean-up in the background
ends).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import fsspec
from fsspec.registry import registry as registered_classes

from .originals import unwrapped_class

log = logging.getLogger("magicfs.filesystems.listings")

P = ParamSpec("P")
R = TypeVar("R")


class Destination(Protocol):
    """What :func:`refreshes_listings` needs of a committer: its store and destination."""

    @property
    def store_fs(self) -> fsspec.AbstractFileSystem: ...

    @property
    def dest(self) -> str: ...


D = TypeVar("D", bound=Destination)


def refreshes_listings(method: Callable[Concatenate[D, P], R]) -> Callable[Concatenate[D, P], R]:
    """Decorate a job-level method: when it ends (returned or raised), forget the
    cached listings of the committer's destination (:func:`forget_listings`)."""

    @functools.wraps(method)
    def run(self: D, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        finally:
            forget_listings(self.store_fs, self.dest)

    return run


def refreshes_listings_of(destination: Destination, work: Callable[[], R]) -> Callable[[], R]:
    """``work``, forgetting the destination's cached listings when it ends (returned or
    raised): for work that ends later, on a thread of its own (a background clean-up)."""

    def run() -> R:
        try:
            return work()
        finally:
            forget_listings(destination.store_fs, destination.dest)

    return run


def forget_listings(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Drop the cached listings at, under and above ``path`` (as ``fs`` names it) in
    ``fs`` and every cached instance of its class family. Never raises: a filesystem
    that fails to forget is logged and skipped."""
    path = path.rstrip("/")
    for instance in _live_instances(fs):
        try:
            _forget(instance, path)
        except Exception as e:  # bookkeeping must not hide the job's own outcome
            log.warning(
                "could not drop the cached listings of %s from %r: %s: %s",
                path,
                instance,
                type(e).__name__,
                e,
            )


def _forget(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """One instance: its ``dircache`` entries related to ``path``, then its own
    ``invalidate_cache(path)`` for whatever else it keeps (implementations drop the
    path and, some, its parents, but none the directories under it)."""
    cache = getattr(fs, "dircache", None)
    if cache is not None:
        for key in [key for key in list(cache) if _related(key, path)]:
            cache.pop(key, None)
    fs.invalidate_cache(path)


def _related(key: Any, path: str) -> bool:
    """Is the listing cached under ``key`` one that a change at ``path`` can alter?
    ``path`` itself, a directory under it, or one of its parents (the root included)."""
    if not isinstance(key, str):
        return False
    key = key.rstrip("/")
    return key in ("", path) or key.startswith(path + "/") or path.startswith(key + "/")


def _live_instances(fs: fsspec.AbstractFileSystem) -> Iterator[fsspec.AbstractFileSystem]:
    """``fs``, then every instance cached by a class of its family, each once."""
    seen: set[int] = set()
    for instance in [fs, *_cached_instances(_family(fs))]:
        if id(instance) not in seen:
            seen.add(id(instance))
            yield instance


def _family(fs: fsspec.AbstractFileSystem) -> list[type]:
    """``fs``'s class, the classes registered for its protocols (only those already
    imported: nothing is imported here), and every subclass of those."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    roots = [unwrapped_class(type(fs))]
    for protocol in protocols:
        registered = registered_classes.get(protocol)
        if registered is not None:
            roots.append(unwrapped_class(registered))
    family: list[type] = []
    pending = list(roots)
    while pending:
        cls = pending.pop()
        if cls not in family:
            family.append(cls)
            pending.extend(cls.__subclasses__())
    return family


def _cached_instances(classes: Iterable[type]) -> Iterator[fsspec.AbstractFileSystem]:
    """The instances in each class's own instance cache (fsspec's ``_Cached`` gives
    every class its ``_cache``; there is no public way to list them)."""
    for cls in classes:
        cache = vars(cls).get("_cache")
        if cache is not None:
            yield from list(cache.values())
