"""The deferred writer: one output stream for every store whose writes stay invisible.

A task file on a store with deferred writes (S3 multipart uploads, Azure block lists,
the in-process store) is written under its *final* name without becoming visible; its
``close()`` saves a ``.pending`` record that only job commit turns into a file. The life
of such a file is the same on every store, so it is written once, here; a store supplies
:class:`FileHooks` (in the manner of fsspec's ``AbstractBufferedFile``, whose subclasses
supply ``_initiate_upload`` and ``_upload_chunk``):

1. open: refuse a task attempt that has already committed or aborted in this process;
   register the file (:mod:`magicfs.task_files`): an earlier writer of the same path is
   superseded (a file of it still closing is waited for, then thrown away), an earlier
   closed file of it is dropped (:meth:`FileHooks.adrop`). Then, in the background,
   :meth:`FileHooks.abegin` (the marker beside the task path, and whatever the store must
   create first) and, once it is done, the job check (:meth:`FileHooks.ajob_active`).
   ``open()`` returns at once; ``xb`` waits for the begin, so a second writer of the
   path gets ``FileExistsError`` from ``open()`` itself (how each store guarantees it:
   its ``abegin``).
2. write: bytes fill part-sized buffers; each full part is staged in the background
   (:meth:`FileHooks.astage`, after the begin) while the caller keeps writing. At most
   ``parts_in_flight`` parts per file are in flight, and at most :data:`BUFFER_BUDGET`
   bytes across the process, so memory stays flat however large the file, however large
   one ``write()`` call and however many files are closing at once. The part size
   doubles every :attr:`PartRules.grow_every` parts, so huge files stay within the
   store's part limit while small files keep small parts.
3. close: stage the last part, wait for all parts and the job check (not for a check
   its task's commit will answer: :attr:`FileHooks.checked_by_commit`), then save the
   record (:meth:`FileHooks.record`, :meth:`FileHooks.asave`; not where the task's
   commit already waits for this close: :meth:`TaskFiles.awaited
   <magicfs.task_files.TaskFiles.awaited>`). For a task attempt's file
   with ``background_close`` this finishes in the background: ``close()`` returns once
   the last part is handed over and the task's commit waits for it
   (:meth:`TaskFiles.settle <magicfs.task_files.TaskFiles.settle>`), failing if it
   failed — a task writing files one after another keeps the store's round trips
   overlapped instead of waiting for each.
4. failure: an exception leaving a ``with`` block, a failed request, ``discard()``, a
   ``close()`` while an exception is propagating (wrappers such as ``TextIOWrapper``
   close in ``finally:``), or garbage collection of a file never closed: whatever was
   begun is undone (:meth:`FileHooks.adiscard`), no record is saved. A truncated file
   never becomes committable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import logging
import os
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from ..errors import JobNotActiveError, TaskNotActiveError
from ..job_context import JOB_CONTEXTS, job_context
from ..lifecycle import at_exit
from ..paths import MagicPath, marked_file, marker_path, split_magic_path, touched_marker
from ..records import SinglePendingCommit
from ..task_files import TASK_FILES, TaskFile, TaskFiles, attempt_set_up_here
from .job_check import start_waiting_checks

log = logging.getLogger("magicfs.deferred_writer")

T = TypeVar("T")


class ByteBudget:
    """Bytes held by parts not yet staged, across every writer of the process."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._changed = threading.Condition()

    def take(self, size: int) -> None:
        """Wait until ``size`` more bytes fit (a bigger part waits for an empty budget)."""
        with self._changed:
            while self.used and self.used + size > self.limit:
                self._changed.wait()
            self.used += size

    def give(self, size: int) -> None:
        with self._changed:
            self.used -= size
            self._changed.notify_all()


#: The process's budget for parts in flight, every store's writers together
#: (``MAGICFS_MAX_BUFFERED_BYTES``, 256 MiB by default).
BUFFER_BUDGET = ByteBudget(int(os.environ.get("MAGICFS_MAX_BUFFERED_BYTES", 256 << 20)))

