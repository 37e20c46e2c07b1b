"""Committed writes from Ray Data: a ``Datasink`` whose write tasks are task attempts.

::

    import magicfs.ray

    sink = magicfs.ray.CommittedDatasink("s3://bkt/sales", storage_options=opts)
    ds.write_datasink(sink)
    print(sink.summary.files)

Why: Ray's own writers (``ds.write_parquet``...) put each task's file straight at its
final name. A job that fails leaves the files of the tasks that finished, and
``mode="overwrite"`` deletes the old data before anything is written, so a failing
overwrite loses it. Here nothing is visible until every task has written, and a
failed job leaves the destination as it was.

How Ray drives it (Ray Data's ``Datasink`` protocol, on Ray 2.41 or later):

* ``on_write_start`` (driver, before the first write task): set up the job. The
  committer itself is built in ``__init__`` (no I/O), so every copy of the sink that
  Ray ships to the workers carries the same job.
* ``write(blocks, ctx)`` (a Ray task): one task attempt per call, numbered at random
  (48 bits: a retried Ray task keeps its ``ctx.task_idx``, so the index alone would
  reuse the failed execution's attempt). It writes its blocks with pyarrow through
  ``committer.fs`` — one file, or one per Hive directory with ``partition_cols`` —
  commits the attempt and returns the commit message.
* ``on_write_complete(write_result)`` (driver): Ray hands over exactly one return
  value per write task (``write_result.write_returns``): the job commits exactly
  those attempts, without listing. A task that was retried after its worker died —
  even one that had already committed — is published once: the attempts Ray did not
  report are swept (uploads aborted, files deleted).
* ``on_write_failed(error)`` (driver): abort the job; the destination is untouched.

Ray before 2.41 does not pass write results to ``on_write_complete`` (2.38-2.40 drop
them), so a job cannot name its committed attempts; ``on_write_complete`` refuses to
commit there. Needs the ``ray`` extra (``pip install 'magicfs[ray]'``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

try:
    from ray.data import Datasink
    from ray.data.block import BlockAccessor
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"magicfs.ray needs Ray Data ({missing}): pip install 'magicfs[ray]'"
    ) from missing

from ..committers import JobSummary, OutputCommitter, TaskCommitMessage
from ..errors import CommitFailedError
from .engines import (
    PartNames,
    abort_job_quietly,
    check_columns,
    job_committer,
    new_attempt_number,
    write_tables,
)

__all__ = ["FORMATS", "CommittedDatasink"]

log = logging.getLogger("magicfs.ray")

FORMATS = ("parquet", "csv", "json")
MINIMUM_RAY = "2.41"
JOB_ID_SOURCE = "magicfs.ray"


class CommittedDatasink(Datasink[TaskCommitMessage]):
    """Write a Ray Dataset to ``dest`` as one committed job: ``ds.write_datasink(sink)``.

    Args:
        dest: any fsspec URL (a deferred store uses its own committer: ``magic`` on
            S3, ``block-list`` on Azure Blob; everything else the manifest committer; a
            local path needs every Ray node to see the same disk).
        format: ``parquet``, ``csv`` or ``json`` (JSON lines).
        storage_options: options of the store's fsspec filesystem.
        committer: a committer name for :func:`magicfs.committer_for`, or an
            ``OutputCommitter`` you built (its job not set up yet).
        conflict_mode: ``append`` (add files), ``fail`` (refuse a destination holding
            data), ``replace`` (delete the old data at job commit, only if every task
            succeeded).
        partition_cols: columns to partition by, Hive-style (``col=value/``); they live
            in the directory names only.
        committer_options: other :func:`magicfs.committer_for` options.

    One sink writes one job: after the write, ``sink.summary`` holds the
    :class:`~magicfs.committers.JobSummary`; create a new sink for the next write.
    File names are ``part-<write task>-<job id>.<format>`` (``-<n>`` before the
    extension when partitioned).
    """

    def __init__(
        self,
        dest: str,
        *,
        format: str = "parquet",
        storage_options: dict[str, Any] | None = None,
        committer: str | OutputCommitter | None = None,
        conflict_mode: str = "append",
        partition_cols: Sequence[str] | None = None,
        committer_options: dict[str, Any] | None = None,
    ):
        fmt = (format or "").lower()
        if fmt not in FORMATS:
            raise ValueError(
                f"magicfs.ray: unsupported format {format!r}: use one of {', '.join(FORMATS)}"
            )
        if isinstance(partition_cols, str):
            partition_cols = [partition_cols]
        self._committer = job_committer(
            JOB_ID_SOURCE, dest, committer, storage_options, conflict_mode, committer_options
        )
        self._format = fmt
        self._partition_cols = tuple(partition_cols or ())
        self._names = PartNames(self._committer.job_id, f".{fmt}")
        self._state = "new"
        self.summary: JobSummary | None = None

    @property
    def committer(self) -> OutputCommitter:
        """The job's committer (``committer.job_id``, ``committer.url``...)."""
        return self._committer

    def get_name(self) -> str:
        return "MagicfsCommitted"

    # -- driver side ----------------------------------------------------------------------------

    def on_write_start(self, schema: Any = None) -> None:
        """Set up the job (once; Ray may call this before or as the first block arrives)."""
        if self._state == "started":
            return
        if self._state != "new":
            raise RuntimeError(
                f"magicfs.ray: this CommittedDatasink already wrote job {self._committer.job_id} "
                f"({self._state}); create a new sink for each write_datasink() call"
            )
        if schema is not None and self._partition_cols:
            check_columns("partition_cols", self._partition_cols, schema.names)
        self._committer.setup_job()
        self._state = "started"

    def on_write_complete(self, write_result: Any) -> None:
        """Commit exactly the attempts whose messages Ray returned, one per write task."""
        try:
            self.summary = self._committer.commit_job(_messages(write_result))
        except BaseException as failure:
            self._fail(failure)
            raise
        self._state = "committed"

    def on_write_failed(self, error: Exception) -> None:
        """Abort the job: nothing of it becomes visible, its uploads are aborted."""
        if self._state in ("committed", "aborted"):
            return
        self._fail(error)

    def _fail(self, failure: BaseException) -> None:
        abort_job_quietly(self._committer, failure)
        self._state = "aborted"
        log.warning(
            "job %s writing to %s aborted: %s: %s",
            self._committer.job_id,
            self._committer.url,
            type(failure).__name__,
            failure,
        )

    # -- workers --------------------------------------------------------------------------------

    def write(self, blocks: Iterable[Any], ctx: Any) -> TaskCommitMessage:
        """One write task: a task attempt of its own, committed; returns its message."""
        committer = self._committer
        index = int(ctx.task_idx)
        with committer.attempt(
            index, new_attempt_number(), context=f"magicfs.ray: write task {index}"
        ) as run:
            run.rows, _ = write_tables(
                committer.fs,
                run.task,
                _arrow_tables(blocks, self._partition_cols),
                self._format,
                self._partition_cols,
                self._names,
                index,
            )
        assert run.message is not None
        return run.message


def _arrow_tables(blocks: Iterable[Any], partition_cols: Sequence[str]) -> Iterator[Any]:
    for block in blocks:
        table = BlockAccessor.for_block(block).to_arrow()
        if partition_cols:
            check_columns("partition_cols", partition_cols, table.column_names)
        yield table


def _messages(write_result: Any) -> list[TaskCommitMessage]:
    """The write tasks' commit messages from Ray's ``WriteResult``."""
    returns = getattr(write_result, "write_returns", None)
    if returns is None:
        raise CommitFailedError(
            "magicfs.ray: Ray did not pass the write tasks' results to on_write_complete "
            f"(got {type(write_result).__name__}); Ray {MINIMUM_RAY} or later is needed to "
            "know which task attempts to commit. The job is aborted"
        )
    returns = list(returns)
    for position, message in enumerate(returns):
        if message is not None and not isinstance(message, TaskCommitMessage):
            raise CommitFailedError(
                f"magicfs.ray: write task result {position} is a {type(message).__name__}, not a "
                "TaskCommitMessage: was write() overridden without returning its message?"
            )
    return returns
