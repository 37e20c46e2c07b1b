"""The committer protocol (Hadoop's ``OutputCommitter``, snake_case), written once.

A committer is bound to one job writing to one destination. The driver calls
``setup_job()``, each task attempt ``setup_task`` / ``commit_task`` (or ``abort_task``),
and finally the driver ``commit_job(messages)`` or ``abort_job()``. Committers pickle,
so one built on the driver can travel to executors; every piece of state that must be
shared lives in the store, not in the object.

**Job commit is a sequence of named stages**, run for every committer by
:mod:`.job_commit` (the committers fill in hooks, :mod:`.hooks`: how to end the job,
load and validate task records, publish, roll back, save ``_SUCCESS``, clean up)::

    end_job -> load -> validate -> conflict -> journal -> [delete_old] -> publish
            -> success -> (committed) -> cleanup

A failure names its stage and the job (:class:`~magicfs.errors.JobCommitError`). The
job is committed once ``_SUCCESS`` and the journal's ``committed`` phase are saved;
``cleanup`` then runs as the ``cleanup`` option says (:mod:`.cleanup`): inline (the
default), off the critical path in the background (``wait_cleanup()`` waits for it),
or not at all.

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
  (checked at job setup and again just before anything is made visible, once the job
  has claimed the destination: of fail-mode jobs committing there at once exactly one
  gets past the check, :mod:`magicfs.stores.claims`); ``replace``
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
import logging
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import fsspec

from ..errors import (
    JobAlreadyActiveError,
    JobCommitError,
    NothingToCommitError,
)
from ..filesystems.listings import refreshes_listings
from ..names import SUCCESS_FILE
from ..statistics import IOStatisticsStore
from ..task_files import TASK_FILES
from .active_jobs import ACTIVE_JOBS
from .attempts import (
    AttemptRun,
    JobSummary,
    Messages,
    TaskAttempt,
    TaskCommitMessage,
    total_rows,
)
from .hooks import CommitterHooks, Loaded, Published
from .job_commit import JobCommit
from .options import CONFLICT_MODES, CommitterOptions, elapsed
from .recovery import Recovery
from .tasks import TaskLifecycle

log = logging.getLogger("magicfs.committer")

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


class OutputCommitter:
    """One job writing to one destination: Hadoop's ``OutputCommitter``, in snake_case.

    Made by :func:`magicfs.committer_for`. The driver calls :meth:`setup_job`; each
    task attempt (:meth:`task_attempt`) is set up with :meth:`setup_task`, writes its
    files under ``task.path(...)`` with :attr:`fs` and ends with :meth:`commit_task`
    or :meth:`abort_task`; the driver then calls :meth:`commit_job` with the tasks'
    messages, or :meth:`abort_job`. :meth:`attempt` wraps one task attempt in a
    ``with`` block. Committers, task attempts and messages pickle, so they can travel
    between driver and executors; the job's state lives in the store, so another
    process can finish or roll back a job whose driver died.

    Its public names are the user's verbs and what a user reads (the job, the
    destination, the filesystem to write with, its options and statistics). Everything
    else is an object it holds: :attr:`flow`, its committer family's hooks of the
    protocol (a :class:`~.hooks.CommitterHooks`, which holds the configuration,
    :attr:`options`, a frozen :class:`~.options.CommitterOptions`). The collaborators it
    makes per call receive the flow, never the committer: what the destination shows
    (:mod:`.destination`), the task side (:mod:`.tasks`), the job commit's named stages
    (:mod:`.job_commit`) and the journal's recovery rules (:mod:`.recovery`).
    """

    #: The committer family's flow: the class built with the committer's keywords.
    flow_class: ClassVar[type[CommitterHooks]]
    #: The committer's name (``committer_for``'s: ``"magic"``, ``"manifest"``...); per
    #: instance where one class serves several (``file-v1``/``file-v2``).
    name: str = "abstract"

    def __init__(self, dest: str, **options: Any):
        #: The protocol's hooks for this job (:mod:`.hooks`): what the verbs call.
        self.flow = self.flow_class(dest, **options)
        self.name = self.flow.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dest={self.url!r}, job_id={self.job_id!r})"

    # -- what a user reads ------------------------------------------------------------------

    @property
    def options(self) -> CommitterOptions:
        """The configuration it was built with (frozen)."""
        return self.flow.options

    @property
    def job_id(self) -> str:
        return self.flow.job_id

    @property
    def dest(self) -> str:
        """The destination, a path of :attr:`store_fs`."""
        return self.flow.dest

    @property
    def url(self) -> str:
        """The destination with its protocol."""
        return self.flow.url

    @property
    def store_fs(self) -> fsspec.AbstractFileSystem:
        """The store's own filesystem (reading the destination back)."""
        return self.flow.store_fs

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem tasks write their output with (``task.path(...)`` paths)."""
        return self.flow.fs

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options that go with :meth:`TaskAttempt.url` URLs (``storage_options=``)."""
        return self.flow.storage_options

    @property
    def stats(self) -> IOStatisticsStore:
        """This process's statistics of the job (Hadoop's IOStatistics)."""
        return self.flow.stats

    # -- tasks: the task side is a collaborator (magicfs.protocol.tasks) ----------------------

    def task_attempt(self, task_id: int, attempt: int = 0) -> TaskAttempt:
        """Hadoop-style ids for attempt ``attempt`` of task ``task_id`` of this job."""
        return TaskLifecycle(self.flow).task_attempt(task_id, attempt)

    def setup_task(self, task: TaskAttempt) -> None:
        """Prepare ``task`` (from :meth:`task_attempt`) to write; call before its writes."""
        TaskLifecycle(self.flow).setup_task(task)

    def needs_task_commit(self, task: TaskAttempt) -> bool:
        """Whether ``task`` must commit (Hadoop's ``needsTaskCommit``): true but where
        the committer knows the attempt wrote nothing (the classic ones)."""
        return self.flow.needs_task_commit(task)

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
        return TaskLifecycle(self.flow).commit_task(task)

    def abort_task(self, task: TaskAttempt) -> None:
        """Abort the attempt: its open files are discarded, its output and records deleted."""
        TaskLifecycle(self.flow).abort_task(task)

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
        with TaskLifecycle(self.flow).attempt(task_id, attempt, context) as run:
            yield run

    # -- job setup ----------------------------------------------------------------------------

    @refreshes_listings  # readers in this process then miss the old _SUCCESS it deleted
    def setup_job(self, *, resume: bool = False) -> None:
        """Set the job up; refuse a job id that is already in use here (see module docs).

        ``resume=True`` continues a job that is still active (another driver set it up).
        A job id the committer generated itself is not looked up the first time (a fresh
        UUID is in use nowhere; copies pickled *before* set-up share it, so set up once,
        then ship the committer).
        """
        start = time.monotonic()
        # A job id this committer drew itself (a fresh UUID) and has not set up yet can be
        # in use nowhere: no journal, marker or _SUCCESS to look up (three requests).
        state = None if self.flow._fresh_job_id and not resume else self.job_state()
        self._refuse_job_id_in_use(state, resume)
        new_job = state is None or not resume
        if new_job:
            self.flow.check_no_conflict("job setup")
        # An old _SUCCESS goes while the job is set up (one round trip less): it need only
        # be gone before the job's first commit, and both are done when this returns. A
        # failure of either fails the set-up (the delete's first: the set-up's, if any, is
        # its context); a retry of it (or abort_job()) tidies up.
        # (A pool of this call, not the job context's: one thread, once per job, ended here.)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            old_success = new_job and self.options.success_file
            deleting = (
                pool.submit(self.flow.delete_files, [self.options.success_path])
                if old_success
                else None
            )
            try:
                self.flow.prepare_job(resume=state == "active")
            finally:
                if deleting is not None:
                    deleting.result()
        self.flow._fresh_job_id = False  # set up: from now on its id is in use
        ACTIVE_JOBS.set_up(
            self.job_id,
            self.url,
            recover=self.options.recover_command(all_committed_tasks=True),
            rollback=self.options.rollback_command(),
        )
        log.info(
            "job %s: %s for %s (%s committer, conflict mode %s) in %.2fs",
            self.job_id,
            "resumed" if state == "active" else "set up",
            self.url,
            self.name,
            self.options.conflict_mode,
            elapsed(start),
        )

    def _refuse_job_id_in_use(self, state: str | None, resume: bool) -> None:
        """Job setup: a job id is used once (only an active job may be resumed)."""
        if state == "committing":
            raise JobAlreadyActiveError(
                f"job {self.job_id} at {self.url}: a commit of this job started and did not "
                f"finish: finish it with commit_job() ({self.options.recover_command()}) or "
                f"roll it back with abort_job() ({self.options.rollback_command()}); a new job "
                "needs a new id"
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

    def job_state(self) -> str | None:
        """``"committing"``, ``"active"``, ``"committed"`` or ``None`` (unknown here)."""
        keeper = self.flow.journal_keeper()
        journal = keeper.read() if keeper is not None else None
        if journal is not None:
            return "committed" if journal.phase == "committed" else "committing"
        if self.flow.job_active():
            return "active"
        if self.flow.success_names_this_job():
            return "committed"
        return None

    # -- job commit ------------------------------------------------------------------------------

    @refreshes_listings  # readers in this process then list what the commit left
    def commit_job(
        self, messages: Messages | None = None, *, all_committed_tasks: bool = False
    ) -> JobSummary:
        """Commit the job: every file of the committed tasks appears at its final name.

        Publishes exactly the task attempts ``messages`` name, without listing; without
        ``messages`` it lists the committed tasks (the last committed attempt of each
        task wins). Every record is loaded and validated before anything is made
        visible; then the files are published ``threads`` at a time, ``_SUCCESS`` is
        written, the journal marked committed, and the job's temporary state deleted:
        before this returns, or with ``cleanup="background"`` after, on a thread of its
        own (:meth:`wait_cleanup` waits for it). Called again with the same job
        id, in any process, it finishes a commit that an earlier driver started.

        **Who may list.** Only the job's driver knows whether every task it needs has
        committed. So without messages it lists only in the process where
        :meth:`setup_job` ran for this job id and destination (until the job is
        committed or aborted there). In any other process, a commit that had begun (its
        journal exists) is finished with exactly the journal's records; with no journal
        the call is refused (:class:`~magicfs.errors.JobCommitError`, ``recoverable``,
        nothing changed) unless ``messages`` or ``all_committed_tasks=True`` say what to
        publish (:mod:`magicfs.protocol.active_jobs`). A job with nothing left to
        publish still gets :class:`~magicfs.errors.NothingToCommitError`.

        Args:
            messages: the :meth:`commit_task` messages, one per task.
            all_committed_tasks: list the committed tasks and publish them as the whole
                job, in any process: the caller vouches that no task is missing. Where it
                decided what was published (not the set-up process, no journal),
                ``_SUCCESS`` records it (diagnostics ``magicfs.recovered``, ``.by``,
                ``.at``; the classic committers' zero-byte ``_SUCCESS`` cannot).

        Returns:
            A :class:`~magicfs.JobSummary`: files, bytes, tasks, seconds, and
            ``cleanup_incomplete`` if an inline clean-up left something or clean-up is
            off (the output is whole; a background clean-up reports through
            :meth:`wait_cleanup`).

        Raises:
            magicfs.errors.JobCommitError: a stage failed; the error names the stage and
                the file. What was made visible has been rolled back unless the error
                says ``recoverable`` (then ``commit_job()`` again finishes the job).
            magicfs.errors.NothingToCommitError: the job was already committed.
            ValueError: both ``messages`` and ``all_committed_tasks`` were given.
        """
        if messages is not None and all_committed_tasks:
            raise ValueError(
                f"job {self.job_id}: commit_job() takes messages or all_committed_tasks=True, "
                "not both: the messages already say exactly what to publish"
            )
        self.wait_cleanup()  # a clean-up of this job still running here finishes first
        with self._ending_job():
            return JobCommit(self.flow, messages, all_committed_tasks).run()

    @contextlib.contextmanager
    def _ending_job(self) -> Iterator[None]:
        """Forget this process's job (:mod:`.active_jobs`) and close its context once it
        has ended here: the commit, abort or clean-up returned, found no job, or failed
        and was rolled back. A failure that leaves the job to be finished
        (``recoverable``) keeps both."""
        try:
            yield
        except NothingToCommitError:
            self._ended()
            raise
        except JobCommitError as e:
            if not e.recoverable:
                self._ended()
            raise
        self._ended()

    def _ended(self) -> None:
        """The job ended here: no longer active, its context closed (its pools shut down,
        :mod:`magicfs.job_context`; after a background clean-up, when that ends)."""
        ACTIVE_JOBS.ended(self.job_id, self.url)
        self.flow.close_context()

    def wait_cleanup(self, timeout: float | None = None) -> str | None:
        """Wait for the clean-up of this job still running in the background, if any.

        With ``cleanup="background"``, ``commit_job()`` returns once the job is
        committed and cleans up on a thread of its own
        (:mod:`magicfs.protocol.cleanup`). Returns what the clean-up left, with the
        command that finishes it (``None``: nothing left, or no clean-up ran here).

        Raises:
            TimeoutError: it is still running after ``timeout`` seconds.
        """
        run = self.flow._cleanup_run
        if run is None:
            return None
        return run.wait(timeout)

    # -- abort and clean-up ---------------------------------------------------------------------

    @refreshes_listings  # readers in this process then list what the abort left
    def abort_job(self, *, force: bool = False) -> None:
        """Abort the job: nothing of it stays visible, nothing parked. Idempotent.

        Rolls back a commit that a dead driver left half done, except in ``replace``
        mode after old data was deleted (see the module docstring; ``force=True``). A
        commit that had finished (``_SUCCESS`` written) is kept: only its clean-up is done.
        """
        with self._ending_job():
            self._abort_job(force)

    def _abort_job(self, force: bool) -> None:
        start = time.monotonic()
        TASK_FILES.settle(self.job_id)  # this process's files still closing: let them finish
        self.wait_cleanup()
        self.flow.end_job()
        keeper = self.flow.journal_keeper()
        journal = keeper.read() if keeper is not None else None
        undone = 0
        if journal is not None and (
            journal.phase == "committed" or self.flow.success_names_this_job()
        ):
            # The commit had finished: a driver killed in its clean-up (journal marked
            # committed), or between saving _SUCCESS and marking the journal. Rolling back
            # would delete complete output and leave a _SUCCESS naming it; refusing would
            # leave the job's tree. So, as after any commit: keep the output, clean up.
            log.warning(
                "job %s has already committed to %s: nothing to roll back; finishing its clean-up",
                self.job_id,
                self.url,
            )
            self.flow.clean_up(None, None)
            self.flow.release_claim()
            return
        if journal is not None:
            undone = Recovery(self.flow, keeper).roll_back(journal, force)
        self.flow.clean_up(None, None)
        self.flow.release_claim()  # a fail-mode job's, once nothing of it is visible
        log.info(
            "job %s: aborted in %.2fs%s",
            self.job_id,
            elapsed(start),
            f" ({undone} files of its interrupted commit deleted)" if undone else "",
        )

    @refreshes_listings  # readers in this process then list what the clean-up left
    def cleanup_job(self) -> None:
        """Delete the job's tree, aborting anything it left. Idempotent.

        Refused while a commit of the job is unfinished: that needs ``commit_job()`` or
        ``abort_job()``, or the half-published output would lose its only record.
        """
        self.wait_cleanup()
        keeper = self.flow.journal_keeper()
        journal = keeper.read() if keeper is not None else None
        if journal is not None and journal.phase != "committed":
            raise JobCommitError(
                f"job {self.job_id}: a commit of this job started and did not finish; finish "
                f"it with commit_job() ({self.options.recover_command()}) or roll it back with "
                f"abort_job() ({self.options.rollback_command()})",
                job_id=self.job_id,
                stage="cleanup",
                recoverable=True,
            )
        with self._ending_job():
            self.flow.end_job()
            self.flow.clean_up(None, None)
            self.flow.release_claim()  # a committed job killed before it released its claim