#: How long the job check of a file whose task commit checks the job anyway
#: (:attr:`FileHooks.checked_by_commit`) waits to share that commit's (or another
#: writer's) before it goes alone: a task that commits within a second of its files'
#: uploads sends no check for them. A zombie writer (its job ended before its upload
#: was created) learns it that much later, at its next write or its task commit; its
#: upload is aborted all the same, unless its process is killed within that second.
CHECK_DELAY = 1.0


class ChecksAfterClose:
    """One job's checks still to come of files whose close did not wait for them
    (:data:`CHECK_DELAY`), kept in its context (:data:`CHECKS_STATE`): at exit they are
    started at once and waited for (:func:`finish_checks_at_exit`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[None]] = set()

    def add(self, check: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._pending.add(check)
        check.add_done_callback(self._done)

    def _done(self, check: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._pending.discard(check)

    def pending(self) -> list[concurrent.futures.Future[None]]:
        with self._lock:
            return list(self._pending)


#: The job context's slot of its writers' checks after close.
CHECKS_STATE = "writer.checks_after_close"


def finish_checks_at_exit() -> None:
    """A script that exits with job checks still waiting makes them now, so a zombie's
    upload is still aborted. (A forked child has none: it forgets its parent's contexts.)"""
    pending = [
        check
        for context in JOB_CONTEXTS.open_contexts()
        if isinstance(checks := context.state(CHECKS_STATE), ChecksAfterClose)
        for check in checks.pending()
    ]
    if pending:
        start_waiting_checks()
        concurrent.futures.wait(pending, timeout=30)


# Before the interpreter shuts thread pools down (as ``magicfs.task_files``'s does).
at_exit(finish_checks_at_exit)


class PartBuffer:
    """The bytes of the next part: pieces, joined once when the part is staged.

    Why pieces: growing one ``bytearray`` and copying it into ``bytes`` for the upload
    made two copies of every part, and the allocator's reallocations as the buffer grew
    cost more than both (about 1 s of CPU per GiB in 1 MiB writes, half the writer's CPU:
    ``benchmarks/write_path.py``). Pieces joined once cost one copy. A ``bytes`` the caller
    hands over whole is kept as it is (immutable, so nothing to copy): a part written in
    one ``write()`` of exactly a part's size reaches the store without any copy. Anything
    mutable (``bytearray``, ``memoryview``, arrays) is copied, since the caller may reuse it.

    Why small writes go to one ``bytearray``: a piece per ``write()`` costs an object and a
    list slot each (an 8 MiB part in 16-byte writes held about 29 MiB). Pieces smaller than
    :attr:`SMALL` (but a whole ``bytes`` starting the part, kept for the no-copy case) are
    appended to a trailing ``bytearray`` instead. Every other piece is at least
    :attr:`SMALL`, so a part's buffer holds at most its size plus a small share (the
    objects' headers, the ``bytearray``'s spare room), which is what :data:`BUFFER_BUDGET`
    counts.
    """

    #: Pieces smaller than this are copied into the trailing ``bytearray``.
    SMALL = 64 << 10

    def __init__(self) -> None:
        self._pieces: list[bytes | bytearray] = []
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, data: Any, view: memoryview, start: int, end: int) -> None:
        """Add bytes ``start:end`` of the caller's ``data`` (``view``: its bytes)."""
        whole = type(data) is bytes and start == 0 and end == len(view)
        if whole and (not self._pieces or end >= self.SMALL):
            self._pieces.append(data)  # kept as it is (a whole part: staged without a copy)
        elif end - start >= self.SMALL:
            self._pieces.append(bytes(view[start:end]))
        elif self._pieces and type(self._pieces[-1]) is bytearray:
            self._pieces[-1] += view[start:end]
        else:
            self._pieces.append(bytearray(view[start:end]))
        self.size += end - start

    def take(self) -> bytes:
        """The part's bytes (one whole ``bytes`` piece: that very object); the buffer is
        then empty."""
        pieces = self.take_pieces()
        if len(pieces) == 1 and type(pieces[0]) is bytes:
            return pieces[0]
        return b"".join(pieces)

    def take_pieces(self) -> list[bytes | bytearray]:
        """The part's bytes as the pieces they are held in, not joined (no copy): nothing
        changes them afterwards (the caller's mutable data was copied in :meth:`add`)."""
        pieces, self._pieces, self.size = self._pieces, [], 0
        return pieces


