"""The deferred-store contract, commit side: what a job commit asks of a store.

A store with deferred writes lets a task write a file under its *final* name without it
becoming visible; the task saves a ``.pending`` record (Hadoop's ``SinglePendingCommit``)
and job commit makes the file visible from that record alone. Each such store has one
adapter implementing :class:`DeferredStore`, bound to one job; the committer over the
magic layout (:mod:`magicfs.committers.magic_layout`) is written once against it, and the
registry (:mod:`.registry`) says which adapter serves which fsspec filesystem; each store's
binding (:mod:`.binding`) declares its adapter with its other halves.

=====================  ===============================  ===============================
operation              S3 (:mod:`.s3.deferred`)          Azure Blob (:mod:`.azure.deferred`)
=====================  ===============================  ===============================
publish                CompleteMultipartUpload          Put Block List
is it published?       HEAD: this job's id and length   committed block list == record's
delete a published     DeleteObjects (1,000 a batch)    Delete Blob per file
discard pending        AbortMultipartUpload             nothing possible: staged blocks
                                                        expire after 7 days (0 counted)
list pending           ListMultipartUploads             (not listed by the committer)
records (small files)  GET / PUT / HEAD / List / Delete  Get / Put Blob, list, Delete Blob
=====================  ===============================  ===============================

**Record I/O is async only**: markers, ``.pending``, ``.pendingset``, ``_SUCCESS`` and the
journal's pages are small whole objects, read and written as coroutines on the store's IO
loop (retried and rate-controlled where the store is: S3's :class:`~.s3.store.S3Store`).
A blocking caller waits with :meth:`DeferredStore.run`; the journal's blocking
``RecordIO`` (:mod:`magicfs.protocol.journal`) is :class:`DeferredStoreBase`'s
``read``/``write``/``display``, written once over the coroutines.

What differs between stores and is not an operation is a declared capability
(:class:`DeferredCapabilities`), named for what it means, never for the store it is.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..records import SinglePendingCommit

T = TypeVar("T")


@dataclass(frozen=True)
class DeferredCapabilities:
    """What a deferred store can do, declared once per store (:mod:`.registry`).

    Each capability is read by the store-neutral code whose behaviour it changes:
    ``discards_pending``, ``lists_pending`` and ``deletes_batch_at_once`` by the
    committer over the magic layout (task abort, the job's clean-up),
    ``counts_throttling`` by job commit's publish (:mod:`.commit_ops`:
    ``store_io_throttled`` in ``_SUCCESS`` and the progress lines).

    How ``"xb"`` (create only) is enforced is no capability: no store-neutral code
    chooses between the ways, each store's own hooks do it — its writer's ``abegin``
    (the marker put only if absent: a second writer is refused at ``open()``) and its
    adapter's ``apublish`` (S3: ``If-None-Match: *`` where the store honours it, else a
    HEAD first; the in-process store: checked and published under one lock; Azure:
    nothing at publish, the destination is job commit's ``conflict_mode``'s). A declared
    value nothing read could only drift from what the hooks do, so none is declared.
    """

    #: A request throws staged data away (S3 aborts an upload). False: aborted data
    #: stays invisible until the name is next published or the store expires it (Azure).
    discards_pending: bool
    #: Pending writes can be listed by key (:meth:`DeferredStore.alist_pending`), so a
    #: job's clean-up can find and discard those no record names (killed writers).
    lists_pending: bool
    #: Throttled replies are counted (:attr:`DeferredStore.throttled`): job commit reports
    #: them (``store_io_throttled``, progress lines) only then, for a 0 from a store that
    #: does not count (the Azure SDK retries them unseen) would claim none happened.
    counts_throttling: bool
    #: One call of :meth:`DeferredStore.adelete_records` with at most 1,000 paths is one
    #: request (S3's DeleteObjects) or deletes them in the order given (the in-process
    #: store), so no crash leaves an earlier path of the call while a later one is gone.
    #: A committed job's clean-up then sends the last of its files with its journal, one
    #: request and one round trip less (:func:`magicfs.committers.magic_layout.delete_tree`).
    #: False: each path is its own request, many at once (Azure).
    deletes_batch_at_once: bool


@dataclass(frozen=True)
class PendingWrite:
    """One pending (staged, unpublished) write: its ``bucket/key`` and upload id."""

    path: str
    upload_id: str


class DeferredStore(Protocol):
    """The commit side of one deferred store, bound to one job."""

    capabilities: DeferredCapabilities

    @property
    def throttled(self) -> int:
        """Replies the store throttled so far (0 where not counted)."""

    # -- running and naming ---------------------------------------------------------------

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        """Run ``call`` on the store's IO loop and wait for it."""

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``call`` on the store's IO loop; return at once."""

    def split(self, path: str) -> tuple[str, str]:
        """``bucket/key`` (or ``container/blob``) -> ``(bucket, key)``."""

    def url(self, path: str) -> str:
        """``bucket/key`` with the store's protocol, for messages."""

    def check_key(self, marker: str) -> tuple[str, str]:
        """The key of the shared job check of ``marker`` (:mod:`.job_check`): where the
        marker is, as the store's writers name it, and the marker. The committer's checks
        share its writers' only when the keys are equal, so a store's writers and its
        adapter take this key from one place in the store's folder."""

    # -- records: small whole objects (markers, .pending, .pendingset, _SUCCESS, journal) --

    async def aread_record(self, path: str, limit: int) -> bytes | None:
        """At most ``limit + 1`` bytes of ``path``; ``None`` when there is none."""

    async def awrite_record(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` as one unit: readers see the old or the new."""

    async def arecord_info(self, path: str) -> dict[str, Any] | None:
        """``path``'s size and metadata (``{"size": int, "metadata": {...}}``), or ``None``."""

    def alist_records(self, directory: str, recursive: bool = True) -> AsyncIterator[str]:
        """The paths (``bucket/key``) of the records below ``directory``, paged, never
        cached; ``recursive=False``: its direct children only."""

    def alist_prefixed(self, prefix: str) -> AsyncIterator[str]:
        """The paths of the records whose path starts with ``prefix`` (a directory's and
        the records named like it: task commit finds an attempt's started marker,
        pendingset and files in one listing), paged, never cached."""

    async def adelete_records(self, paths: Sequence[str]) -> int:
        """Delete records (absent ones are no error; S3: DeleteObjects, in batches);
        how many were asked for."""

    async def adelete_record(self, path: str) -> None:
        """Delete one record (the job marker; absent is no error; S3: DeleteObject)."""

    # -- pending data ---------------------------------------------------------------------

    def check(self, commit: SinglePendingCommit, source: str) -> None:
        """Refuse (``InvalidCommitData``, naming ``source`` and the field) a record this
        store cannot publish."""

    async def apublish(self, commit: SinglePendingCommit) -> None:
        """Make the file visible. Idempotent for this job: a commit an earlier attempt of
        the same job commit already published counts as done."""

    async def apublished(self, commit: SinglePendingCommit) -> bool:
        """Does the destination hold exactly what this commit published?"""

    async def adelete_published(self, commits: Sequence[SinglePendingCommit]) -> int:
        """Delete the destinations of ``commits`` (published by this job); how many."""

    async def arolled_back(self, commit: SinglePendingCommit) -> None:
        """A create-only commit of this job was rolled back, published or not: release
        what publishing it holds (S3: the file's claim, :mod:`.s3.create_claims`)."""

    async def adiscard(self, writes: Sequence[PendingWrite]) -> int:
        """Throw pending writes away where the store can
        (:attr:`DeferredCapabilities.discards_pending`); how many were discarded. Writes
        already gone (discarded, published) are no error."""

    def alist_pending(self, prefix: str) -> AsyncIterator[PendingWrite]:
        """The pending writes under ``prefix`` (``bucket/key``), paged (only where
        :attr:`DeferredCapabilities.lists_pending`; elsewhere nothing)."""

    # -- blocking forms, written once by DeferredStoreBase --------------------------------

    def delete(self, commits: list[SinglePendingCommit]) -> int:
        """:meth:`adelete_published`, waited for (roll-back in :mod:`.commit_ops`)."""

    def discard(self, commits: Iterable[SinglePendingCommit]) -> int:
        """:meth:`adiscard`, waited for (:mod:`.commit_ops`)."""

    def read(self, path: str, limit: int) -> bytes | None:
        """The journal's ``RecordIO.read``: :meth:`aread_record`, waited for."""

    def write(self, path: str, data: bytes) -> None:
        """The journal's ``RecordIO.write``: :meth:`awrite_record`, waited for."""

    def display(self, path: str) -> str:
        """The journal's ``RecordIO.display``: :meth:`url`."""


class DeferredStoreBase:
    """What every adapter derives from the coroutines, written once: waiting, the blocking
    forms :mod:`.commit_ops` calls, and the journal's ``RecordIO`` (``read``, ``write``,
    ``display``). An adapter subclasses it and implements :class:`DeferredStore`'s
    coroutines and ``run_background``, ``split`` and ``url``."""

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        raise NotImplementedError

    def url(self, path: str) -> str:
        raise NotImplementedError

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return self.run_background(call).result()

    def split(self, path: str) -> tuple[str, str]:
        raise NotImplementedError

    def check_key(self, marker: str) -> tuple[str, str]:
        """``(bucket, key)``: a store whose writers key their checks by bucket (S3, the
        in-process store)."""
        return self.split(marker)

    async def adelete_published(self, commits: Sequence[SinglePendingCommit]) -> int:
        raise NotImplementedError

    async def arolled_back(self, commit: SinglePendingCommit) -> None:
        """Nothing held beyond the publish itself (every store but S3)."""

    async def adelete_records(self, paths: Sequence[str]) -> int:
        raise NotImplementedError

    async def adelete_record(self, path: str) -> None:
        await self.adelete_records([path])

    async def adiscard(self, writes: Sequence[PendingWrite]) -> int:
        raise NotImplementedError

    async def aread_record(self, path: str, limit: int) -> bytes | None:
        raise NotImplementedError

    async def awrite_record(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def delete(self, commits: list[SinglePendingCommit]) -> int:
        return self.run(self.adelete_published(commits))

    def discard(self, commits: Iterable[SinglePendingCommit]) -> int:
        return self.run(self.adiscard(pending_writes(commits)))

    # -- the journal's RecordIO (magicfs.protocol.journal): blocking by its design ---------

    def read(self, path: str, limit: int) -> bytes | None:
        return self.run(self.aread_record(path, limit))

    def write(self, path: str, data: bytes) -> None:
        self.run(self.awrite_record(path, data))

    def display(self, path: str) -> str:
        return self.url(path)


class AdapterFactory(Protocol):
    """Make a store's adapter for one job: ``fs`` (the store's fsspec filesystem),
    ``job_id``, ``scratch_dir()`` (a directory in the job's hidden tree where probes may
    write throw-away records), the job's ``context`` (:mod:`magicfs.job_context`: where
    per-job store state hangs, shared with the job's writers in this process) and the
    committer's store options (``retry_policy``, ``max_request_rate``: each adapter takes
    those it knows and ignores the rest)."""

    def __call__(
        self, fs: Any, job_id: str, scratch_dir: Callable[[], str], **options: Any
    ) -> DeferredStore: ...


def pending_writes(commits: Iterable[SinglePendingCommit]) -> list[PendingWrite]:
    """The pending writes ``commits`` would publish."""
    return [PendingWrite(commit.destination, commit.upload_id) for commit in commits]


def protocols(fs: Any) -> set[str]:
    """The protocol names an fsspec filesystem (class or instance) answers to."""
    protocol = fs.protocol
    return set(protocol if isinstance(protocol, (tuple, list)) else (protocol,))


async def collect(listing: AsyncIterator[T]) -> list[T]:
    """Every item of an async listing (for a caller that needs them all at once)."""
    return [item async for item in listing]


async def take(listing: AsyncIterator[T], size: int) -> list[T]:
    """The next ``size`` items of an async listing, fewer at its end: a caller streams a
    listing of any length a page at a time, never holding it whole."""
    found: list[T] = []
    async for item in listing:
        found.append(item)
        if len(found) >= size:
            break
    return found
