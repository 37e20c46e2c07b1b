"""Is the job still active? One check of its marker, shared by the callers of a process.

Every deferred writer must check, *after* creating its pending write, that its job's
marker still exists (the zombie handshake: :mod:`magicfs.stores.s3.writer` after the
create, :mod:`magicfs.stores.azure.writer` after the marker and before the record); task
set-up and commit ask the same question (:mod:`magicfs.committers.magic_layout`). A check
that started after the caller's last write proves that write happened before the job's
end began, and any such check will do — it need not be the caller's own. So the callers
of one process share checks: a caller joins the next check to start (never one already
running, which may have started before its write); while one runs, every caller that
asks waits for the single check that starts when it ends (:class:`~.coalesce.Coalesced`).
Callers working one after another still make a check each; callers that overlap
(background closes, threads, tasks) share them.

Store-neutral (the check itself is the caller's coroutine: a HEAD on S3, Get Blob
Properties on Azure; or, where an ``in_memory`` task commit waits for the next check, a
listing of the marker's name that also finds the tasks marked touched, and answers the
writers who join it as well). Runs on the store's event loop: no locks, one instance per (loop,
store key, marker key); a store's writers pass a key that names the store and bucket or
container, so checks are never shared across stores.

**Where the shared checks live**: in the job's context (:mod:`magicfs.job_context`, slot
:data:`CHECKS_STATE`), which the committer and the writers of its task paths pass, so
they go when the job does. A caller that passes none (a store-neutral caller with a key
of its own) shares in this process's table of such checks. A forked child starts with
none of its parent's (its parent's run on a loop the child does not run): each table
drops them at the child's first check.

A caller that need not know at once passes a ``delay``: its check starts within that
many seconds, or earlier with the next caller's that cannot wait (an ``in_memory`` writer
whose task commit, in the same process, checks the job after it anyway:
:mod:`magicfs.stores.s3.writer`). Checks still waiting when the interpreter exits start
then (:func:`start_waiting_checks`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..job_context import JOB_CONTEXTS, JobContext
from .coalesce import Coalesced


@dataclass(frozen=True)
class JobCheck:
    """What one check of a job marker found."""

    active: bool  # the marker exists
    #: The tasks marked touched, where the check was a listing (``None``: a HEAD).
    touched: frozenset[str] | None = None


class _Checks:
    """The checks of one marker on one loop: a HEAD, or, where a caller waiting for the
    next check needs the tasks marked touched, a listing (which answers the others too)."""

    def __init__(self, head: Callable[[], Awaitable[bool]]):
        self.loop = asyncio.get_running_loop()
        self.head = head
        self.listing: Callable[[], Awaitable[JobCheck]] | None = None
        self.wants_listing = False
        self.coalesced: Coalesced[JobCheck] = Coalesced(self._start)

    def _start(self) -> Awaitable[JobCheck]:
        """Called as a check starts: what its callers asked for until then."""
        wants, self.wants_listing = self.wants_listing, False
        if wants and self.listing is not None:
            return self.listing()
        return self._ahead()

    async def _ahead(self) -> JobCheck:
        return JobCheck(await self.head())


#: The job context's slot of its shared checks
#: (:meth:`~magicfs.job_context.JobContext.store_state`).
CHECKS_STATE = "job_check.shared"


class SharedChecks:
    """One job's checks running in this process, by (loop, store key, marker key)."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._checks: dict[tuple[int, str, str], _Checks] = {}

    def current(self) -> dict[tuple[int, str, str], _Checks]:
        """The checks, none in a forked child (module docstring: a new loop there could
        even reuse the id of the parent's and wait on its checks forever)."""
        if self._pid != os.getpid():
            self._pid, self._checks = os.getpid(), {}
        return self._checks


#: The checks of callers that pass no job context (module docstring).
_UNSCOPED = SharedChecks()


async def job_still_active(
    bucket: str,
    marker_key: str,
    head: Callable[[], Awaitable[bool]],
    delay: float = 0.0,
    *,
    context: JobContext | None = None,
) -> bool:
    """Whether the job marker exists, by a check started after this call (shared), at
    most ``delay`` seconds after it.

    ``bucket``: where the marker is, as the caller's store names it (S3: the bucket; Azure:
    the account endpoint and container); ``head()`` performs one check (True if the
    marker exists); ``context``: the job's, where its shared checks are.
    """
    return (await job_check(bucket, marker_key, head, delay=delay, context=context)).active


async def job_check(
    bucket: str,
    marker_key: str,
    head: Callable[[], Awaitable[bool]],
    listing: Callable[[], Awaitable[JobCheck]] | None = None,
    delay: float = 0.0,
    *,
    context: JobContext | None = None,
) -> JobCheck:
    """A check of the job marker started after this call, shared (module docstring).
    With ``listing`` (a caller that needs the tasks marked touched, which one listing of
    the marker's name finds with the marker: ``magicfs.committers.memory_commits``) the
    check this caller joins is that listing, and the writers who join it take its answer
    as a HEAD's. ``delay``: how long the check may wait for another caller's."""
    table = context.store_state(CHECKS_STATE, SharedChecks) if context else _UNSCOPED
    shared = table.current()
    key = (id(asyncio.get_running_loop()), bucket, marker_key)
    checks = shared.get(key)
    if checks is None:
        checks = shared[key] = _Checks(head)
    if listing is not None:
        checks.listing = listing
        checks.wants_listing = True
    try:
        return await checks.coalesced.fresh(delay)
    finally:
        if checks.coalesced.idle:
            shared.pop(key, None)


def start_waiting_checks() -> None:
    """Start every check still waiting for its delay, on its loop: at exit no caller can
    wait any longer (the callers wait for their own answers)."""
    tables = [_UNSCOPED] + [
        shared
        for context in JOB_CONTEXTS.open_contexts()
        if isinstance(shared := context.state(CHECKS_STATE), SharedChecks)
    ]
    for table in tables:
        for checks in table.current().copy().values():  # (a copy: loops' threads change it)
            if checks.loop.is_running():
                checks.loop.call_soon_threadsafe(checks.coalesced.start_now)
