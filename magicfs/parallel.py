"""One function over many items, a bounded number at once: magicfs's one parallel map.

Two forms of the same contract, for the two kinds of work magicfs does in parallel:

* :func:`thread_map`: a blocking function on ``threads`` threads
  (:class:`concurrent.futures.ThreadPoolExecutor`): fsspec calls, local files;
* :func:`loop_map`: a coroutine function on an asyncio IO loop (a store's: s3fs's,
  Azure's), at most ``limit`` running at once (an :class:`asyncio.Semaphore`), no
  thread per call.

The contract, both forms:

* **results in the order of** ``items``, yielded as they are ready;
* **flat memory**: ``items`` is consumed lazily, at most ``window`` (twice the bound by
  default) ahead of the results handed out, so a spooled job of any size goes through;
  ``items`` is always read in the calling thread (a spool's SQLite cursor must be);
* **stop on the first failure**: once one call has failed, no further call starts;
  those running finish, then that failure is raised (the first in ``items``' order, when
  several fail at once). Leaving the loop early (``break``, an error in the caller)
  stops the map the same way; neither form returns while one of its calls still runs.

Why one map: each stage used to carry its own hand-written loop of futures, each
with its own idea of when to stop; a job's commit should stop the same way wherever
it fails.

Beside the map, :func:`in_background`: one blocking call started on a thread of its
own, for work that overlaps the caller's next step (a job's end while its journal is
saved, a clean-up's listing while the journal is marked committed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["in_background", "loop_map", "thread_map"]

T = TypeVar("T")
R = TypeVar("R")

_END = object()


def in_background(
    call: Callable[..., R], *args: Any, name: str = "magicfs"
) -> concurrent.futures.Future[R]:
    """``call(*args)`` on a new thread named ``name``, started now: its future. The
    thread ends with the call; the caller waits on the future (or never: it still ends)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, name)
    try:
        return pool.submit(call, *args)
    finally:
        pool.shutdown(wait=False)


def thread_map(
    function: Callable[[T], R],
    items: Iterable[T],
    threads: int,
    window: int | None = None,
    name: str = "magicfs-map",
) -> Iterator[R]:
    """``function(item)`` for each item on ``threads`` threads (module docstring)."""
    stop = threading.Event()

    def call(item: T) -> R:
        if stop.is_set():  # queued when another failed: never started
            raise _Skipped
        try:
            return function(item)
        except BaseException:
            stop.set()  # before another queued call can start
            raise

    with concurrent.futures.ThreadPoolExecutor(threads, name) as pool:
        yield from _in_order(
            lambda item: pool.submit(call, item), items, window or 2 * threads, stop
        )


def loop_map(
    run_background: Callable[[Coroutine[Any, Any, R]], concurrent.futures.Future[R]],
    function: Callable[[T], Awaitable[R]],
    items: Iterable[T],
    limit: int,
    window: int | None = None,
) -> Iterator[R]:
    """``await function(item)`` for each item, at most ``limit`` at once (module docstring).

    ``run_background`` starts a coroutine on the IO loop and returns at once (a store's
    ``run_background``: ``asyncio.run_coroutine_threadsafe`` on its loop); the map is
    called from another thread, which it blocks.
    """
    stop = threading.Event()
    semaphore = asyncio.Semaphore(limit)  # bound to the IO loop at its first use there

    async def call(item: T) -> R:
        async with semaphore:
            if stop.is_set():  # waiting for its turn when another failed: never started
                raise _Skipped
            try:
                return await function(item)
            except BaseException:
                stop.set()
                raise

    def start(item: T) -> concurrent.futures.Future[R]:
        return run_background(call(item))

    yield from _in_order(start, items, window or 2 * limit, stop)


def _in_order(
    start: Callable[[T], concurrent.futures.Future[R]],
    items: Iterable[T],
    window: int,
    stop: threading.Event,
) -> Iterator[R]:
    """Start calls from ``items`` (at most ``window`` not yet yielded) and yield their
    results in order. A failing call sets ``stop`` before it ends: then the calls
    already started end, and the failure is raised."""
    pending: deque[concurrent.futures.Future[R]] = deque()
    source = iter(items)
    try:
        while True:
            while len(pending) < window and not stop.is_set():
                item = next(source, _END)
                if item is _END:
                    break
                pending.append(start(item))  # type: ignore[arg-type]
            if not pending:
                return
            # Wait for a call still running: a done one behind an unfinished head would
            # make the wait return at once, and this thread spin (taking the GIL from
            # the IO loop it waits for). Wakes once per completion, failures included.
            running = [f for f in pending if not f.done()]
            if running:
                concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            if stop.is_set():
                concurrent.futures.wait(pending)
                raise _first_failure(pending)
            while pending and pending[0].done() and not stop.is_set():
                yield pending.popleft().result()
    finally:
        stop.set()  # the caller left early: queued calls do not start
        concurrent.futures.wait(pending)


class _Skipped(Exception):
    """A call that was queued when another failed, and so never ran."""


def _first_failure(futures: Iterable[concurrent.futures.Future[R]]) -> BaseException:
    errors = [f.exception() for f in futures if not f.cancelled()]  # cancelled by the caller
    failures = (e for e in errors if e is not None and not isinstance(e, _Skipped))
    return next(failures, concurrent.futures.CancelledError())
