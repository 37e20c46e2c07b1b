"""The task side of the protocol: one attempt is set up, writes, and commits or aborts.

:class:`TaskLifecycle` is a collaborator of the committer (its ``setup_task``,
``commit_task``, ``abort_task`` and ``attempt`` delegate here): it runs the steps every
committer shares — this process's files settled, the refusals, the per-commit
:class:`~.hooks.TaskCommit` opened and closed — and calls the committer's task hooks
(:class:`~.hooks.CommitterHooks`) for what differs. The checks the committers' task hooks
share are functions here too (is the job active, why an attempt cannot commit, the
message a committed attempt returns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import Protocol

from ..errors import CommitFailedError, JobNotActiveError
from ..layouts.magic import task_attempt_id as layout_attempt_id
from ..layouts.magic import task_id as layout_task_id
from ..task_files import TASK_FILES
from .attempts import CARRIED_RECORD_MAX, AttemptRun, TaskAttempt, TaskCommitMessage
from .hooks import CommitterHooks, TaskCommit
from .options import elapsed

log = logging.getLogger("magicfs.committer")


class TaskJob(Protocol):
    """What the task side's shared checks read of a job: whose it is, where, and whether
    it is still active (any committer's hooks answer it)."""

    @property
    def name(self) -> str:
        """The committer's name, for messages."""

    @property
    def job_id(self) -> str: ...

    @property
    def url(self) -> str:
        """The destination's URL, for messages."""

    def job_active(self) -> bool:
        """Whether the job has been set up and has not ended."""


class TaskLifecycle:
    """``task_attempt`` / ``setup_task`` / ``commit_task`` / ``abort_task`` / ``attempt``
    of one committer, through its flow (``hooks``), which holds no task state: a
    lifecycle is made per call."""

    def __init__(self, hooks: CommitterHooks):
        self.hooks = hooks
        self.job_id = hooks.job_id

    def task_attempt(self, task_id: int, attempt: int = 0) -> TaskAttempt:
        if task_id < 0 or attempt < 0:
            raise ValueError(f"task and attempt numbers must be >= 0, not {task_id}/{attempt}")
        attempt_id = layout_attempt_id(self.job_id, task_id, attempt)
        return TaskAttempt(
            job_id=self.job_id,
            task_index=task_id,
            attempt_number=attempt,
            task_id=layout_task_id(self.job_id, task_id),
            attempt_id=attempt_id,
            work_path=self.hooks.work_path_for(attempt_id),
            work_url=self.hooks.work_url_for(attempt_id),
        )

    def setup_task(self, task: TaskAttempt) -> None:
        self._check_task(task)
        TASK_FILES.reopen_attempt(self.job_id, task.attempt_id)
        self.hooks.prepare_task(task)

    def commit_task(self, task: TaskAttempt) -> TaskCommitMessage:
        self._check_task(task)
        commit = TaskCommit(task)
        try:
            self.hooks.begin_task_commit(commit)
            with TASK_FILES.committing(self.job_id, task.attempt_id):
                return self._commit(commit)
        finally:
            commit.close()

    def _commit(self, commit: TaskCommit) -> TaskCommitMessage:
        task = commit.task
        failed = TASK_FILES.settle(self.job_id, task.attempt_id)  # closes in the background
        if failed:
            self.abort_task(task)
            path, error = failed[0]
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(failed)} files could not be saved, e.g. "
                f"{self.hooks.store_fs.unstrip_protocol(path)}: {type(error).__name__}: {error} "
                "(the attempt has been aborted)"
            ) from error
        still_open = TASK_FILES.open_files(self.job_id, task.attempt_id)
        if still_open:
            self.abort_task(task)
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(still_open)} files are still open, e.g. "
                f"{self.hooks.store_fs.unstrip_protocol(still_open[0])}: close every file before "
                "committing the task (the attempt has been aborted)"
            )
        files = TASK_FILES.of_attempt(self.job_id, task.attempt_id)
        message = self.hooks.commit_task_files(commit, files)
        TASK_FILES.finish_attempt(self.job_id, task.attempt_id, "committed")
        return message

    def abort_task(self, task: TaskAttempt) -> None:
        self._check_task(task)
        TASK_FILES.settle(self.job_id, task.attempt_id)  # what is closing has closed (or failed)
        files = TASK_FILES.finish_attempt(self.job_id, task.attempt_id, "aborted")
        for entry in files:
            if entry.writer is not None:
                entry.writer.supersede("its task attempt was aborted")
        self.hooks.abort_task_files(task, files)

    @contextlib.contextmanager
    def attempt(self, task_id: int, attempt: int, context: str) -> Iterator[AttemptRun]:
        task = self.task_attempt(task_id, attempt)
        self.setup_task(task)
        run = AttemptRun(task, self.hooks.fs)
        try:
            yield run
            message = self.commit_task(task)
        except BaseException as failure:
            self._abort_task_quietly(task, failure)
            failure.add_note(
                f"{context}: task attempt {task.attempt_id} writing to {self.hooks.url} failed; "
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

    def _check_task(self, task: TaskAttempt) -> None:
        if task.job_id != self.job_id:
            raise ValueError(f"task attempt {task.attempt_id} belongs to job {task.job_id}")


def require_active_job(hooks: TaskJob, task: TaskAttempt) -> None:
    """Refuse to start an attempt of a job that was never set up or has ended."""
    if not hooks.job_active():
        raise JobNotActiveError(
            f"job {hooks.job_id} at {hooks.url} is not active (never set up, or already "
            f"committed or aborted): task attempt {task.attempt_id} cannot start"
        )


def not_started_error(hooks: TaskJob, task: TaskAttempt, hint: str = "") -> Exception:
    """Why an attempt cannot commit (no ``.started`` marker, or no proof it was set up):
    job ended, or never set up, or aborted (or, staging committers, already committed:
    its files are gone).
    ``hint``: what else the caller should know (appended)."""
    if not hooks.job_active():
        return JobNotActiveError(
            f"job {hooks.job_id} is not active: task attempt {task.attempt_id} cannot commit"
        )
    if TASK_FILES.finished(hooks.job_id, task.attempt_id) == "committed":
        return FileNotFoundError(
            f"task attempt {task.attempt_id} of job {hooks.job_id} has already committed: "
            "it cannot commit again"
        )
    return FileNotFoundError(
        f"task attempt {task.attempt_id} of job {hooks.job_id} was never set up, or was "
        f"aborted: it cannot commit{hint}"
    )


def task_committed(
    hooks: TaskJob,
    task: TaskAttempt,
    record: str,
    files: int,
    size: int,
    start: float,
    verb: str,
    record_json: bytes | None = None,
) -> TaskCommitMessage:
    """Log a committed task (``verb``: what its commit did) and build its message
    (carrying ``record_json``, the record's bytes, where they are small enough)."""
    log.info(
        "task %s: %s %d files (%d bytes) in %.2fs (%s committer)",
        task.attempt_id,
        verb,
        files,
        size,
        elapsed(start),
        hooks.name,
    )
    return TaskCommitMessage(
        committer=hooks.name,
        job_id=hooks.job_id,
        task_id=task.task_id,
        attempt_id=task.attempt_id,
        record=record,
        files=files,
        bytes=size,
        record_json=(
            record_json.decode("utf-8")
            if record_json is not None and len(record_json) <= CARRIED_RECORD_MAX
            else None
        ),
    )
