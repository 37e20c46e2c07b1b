"""One job's state in this process: Hadoop's ``CommitContext`` with its IO statistics.

A job reaches a process through several objects: its committer (with the store's
adapter), the task view's writes, and one filesystem per file a writer opens by URL
(task paths are not cachable, so each ``fsspec.open`` makes its own). What the job
promises per process must not depend on which of them makes a call: ``max_request_rate``
caps the job's requests in this process, the retry budget is spent by all its calls in
this process. So that state lives here, once per job and destination, and every object
of the job finds it: the committer by its job id and destination, a writer by the job
its task path names (``.../__magic_job-<id>/...``: :func:`job_context`).

A context holds:

* **store state** (:meth:`JobContext.store_state`): what a store keeps per job, made
  once by the first caller and shared after (S3: the rate control, the replies it
  watches and the retry budget, :mod:`magicfs.stores.s3.store`; the touched markers its
  writers saved; the job checks its committer and writers share,
  :mod:`magicfs.stores.job_check`; Azure's writer records,
  :mod:`magicfs.stores.azure.records`). A store's module names its own key
  (``"s3.calls"``); this module knows nothing of stores;
* **the job's thread pools** (:meth:`JobContext.pool`): made once by name, shut down
  when the context closes;
* **statistics** (:attr:`JobContext.statistics`): the job's IO statistics in this
  process, across all of its stores (S3: ``store_io_request``, ``store_io_retry``);
* **what to do when it closes** (:meth:`JobContext.on_close`).

**Lifetime.** The registry (:data:`JOB_CONTEXTS`) holds contexts weakly: a context
lives while its committer, a store of one of its writers, or a task file of the job that
this process keeps track of (:class:`~magicfs.task_files.TaskFile`, until its attempt
commits or aborts here) holds it, so a long-lived executor that ran many jobs keeps none
of the finished ones. :meth:`JobContext.close` ends it at once (its pools shut down, its
close callbacks run, the registry forgets it; the next lookup of the job makes a new
one): the protocol closes it when the job ends in this process (commit, abort or
clean-up; after a background clean-up, when that ends:
:meth:`magicfs.protocol.hooks.CommitterHooks.close_context`). A forked child forgets its
parent's contexts (:mod:`magicfs.lifecycle`): their locks and pools are the parent's.

**What is not here, by decision**: state that is per store or per process, not per job.
Per-store caches stay with their stores (what a bucket answers:
:mod:`magicfs.stores.s3.conditional`'s ``_LEARNT``, :mod:`magicfs.stores.gcs_moves`'s
``_ANSWERS``, :mod:`magicfs.stores.s3.client`'s ``_LOADERS``; the job index's "said once
per bucket", :func:`magicfs.layouts.job_index.index_failed`). Two process registries stay
too, because they must outlive any one job's context: :data:`magicfs.task_files.TASK_FILES`
(the exit hook settles every file still closing; a finished attempt stays refused after
its job's context is gone) and :data:`magicfs.protocol.active_jobs.ACTIVE_JOBS` (the exit
warning is about a job whose every object was dropped before it ended).

**What it does not span**: another process. A job whose tasks run in eight executor
processes has one context in each; each caps its own requests at ``max_request_rate``.
A context pickles as its job and destination, and unpickles as that process's context
for the job.
"""

from __future__ import annotations

import concurrent.futures
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from .lifecycle import after_fork
from .paths import split_magic_path
from .statistics import IOStatisticsStore

_T = TypeVar("_T")


def destination_key(destination: str) -> str:
    """``s3://bkt/out/`` -> ``bkt/out``: a destination as the registry keys it (a URL and
    a store path of the same destination name one job)."""
    return destination.split("://", 1)[-1].strip("/")


