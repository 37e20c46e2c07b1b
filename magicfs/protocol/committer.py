"""The committer protocol (Hadoop's ``OutputCommitter``, snake_case), written once.

A committer is bound to one job writing to one destination. The driver calls
``setup_job()``, each task attempt ``setup_task`` / ``commit_task`` (or ``abort_task``),
and finally the driver ``commit_job(messages)`` or ``abort_job()``. Committers pickle,
so one built on the driver can travel to executors; every piece of state that must be
shared lives in the store, not in the object.

**Job commit is a sequence of named stages**, run here for every committer (the
committers fill in hooks: how to end the job, load and validate task records, publish,
roll back, save ``_SUCCESS``, clean up)::

    end_job -> load -> validate -> conflict -> journal -> [delete_old] -> publish
            -> success -> cleanup

A failure names its stage and the job (:class:`~magicfs.errors.JobCommitError`).

**Recovery.** The *journal* (:mod:`magicfs.records.journal`) is saved after every task
record has loaded and validated and before anything becomes visible or is deleted. It
fixes the task records being committed and the conflict decision. From then on:

* ``commit_job()`` again (same job id, any process) finishes the commit: the same
  records, publishing idempotent (a file already made visible by the dead driver is
  recognised), no second conflict check (the commit's own files are not a conflict),
  and in ``replace`` mode old files are deleted only while nothing new is visible;
* ``abort_job()`` rolls it back: every file the commit published is deleted again,
  every upload aborted; the destination is as before the job (``append``: a same-named
  file the job had already *replaced* is gone — S3 and rename stores keep no old
  version). In ``replace`` mode, once old data was deleted, rolling back would lose old
  and new data both: ``abort_job()`` refuses (``abort_job(force=True)`` insists) and
  the error says to finish with ``commit_job()`` (while every old file is still there,
  it rolls back). A commit that had got as far as ``_SUCCESS`` is complete:
  ``abort_job()`` keeps it and only finishes its clean-up;
* a failure *during* the commit does the same in-process: rolled back and aborted,
  except in ``replace`` mode after deletes began, where the job is left to be finished.

Decisions shared by all committers:

* **Job ids** are a fresh UUID unless given, never derived from a clock (two jobs
  started in the same second must not collide: SPARK-33402, HADOOP-17318). A job id that
  is active, mid-commit or already committed at the destination is refused by
  ``setup_job`` (``setup_job(resume=True)`` continues an active job). The classic
  committers cannot recognise a committed one: their zero-byte ``_SUCCESS`` names no job.
* **Conflict modes** (``conflict_mode``): ``append`` (default) adds files, replacing
  same-named ones; ``fail`` refuses a destination that already holds visible data
  (checked at job setup and again just before anything is made visible); ``replace``
  deletes the destination's visible data at job commit, after every task's record has
  loaded and validated, just before the new files are made visible. Replace is not
  atomic: readers see an empty destination for the moment in between. ``file-v2``, whose
  tasks publish at task commit, checks ``fail`` at job setup only and refuses ``replace``.
* **Visible data** is any entry of the destination whose name does not start with
  ``_`` or ``.`` — the convention by which Spark, Hive and pyarrow skip ``_SUCCESS``,
  ``__magic_job-*`` and ``_temporary``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import socket
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import fsspec

from ..errors import (
    CommitConflictError,
    CommitFailedError,
    JobAlreadyActiveError,
    JobCommitError,
    JobNotActiveError,
    NothingToCommitError,
)
from ..filesystems.originals import store_filesystem, unwrapped
from ..layouts.magic import check_job_id
from ..layouts.magic import task_attempt_id as layout_attempt_id
from ..layouts.magic import task_id as layout_task_id
from ..names import SUCCESS_FILE
from ..paths import join
from ..records import SuccessData
from ..records.journal import CommitJournal
from ..statistics import IOStatisticsSnapshot, IOStatisticsStore
from ..stores.capabilities import is_local
from ..task_files import TASK_FILES, TaskFile
from .attempts import AttemptRun, JobSummary, Messages, TaskAttempt, TaskCommitMessage, total_rows
from .journal import JournalKeeper

log = logging.getLogger("magicfs.committer")

CONFLICT_MODES = ("append", "fail", "replace")

__all__ = [
    "CONFLICT_MODES",
    "SUCCESS_FILE",
    "JobSummary",
    "Loaded",
    "OutputCommitter",
    "Published",
    "TaskAttempt",
    "TaskCommitMessage",
    "elapsed",
    "total_rows",
]


@dataclass
class Loaded:
    """The task records a job commit publishes, loaded and (after ``validate``) checked.

    ``payload`` is the committer's own form of them (pendingsets, manifests on disk).
    """

    records: list[str]
    tasks: int
    files: int
    bytes: int
    payload: Any = None
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)

    def discard(self) -> None:
        """Release local resources (the manifest committer's spill files)."""
        discard = getattr(self.payload, "discard", None)
        if discard is not None:
            discard()


@dataclass
class Published:
    """What the publish stage made visible."""

    files: int
    bytes: int
    filenames: list[str] = field(default_factory=list)
    payload: Any = None


class _Stages:
    """Which stage a job commit is in, each timed into the committer's statistics."""

    def __init__(self, stats: IOStatisticsStore):
        self.stats = stats
        self.current = "start"

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.current = name
        with self.stats.track(f"job_stage_{name}"):
            yield


class OutputCommitter(ABC):
    """One job writing to one destination: Hadoop's ``OutputCommitter``, in snake_case.

    Made by :func:`magicfs.committer_for`. The driver calls :meth:`setup_job`; each
    task attempt (:meth:`task_attempt`) is set up with :meth:`setup_task`, writes its
    files under ``task.path(...)`` with :attr:`fs` and ends with :meth:`commit_task`
    or :meth:`abort_task`; the driver then calls :meth:`commit_job` with the tasks'
    messages, or :meth:`abort_job`. :meth:`attempt` wraps one task attempt in a
    ``with`` block. Committers, task attempts and messages pickle, so they can travel
    between driver and executors; the job's state lives in the store, so another
    process can finish or roll back a job whose driver died.

    This base class holds the configuration, the protocol written once as named
    stages, recovery and conflict handling; each committer fills in its hooks.
    """

    name: str = "abstract"  # per instance where one class serves several (file-v1/v2)
    #: Whether a failed commit can take back what it made visible (not the classic ones).
    can_roll_back: ClassVar[bool] = True

    def __init__(
        self,
        dest: str,
        *,
        job_id: str | None = None,
        storage_options: dict[str, Any] | None = None,
        fs: fsspec.AbstractFileSystem | None = None,
        threads: int = 8,
        conflict_mode: str = "append",
        success_file: bool = True,
        app_attempt: int = 0,
        progress: bool | None = None,
        job_id_source: str | None = None,
    ):
        if conflict_mode not in CONFLICT_MODES:
            raise ValueError(
                f"unknown conflict_mode {conflict_mode!r}: use one of {', '.join(CONFLICT_MODES)}"
            )
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self.job_id = check_job_id(job_id) if job_id is not None else str(uuid.uuid4())
        # Hadoop's values: "Generated Locally", "spark.sql.sources.writeJobUUID", "JobID"...
        self.job_id_source = job_id_source or ("job_id" if job_id else "Generated Locally")
        #: The options the store's filesystem was built with (see :attr:`storage_options`).
        self.store_options = dict(storage_options or {})
        self.threads = threads
        self.conflict_mode = conflict_mode
        self.success_file = success_file
        self.app_attempt = app_attempt
        self.progress = progress
        # The store itself, even when install() made its URLs build magic wrappers.
        self.store_fs = unwrapped(fs) if fs is not None else self._make_store_fs(dest)
        if fs is not None and not self.store_options:  # the store's, not a wrapper's
            self.store_options = dict(getattr(self.store_fs, "storage_options", {}) or {})
        self.dest = self.store_fs._strip_protocol(dest).rstrip("/")
        self.stats = IOStatisticsStore()

    # -- construction helpers --------------------------------------------------------------

    def _make_store_fs(self, dest: str) -> fsspec.AbstractFileSystem:
        protocol = fsspec.core.split_protocol(dest)[0] or "file"
        return store_filesystem(protocol, **self.store_options)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("stats", None)  # per process; holds a lock
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.stats = IOStatisticsStore()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dest={self.url!r}, job_id={self.job_id!r})"

    @property
    def url(self) -> str:
        """The destination with its protocol, for messages and ``_SUCCESS``."""
        return cast(str, self.store_fs.unstrip_protocol(self.dest))

    @property
    def success_path(self) -> str:
        return join(self.dest, SUCCESS_FILE)

    @property
    def protocol(self) -> str:
        """The store's protocol name, as chained URLs key their options by it."""
        protocol: str | tuple[str, ...] | list[str] = self.store_fs.protocol
        return protocol[0] if isinstance(protocol, (tuple, list)) else protocol

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options that go with :meth:`TaskAttempt.url` URLs (``storage_options=``).

        For committers whose tasks write through ``magic::`` URLs they are nested per
        protocol, as fsspec's chained URLs expect (``{"magic": {...}, "s3": {...}}``).
        """
        return dict(self.store_options)

    def recover_command(self) -> str:
        return f"magicfs jobs recover --job {self.job_id} {self.url}"

    def rollback_command(self) -> str:
        return f"magicfs jobs rollback --job {self.job_id} {self.url}"

    # -- hooks every committer fills in -------------------------------------------------

    @property
    @abstractmethod
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem tasks write their output with (``task.path(...)`` paths)."""

    @abstractmethod
    def work_path_for(self, attempt_id: str) -> str:
        """Where the attempt writes (what ``task.path(...)`` builds on)."""

    def work_url_for(self, attempt_id: str) -> str:
        """:meth:`work_path_for` as a URL (what ``task.url(...)`` builds on).

        Default: the store's own URL of it; on a local disk ``local://<path>`` (fsspec's
        other name for its local filesystem), not ``file://``: pandas opens ``file://``
        URLs with urllib, which cannot write them, while ``local://`` goes to fsspec with
        :attr:`storage_options` like any store's URL. (A plain path would not do: pandas
        refuses ``storage_options`` with one.) Committers whose tasks write through
        ``magic::`` URLs override this.
        """
        path = self.work_path_for(attempt_id)
        if is_local(self.store_fs):
            return "local://" + path
        return cast(str, self.store_fs.unstrip_protocol(path))

    @abstractmethod
    def _setup_job(self, resume: bool) -> None:
        """Create what the job needs in the store (a resumed job keeps what it has)."""

    @abstractmethod
    def _setup_task(self, task: TaskAttempt) -> None: ...

    @abstractmethod
    def _commit_task(self, task: TaskAttempt, files: list[TaskFile]) -> TaskCommitMessage:
        """Commit the attempt; ``files``: what this process knows it wrote."""

    @abstractmethod
    def _abort_task(self, task: TaskAttempt, files: list[TaskFile]) -> None: ...

    def job_active(self) -> bool:
        """Whether the job has been set up and has not ended (its marker, where it keeps one)."""
        return False

    def _end_job(self, check: bool = True) -> bool:
        """End the job (no writer or task may join it any more).

        Returns whether it was active (looked up only if ``check``: one request less when
        the caller's messages say what to commit).
        """
        return self.job_active() if check else False

    @abstractmethod
    def _journal(self) -> JournalKeeper | None:
        """Where this job's commit journal lives (``None``: the committer keeps none)."""

    @abstractmethod
    def _records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        """The task records to publish: those the messages name, or the listed ones.

        Raises :class:`NothingToCommitError` when the job has nothing (left) to commit.
        """

    @abstractmethod
    def _load(self, records: list[str], messages: Messages | None = None) -> Loaded:
        """Load (and check the form of) the task records; ``messages`` when the caller gave them."""

    def _validate(self, loaded: Loaded) -> None:  # noqa: B027 (optional hook)
        """Every check that can fail, before anything becomes visible."""

    def _plan_replace(self, loaded: Loaded) -> list[str]:
        """``replace`` mode: the files to delete (default: all visible data)."""
        return self.visible_files()

    @abstractmethod
    def _delete_files(self, paths: list[str]) -> None:
        """Delete ``paths`` (missing ones are fine)."""

    @abstractmethod
    def _publish(self, loaded: Loaded) -> Published:
        """Make every file visible; idempotent (files already visible count as done)."""

    @abstractmethod
    def _unpublish(self, loaded: Loaded) -> int:
        """Roll back: delete every file of ``loaded`` that was made visible; returns how many."""

    @abstractmethod
    def _save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        """Write ``_SUCCESS`` (if enabled); returns the file names it lists."""

    @abstractmethod
    def _clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """Delete the job's tree (journal last) and abort what is left; ``published`` is
        ``None`` for an aborted job."""

    def _failure_report(  # noqa: B027 (optional hook)
        self, stage: str, failure: BaseException, start: float
    ) -> None:
        """A chance to record a failed commit (the manifest committer's report)."""

    # -- job setup ----------------------------------------------------------------------------

    def setup_job(self, *, resume: bool = False) -> None:
        """Set the job up; refuse a job id that is already in use here (see module docs).

        ``resume=True`` continues a job that is still active (another driver set it up).
        """
        start = time.monotonic()
        state = self.job_state()
        if state == "committing":
            raise JobAlreadyActiveError(
                f"job {self.job_id} at {self.url}: a commit of this job started and did not "
                f"finish: finish it with commit_job() ({self.recover_command()}) or roll it "
                f"back with abort_job() ({self.rollback_command()}); a new job needs a new id"
            )
        if state == "committed":
            raise JobAlreadyActiveError(
                f"job {self.job_id} has already committed to {self.url}: a job id is used "
                "once; start the new job with a new id"
            )
        if state == "active" and not resume:
            raise JobAlreadyActiveError(
                f"job {self.job_id} is already active at {self.url}: two drivers with one job "
                "id would mix their files. Use a new job id, or setup_job(resume=True) to "
                "continue this job"
            )
        if state is None or not resume:
            self.check_no_conflict("job setup")
            if self.success_file:
                self._delete_files([self.success_path])
        self._setup_job(resume=state == "active")
        log.info(
            "job %s: %s for %s (%s committer, conflict mode %s) in %.2fs",
            self.job_id,
            "resumed" if state == "active" else "set up",
            self.url,
            self.name,
            self.conflict_mode,
            elapsed(start),
        )

    def job_state(self) -> str | None:
        """``"committing"``, ``"active"``, ``"committed"`` or ``None`` (unknown here)."""
        keeper = self._journal()
        journal = keeper.read() if keeper is not None else None
        if journal is not None:
            return "committed" if journal.phase == "committed" else "committing"
        if self.job_active():
            return "active"
        if self._success_names_this_job():
            return "committed"
        return None

    def _success_names_this_job(self) -> bool:
        try:
            data = self.store_fs.cat_file(self.success_path, start=0, end=SuccessData.MAX_BYTES)
        except (FileNotFoundError, OSError):
            return False
        try:
            job_id: object = json.loads(data).get("jobId")
            return job_id == self.job_id
        except (ValueError, AttributeError):
            return False

    def job_marker_document(self) -> bytes:
        """The job marker's JSON: which job is active where, since when, started by whom."""
        marker = {
            "jobId": self.job_id,
            "committer": self.name,
            "destination": self.url,
            "created": int(time.time() * 1000),
            "hostname": socket.gethostname(),
        }
        return json.dumps(marker).encode()

    # -- tasks ----------------------------------------------------------------------------------

    def task_attempt(self, task_id: int, attempt: int = 0) -> TaskAttempt:
        """Hadoop-style ids for attempt ``attempt`` of task ``task_id`` of this job."""
        if task_id < 0 or attempt < 0:
            raise ValueError(f"task and attempt numbers must be >= 0, not {task_id}/{attempt}")
        attempt_id = layout_attempt_id(self.job_id, task_id, attempt)
        return TaskAttempt(
            job_id=self.job_id,
            task_index=task_id,
            attempt_number=attempt,
            task_id=layout_task_id(self.job_id, task_id),
            attempt_id=attempt_id,
            work_path=self.work_path_for(attempt_id),
            work_url=self.work_url_for(attempt_id),
        )

    def setup_task(self, task: TaskAttempt) -> None:
        """Prepare ``task`` (from :meth:`task_attempt`) to write; call before its writes."""
        self._check_task(task)
        TASK_FILES.reopen_attempt(self.job_id, task.attempt_id)
        self._setup_task(task)

    def needs_task_commit(self, task: TaskAttempt) -> bool:
        """Always true: even an attempt that wrote nothing commits (an empty record)."""
        return True

    def commit_task(self, task: TaskAttempt) -> TaskCommitMessage:
        """Commit the attempt: its files become part of the job (still invisible).

        Waits for the attempt's files still closing in the background, then saves one
        record of the attempt's files in the store.

        Returns:
            The :class:`~magicfs.TaskCommitMessage` to hand to :meth:`commit_job`
            (picklable and JSON-serialisable).

        Raises:
            magicfs.errors.CommitFailedError: a file is still open or could not be
                saved; the attempt has been aborted.
            magicfs.errors.JobNotActiveError: the job has ended (committed or aborted).
        """
        self._check_task(task)
        failed = TASK_FILES.settle(self.job_id, task.attempt_id)  # closes in the background
        if failed:
            self.abort_task(task)
            path, error = failed[0]
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(failed)} files could not be saved, e.g. "
                f"{self.store_fs.unstrip_protocol(path)}: {type(error).__name__}: {error} "
                "(the attempt has been aborted)"
            ) from error
        still_open = TASK_FILES.open_files(self.job_id, task.attempt_id)
        if still_open:
            self.abort_task(task)
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(still_open)} files are still open, e.g. "
                f"{self.store_fs.unstrip_protocol(still_open[0])}: close every file before "
                "committing the task (the attempt has been aborted)"
            )
        files = TASK_FILES.of_attempt(self.job_id, task.attempt_id)
        message = self._commit_task(task, files)
        TASK_FILES.finish_attempt(self.job_id, task.attempt_id, "committed")
        return message

    def abort_task(self, task: TaskAttempt) -> None:
        """Abort the attempt: its open files are discarded, its output and records deleted."""
        self._check_task(task)
        TASK_FILES.settle(self.job_id, task.attempt_id)  # what is closing has closed (or failed)
        files = TASK_FILES.finish_attempt(self.job_id, task.attempt_id, "aborted")
        for entry in files:
            if entry.writer is not None:
                entry.writer.supersede("its task attempt was aborted")
        self._abort_task(task, files)

    @contextlib.contextmanager
    def attempt(
        self, task_id: int, attempt: int = 0, *, context: str = "magicfs"
    ) -> Iterator[AttemptRun]:
        """Run one task attempt: set it up, yield it, commit it when the block ends.

        An exception inside the block (or from the commit) aborts the attempt — an abort
        that fails too is logged, never raised over the original error — and propagates
        with a note naming the attempt (``context`` says who ran it, e.g.
        ``"magicfs.dask: partition 3"``). Every integration runs its tasks through this.
        """
        task = self.task_attempt(task_id, attempt)
        self.setup_task(task)
        run = AttemptRun(task, self.fs)
        try:
            yield run
            message = self.commit_task(task)
        except BaseException as failure:
            self._abort_task_quietly(task, failure)
            failure.add_note(
                f"{context}: task attempt {task.attempt_id} writing to {self.url} failed; "
                "the attempt was aborted and nothing of it is visible"
            )
            raise
        run.message = message if run.rows is None else dataclasses.replace(message, rows=run.rows)

    def _abort_task_quietly(self, task: TaskAttempt, failure: BaseException) -> None:
        try:
            self.abort_task(task)
        except Exception as abort_error:
            log.warning(
                "task attempt %s failed (%s: %s) and aborting it failed too (%s: %s); the "
                "job's end sweeps what it left",
                task.attempt_id,
                type(failure).__name__,
                failure,
                type(abort_error).__name__,
                abort_error,
            )

    def require_active_job(self, task: TaskAttempt) -> None:
        """Refuse to start an attempt of a job that was never set up or has ended."""
        if not self.job_active():
            raise JobNotActiveError(
                f"job {self.job_id} at {self.url} is not active (never set up, or already "
                f"committed or aborted): task attempt {task.attempt_id} cannot start"
            )

    def not_started_error(self, task: TaskAttempt) -> Exception:
        """Why an attempt with no ``.started`` marker cannot commit: job ended, or never set
        up, or aborted (or, staging committers, already committed: its files are gone)."""
        if not self.job_active():
            return JobNotActiveError(
                f"job {self.job_id} is not active: task attempt {task.attempt_id} cannot commit"
            )
        if TASK_FILES.finished(self.job_id, task.attempt_id) == "committed":
            return FileNotFoundError(
                f"task attempt {task.attempt_id} of job {self.job_id} has already committed: "
                "it cannot commit again"
            )
        return FileNotFoundError(
            f"task attempt {task.attempt_id} of job {self.job_id} was never set up, or was "
            "aborted: it cannot commit"
        )

    def task_committed(
        self, task: TaskAttempt, record: str, files: int, size: int, start: float, verb: str
    ) -> TaskCommitMessage:
        """Log a committed task (``verb``: what its commit did) and build its message."""
        log.info(
            "task %s: %s %d files (%d bytes) in %.2fs (%s committer)",
            task.attempt_id,
            verb,
            files,
            size,
            elapsed(start),
            self.name,
        )
        return TaskCommitMessage(
            committer=self.name,
            job_id=self.job_id,
            task_id=task.task_id,
            attempt_id=task.attempt_id,
            record=record,
            files=files,
            bytes=size,
        )

    def _check_task(self, task: TaskAttempt) -> None:
        if task.job_id != self.job_id:
            raise ValueError(f"task attempt {task.attempt_id} belongs to job {task.job_id}")

    # -- job commit ------------------------------------------------------------------------------

    def commit_job(self, messages: Messages | None = None) -> JobSummary:
        """Commit the job: every file of the committed tasks appears at its final name.

        Publishes exactly the task attempts ``messages`` name, without listing; without
        ``messages`` it lists the committed tasks (the last committed attempt of each
        task wins). Every record is loaded and validated before anything is made
        visible; then the files are published ``threads`` at a time, ``_SUCCESS`` is
        written and the job's temporary state deleted. Called again with the same job
        id, in any process, it finishes a commit that an earlier driver started.

        Args:
            messages: the :meth:`commit_task` messages, one per task.

        Returns:
            A :class:`~magicfs.JobSummary`: files, bytes, tasks, seconds, and
            ``cleanup_incomplete`` if clean-up left something (the output is whole).

        Raises:
            magicfs.errors.JobCommitError: a stage failed; the error names the stage and
                the file. What was made visible has been rolled back unless the error
                says ``recoverable`` (then ``commit_job()`` again finishes the job).
            magicfs.errors.NothingToCommitError: the job was already committed.
        """
        start = time.monotonic()
        stages = _Stages(self.stats)
        keeper = self._journal()
        TASK_FILES.settle(self.job_id)  # this process's files still closing: let them finish
        with stages("end_job"), concurrent.futures.ThreadPoolExecutor(1) as pool:
            ending = pool.submit(self._end_job, messages is None)
            journal = keeper.read() if keeper is not None else None
            was_active = ending.result()
        if journal is not None:
            self._check_resumable(journal, messages)
            if journal.phase == "committed":
                return self._finish_clean_up(journal, start)
        loaded: Loaded | None = None
        try:  # the loaded records (on local disk) serve every stage, clean-up included
            try:
                with self.stats.track("committer_commit_job"):
                    with stages("load"):
                        records = (
                            journal.records
                            if journal is not None
                            else self._records_to_commit(messages, was_active)
                        )
                        try:
                            loaded = self._load(records, messages)
                        except FileNotFoundError:
                            self._check_not_committed_already(journal, messages)
                            raise
                    with stages("validate"):
                        self._validate(loaded)
                    if journal is None:
                        with stages("conflict"):
                            self.check_no_conflict("job commit")
                            doomed = (
                                self._plan_replace(loaded)
                                if self.conflict_mode == "replace"
                                else []
                            )
                        if keeper is not None:
                            with stages("journal"):
                                journal = keeper.start(self._new_journal(loaded, doomed), doomed)
                        elif doomed:
                            self._delete_files(doomed)
                    if journal is not None and journal.phase == "deleting":
                        assert keeper is not None
                        with stages("delete_old"):
                            self._delete_old(keeper, journal)
                    with stages("publish"):
                        published = self._publish(loaded)
                    with stages("success"):
                        filenames = self._save_success(
                            loaded, published, start, total_rows(messages)
                        )
            except NothingToCommitError:
                raise
            except BaseException as failure:
                self.stats.increment("committer_jobs_failed")
                self._failure_report(stages.current, failure, start)
                raise self._failed(stages.current, failure, journal, loaded) from failure
            self.stats.increment("committer_jobs_completed")
            if journal is not None and keeper is not None:
                journal.phase = "committed"
                journal.result = {"files": published.files, "bytes": published.bytes}
                journal.result["tasks"] = loaded.tasks
                journal.updated = int(time.time() * 1000)
                try:
                    keeper.save(journal)
                except Exception as e:  # the output is complete: only a retry's shortcut is lost
                    log.warning("job %s: could not mark the journal committed: %s", self.job_id, e)
            with stages("cleanup"):
                incomplete = self._try_clean_up(loaded, published)
            summary = self.summarise(
                published.files, published.bytes, loaded.tasks, start, filenames
            )
            summary.cleanup_incomplete = incomplete
            return summary
        finally:
            if loaded is not None:
                loaded.discard()

    def _check_not_committed_already(
        self, journal: CommitJournal | None, messages: Messages | None
    ) -> None:
        """Task records are missing: was this a retried ``commit_job(messages)`` of a finished job?

        Its records went with its tree, and failing to load them must not read as "rolled
        back". Asked only once a record is missing, so a first commit pays no extra request.
        """
        if journal is None and messages is not None and self._success_names_this_job():
            raise NothingToCommitError(
                f"job {self.job_id}: nothing to commit at {self.url}: it has already been "
                "committed (its _SUCCESS names it)"
            )

    def _try_clean_up(self, loaded: Loaded | None, published: Published | None) -> str | None:
        """Clean up after a successful commit; what is left (and how to finish) on failure."""
        try:
            self._clean_up(loaded, published)
        except Exception as e:
            incomplete = (
                f"clean-up of job {self.job_id} did not finish ({type(e).__name__}: {e}); "
                f"the output is complete. Finish it with cleanup_job() (magicfs jobs cleanup "
                f"--job {self.job_id} {self.url})"
            )
            log.warning("job %s: %s", self.job_id, incomplete)
            return incomplete
        return None

    def _finish_clean_up(self, journal: CommitJournal, start: float) -> JobSummary:
        """A commit that got as far as ``_SUCCESS``: only its clean-up is left to do."""
        log.info("job %s: already committed; finishing its clean-up", self.job_id)
        incomplete = self._try_clean_up(None, Published(0, 0))
        result = journal.result
        summary = self.summarise(
            result.get("files", 0), result.get("bytes", 0), result.get("tasks", 0), start, []
        )
        summary.cleanup_incomplete = incomplete
        return summary

    def _new_journal(self, loaded: Loaded, doomed: list[str]) -> CommitJournal:
        return CommitJournal(
            job_id=self.job_id,
            committer=self.name,
            destination=self.url,
            conflict_mode=self.conflict_mode,
            phase="deleting" if doomed else "publishing",
            records=list(loaded.records),
        )

    def _check_resumable(self, journal: CommitJournal, messages: Messages | None) -> None:
        """A started commit is finished with its own records, by a committer of its kind."""
        if journal.committer != self.name:
            raise JobCommitError(
                f"job {self.job_id}: its interrupted commit was started by the "
                f"{journal.committer} committer; finish it with that committer",
                job_id=self.job_id,
                stage="load",
                recoverable=True,
            )
        if messages is not None and any(m is not None for m in messages):
            named = {m.record for m in messages if m is not None}
            if named != set(journal.records):
                raise JobCommitError(
                    f"job {self.job_id}: a commit of this job already started with "
                    f"{len(journal.records)} task records and must finish with exactly those; "
                    f"these messages name others. Run commit_job() without messages to finish "
                    f"it, or abort_job() to roll it back",
                    job_id=self.job_id,
                    stage="load",
                    recoverable=True,
                )
        log.info(
            "job %s: finishing an interrupted commit (%d task records, phase %s)",
            self.job_id,
            len(journal.records),
            journal.phase,
        )

    def _old_data_deleted(self, journal: CommitJournal) -> bool:
        """Has a replace commit deleted any old file yet? (Then rolling back would lose it.)

        Past the ``deleting`` phase, yes. During it, the delete pages are compared with one
        listing of the destination: a commit stopped before its first delete can still be
        rolled back exactly.
        """
        if not journal.deletes:
            return False
        if journal.phase != "deleting":
            return True
        keeper = self._journal()
        assert keeper is not None
        try:
            present = set(self.store_fs.find(self.dest))
        except FileNotFoundError:
            return True
        return any(path not in present for paths in keeper.pages(journal) for path in paths)

    def _delete_old(self, keeper: JournalKeeper, journal: CommitJournal) -> None:
        deleted = 0
        for paths in keeper.pages(journal):
            self._delete_files(paths)
            deleted += len(paths)
        log.info("%s: replace mode deleted %d existing files", self.url, deleted)
        journal.phase = "publishing"
        journal.updated = int(time.time() * 1000)
        keeper.save(journal)

    def _failed(
        self,
        stage: str,
        failure: BaseException,
        journal: CommitJournal | None,
        loaded: Loaded | None,
    ) -> JobCommitError:
        """Roll back and abort a failed commit, or leave it to be finished; the error says which."""
        what = (
            f"job {self.job_id}: commit to {self.url} failed in stage {stage}: "
            f"{type(failure).__name__}: {failure}"
        )
        if journal is not None and self._old_data_deleted(journal):
            log.error("%s; old data was deleted, the job is left to be finished", what)
            return JobCommitError(
                f"{what}. The destination's old data had already been deleted (replace mode), "
                "so the job was NOT rolled back (that would lose old and new data both): run "
                f"commit_job() again to finish it ({self.recover_command()})",
                job_id=self.job_id,
                stage=stage,
                recoverable=True,
            )
        try:
            undone = self._unpublish(loaded) if journal is not None and loaded is not None else 0
            self._clean_up(None, None)
        except Exception as e:
            log.error("%s; rolling back failed too: %s", what, e)
            return JobCommitError(
                f"{what}. Rolling the job back failed too ({type(e).__name__}: {e}): run "
                f"abort_job() again ({self.rollback_command()})",
                job_id=self.job_id,
                stage=stage,
                recoverable=True,
            )
        if not self.can_roll_back:
            detail = (
                ": files it had already moved into the destination stay there (the "
                f"{self.name} committer cannot take them back)"
            )
            log.error("%s; the job was aborted%s", what, detail)
            return JobCommitError(
                f"{what}. The job was aborted{detail}", job_id=self.job_id, stage=stage
            )
        detail = f" ({undone} files it had made visible were deleted again)" if undone else ""
        log.error("%s; the job was rolled back%s", what, detail)
        return JobCommitError(
            f"{what}. The job was aborted: nothing of it is visible{detail}",
            job_id=self.job_id,
            stage=stage,
        )

    # -- abort and clean-up ---------------------------------------------------------------------

    def abort_job(self, *, force: bool = False) -> None:
        """Abort the job: nothing of it stays visible, nothing parked. Idempotent.

        Rolls back a commit that a dead driver left half done, except in ``replace``
        mode after old data was deleted (see the module docstring; ``force=True``). A
        commit that had finished (``_SUCCESS`` written) is kept: only its clean-up is done.
        """
        start = time.monotonic()
        TASK_FILES.settle(self.job_id)  # this process's files still closing: let them finish
        self._end_job()
        keeper = self._journal()
        journal = keeper.read() if keeper is not None else None
        undone = 0
        if journal is not None and (journal.phase == "committed" or self._success_names_this_job()):
            # The commit had finished: a driver killed in its clean-up (journal marked
            # committed), or between saving _SUCCESS and marking the journal. Rolling back
            # would delete complete output and leave a _SUCCESS naming it; refusing would
            # leave the job's tree. So, as after any commit: keep the output, clean up.
            log.warning(
                "job %s has already committed to %s: nothing to roll back; finishing its clean-up",
                self.job_id,
                self.url,
            )
            self._clean_up(None, None)
            return
        if journal is not None:
            if not force and self._old_data_deleted(journal):
                raise JobCommitError(
                    f"job {self.job_id}: its commit had already deleted the destination's old "
                    f"data ({journal.deletes} files, replace mode) when it stopped; rolling back "
                    "cannot bring that back. Finish the commit with commit_job() "
                    f"({self.recover_command()}) to keep the new data, or abort_job(force=True) "
                    "to discard the new data too",
                    job_id=self.job_id,
                    stage="abort",
                    recoverable=True,
                )
            loaded = self._load(journal.records)
            try:
                undone = self._unpublish(loaded)
            finally:
                loaded.discard()
        self._clean_up(None, None)
        log.info(
            "job %s: aborted in %.2fs%s",
            self.job_id,
            elapsed(start),
            f" ({undone} files of its interrupted commit deleted)" if undone else "",
        )

    def cleanup_job(self) -> None:
        """Delete the job's tree, aborting anything it left. Idempotent.

        Refused while a commit of the job is unfinished: that needs ``commit_job()`` or
        ``abort_job()``, or the half-published output would lose its only record.
        """
        keeper = self._journal()
        journal = keeper.read() if keeper is not None else None
        if journal is not None and journal.phase != "committed":
            raise JobCommitError(
                f"job {self.job_id}: a commit of this job started and did not finish; finish "
                f"it with commit_job() ({self.recover_command()}) or roll it back with "
                f"abort_job() ({self.rollback_command()})",
                job_id=self.job_id,
                stage="cleanup",
                recoverable=True,
            )
        self._end_job()
        self._clean_up(None, None)

    # -- shared parts of job commit ------------------------------------------------------

    def check_messages(self, messages: Messages, records_under: str) -> list[str]:
        """The records named by ``messages``, once each is known to be this job's own.

        One message per task, from this job, naming a record under ``records_under``; a
        missing message (Spark's ``None`` for a task that never reported) is an error.
        """
        tasks: dict[str, str] = {}
        present = self.reported(messages)
        for message in present:
            if message.job_id != self.job_id:
                raise CommitFailedError(
                    f"job {self.job_id}: message for task {message.task_id} comes from job "
                    f"{message.job_id}"
                )
            if not message.record.startswith(records_under.rstrip("/") + "/"):
                raise CommitFailedError(
                    f"job {self.job_id}: message for task {message.task_id} names a record "
                    f"outside this job: {message.record}"
                )
            if message.task_id in tasks:
                raise CommitFailedError(
                    f"job {self.job_id}: two messages for task {message.task_id} (attempts "
                    f"{tasks[message.task_id]} and {message.attempt_id})"
                )
            tasks[message.task_id] = message.attempt_id
        return [message.record for message in present]

    def reported(self, messages: Messages) -> list[TaskCommitMessage]:
        """``messages``, refused if one is missing (Spark's ``None`` for a silent task)."""
        present = []
        for index, message in enumerate(messages):
            if message is None:
                raise CommitFailedError(
                    f"job {self.job_id}: message {index} is missing: a task did not report, "
                    "so the job cannot be committed"
                )
            present.append(message)
        return present

    def metrics(
        self, files: int, size: int, tasks: int, start: float, rows: int | None
    ) -> dict[str, int]:
        """``_SUCCESS`` metrics: totals, duration and (when known) rows."""
        metrics = {
            "files": files,
            "bytes": size,
            "tasks": tasks,
            "duration_ms": int(elapsed(start) * 1000),
        }
        if rows is not None:
            metrics["rows"] = rows
        return metrics

    def diagnostics(self, **extra: str) -> dict[str, str]:
        """``_SUCCESS`` diagnostics: how the job was configured."""
        return {
            "magicfs.destination": self.url,
            "magicfs.committer.threads": str(self.threads),
            "magicfs.conflict_mode": self.conflict_mode,
            **extra,
        }

    def summarise(
        self, files: int, size: int, tasks: int, start: float, filenames: list[str]
    ) -> JobSummary:
        """The :class:`JobSummary` of a committed job, logged at INFO."""
        summary = JobSummary(
            job_id=self.job_id,
            destination=self.url,
            committer=self.name,
            files=files,
            bytes=size,
            tasks=tasks,
            seconds=elapsed(start),
            success_file=self.store_fs.unstrip_protocol(self.success_path)
            if self.success_file
            else None,
            filenames=list(filenames),
            counters=dict(self.stats.counters()),
        )
        log.info(
            "job %s: committed %d files (%d bytes) from %d tasks to %s in %.2fs (%s committer)",
            self.job_id,
            files,
            size,
            tasks,
            self.url,
            summary.seconds,
            self.name,
        )
        return summary

    # -- conflict handling shared by every committer -------------------------------------

    def visible_entries(self) -> list[str]:
        """Top-level entries of the destination that readers would see (one listing)."""
        try:
            entries = self.store_fs.ls(self.dest, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries]
        return [
            entry
            for entry, name in zip(entries, names, strict=True)
            if name and not name.startswith(("_", ".")) and entry.rstrip("/") != self.dest
        ]

    def visible_files(self) -> list[str]:
        """Every file of the destination's visible data (what ``replace`` deletes)."""
        files: list[str] = []
        for entry in self.visible_entries():
            if self.store_fs.isdir(entry):
                files.extend(self.store_fs.find(entry))
            else:
                files.append(entry)
        return files

    def check_no_conflict(self, stage: str) -> None:
        """``fail`` mode: refuse a destination with visible data."""
        if self.conflict_mode != "fail":
            return
        entries = self.visible_entries()
        if entries:
            raise CommitConflictError(
                f"{self.url}: destination already holds data ({len(entries)} entries, e.g. "
                f"{self.store_fs.unstrip_protocol(entries[0])}) and conflict_mode is 'fail' "
                f"(checked at {stage})"
            )


def elapsed(start: float) -> float:
    """Seconds since ``start`` (a ``time.monotonic()`` reading)."""
    return time.monotonic() - start
