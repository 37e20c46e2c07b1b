"""``write_job`` / ``job.task``: the committer protocol as two ``with`` blocks.

::

    with magicfs.write_job("s3://bkt/out", storage_options=opts) as job:
        with job.task(0) as task:
            df.to_parquet(task.path("part-00000.parquet"), filesystem=job.fs)

Leaving ``job.task`` normally commits the task attempt; an exception aborts it and
propagates. Leaving ``write_job`` normally commits exactly the tasks committed inside
it (by their messages, no listing); an exception aborts the whole job. After the block,
``job.summary`` holds the :class:`~magicfs.committers.JobSummary`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import fsspec

from ..committers import JobSummary, OutputCommitter, TaskAttempt, TaskCommitMessage, committer_for


class JobWriter:
    """One job, as a context manager: made by :func:`write_job`.

    Entering sets the job up; leaving commits it from the tasks committed inside it
    (by their messages, no listing), or aborts it on an exception. ``committer`` is the
    :class:`~magicfs.OutputCommitter` underneath; ``summary`` is ``None`` until the job
    has committed.
    """

    def __init__(self, committer: OutputCommitter):
        self.committer = committer
        self.messages: list[TaskCommitMessage] = []
        self.summary: JobSummary | None = None
        self._lock = threading.Lock()

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem to write task output with."""
        return self.committer.fs

    @property
    def job_id(self) -> str:
        """The job's id (recorded in ``_SUCCESS``)."""
        return self.committer.job_id

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options that go with ``task.url(...)`` URLs (see ``committer.storage_options``)."""
        return self.committer.storage_options

    @contextmanager
    def task(self, task_id: int, attempt: int = 0) -> Iterator[TaskAttempt]:
        """One task attempt, as a ``with`` block that yields a :class:`~magicfs.TaskAttempt`.

        Leaving the block normally commits the attempt; an exception aborts it (its
        files are discarded) and propagates. Committing the same ``task_id`` again
        replaces the earlier attempt's message: the job commits the last one.

        Args:
            task_id: the task's number, ``>= 0``; one per piece of the output.
            attempt: the attempt's number, for retries of the same task.

        Raises:
            magicfs.errors.CommitFailedError: a file of the attempt is still open, or
                could not be saved (the attempt has been aborted).
        """
        with self.committer.attempt(task_id, attempt, context="magicfs.write_job") as run:
            yield run.task
        message = run.message
        assert message is not None
        with self._lock:
            self.messages = [m for m in self.messages if m.task_id != message.task_id]
            self.messages.append(message)

    def __enter__(self) -> JobWriter:
        self.committer.setup_job()
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is not None:
            self.committer.abort_job()
            return
        self.summary = self.committer.commit_job(self.messages)


def write_job(
    dest: str,
    *,
    committer: str | None = None,
    job_id: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> JobWriter:
    """A job writing many files to ``dest`` that all appear when it commits.

    Use it as a ``with`` block and run each task inside ``job.task(task_id)``. Files a
    task writes under ``task.path(...)`` with ``job.fs`` (or at ``task.url(...)`` with
    ``job.storage_options``) stay invisible until the job block ends normally; then the
    job commits exactly the tasks committed inside it and every file appears at its
    final name. An exception in a task block aborts that task attempt; an exception in
    the job block aborts the whole job, leaving nothing visible and no upload parked.

    Args:
        dest: where the output goes, any fsspec URL: ``s3://bucket/out`` (magic
            committer), ``abfs://container/out`` (block-list), ``gs://``, ``file://``,
            ``memory://`` (manifest).
        committer: a committer by name instead of the store's default: ``magic``,
            ``block-list``, ``manifest``, ``directory``, ``partitioned``, ``file-v1``,
            ``file-v2``.
        job_id: the job's id (letters, digits, ``.``, ``-``); a fresh UUID by default.
        storage_options: the store's fsspec options, as given to pandas
            (``{"profile": "prod"}``, ``{"client_kwargs": {"endpoint_url": ...}}``).
        **options: committer options, see :func:`magicfs.committer_for` (``threads``,
            ``conflict_mode``, ``success_file``, ``fs``, ...).

    Returns:
        A :class:`JobWriter`: ``job.fs`` to write with, ``job.task(...)`` for each task,
        and after the block ``job.summary`` (a :class:`~magicfs.JobSummary`).

    Raises:
        ValueError: an unknown committer or option value (before anything is written).
        magicfs.errors.JobAlreadyActiveError: ``job_id`` is active, mid-commit or
            already committed at ``dest``.
        magicfs.errors.CommitConflictError: ``conflict_mode="fail"`` and ``dest``
            already holds visible data.
        magicfs.errors.JobCommitError: job commit failed; the error names the stage and
            the file, and says whether the job was rolled back.

    Example:
        >>> import magicfs
        >>> with magicfs.write_job("memory://docs/write-job") as job:
        ...     for task_id in range(2):
        ...         with job.task(task_id) as task:
        ...             with job.fs.open(task.path(f"part-{task_id}.csv"), "w") as f:
        ...                 _ = f.write("a,b")
        >>> job.summary.files, job.summary.committer
        (2, 'manifest')
    """
    return JobWriter(
        committer_for(
            dest,
            committer=committer,
            job_id=job_id,
            storage_options=storage_options,
            **options,
        )
    )
