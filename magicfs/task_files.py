"""What this process knows about the files its task attempts are writing.

Every store keeps its own records (markers and ``.pending`` files on S3, the attempt's
working directory on rename stores), and those are what committers trust across
processes. This registry adds what only the writing process can know, for free:

* **which files are still open**: task commit refuses an attempt with an open file on
  every store (on a local disk a file left open would keep changing after job commit);
* **which files have begun** (:meth:`TaskFiles.begun`): a deferred writer's begin (its
  marker and upload) runs in the background after ``open()``; the magic layout's task
  commit lists the attempt once every file of it has begun, while the closes finish;
* **which files are still closing**: on S3 ``close()`` of a task file returns at once and
  finishes in the background (its last part and its record); task commit waits for them
  (:meth:`TaskFiles.settle`) and fails if one failed, and so does the interpreter's exit;
* **which closes a task commit is waiting for** (:meth:`TaskFiles.committing`,
  :meth:`TaskFiles.awaited`): a file whose last part finishes while its attempt's commit,
  in the process that set the attempt up, already waits for it hands its record to that
  commit and saves no ``.pending`` (one round trip and one request less);
* **what a rewrite replaces**: opening a path again discards the earlier writer or, on
  S3, aborts the earlier upload at once instead of leaving it parked until job end;
* **the bytes written**, so ``info()`` and listings of a task file report its size
  without reading its record;
* **the pending commits of in-memory writers** (the magic committer's ``in_memory``
  mode keeps them here until its task commits);
* **which attempts have finished**: a write to an attempt that has already committed or
  aborted in this process is refused at ``open()``, before anything is written;
* **which attempts were set up here** (:func:`attempt_set_up_here`): an unmarked S3 job's
  writer skips its intent marker only in the process that set up its attempt, the one
  whose task commit sees its open files in this registry. A writer in any other process
  (a forked child included: the process id is recorded) writes its marker, so a task
  commit refuses its file if that process dies before closing it. Forgotten when the
  attempt commits or aborts here.

Keys are store paths without protocol (``bkt/out/__magic_job-7/.../a.csv`` on S3, the
routed working-directory path on rename stores). Entries are dropped when their
attempt commits or aborts. Thread-safe; one instance per process (:data:`TASK_FILES`).

**Per process, not per job** (:mod:`magicfs.job_context` holds what is per job): it
is "the task files of this process", and must outlive any one job's context. The exit
hook settles every file still closing, whatever became of its job's objects; a write to
an attempt that finished here is refused long after the job's context has closed; a
writer finds its entry by path alone. An entry holds its job's context instead
(:attr:`TaskFile.context`): the job's per-process state lasts while its files do here.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .job_context import JobContext
from .lifecycle import at_exit


class OpenWriter(Protocol):
    """What the registry's users need of an open writer: a way to throw it away."""

    def supersede(self, reason: str) -> None:
        """Discard the writer: the file was opened again or deleted (``reason``)."""


@dataclass
class TaskFile:
    """One file a task attempt of this process wrote or is writing."""

    path: str
    job_id: str
    attempt_id: str
    writer: OpenWriter | None = None  # set while the file is open or closing
    length: int = 0  # bytes written (so far, while open)
    commit: Any = None  # S3: the closed file's SinglePendingCommit
    begin: concurrent.futures.Future[None] | None = None  # its begin (deferred writers)
    closing: concurrent.futures.Future[None] | None = None  # its close, finishing in the background
    error: BaseException | None = None  # why its close failed
    #: Its job's context (:mod:`magicfs.job_context`), held while the entry is here: the
    #: job's state in this process (rate, writer records) lasts as long as its files.
    context: JobContext | None = None

    @property
    def is_open(self) -> bool:
        """Still being written (a file whose close is finishing is not open)."""
        return self.writer is not None and self.closing is None


