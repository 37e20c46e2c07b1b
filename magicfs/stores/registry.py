"""Every deferred store, declared once: the one place that knows which stores exist.

A deferred store (:mod:`.deferred`) is one :class:`~.binding.DeferredStoreSpec`, written
in its folder's ``binding.py``; this module lists them. Everything that behaves differently per
deferred store — ``committer_for``'s default, the task view
(:class:`~magicfs.filesystems.MagicFileSystem`), the capabilities
(:mod:`.capabilities`), the CLI (:func:`operator_view_for`, :func:`explain`) — asks
:func:`deferred_store_for` instead of comparing protocol names. Adding a store is its
folder and one line in :data:`DEFERRED_STORES`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .azure.binding import SPEC as AZURE_BLOCK_LISTS
from .binding import DeferredStoreSpec
from .deferred import DeferredStore
from .failures import Failure, read
from .memory_deferred.binding import SPEC as IN_PROCESS
from .operator_view import OperatorView, no_scratch
from .s3.binding import SPEC as S3_MULTIPART

#: The deferred stores, in the order they are tried.
DEFERRED_STORES: tuple[DeferredStoreSpec, ...] = (S3_MULTIPART, AZURE_BLOCK_LISTS, IN_PROCESS)


def deferred_store_for(fs: Any) -> DeferredStoreSpec | None:
    """The deferred store an fsspec filesystem (class or instance) belongs to, if any."""
    return next((spec for spec in DEFERRED_STORES if spec.recognises(fs)), None)


def deferred_store_named(name: str) -> DeferredStoreSpec:
    """The deferred store called ``name`` (``ValueError`` naming the known ones)."""
    for spec in DEFERRED_STORES:
        if spec.name == name:
            return spec
    known = ", ".join(spec.name for spec in DEFERRED_STORES)
    raise ValueError(f"no deferred store is called {name!r} (known: {known})")


def committed_by(committer: str) -> tuple[DeferredStoreSpec, ...]:
    """The deferred stores whose jobs ``committer`` (a ``committer_for`` name) commits."""
    return tuple(spec for spec in DEFERRED_STORES if spec.committer == committer)


def store_keywords() -> frozenset[str]:
    """Every task-view keyword that belongs to some deferred store (its writer options
    and its opt-in): what :class:`~magicfs.filesystems.MagicFileSystem` passes through."""
    names = {spec.opt_in for spec in DEFERRED_STORES if spec.opt_in}
    for spec in DEFERRED_STORES:
        if spec.writer_options is not None:
            names.update(f.name for f in dataclasses.fields(spec.writer_options))
    return frozenset(names)


def store_default(keyword: str) -> Any:
    """The default of a deferred store's own task-view keyword (:func:`store_keywords`):
    its ``writer_options`` field's, or False for an opt-in; ``None`` if no store has it."""
    for spec in DEFERRED_STORES:
        if keyword == spec.opt_in:
            return False
        fields = dataclasses.fields(spec.writer_options) if spec.writer_options else ()
        for field in fields:
            if field.name == keyword:
                return field.default
    return None


def operator_view_for(fs: Any, adapter: DeferredStore | None = None) -> OperatorView | None:
    """The operator's view (:mod:`.operator_view`) of the deferred store ``fs`` belongs
    to, over ``adapter`` (a job's, with its options) or a new one of no job; ``None``
    when no deferred store recognises ``fs``."""
    spec = deferred_store_for(fs)
    if spec is None:
        return None
    if adapter is None:
        adapter = spec.adapter(fs, "", no_scratch)
    view: OperatorView = (spec.operator_view or OperatorView)(adapter)
    return view


def explain(error: BaseException) -> Failure | None:
    """``error`` as the deferred store whose client raised it reads it (its declared
    :class:`~.failures.StoreFailures`: code, HTTP status, its own words); ``None`` when
    no store claims it (a local disk's error, or a store that declares no reading)."""
    for spec in DEFERRED_STORES:
        if spec.failures is not None:
            failure = read(spec.failures, error)
            if failure is not None:
                return failure
    return None


def store_exceptions() -> tuple[type[BaseException], ...]:
    """The exception types the deferred stores' clients raise besides ``OSError`` (S3:
    botocore's), for a caller that turns every store error into a message."""
    return tuple(t for spec in DEFERRED_STORES if spec.failures for t in spec.failures.raises)