class JobContext:
    """What is per job in this process (module docstring)."""

    def __init__(self, job_id: str, destination: str) -> None:
        self.job_id = job_id
        #: The destination without protocol (:func:`destination_key`).
        self.destination = destination_key(destination)
        #: The job's IO statistics in this process.
        self.statistics = IOStatisticsStore()
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {}
        self._pools: dict[str, concurrent.futures.ThreadPoolExecutor] = {}
        self._on_close: list[Callable[[], None]] = []
        self.closed = False
        # Pools of a context nobody holds any more are shut down with it.
        self._finalizer = weakref.finalize(self, _shut_down, self._pools)

    def __repr__(self) -> str:
        return f"JobContext(job_id={self.job_id!r}, destination={self.destination!r})"

    def __reduce__(self) -> tuple[Callable[[str, str], JobContext], tuple[str, str]]:
        return job_context, (self.job_id, self.destination)

    def store_state(self, key: str, factory: Callable[[], _T]) -> _T:
        """The job's state under ``key`` (a store's own name, ``"s3.calls"``); made by
        ``factory`` at the first call, the same object at every later one."""
        with self._lock:
            if key not in self._state:
                self._state[key] = factory()
            state: _T = self._state[key]
            return state

    def state(self, key: str) -> Any:
        """The job's state under ``key`` if a store made it (:meth:`store_state`); else
        ``None``."""
        with self._lock:
            return self._state.get(key)

    def pool(self, name: str, threads: int) -> concurrent.futures.ThreadPoolExecutor:
        """The job's thread pool ``name`` (``threads`` at most; made at the first call),
        shut down when the context closes."""
        with self._lock:
            if self.closed:
                raise RuntimeError(f"job {self.job_id}: its context is closed")
            pool = self._pools.get(name)
            if pool is None:
                prefix = f"magicfs-{name}-{self.job_id}"
                pool = self._pools[name] = concurrent.futures.ThreadPoolExecutor(threads, prefix)
            return pool

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the context closes."""
        with self._lock:
            self._on_close.append(callback)

    def close(self) -> None:
        """End the job's state in this process: close callbacks (last added first), pools
        shut down (work already submitted finishes), the registry forgets the context.
        Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            callbacks, self._on_close = list(reversed(self._on_close)), []
        JOB_CONTEXTS.forget(self)
        try:
            for callback in callbacks:
                callback()
        finally:
            self._finalizer()


def _shut_down(pools: dict[str, concurrent.futures.ThreadPoolExecutor]) -> None:
    for pool in pools.values():
        pool.shutdown(wait=False)
    pools.clear()


class JobContexts:
    """The open job contexts of this process, by job id and destination (held weakly:
    module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: weakref.WeakValueDictionary[tuple[str, str], JobContext] = (
            weakref.WeakValueDictionary()
        )

    def get(self, job_id: str, destination: str) -> JobContext:
        """The open context of the job at ``destination``; a new one if none is open."""
        key = (job_id, destination_key(destination))
        with self._lock:
            context = self._open.get(key)
            if context is None:
                context = self._open[key] = JobContext(job_id, destination)
            return context

    def find(self, job_id: str, destination: str) -> JobContext | None:
        """The open context of the job at ``destination``, if there is one."""
        with self._lock:
            return self._open.get((job_id, destination_key(destination)))

    def forget(self, context: JobContext) -> None:
        """``context`` closed: the next lookup of its job makes a new one."""
        key = (context.job_id, context.destination)
        with self._lock:
            if self._open.get(key) is context:
                del self._open[key]

    def open_contexts(self) -> list[JobContext]:
        with self._lock:
            return list(self._open.values())

    def forget_all(self) -> None:
        """A forked child: its parent's contexts are not its own."""
        self._lock = threading.Lock()
        self._open = weakref.WeakValueDictionary()


#: The job contexts of this process.
JOB_CONTEXTS = JobContexts()
after_fork(JOB_CONTEXTS.forget_all)


def job_context(job_id: str, destination: str) -> JobContext:
    """The context of job ``job_id`` at ``destination`` in this process (made if none is
    open): what a committer and the writers of its task paths share."""
    return JOB_CONTEXTS.get(job_id, destination)


def job_context_of(path: str) -> JobContext | None:
    """The context of the job a store path names (``bkt/out/__magic_job-<id>/...``);
    ``None`` for a path that names no job."""
    magic_path = split_magic_path(path)
    if magic_path is None or not magic_path.job_id:
        return None
    return job_context(magic_path.job_id, magic_path.destination_dir)
