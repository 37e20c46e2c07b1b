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
Properties on Azure). Runs on the store's event loop: no locks, one instance per (loop,
store key, marker key); a store's writers pass a key that names the store and bucket or
container, so checks are never shared across stores. A forked child starts with no shared
checks (its parent's run on a loop the child does not run).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .coalesce import Coalesced

T = TypeVar("T")

_SHARED: dict[tuple[int, str, str], Coalesced[Any]] = {}


async def job_still_active(
    bucket: str, marker_key: str, head: Callable[[], Awaitable[bool]]
) -> bool:
    """Whether the job marker exists, by a check started after this call (shared).

    ``bucket``: where the marker is, as the caller's store names it (S3: the bucket; Azure:
    the account endpoint and container); ``head()`` performs one check (True if the
    marker exists).
    """
    return await shared_fresh(bucket, marker_key, head)


async def shared_fresh(bucket: str, key: str, check: Callable[[], Awaitable[T]]) -> T:
    """The answer of a ``check()`` of ``key`` started after this call, shared with the
    callers of this process that ask meanwhile (:func:`job_still_active`; and the
    listing of the job marker's name that ``in_memory`` task commits make instead,
    ``magicfs.committers.magic_layout``, under a key of its own)."""
    shared = (id(asyncio.get_running_loop()), bucket, key)
    coalesced = _SHARED.get(shared)
    if coalesced is None:
        coalesced = _SHARED[shared] = Coalesced(check)
    try:
        answer: T = await coalesced.fresh()
        return answer
    finally:
        if coalesced.idle:
            _SHARED.pop(shared, None)


def _forget_all() -> None:
    """In a forked child: the parent's checks run on the parent's event loop, which does
    not run in the child; a new loop could even reuse the old one's ``id`` and wait on
    them forever. The child starts with none."""
    _SHARED.clear()


os.register_at_fork(after_in_child=_forget_all)