class TaskFiles:
    """Process-wide registry of task files (see the module docstring)."""

    #: Finished attempts remembered (oldest forgotten first): bounds a long-lived
    #: executor's memory; an attempt is refused writes long after it finished anyway
    #: by its job's end (the writers' job check).
    MAX_FINISHED = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, TaskFile] = {}
        #: (job, attempt) -> (outcome, whether this process had set the attempt up).
        self._finished: dict[tuple[str, str], tuple[str, bool]] = {}
        self._set_up: dict[tuple[str, str], int] = {}  # attempt -> the process that set it up
        self._committing: set[tuple[str, str]] = set()  # attempts whose commit waits here

    # -- writers -------------------------------------------------------------------------

    def opened(self, entry: TaskFile) -> TaskFile | None:
        """Register a newly opened file; returns the entry it replaces (if any)."""
        with self._lock:
            previous = self._files.get(entry.path)
            self._files[entry.path] = entry
            return previous

    def closed(self, path: str, writer: OpenWriter, length: int, commit: Any = None) -> bool:
        """``writer`` closed cleanly: the file now has ``length`` bytes. Whether its entry
        was still here to take it (not where its attempt finished, or another writer
        replaced it, while it closed: no commit will see it then)."""
        with self._lock:
            entry = self._files.get(path)
            if entry is None or entry.writer is not writer:
                return False
            entry.writer, entry.length, entry.commit = None, length, commit
            entry.closing = None
            return True

    def began(self, path: str, writer: OpenWriter, future: concurrent.futures.Future[None]) -> None:
        """``writer`` is beginning its file; ``future`` finishes the begin in the background."""
        with self._lock:
            entry = self._files.get(path)
            if entry is not None and entry.writer is writer:
                entry.begin = future

    def closing(
        self, path: str, writer: OpenWriter, future: concurrent.futures.Future[None]
    ) -> None:
        """``writer`` was closed; ``future`` finishes its close in the background."""
        with self._lock:
            entry = self._files.get(path)
            if entry is not None and entry.writer is writer:
                entry.closing = future

    def failed(self, path: str, writer: OpenWriter, error: BaseException) -> None:
        """``writer``'s background close failed: its task must not commit."""
        with self._lock:
            entry = self._files.get(path)
            if entry is not None and entry.writer is writer:
                entry.writer, entry.closing, entry.error = None, None, error

    def wrote(self, path: str, writer: OpenWriter, length: int) -> None:
        """Progress of an open writer (for ``info()`` while it writes)."""
        with self._lock:
            entry = self._files.get(path)
            if entry is not None and entry.writer is writer:
                entry.length = length

    def discarded(
        self, path: str, writer: OpenWriter | None = None, commit: Any = None
    ) -> TaskFile | None:
        """Forget ``path`` (thrown away, or deleted); only ``writer``'s entry if given, or
        only the entry holding ``commit`` (a file thrown away after it closed)."""
        with self._lock:
            entry = self._files.get(path)
            if entry is None or (writer is not None and entry.writer is not writer):
                return None
            if commit is not None and entry.commit is not commit:
                return None
            return self._files.pop(path)

    def get(self, path: str) -> TaskFile | None:
        with self._lock:
            return self._files.get(path)

    def under(self, prefix: str) -> list[TaskFile]:
        """Files whose path starts with ``prefix``."""
        with self._lock:
            return [f for f in self._files.values() if f.path.startswith(prefix)]

    # -- attempts -------------------------------------------------------------------------

    def of_attempt(self, job_id: str, attempt_id: str) -> list[TaskFile]:
        with self._lock:
            return [
                f for f in self._files.values() if (f.job_id, f.attempt_id) == (job_id, attempt_id)
            ]

    def open_files(self, job_id: str, attempt_id: str) -> list[str]:
        """Paths of the attempt's files that are still open in this process."""
        return sorted(f.path for f in self.of_attempt(job_id, attempt_id) if f.is_open)

    def closing_paths(self) -> set[str]:
        """Files whose close is still finishing in the background."""
        with self._lock:
            return {f.path for f in self._files.values() if f.closing is not None}

    def begun(self, job_id: str, attempt_id: str) -> None:
        """Wait until every file of the attempt has finished its begin (or failed it: its
        close then fails, and :meth:`settle` says so)."""
        with self._lock:
            begins = [
                f.begin
                for f in self._files.values()
                if f.begin is not None and (f.job_id, f.attempt_id) == (job_id, attempt_id)
            ]
        concurrent.futures.wait(begins)

    def settle(
        self, job_id: str | None = None, attempt_id: str | None = None
    ) -> list[tuple[str, BaseException]]:
        """Wait until every background close (of the attempt, the job, or all) has finished.

        Returns the files whose close failed, with why.
        """
        with self._lock:
            entries = [
                f
                for f in self._files.values()
                if job_id is None or (f.job_id == job_id and attempt_id in (None, f.attempt_id))
            ]
        concurrent.futures.wait([f.closing for f in entries if f.closing is not None])
        with self._lock:
            failures = [(f.path, error) for f in entries if (error := _close_error(f)) is not None]
            return sorted(failures, key=lambda failure: failure[0])

    @contextlib.contextmanager
    def committing(self, job_id: str, attempt_id: str) -> Iterator[None]:
        """While the block runs, the attempt's commit waits for its files here (only in
        the process that set the attempt up, whose commit takes the records of this
        process's files from this registry; :meth:`awaited`)."""
        key = (job_id, attempt_id)
        with self._lock:
            waits = self._set_up.get(key) == os.getpid() and key not in self._committing
            if waits:
                self._committing.add(key)
        try:
            yield
        finally:
            if waits:
                with self._lock:
                    self._committing.discard(key)

    def handed_over(self, job_id: str, attempt_id: str) -> bool:
        """Has the attempt's commit begun in this process, or has the attempt finished
        here? Its files are then that commit's (or abort's) to keep or undo: their
        writers' own job checks, where they come later, leave them alone."""
        key = (job_id, attempt_id)
        with self._lock:
            return key in self._committing or key in self._finished

    def awaited(self, path: str) -> bool:
        """Is the commit of this file's attempt waiting for its close, in the process that
        set the attempt up? Its record then goes into the attempt's ``.pendingset`` and
        needs no ``.pending`` of its own: that commit either saves it or aborts the
        attempt. A crash first leaves the file out of a commit of the attempt in another
        process, as for a writer killed before its record was saved (refused there
        where its intent marker names it)."""
        with self._lock:
            entry = self._files.get(path)
            return entry is not None and (entry.job_id, entry.attempt_id) in self._committing

    def finish_attempt(self, job_id: str, attempt_id: str, outcome: str) -> list[TaskFile]:
        """The attempt committed or aborted (``outcome``): forget its files, refuse new ones.

        Returns the entries it had (task commit of in-memory writers takes its commits
        from them).
        """
        with self._lock:
            earlier = self._finished.pop((job_id, attempt_id), None)  # (an abort after a commit)
            here = self._set_up.pop((job_id, attempt_id), None) == os.getpid()
            self._finished[(job_id, attempt_id)] = (outcome, here or bool(earlier and earlier[1]))
            while len(self._finished) > self.MAX_FINISHED:
                del self._finished[next(iter(self._finished))]
            taken = [
                f for f in self._files.values() if (f.job_id, f.attempt_id) == (job_id, attempt_id)
            ]
            for entry in taken:
                del self._files[entry.path]
            return taken

    def reopen_attempt(self, job_id: str, attempt_id: str) -> None:
        """Task setup of an attempt id (again), in this process: it may write from now on."""
        with self._lock:
            self._finished.pop((job_id, attempt_id), None)
            self._set_up[(job_id, attempt_id)] = os.getpid()

    def set_up_here(self, job_id: str | None, attempt_id: str | None) -> bool:
        """Was the attempt set up by this very process (and has not finished since)?"""
        if not job_id or not attempt_id:
            return False
        with self._lock:
            return self._set_up.get((job_id, attempt_id)) == os.getpid()

    def finished(self, job_id: str | None, attempt_id: str | None) -> str | None:
        """``"committed"``/``"aborted"`` if the attempt has finished in this process."""
        if not job_id or not attempt_id:
            return None
        with self._lock:
            ended = self._finished.get((job_id, attempt_id))
            return None if ended is None else ended[0]

    def ended_where_set_up(self, job_id: str, attempt_id: str) -> bool:
        """Did the attempt finish in the process that set it up (this one)? Its abort then
        needs no record for other processes: its commits were this process's alone."""
        with self._lock:
            ended = self._finished.get((job_id, attempt_id))
            return ended is not None and ended[1]