@dataclass(frozen=True)
class PartRules:
    """A store's limits on the parts of one file."""

    noun: str  # what the store calls a part ("part", "block"), for messages
    min_size: int  # the smallest part but the last
    max_size: int
    max_parts: int
    #: The part size doubles after every ``grow_every`` parts (``None``: never).
    grow_every: int | None
    #: An empty file still stages one (empty) part (S3: an upload needs one).
    at_least_one: bool

    def check(self, part_size: int, store: str) -> None:
        if not self.min_size <= part_size <= self.max_size:
            raise ValueError(
                f"part_size must be within {self.min_size} and {self.max_size} bytes "
                f"({store}'s {self.noun} size limits); got {part_size}"
            )

    def size_after(self, part_size: int, parts: int) -> int:
        doublings = parts // self.grow_every if self.grow_every else 0
        return min(part_size << doublings, self.max_size)


@dataclass(frozen=True)
class WriterOptions:
    """How a task view's writers write (:class:`~magicfs.filesystems.MagicFileSystem`'s
    options; a store uses those that apply to it)."""

    part_size: int = 8 << 20
    parts_in_flight: int = 4
    in_memory: bool = False  # keep the record in this process, no ``.pending`` (S3)
    check_job_active: bool = True
    background_close: bool = True
    #: The store's own options (its spec's ``writer_options``, e.g. S3's retry policy,
    #: checksum and intent markers), passed through unread; ``None``: its defaults.
    store: Any = None
    registry: TaskFiles = TASK_FILES


class FileHooks(Protocol):
    """One file's requests on one store. Coroutines run on the store's IO loop, one
    :meth:`abegin` first; the writer calls each at the point its docstring names."""

    #: The file's URL, for messages.
    url: str
    #: The file's task commit, in this process, checks the job after this file closed
    #: (S3's ``in_memory`` files of an attempt set up here): its close does not wait for
    #: its own job check, which waits (:data:`CHECK_DELAY`) to share that commit's. Its
    #: upload is aborted either way if the job has ended: by the writer whose check
    #: finds it gone, or by the commit that does.
    checked_by_commit: bool
    #: :meth:`astage` takes the part as its pieces (a list of ``bytes``-like objects
    #: nothing changes afterwards), not joined into one ``bytes``: a store whose client
    #: sends buffers as they are saves the copy of every part (S3: :mod:`.s3.body`).
    part_pieces: bool

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``call`` on the store's IO loop."""

    async def abegin(self) -> None:
        """Put the marker beside the task path (:func:`~magicfs.paths.marker_path`; and
        create what the parts need). For ``xb``,
        raise ``FileExistsError`` if another writer has opened the path."""

    async def ajob_active(self) -> bool:
        """Is the job still active? (Only asked when the file belongs to a job.)"""

    async def astage(self, number: int, body: Any) -> str:
        """Stage part ``number`` (from 1): ``body`` is its ``bytes``, or its pieces with
        :attr:`part_pieces`; returns its id for the record."""

    def record(self, part_ids: list[str], length: int) -> SinglePendingCommit:
        """The file's record: ``part_ids`` in order, ``length`` bytes written."""

    async def asave(self, record: SinglePendingCommit) -> None:
        """Save the record where task commit finds it (or nowhere: in-memory mode)."""

    async def adiscard(self, saved: bool) -> None:
        """Undo what was begun and staged (and the saved record, if ``saved``); repeatable."""

    async def adrop(self, commit: SinglePendingCommit) -> None:
        """Throw away an earlier, closed file of this path whose record is ``commit``."""


@dataclass(frozen=True)
class StoreWords:
    """How messages about a store's task files name things (the task view's refusals)."""

    store_name: str  # "S3"
    noun: str  # what a deferred file is: "upload"
    pending_bytes: str  # where its bytes are until job commit: "an unfinished multipart upload"
    where: str  # how they relate to the final name: "aimed at"
    advice: str  # what to do instead of reading a task file back


