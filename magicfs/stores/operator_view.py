"""What the operator commands ask of a deferred store beyond job commit's contract.

``magicfs uploads`` (pending writes: list, measure, abort) and ``magicfs jobs`` (the job
trees at a destination) work on any registered deferred store through an
:class:`OperatorView`: written once here over the store's adapter
(:class:`~.deferred.DeferredStore`: ``alist_pending``, ``adiscard``, ``alist_prefixed``),
and, where a store can say more, a subclass in the store's own folder, declared as its
spec's ``operator_view`` (:class:`~.deferred.DeferredStoreSpec`):

* S3 (:mod:`.s3.operator_view`): each upload's initiation time (so ``--older-than``
  selects) and parts (ListParts), aborts that tell "already gone" from "aborted", job
  trees found by one delimited listing, and an unmarked job's uploads;
* Azure (:mod:`.azure.operator_view`): the names holding staged blocks, with their
  blocks and bytes, and why they cannot be discarded;
* the in-process store (:mod:`.memory_deferred.operator_view`): each upload's parts
  and bytes.

:func:`magicfs.stores.registry.operator_view_for` makes the view of a filesystem.
"""

from __future__ import annotations

import concurrent.futures
import datetime
from collections.abc import AsyncIterator, Callable, Container, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from .deferred import DeferredCapabilities, DeferredStore, PendingWrite

T = TypeVar("T")


@dataclass(slots=True)
class Pending:
    """One pending write as an operator sees it: its ``bucket/key``, its upload id, and
    what the store's listing tells of it (``None``/0: not told)."""

    path: str
    upload_id: str
    initiated: datetime.datetime | None = None
    #: Staged parts (S3's parts, Azure's blocks); ``None``: not measured by the listing.
    parts: int | None = None
    bytes: int = 0


#: Is a pending write one of a job's? (:meth:`OperatorView.job_owner`)
Owner = Callable[[Pending], bool]


class OperatorView:
    """An operator's view of one deferred store, over its adapter (the module docstring).

    Every method has a generic form here, written over the adapter; a store's own view
    overrides what it can do better.
    """

    #: What a staged piece of a pending write is called, in messages.
    part_noun = "part"
    #: Does the listing tell when each pending write began (``--older-than`` selects)?
    knows_initiation = False
    #: Are single records read better through the adapter (retried, paced) than through
    #: the fsspec filesystem (``magicfs inspect``, ``magicfs success``)?
    paced_reads = False
    #: Why nothing is discarded, on a store that cannot (not ``discards_pending``).
    cannot_discard = (
        "this store has no request that discards pending writes alone. Nothing was changed."
    )

    def __init__(self, adapter: DeferredStore):
        self.adapter = adapter

    @property
    def capabilities(self) -> DeferredCapabilities:
        return self.adapter.capabilities

    # -- running and naming -----------------------------------------------------------------

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return self.adapter.run(call)

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.adapter.run_background(call)

    def split(self, path: str) -> tuple[str, str]:
        return self.adapter.split(path)

    def url(self, path: str) -> str:
        return self.adapter.url(path)

    def iterate(self, items: AsyncIterator[T], chunk: int = 1000) -> Iterator[T]:
        """An async listing for blocking code, ``chunk`` items a wait: a consumer that
        stops early has asked for the first items only."""

        async def take() -> list[T]:
            taken: list[T] = []
            async for item in items:
                taken.append(item)
                if len(taken) == chunk:
                    break
            return taken

        while batch := self.run(take()):
            yield from batch

    # -- pending writes (magicfs uploads) ---------------------------------------------------

    async def alist_pending(self, prefix: str) -> AsyncIterator[Pending]:
        """The pending writes whose path starts with ``prefix`` (``bucket/key``), paged."""
        async for write in self.adapter.alist_pending(prefix):
            yield Pending(write.path, write.upload_id)

    async def ameasure(self, pending: Pending) -> tuple[int, int] | None:
        """``(parts, bytes)`` staged for ``pending``; ``None``: it ended meanwhile. The
        generic form knows what the listing told (nothing: ``(0, 0)``)."""
        return pending.parts or 0, pending.bytes

    async def aabort(self, pending: Pending) -> bool:
        """Discard ``pending`` (:meth:`~.deferred.DeferredStore.adiscard`); ``False``:
        it was already gone. A failure raises ``OSError``."""
        return await self.adapter.adiscard([PendingWrite(pending.path, pending.upload_id)]) > 0

    def job_owner(self, dest: str, job: str, keys: Container[str], record: str) -> Owner | None:
        """For a job that writes no intent markers (its tree holds ``record``, its
        unmarked record): the test of its pending writes beyond the ``keys`` its tree
        names; ``None``: those keys alone (the generic answer)."""
        return None

    # -- job trees (magicfs jobs) -----------------------------------------------------------

    async def alist_named(self, prefix: str) -> AsyncIterator[str]:
        """The paths directly in ``prefix``'s directory whose names start with its last
        element (directories without a trailing ``/``), each once. The generic form lists
        every record below them (:meth:`~.deferred.DeferredStore.alist_prefixed`)."""
        seen: set[str] = set()
        async for path in self.adapter.alist_prefixed(prefix):
            name = prefix + path[len(prefix) :].split("/", 1)[0]
            if name not in seen:
                seen.add(name)
                yield name


def no_scratch() -> str:
    """The ``scratch_dir`` of an adapter made for no job: nothing may be probed there."""
    raise RuntimeError("an operator's view belongs to no job: it has no scratch directory")
