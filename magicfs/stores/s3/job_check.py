"""Is the job still active? One HEAD of its marker, shared by the writers of a process.

Every writer must check, *after* creating its upload, that its job's marker still exists
(the zombie handshake, :mod:`magicfs.stores.s3.writer`): a check that started after the create
proves the upload existed before the job's end began. Any check that *starts* after a
writer's create will do for it — it need not be its own. So the writers of one process
share checks: a writer joins the next check to start (never one already running, which
may have started before its create); while one runs, every writer that asks waits for
the single check that starts when it ends. Writers working one after another still make
a check each; writers whose closes overlap (background closes, threads) share them.

**A "yes" serves for :data:`CHECK_LEASE` seconds.** A check that found the marker
started before the job's end (the store answered after the request was sent, and the
marker was there). A create whose reply arrives within ``CHECK_LEASE`` of that start
therefore took effect before ``end + CHECK_LEASE``; the job's sweep lists uploads no
earlier than ``CHECK_LEASE`` after the marker's delete was answered
(:meth:`magicfs.committers.magic.MagicCommitter._discard_left`), so such an upload is in
its listing and swept, and the writer may skip its own check: the handshake holds with
one check per lease per process instead of one per create (or per overlapping group of
creates). Both sides measure durations on their monotonic clocks, not times: no clock
needs to agree with another. A "no" is never reused, and nothing is assumed for a
create that ends after the lease: it waits for a fresh check, as before. Cost: a job's
sweep may wait up to ``CHECK_LEASE`` after the job ended (job commit's own work between
its end and its clean-up usually covers it).

Runs on s3fs's event loop: no locks, one instance per (loop, bucket, marker key).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

#: Seconds a check that found the job active serves later creates (see the module docs).
CHECK_LEASE = 0.25

_Key = tuple[int, str, str]
_SHARED: dict[_Key, _Coalesced] = {}
#: When the latest check that found the job active started (``time.monotonic()``).
_CONFIRMED: dict[_Key, float] = {}


class _Coalesced:
    """Checks of one job marker: at most one running, at most one waiting to start."""

    def __init__(self, key: _Key, check: Callable[[], Awaitable[bool]]):
        self.key = key
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
        started = time.monotonic()  # before the request is sent
        self.running = asyncio.ensure_future(self.check())

        def finished(task: asyncio.Task[bool]) -> None:
            self.running = None
            if task.cancelled():
                waiting.cancel()
            elif task.exception() is not None:
                waiting.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                if task.result():
                    _confirmed(self.key, started)
                waiting.set_result(task.result())
            if self.next is not None:
                self._start()

        self.running.add_done_callback(finished)


def _confirmed(key: _Key, started: float) -> None:
    _CONFIRMED[key] = max(started, _CONFIRMED.get(key, started))
    if len(_CONFIRMED) > 1000:  # many jobs in one process: forget the lapsed leases
        lapsed = time.monotonic() - CHECK_LEASE
        for old in [k for k, at in _CONFIRMED.items() if at < lapsed]:
            del _CONFIRMED[old]


async def job_still_active(
    bucket: str, marker_key: str, head: Callable[[], Awaitable[bool]]
) -> bool:
    """Whether the job marker exists, by a check started after this call (shared), or
    by one that found it within :data:`CHECK_LEASE` before this call. Call it once the
    create it vouches for has been answered.

    ``head()`` performs one check (True if the marker exists).
    """
    key = (id(asyncio.get_running_loop()), bucket, marker_key)
    confirmed = _CONFIRMED.get(key)
    if confirmed is not None and time.monotonic() - confirmed < CHECK_LEASE:
        return True
    coalesced = _SHARED.get(key)
    if coalesced is None:
        coalesced = _SHARED[key] = _Coalesced(key, head)
    try:
        return await coalesced.fresh()
    finally:
        if coalesced.running is None and coalesced.next is None:
            _SHARED.pop(key, None)