class DeferredWrites(Protocol):
    """A store's write side, as a task view needs it (one per filesystem and options).

    Declared once per store in the registry (:mod:`magicfs.stores.registry`)."""

    fs: Any  # the store's fsspec filesystem: markers, records, listings
    words: StoreWords
    options: WriterOptions

    def url(self, path: str) -> str:
        """``path`` with the store's protocol, for messages."""

    def writer(
        self, path: str, magic_path: MagicPath, mode: str, part_size: int, job_marker: str | None
    ) -> DeferredWriter:
        """A writer for task file ``path`` (``mode`` ``wb``/``xb``); ``job_marker``: the
        path whose existence says the job is active (``None``: no check)."""

    def discard(self, commits: list[SinglePendingCommit], records: list[str]) -> int:
        """Throw away what closed files staged, known by their ``commits`` or by their
        saved ``records`` (paths; missing ones skipped), where the store can; how many."""

    def delete(self, paths: list[str]) -> None:
        """Delete markers and records (missing ones are fine)."""

    def touch_tasks(self, paths: list[str]) -> None:
        """Before files of other processes' task attempts are deleted here: mark their
        tasks touched where the store's commits need it (:class:`DeferredWritesBase`)."""


class DeferredWriter(io.BufferedIOBase):
    """Write-only binary stream for one task file (see the module docstring)."""

    def __init__(
        self,
        hooks: FileHooks,
        rules: PartRules,
        path: str,
        magic_path: MagicPath,
        options: WriterOptions,
        *,
        mode: str = "wb",
        part_size: int | None = None,
        check_job: bool = True,
        store: str = "the store",
    ):
        super().__init__()
        self.part_size = part_size or options.part_size
        rules.check(self.part_size, store)
        self.hooks, self.rules, self.path, self.mode = hooks, rules, path, mode
        self._registry = registry = options.registry
        self._job_id = magic_path.job_id
        self._attempt_id = magic_path.task_attempt_id
        attempt_file = bool(self._job_id and self._attempt_id)
        # Only a task attempt's file has a commit to wait for its close.
        self._background_close = options.background_close and attempt_file
        self._check_job = check_job
        self._closing: concurrent.futures.Future[None] | None = None
        self._lock = threading.RLock()
        self._slots = threading.BoundedSemaphore(options.parts_in_flight)
        self._buffer = PartBuffer()
        self._parts: dict[int, concurrent.futures.Future[str]] = {}
        self._tasks: dict[int, asyncio.Task[str]] = {}  # the parts' tasks on the IO loop
        self._saved: SinglePendingCommit | None = None  # the record, once saved
        self._entered = False  # closed into the registry, where its task's commit takes it
        self._written = 0
        self._failure: BaseException | None = None
        self._state = "open"
        self._superseded: str | None = None

        finished = registry.finished(self._job_id, self._attempt_id)
        if finished:
            self._state = "refused"
            raise TaskNotActiveError(
                f"{hooks.url}: task attempt {self._attempt_id} has already {finished}: "
                "a file written now would never be published (write before commit_task)"
            )
        self._register(magic_path)
        self._start = hooks.run_background(hooks.abegin())
        self._registry.began(self.path, self, self._start)
        #: Whether the job check may end after the close (:attr:`FileHooks.checked_by_commit`).
        self._check_follows = check_job and attempt_file and hooks.checked_by_commit
        self._checking = hooks.run_background(self._acheck_job())
        if self._check_follows and self._context is not None:
            # The writer (which its check holds) holds the job's context while it runs.
            self._context.store_state(CHECKS_STATE, ChecksAfterClose).add(self._checking)
        if "x" in mode:
            try:
                self._start.result()
            except BaseException:
                self._abort()
                raise

    # -- opening ---------------------------------------------------------------------------

    def _register(self, magic_path: MagicPath) -> None:
        """Enter this file in the registry, replacing an earlier file of the same path.
        The entry holds the job's context (its state in this process) while it is there."""
        job_id = magic_path.job_id
        self._context = job_context(job_id, magic_path.destination_dir) if job_id else None
        if "x" in self.mode and self._registry.get(self.path) is not None:
            self._state = "refused"
            raise FileExistsError(f"{self.hooks.url}: already written by this process ('xb')")
        attempt_id, context = self._attempt_id or "", self._context
        entry = TaskFile(self.path, job_id or "", attempt_id, writer=self, context=context)
        previous = self._registry.opened(entry)
        if previous is None:
            return
        if previous.writer is not None:
            log.info("%s: opened again; the earlier writer is discarded", self.hooks.url)
            previous.writer.supersede("the file was opened again")
        elif previous.commit is not None:
            log.info("%s: written again; the earlier file is thrown away", self.hooks.url)
            self.hooks.run_background(self.hooks.adrop(previous.commit)).result()

    async def _acheck_job(self) -> None:
        """After the begin, make sure the job is still active (the zombie check)."""
        await asyncio.wrap_future(self._start)
        if not self._check_job or await self.hooks.ajob_active():
            return
        if self._state == "discarded":
            return  # undone already (a discard does not wait for a delayed check)
        if (
            self._check_follows
            and self._entered
            and self._registry.handed_over(self._job_id or "", self._attempt_id or "")
        ):
            return  # its attempt's commit took it and checks the job after it: the commit owns it
        # The job has ended: its clean-up may have missed this file, so undo it now,
        # whatever this writer does next (it may be a zombie that never writes again).
        await self.hooks.adiscard(saved=False)
        raise JobNotActiveError(
            f"{self.hooks.url}: job {self._job_id} is not active (never set up, or already "
            "committed or aborted); this write has been aborted"
        )

    # -- the stream ------------------------------------------------------------------------

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, data: Any) -> int:
        with self._lock:
            self._check_usable()
            view = memoryview(data).cast("B")
            size = len(view)
            offset = 0
            while offset < size:
                part_size = self.rules.size_after(self.part_size, len(self._parts))
                take = min(part_size - len(self._buffer), size - offset)
                self._buffer.add(data, view, offset, offset + take)
                offset += take
                if len(self._buffer) == part_size:
                    self._stage(self._take())
            self._written += size
            self._registry.wrote(self.path, self, self._written)
            return size

    def flush(self) -> None:
        """Nothing to do: parts go out as they fill (stores have minimum part sizes)."""

    def close(self) -> None:
        """Stage the last part and save the record — never publish.

        Called while an exception is propagating (``with`` blocks of wrappers such as
        ``TextIOWrapper`` or fsspec's ``OpenFile``, ``finally:`` clauses), it discards
        instead: the data written so far may be truncated.
        """
        if sys.exc_info()[1] is not None and self._state == "open":
            log.warning(
                "%s closed while an exception is propagating: discarding it "
                "(a possibly truncated file is never saved as pending)",
                self.hooks.url,
            )
            self.discard()
            return
        self._finish()

    def _finish(self) -> None:
        with self._lock:
            if self._state != "open":
                if self._superseded:
                    raise OSError(
                        f"{self.hooks.url}: {self._superseded} before this writer closed; "
                        "its data has been discarded"
                    )
                return
            try:
                self._check_usable()
                if self._buffer or (not self._parts and self.rules.at_least_one):
                    self._stage(self._take())
            except BaseException:
                self._abort()
                raise
            self._state = "closing"
            closing = self.hooks.run_background(self._aclose(self._background_close))
            if self._background_close:
                self._closing = closing
                self._registry.closing(self.path, self, closing)
                super().close()
                return
            try:
                closing.result()
            except BaseException:
                # Its own failure has discarded the file already; an interrupted wait
                # (Ctrl-C) has not: the caller sees a failure, so nothing may be saved.
                self._throw_away(closing)
                raise
            finally:
                super().close()

    async def _aclose(self, background: bool) -> None:
        """The end of :meth:`close`, on the IO loop: parts, job check, then the record."""
        parts = [asyncio.wrap_future(self._parts[n]) for n in sorted(self._parts)]
        checking = [] if self._check_follows else [asyncio.wrap_future(self._checking)]
        checked = await asyncio.gather(*checking, return_exceptions=True)
        if checked and isinstance(checked[0], BaseException):  # job gone: stop retrying parts
            # Cancel the loop's tasks, not the futures: each future then ends when its
            # request has really ended, so the discard below comes after every part (an
            # abort racing a part can leave it behind) and the budget is given back then.
            for number, future in self._parts.items():
                task = self._tasks.get(number)
                (task or future).cancel()  # a part not started yet has no task
        # The job check first: when it found the job gone it undid the file, and the
        # parts' failures are only the consequence.
        results = await asyncio.gather(*parts, return_exceptions=True)
        failure = next((r for r in [*checked, *results] if isinstance(r, BaseException)), None)
        try:
            if failure is not None:
                raise failure
            record = self.hooks.record([str(r) for r in results], self._written)
            if not (background and self._registry.awaited(self.path)):
                # (Else its task's commit waits for this close: the record goes into the
                # attempt's pendingset, no .pending of its own: TaskFiles.awaited. Its
                # filename still says where its record belongs, which job commit's
                # checks compare with its destination.)
                await self.hooks.asave(record)
        except BaseException as error:
            if background:
                log.error("%s: could not be saved: %s; discarding it", self.hooks.url, error)
            await self.hooks.adiscard(saved=False)
            self._state = "discarded"
            if background:
                self._registry.failed(self.path, self, error)
            else:
                self._registry.discarded(self.path, self)
            raise
        self._state = "closed"
        self._saved = record
        self._entered = self._registry.closed(self.path, self, self._written, record)

    def discard(self) -> None:
        """Throw the file away; nothing of it will ever be visible."""
        with self._lock:
            if self._state == "open":
                self._abort()

    def supersede(self, reason: str) -> None:
        """Discard this writer because the file was opened again or deleted (``reason``).

        Its later ``write()``/``close()`` raise, naming the reason: the caller must not
        believe the data was saved. A file still closing in the background is waited
        for, then thrown away (its staged data and its records too).
        """
        with self._lock:
            if self._state == "open":
                self._superseded = reason
                self._abort()
                return
            closing = self._closing
        if closing is not None:
            self._throw_away(closing)

    def _throw_away(self, closing: concurrent.futures.Future[None]) -> None:
        """Wait for a close in flight; if it saved the file, throw the file away."""
        concurrent.futures.wait([closing])
        if self._state == "closed":
            self.hooks.run_background(self.hooks.adiscard(saved=True)).result()
            self._state = "discarded"
            self._registry.discarded(self.path, commit=self._saved)

    def commit(self) -> None:
        """For fsspec's transaction protocol: the commit of a task file is its ``close()``."""
        self.close()

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self._finish()
        else:
            self.discard()

    def __del__(self) -> None:
        if getattr(self, "_state", None) != "open":
            return
        log.warning("%s was never closed: discarding it", self.hooks.url)
        # Garbage collection may run this on the store's IO-loop thread, where waiting
        # for the loop would deadlock: discard from a thread of its own.
        # (At interpreter shutdown no thread can start: the job's clean-up must do it.)
        with contextlib.suppress(RuntimeError):
            threading.Thread(target=self.discard, name="magicfs-discard", daemon=True).start()

    # -- internals ---------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._state != "open":
            reason = f" ({self._superseded})" if self._superseded else ""
            raise ValueError(f"I/O operation on {self._state} file {self.hooks.url}{reason}")
        for background in (self._start, self._checking):
            if background.done() and not background.cancelled() and background.exception():
                self._failure = self._failure or background.exception()
        if self._failure is not None:
            failure = self._failure
            self._abort()
            raise failure

    def _take(self) -> Any:
        """The next part's body: its pieces for a store that takes them, else its bytes."""
        return self._buffer.take_pieces() if self.hooks.part_pieces else self._buffer.take()

    def _stage(self, body: Any) -> None:
        number = len(self._parts) + 1
        if number > self.rules.max_parts:
            raise OSError(
                f"{self.hooks.url}: more than {self.rules.max_parts} {self.rules.noun}s; "
                "open with a larger part_size"
            )
        self._slots.acquire()  # back-pressure: at most parts_in_flight parts in memory
        try:
            self._check_usable()
        except BaseException:
            self._slots.release()
            raise
        size = len(body) if isinstance(body, bytes) else sum(map(len, body))
        BUFFER_BUDGET.take(size)  # and at most BUFFER_BUDGET across the process
        try:
            future = self.hooks.run_background(self._astage(number, body))
        except BaseException:  # no loop to run it (closed filesystem, shutdown)
            BUFFER_BUDGET.give(size)
            self._slots.release()
            raise
        future.add_done_callback(lambda done: self._staged(done, size))
        self._parts[number] = future

    async def _astage(self, number: int, body: Any) -> str:
        task = asyncio.current_task()
        if task is not None:
            self._tasks[number] = task
        await asyncio.wrap_future(self._start)
        return await self.hooks.astage(number, body)

    def _staged(self, future: concurrent.futures.Future[str], size: int) -> None:
        BUFFER_BUDGET.give(size)
        self._slots.release()
        error = None if future.cancelled() else future.exception()
        if error is not None and self._failure is None:
            self._failure = error

    def _abort(self) -> None:
        """Undo the file once every request in flight has finished; it is then gone."""
        if self._state == "discarded":
            return
        self._state = "discarded"
        self._buffer = PartBuffer()
        self._registry.discarded(self.path, self)
        # Let in-flight requests finish first: an abort racing a part upload can leave
        # the part behind (S3 asks callers to repeat the abort in that case).
        calls: list[concurrent.futures.Future[Any]] = [*self._parts.values(), self._start]
        if not self._check_follows:
            calls.append(self._checking)
        concurrent.futures.wait(calls)
        try:
            self.hooks.run_background(self.hooks.adiscard(saved=False)).result()
        finally:
            super().close()


