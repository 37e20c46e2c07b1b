"""Runs of one coroutine shared by the callers that overlap: the answer of a fresh run.

Two things a process does for many callers at once need the same promise: a caller gets
the outcome of a run that *started after it asked* (never of one already running, which
may have started before the caller's own write), and callers that overlap share runs.
The job check (:mod:`.job_check`: is the job marker still there, after this writer's
write?) and Azure's writer-record saves (:mod:`.azure.records`: is this file's record on
the store?) are both that.

:class:`Coalesced` keeps at most one run going and at most one waiting to start: a caller
that asks while one runs waits for the single run that starts when it ends, with every
other caller that asked meanwhile. Callers one after another still make a run each.
Runs on one event loop (the store's IO loop): no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Coalesced(Generic[T]):
    """Runs of ``start()`` (which begins one run, synchronously, and returns it to await):
    at most one running, at most one waiting to start (see the module docstring)."""

    def __init__(self, start: Callable[[], Awaitable[T]]):
        self.start = start
        self.running: asyncio.Future[T] | None = None
        self.next: asyncio.Future[T] | None = None
        self.due = 0.0  # the loop time by which the next run must start

    @property
    def idle(self) -> bool:
        """No run going and none waiting to start."""
        return self.running is None and self.next is None

    async def fresh(self, delay: float = 0.0) -> T:
        """The outcome of a run that starts after this call, and at most ``delay``
        seconds after it."""
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if self.next is None:
            self.next = loop.create_future()
            self.due = due
        else:
            self.due = min(self.due, due)
        answer = self.next
        if self.running is None:
            self._start_when_due()
        return await asyncio.shield(answer)

    def start_now(self) -> None:
        """Start the waiting run now, if none is running (the callers it had can no
        longer wait: the interpreter is exiting)."""
        self.due = 0.0
        if self.running is None and self.next is not None:
            self._start()

    def _start_when_due(self) -> None:
        """Start the waiting run if it is due, else look again when it will be."""
        if self.next is None or self.running is not None:
            return
        loop = asyncio.get_running_loop()
        wait = self.due - loop.time()
        if wait > 0:
            loop.call_later(wait, self._start_when_due)
        else:
            self._start()

    def _start(self) -> None:
        waiting, self.next = self.next, None
        assert waiting is not None
        self.running = asyncio.ensure_future(self.start())

        def finished(run: asyncio.Future[T]) -> None:
            self.running = None
            if run.cancelled():
                waiting.cancel()
            elif run.exception() is not None:
                waiting.set_exception(run.exception())  # type: ignore[arg-type]
            else:
                waiting.set_result(run.result())
            self._start_when_due()

        self.running.add_done_callback(finished)
