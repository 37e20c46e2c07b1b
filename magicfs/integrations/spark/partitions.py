"""Committed writes from your own per-partition code: ``write_partitions`` and ``partition_task``.

**``write_partitions(rdd, write_fn, dest, **options)``** runs ``write_fn(task, rows)`` on
every partition through ``rdd.mapPartitions(...).collect()``. Spark's scheduler keeps
exactly one successful result per partition, so the driver commits exactly one task
attempt per partition — the one Spark chose — from its message, without listing; failed
attempts and speculative losers are swept by the job. This is the recommended way.

**``partition_task(committer)``** is for existing ``rdd.foreachPartition(fn)`` code that
cannot change shape: inside ``fn``, ``with partition_task(committer) as task:`` sets up,
commits or aborts the partition's attempt. ``foreachPartition`` returns nothing to the
driver, so ``committer.commit_job()`` then *lists* the committed tasks: the last
attempt of a task to commit wins, which with speculation may not be the attempt Spark
kept (both are complete outputs of the task; the others are swept).

Attempts are named by ``TaskContext.taskAttemptId()``: unique in the application,
unlike ``attemptNumber()``, which repeats across stage retries (SPARK-24552).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyspark import TaskContext

from ...committers import JobSummary, OutputCommitter, committer_for
from ..engines import PartitionTask, rows_written
from .python import use_driver_python


def spark_task(caller: str) -> TaskContext:
    """The running Spark task's context; a clear error outside one."""
    context = TaskContext.get()
    if context is None:
        raise RuntimeError(f"{caller} must run inside a Spark task (on an executor)")
    return context


@contextmanager
def partition_task(committer: OutputCommitter) -> Iterator[PartitionTask]:
    """Set up this Spark task's attempt; commit it on success, abort it on an exception."""
    context = spark_task("partition_task()")
    with committer.attempt(
        context.partitionId(),
        context.taskAttemptId(),
        context=f"magicfs.spark: partition {context.partitionId()}",
    ) as run:
        yield PartitionTask(run.task, committer.fs, context.partitionId())


def write_partitions(
    rdd: Any,
    write_fn: Callable[[PartitionTask, Iterator[Any]], int | None],
    dest: str,
    **options: Any,
) -> JobSummary:
    """Run ``write_fn(task, rows)`` on every partition of ``rdd`` as one committed job.

    ``write_fn`` writes any files under ``task.path(...)`` with ``task.fs`` and may
    return the number of rows it wrote (reported in ``_SUCCESS``). ``options`` are
    those of :func:`magicfs.committer_for`. Returns the job summary; on any failure the
    job is aborted (nothing visible, nothing parked) and the error raised.
    """
    use_driver_python(rdd.context)  # a local master's workers run this interpreter
    committer = committer_for(dest, **options)
    committer.setup_job()

    def run(rows: Iterator[Any]) -> Iterator[Any]:
        context = spark_task("write_partitions()")
        with committer.attempt(
            context.partitionId(),
            context.taskAttemptId(),
            context=f"magicfs.spark: partition {context.partitionId()}",
        ) as run:
            count = write_fn(PartitionTask(run.task, committer.fs, context.partitionId()), rows)
            run.rows = rows_written(count)
        yield run.message

    try:
        messages = rdd.mapPartitions(run).collect()
        return committer.commit_job(messages)
    except BaseException:
        committer.abort_job()
        raise
