"""Committed writes from Dask DataFrames: each partition a task attempt, one job commit.

::

    import magicfs.dask

    summary = magicfs.dask.to_parquet(ddf, "s3://bkt/sales", storage_options=opts)
    summary = magicfs.dask.to_csv(ddf, "file:///data/sales", index=False)
    summary = magicfs.dask.write_partitions(ddf, write_fn, "gs://bkt/out")  # your own writer

Why: Dask re-runs a partition when the worker holding it dies, before or after the
partition was written (dask/dask#6445: 101 files for 100 partitions), and a failed
``ddf.to_parquet`` leaves every partition written so far in the destination. Here
nothing is visible until every partition is written, and then exactly one execution
of each partition appears.

How a job runs:

1. On the client: the committer is built (``magicfs.committer_for``: ``magic`` on S3,
   ``manifest`` elsewhere) and the job set up.
2. One graph task per partition (``ddf.to_delayed()``), on any scheduler: the
   execution becomes a task attempt numbered at random (48 bits; see
   :mod:`magicfs.integrations.engines` for why not a counter), writes the partition with
   pandas/pyarrow through ``committer.fs`` under ``task.path(...)``, commits the
   attempt and returns its commit message. A failing write aborts its attempt.
3. On the client: Dask delivers exactly one result per partition — the execution it
   kept — and the job commits exactly those attempts, without listing. Every other
   execution of a partition (killed mid-write, or complete but superseded after its
   worker died) is swept by the job: its uploads aborted, its files never visible.
4. On any failure the client waits until none of the job's tasks is still running,
   aborts the job (nothing visible, no upload left) and re-raises the error.

Works with the synchronous, threaded and process schedulers and with
``dask.distributed``; committers, task attempts and messages pickle. Needs the
``dask`` extra (``pip install 'magicfs[dask]'``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    import dask
    import dask.base
    import dask.multiprocessing
    import dask.system
    import dask.threaded
    from dask.delayed import delayed
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"magicfs.dask needs Dask ({missing}): pip install 'magicfs[dask]'"
    ) from missing

import fsspec

from ..committers import JobSummary, OutputCommitter, TaskCommitMessage, committer_for
from .engines import (
    COMPRESSION_SUFFIXES,
    PartitionTask,
    PartNames,
    abort_job_quietly,
    check_columns,
    job_committer,
    new_attempt_number,
    padding_for,
    rows_written,
)

__all__ = [
    "PartitionTask",
    "to_csv",
    "to_parquet",
    "write_partition",
    "write_partitions",
]

log = logging.getLogger("magicfs.dask")

JOB_ID_SOURCE = "magicfs.dask"


WriteFn = Callable[[PartitionTask, Any], "int | None"]


def write_partition(
    committer: OutputCommitter, write_fn: WriteFn, frame: Any, partition_id: int
) -> TaskCommitMessage:
    """Run one execution of one partition as a task attempt; return its commit message.

    The building block of every function here, for your own graphs: call it inside a
    task (``ddf.map_partitions``, ``dask.delayed``, ``client.submit``...) with a
    committer whose job is set up, bring the messages to the client — exactly one per
    partition — and call ``committer.commit_job(messages)`` (``committer.abort_job()``
    on failure). ``write_fn(task, frame)`` may return the rows it wrote (reported in
    ``_SUCCESS``). Each call is a new attempt with a random number, so Dask re-running
    the task never collides with an earlier execution. An exception aborts the
    attempt and propagates with a note naming the partition.
    """
    with committer.attempt(
        partition_id, new_attempt_number(), context=f"magicfs.dask: partition {partition_id}"
    ) as run:
        rows = write_fn(PartitionTask(run.task, committer.fs, partition_id), frame)
        run.rows = rows_written(rows)
    assert run.message is not None
    return run.message


# -- writers -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _ParquetWriter:
    """Writes one partition as Parquet (picklable: it travels to the workers)."""

    names: PartNames
    partition_on: tuple[str, ...]
    index: bool | None
    options: Mapping[str, Any]

    def __call__(self, task: PartitionTask, frame: Any) -> int:
        if self.partition_on:
            import pyarrow as pa
            import pyarrow.parquet as pq

            if not len(frame):
                return 0
            table = pa.Table.from_pandas(frame, preserve_index=self.index)
            pq.write_to_dataset(
                table,
                task.work_path,
                partition_cols=list(self.partition_on),
                filesystem=task.fs,
                basename_template=self.names.template(task.partition_id),
                existing_data_behavior="overwrite_or_ignore",
                **self.options,
            )
        else:
            with task.fs.open(task.path(self.names(task.partition_id)), "wb") as handle:
                frame.to_parquet(handle, engine="pyarrow", index=self.index, **self.options)
        return len(frame)


@dataclasses.dataclass(frozen=True)
class _CsvWriter:
    """Writes one partition as CSV with pandas (picklable).

    pandas writes into an open file here, where it cannot see the file's name: without
    ``compression=`` the file is opened with fsspec's ``compression="infer"``, so a
    ``name_function`` returning ``part-0.csv.gz`` gets a gzip file, as pandas would
    write given that name as a URL. (Through ``fsspec.core.OpenFile``, which closes the
    compressor *and* the file under it; ``fs.open(..., compression=)`` leaves the file
    under a compressor open.)
    """

    names: PartNames
    options: Mapping[str, Any]

    def __call__(self, task: PartitionTask, frame: Any) -> int:
        options = dict(self.options)
        infer = options.get("compression", "infer") == "infer"
        if infer:
            options.pop("compression", None)
        path = task.path(self.names(task.partition_id))
        opened = fsspec.core.OpenFile(task.fs, path, "wb", compression="infer" if infer else None)
        with opened as handle:
            frame.to_csv(handle, mode="wb", **options)
        return len(frame)


# -- the public functions ------------------------------------------------------------------------

_PARQUET_REFUSED = {
    "append": "use conflict_mode='append' (the default): files are added, named by the job",
    "overwrite": "use conflict_mode='replace': old data is deleted only when the job commits",
    "compute": "the job always runs and commits before to_parquet returns",
    "write_metadata_file": "no _metadata summary is written; readers list the files",
    "filesystem": "files are written through the committer's filesystem (storage_options=)",
    "path": "pass the destination as the second argument",
    "ignore_divisions": "divisions are not recorded",
}
_CSV_REFUSED = {
    "single_file": "each partition is its own file (one task attempt per partition)",
    "mode": "files are created, never appended to: use conflict_mode=",
    "compute": "the job always runs and commits before to_csv returns",
    "filename": "pass the destination as the second argument",
    "path_or_buf": "pass the destination as the second argument",
}


def _refuse(function: str, kwargs: Mapping[str, Any], refused: Mapping[str, str]) -> None:
    for name, why in refused.items():
        if name in kwargs:
            raise TypeError(f"magicfs.dask.{function}() does not take {name}=: {why}")


def to_parquet(
    ddf: Any,
    dest: str,
    *,
    storage_options: dict[str, Any] | None = None,
    committer: str | OutputCommitter | None = None,
    conflict_mode: str = "append",
    partition_on: str | Sequence[str] | None = None,
    write_index: bool | None = None,
    name_function: Callable[[int], str] | None = None,
    compute_kwargs: Mapping[str, Any] | None = None,
    committer_options: Mapping[str, Any] | None = None,
    **to_parquet_kwargs: Any,
) -> JobSummary:
    """Write ``ddf`` to ``dest`` as Parquet, one file per partition, as one committed job.

    Args:
        ddf: a Dask DataFrame.
        dest: any fsspec URL (``s3://``, ``gs://``, ``abfs://``, ``file://``, a path).
        storage_options: options of the store's fsspec filesystem (``endpoint_url``...).
        committer: a committer name for :func:`magicfs.committer_for` (``magic`` on S3
            and ``manifest`` elsewhere by default), or an ``OutputCommitter`` you built
            (its job not yet set up; then leave ``storage_options`` and
            ``committer_options`` out).
        conflict_mode: ``append`` (add files), ``fail`` (refuse a destination holding
            data), ``replace`` (delete the old data at job commit — only if every
            partition was written).
        partition_on: columns to partition by, Hive-style (``col=value/``), written by
            pyarrow; the columns then live in the directory names only, and read back
            as categoricals.
        write_index: pandas' ``index=``: ``None`` stores a RangeIndex as metadata and
            other indexes as columns.
        name_function: ``index -> relative file name``; default
            ``part-<index>-<job id>.parquet``, zero-padded so names sort in partition
            order.
        compute_kwargs: passed to the scheduler (``scheduler=``, ``retries=``...).
        committer_options: other :func:`magicfs.committer_for` options (``threads``,
            ``job_id``, ``in_memory``...).
        to_parquet_kwargs: passed to ``pandas.DataFrame.to_parquet`` / pyarrow
            (``compression=``, ``row_group_size=``, ``schema=`` a pyarrow schema...).

    Returns the :class:`~magicfs.committers.JobSummary`. On any failure the job is
    aborted (nothing visible, no upload left behind) and the error re-raised.
    """
    _refuse("to_parquet", to_parquet_kwargs, _PARQUET_REFUSED)
    engine = to_parquet_kwargs.pop("engine", "pyarrow")
    if engine not in ("pyarrow", "auto"):
        raise ValueError(f"magicfs.dask.to_parquet() writes with pyarrow, not engine={engine!r}")
    if isinstance(to_parquet_kwargs.get("schema"), str):
        raise TypeError(
            "magicfs.dask.to_parquet(): schema= must be a pyarrow.Schema (each partition is "
            "converted by pyarrow.Table.from_pandas); dask's 'infer' is not supported"
        )
    columns = [partition_on] if isinstance(partition_on, str) else list(partition_on or [])
    check_columns("partition_on", columns, ddf.columns)
    job = job_committer(
        JOB_ID_SOURCE, dest, committer, storage_options, conflict_mode, committer_options
    )
    names = PartNames(job.job_id, ".parquet", padding_for(ddf.npartitions), name_function)
    writer = _ParquetWriter(names, tuple(columns), write_index, dict(to_parquet_kwargs))
    return _run_job(ddf, writer, job, compute_kwargs)


def to_csv(
    ddf: Any,
    dest: str,
    *,
    storage_options: dict[str, Any] | None = None,
    committer: str | OutputCommitter | None = None,
    conflict_mode: str = "append",
    name_function: Callable[[int], str] | None = None,
    compute_kwargs: Mapping[str, Any] | None = None,
    committer_options: Mapping[str, Any] | None = None,
    **to_csv_kwargs: Any,
) -> JobSummary:
    """Write ``ddf`` to ``dest`` as CSV, one file per partition, as one committed job.

    Arguments as for :func:`to_parquet`; ``to_csv_kwargs`` go to
    ``pandas.DataFrame.to_csv`` (``index=``, ``sep=``, ``compression="gzip"``...).
    The default names are ``part-<index>-<job id>.csv`` (plus ``.gz`` etc. for a named
    compression). Dask's ``single_file=`` is refused: one file cannot be committed
    from many task attempts.
    """
    _refuse("to_csv", to_csv_kwargs, _CSV_REFUSED)
    compression = to_csv_kwargs.get("compression")
    suffix = ".csv" + (
        COMPRESSION_SUFFIXES.get(compression, "") if isinstance(compression, str) else ""
    )
    job = job_committer(
        JOB_ID_SOURCE, dest, committer, storage_options, conflict_mode, committer_options
    )
    names = PartNames(job.job_id, suffix, padding_for(ddf.npartitions), name_function)
    return _run_job(ddf, _CsvWriter(names, dict(to_csv_kwargs)), job, compute_kwargs)


def write_partitions(
    ddf: Any,
    write_fn: WriteFn,
    dest: str,
    *,
    compute_kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> JobSummary:
    """Run ``write_fn(task, frame)`` on every partition of ``ddf`` as one committed job.

    ``write_fn`` gets a :class:`PartitionTask` and the partition (a pandas DataFrame),
    writes any files under ``task.path(...)`` with ``task.fs`` (pyarrow:
    ``filesystem=task.fs``; ``write_dataset(base_dir=task.work_path)``) and may
    return the rows it wrote (reported in ``_SUCCESS``). It runs on the workers, so it
    must pickle (a module-level function). ``options`` are those of
    :func:`magicfs.committer_for` (``storage_options``, ``committer``,
    ``conflict_mode``, ``threads``...); ``compute_kwargs`` go to the scheduler.
    Returns the job summary; on any failure the job is aborted and the error raised.
    """
    job = committer_for(dest, job_id_source=JOB_ID_SOURCE, **options)
    return _run_job(ddf, write_fn, job, compute_kwargs)


# -- the job ------------------------------------------------------------------------------------


def _run_job(
    ddf: Any,
    write_fn: WriteFn,
    committer: OutputCommitter,
    compute_kwargs: Mapping[str, Any] | None,
) -> JobSummary:
    """Set up the job, write every partition, commit exactly the attempts Dask kept."""
    parts = ddf.to_delayed(optimize_graph=True)
    # The committer and writer enter the graph once each, under names of their own: no
    # tokenizing (hashing) of their state, and a distributed worker fetches them once.
    name = f"magicfs-{committer.job_id}"
    committer_node = delayed(committer, name=f"{name}-committer", traverse=False)
    writer_node = delayed(write_fn, name=f"{name}-writer", traverse=False)
    write = delayed(write_partition, pure=False, traverse=False)
    writes = [
        write(committer_node, writer_node, part, index, dask_key_name=(f"{name}-write", index))
        for index, part in enumerate(parts)
    ]
    committer.setup_job()
    try:
        messages = _compute_all(writes, dict(compute_kwargs or {}))
        return committer.commit_job(messages)
    except BaseException as failure:
        if abort_job_quietly(committer, failure):
            failure.add_note(
                f"magicfs.dask: job {committer.job_id} writing {len(writes)} partitions to "
                f"{committer.url} was aborted: nothing of it is visible and no upload is "
                "left; fix the error above and run the job again"
            )
        raise


def _compute_all(writes: list[Any], compute_kwargs: dict[str, Any]) -> list[TaskCommitMessage]:
    """Compute every write; if any fails, wait until none is still running, then raise.

    Dask raises the first task error at once while other tasks of the graph keep
    running; aborting the job under them would leave their uploads to be found by
    their own writers' checks. So each scheduler's tasks are drained first: the
    distributed client waits for all futures, the threaded and process schedulers run
    on a pool of ours that is shut down (waiting for running tasks, dropping queued
    ones). Other schedulers (synchronous, a user's executor) compute as they are.
    """
    scheduler = dask.base.get_scheduler(
        scheduler=compute_kwargs.pop("scheduler", None), collections=writes
    )
    client = getattr(scheduler, "__self__", None)
    if client is not None and type(client).__name__ == "Client" and hasattr(client, "gather"):
        import distributed

        futures = client.compute(writes, **compute_kwargs)
        try:
            distributed.wait(futures)
            return list(client.gather(futures))
        finally:
            client.cancel(futures)
    pool: concurrent.futures.Executor | None = None
    workers = compute_kwargs.pop("num_workers", None) or dask.config.get("num_workers", None)
    if scheduler is dask.threaded.get:
        pool = concurrent.futures.ThreadPoolExecutor(workers or dask.system.CPU_COUNT)
    elif scheduler is dask.multiprocessing.get:
        pool = concurrent.futures.ProcessPoolExecutor(
            workers or dask.system.CPU_COUNT, mp_context=dask.multiprocessing.get_context()
        )
    if pool is None:
        return list(dask.base.compute(*writes, scheduler=scheduler, **compute_kwargs))
    try:
        return list(dask.base.compute(*writes, scheduler=scheduler, pool=pool, **compute_kwargs))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