class DeferredWritesBase:
    """What every store's write side shares (a :class:`DeferredWrites`): it keeps the
    filesystem and the options and builds each writer from the store's :meth:`hooks`.

    A store sets :attr:`rules` and :attr:`words` and writes ``hooks``, ``url``,
    ``discard`` and ``delete``: the writer itself is never built twice.
    """

    rules: PartRules
    words: StoreWords

    def __init__(self, fs: Any, options: WriterOptions):
        self.fs = fs
        self.options = options

    def hooks(
        self, path: str, magic_path: MagicPath, mode: str, job_marker: str | None
    ) -> FileHooks:
        """The requests of one task file (see :class:`FileHooks`)."""
        raise NotImplementedError

    #: Whether an ``in_memory`` task commit on this store trusts its process's memory
    #: unless the task is marked touched (S3: ``magicfs.committers.memory_commits``);
    #: then :meth:`touch_tasks` marks them, through :meth:`put_marker`.
    touches_tasks: ClassVar[bool] = False

    def touch_tasks(self, paths: list[str]) -> None:
        """Before this process deletes files of task attempts it did not set up: in
        ``in_memory`` mode, mark their tasks touched, so that the commit in each
        attempt's own process lists the attempt instead of trusting its memory
        (:data:`~magicfs.names.TOUCHED_DIR`)."""
        markers = set()
        for path in paths:
            found = split_magic_path(path)
            marker = self.touched_marker(found) if found is not None else None
            if marker is not None:
                markers.add(marker)
        for marker in sorted(markers):
            self.put_marker(marker)

    @staticmethod
    def with_markers(paths: list[str]) -> list[str]:
        """``paths`` (task files, markers, records) and the marker of each task file
        among them (:func:`~magicfs.paths.marker_path`): a store's :meth:`delete` deletes
        them all, so deleting a task file by its name deletes its marker too."""
        markers = [marker_path(p) for p in paths if marked_file(p) == p]
        return sorted({*paths, *markers})

    def touched_marker(self, magic_path: MagicPath) -> str | None:
        """The touched marker of ``magic_path``'s task where this process must save it
        before writing or deleting there: an ``in_memory`` store that trusts memory, and an
        attempt this process did not set up; else ``None``."""
        job, attempt = magic_path.job_id, magic_path.task_attempt_id
        if not (self.touches_tasks and self.options.in_memory and job and attempt):
            return None
        if attempt_set_up_here(job, attempt):
            return None
        return touched_marker(magic_path.magic_dir, attempt)

    def put_marker(self, path: str) -> None:
        """Save an empty marker (stores whose :attr:`touches_tasks` is True)."""
        raise NotImplementedError

    def writer(
        self, path: str, magic_path: MagicPath, mode: str, part_size: int, job_marker: str | None
    ) -> DeferredWriter:
        return DeferredWriter(
            self.hooks(path, magic_path, mode, job_marker),
            self.rules,
            path,
            magic_path,
            self.options,
            mode=mode,
            part_size=part_size,
            check_job=job_marker is not None,
            store=self.words.store_name,
        )
