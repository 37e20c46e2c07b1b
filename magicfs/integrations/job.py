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
    """One job; use as a context manager (see the module docstring)."""

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
        return self.committer.job_id

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options that go with ``task.url(...)`` URLs (see ``committer.storage_options``)."""
        return self.committer.storage_options

    @contextmanager
    def task(self, task_id: int, attempt: int = 0) -> Iterator[TaskAttempt]:
        """Set up a task attempt; commit it on success, abort it on an exception."""
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
    """A job writing to ``dest``; see :func:`magicfs.committer_for` for the options."""
    return JobWriter(
        committer_for(
            dest,
            committer=committer,
            job_id=job_id,
            storage_options=storage_options,
            **options,
        )
    )