#: The registry of this process.
TASK_FILES = TaskFiles()


def _close_error(entry: TaskFile) -> BaseException | None:
    """Why ``entry``'s background close failed: as its writer reported it, or, where the
    close ended without reporting (cancelled, or an error outside its handling), the
    close's own outcome: a file whose close failed never counts as saved."""
    if entry.error is not None or entry.closing is None or not entry.closing.done():
        return entry.error
    if entry.closing.cancelled():
        return concurrent.futures.CancelledError(f"{entry.path}: its close was cancelled")
    return entry.closing.exception()


def attempt_set_up_here(job_id: str | None, attempt_id: str | None) -> bool:
    """Did this process set up the task attempt (``setup_task``)? See the module docstring."""
    return TASK_FILES.set_up_here(job_id, attempt_id)


log = logging.getLogger("magicfs.task_files")


def _settle_at_exit() -> None:
    """A script that writes task files and exits loses nothing still being closed."""
    closing = TASK_FILES.closing_paths()
    for path, error in TASK_FILES.settle():
        if path in closing:  # (earlier failures were reported when they happened)
            log.error("%s: could not be saved before exit: %s", path, error)


# It must run before the interpreter shuts down thread pools (the S3 client resolves
# names in one): magicfs.lifecycle says how.
at_exit(_settle_at_exit)
