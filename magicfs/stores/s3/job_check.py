"""Is the job still active? One HEAD of its marker, shared by the writers of a process.

Every writer must check, *after* creating its upload, that its job's marker still exists
(the zombie handshake, :mod:`magicfs.stores.s3.writer`): a check that started after the create
proves the upload existed before the job's end began. Any check that *starts* after a
writer's create will do for it — it need not be its own. So the writers of one process
share checks: a writer joins the next check to start (never one already running, which
may have started before its create); while one runs, every writer that asks waits for
the single check that starts when it ends. Writers working one after another still make
a check each; writers whose closes overlap (background closes, threads) share them.

Runs on s3fs's event loop: no locks, one instance per (loop, bucket, marker key).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

_SHARED: dict[tuple[int, str, str], _Coalesced] = {}


class _Coalesced:
    """Checks of one job marker: at most one running, at most one waiting to start."""

    def __init__(self, check: Callable[[], Awaitable[bool]]):
        self.check = check
        self.running: asyncio.Task[bool] | None = None
        self.next: asyncio.Future[bool] | None = None

    async def fresh(self) -> bool:
        """The answer of a check that starts after this call."""
        if self.next is None:
            self.next = asyncio.get_running_loop().create_future()
        answer = self.next
        if self.running is None:
            self._start()
        return await asyncio.shield(answer)

    def _start(self) -> None:
        waiting, self.next = self.next, None
        assert waiting is not None
        self.running = asyncio.ensure_future(self.check())

        def finished(task: asyncio.Task[bool]) -> None:
            self.running = None
            if task.cancelled():
                waiting.cancel()
            elif task.exception() is not None:
                waiting.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                waiting.set_result(task.result())
            if self.next is not None:
                self._start()

        self.running.add_done_callback(finished)


async def job_still_active(
    bucket: str, marker_key: str, head: Callable[[], Awaitable[bool]]
) -> bool:
    """Whether the job marker exists, by a check started after this call (shared).

    ``head()`` performs one check (True if the marker exists).
    """
    key = (id(asyncio.get_running_loop()), bucket, marker_key)
    coalesced = _SHARED.get(key)
    if coalesced is None:
        coalesced = _SHARED[key] = _Coalesced(head)
    try:
        return await coalesced.fresh()
    finally:
        if coalesced.running is None and coalesced.next is None:
            _SHARED.pop(key, None)
