"""A deferred store's binding: its halves, declared together (listed by :mod:`.registry`).

A deferred store has two halves that must agree: the write side (its writers' hooks,
:mod:`.deferred_writer`) and the commit side (its adapter, :mod:`.deferred`, with its job
hooks, :mod:`.job_hooks`, and its operator view, :mod:`.operator_view`). Each store's
folder has one ``binding.py`` that builds its :class:`DeferredStoreSpec` from them, so
no half imports another's declaration: the writer, the adapter, the job hooks and the
operator view import what they share (record format, names, the shared job check's
key) from the store's own small modules, and only the binding imports them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .deferred import AdapterFactory, DeferredCapabilities
from .failures import StoreFailures
from .job_hooks import JobHooksFactory, StoreOptions


@dataclass(frozen=True)
class DeferredStoreSpec:
    """One deferred store, declared once (listed by :mod:`.registry`)."""

    #: The store's name (``"s3"``, ``"azure-block-list"``): registry key, messages.
    name: str
    #: Does an fsspec filesystem (class or instance) belong to this store? Judged by what
    #: it is (its class), never by a protocol name a wrapper could also answer to.
    recognises: Callable[[Any], bool]
    #: The commit side (:class:`DeferredStore`) for one job.
    adapter: AdapterFactory
    capabilities: DeferredCapabilities
    #: The committer (``committer_for`` name) that commits its jobs by default.
    committer: str
    #: Can ``committer="magic-layout"`` (the generic hooks) commit what its writers save?
    #: False where its writers' records are read only by its own job hooks (Azure's
    #: writer records: a task committed in another process than its writers' would
    #: commit without their files): ``magic-layout`` is then refused, naming
    #: :attr:`committer`.
    generic_hooks_commit: bool = True
    #: The :class:`~magicfs.filesystems.MagicFileSystem` keyword that must be True for
    #: its task view (``"block_lists"`` on Azure, whose adlfs also serves the manifest
    #: committer); ``None``: always.
    opt_in: str | None = None
    #: The write side (the task view's writer hooks), ``(fs, options) -> writes``.
    writes: Callable[..., Any] | None = None
    #: The task view's keywords its writers take, typed (a dataclass: the
    #: :class:`~magicfs.filesystems.MagicFileSystem` keywords it declares reach its
    #: writers as one instance, ``WriterOptions.store``; ``None``: none).
    writer_options: type[Any] | None = None
    #: Its committer's options, typed (:class:`~.job_hooks.StoreOptions`; ``None``: none).
    options: type[StoreOptions] | None = None
    #: What its jobs add to the magic-layout flow (:class:`~.job_hooks.DeferredJobHooks`
    #: or a subclass; ``None``: the generic hooks).
    job_hooks: JobHooksFactory | None = None
    #: What the operator commands (``magicfs uploads``, ``magicfs jobs``) ask of it beyond
    #: the adapter, ``(adapter) -> view``: a subclass of :class:`~.operator_view.OperatorView`
    #: in the store's folder; ``None``: the generic view over the adapter.
    operator_view: Callable[[Any], Any] | None = None
    #: How to read its client's errors for messages (:class:`~.failures.StoreFailures`:
    #: code, HTTP status, its own words, no connection, no bucket, the exception types
    #: it raises besides ``OSError``); ``None``: the exception's class says all it can.
    failures: StoreFailures | None = None
