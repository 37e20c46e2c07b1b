"""What the engine integrations share: attempt numbers, the partition writer's task, file
names, table writers (Dask and Ray; Spark's ``write_partitions`` takes the task too).

Distributed engines re-run work: Dask runs a partition again when the worker holding
it dies (before or after it finished writing), Ray retries a task whose worker
process died. Each execution must be its own task attempt, so the committer can tell
them apart and publish exactly the one the engine reports back. Neither engine hands
user code an attempt counter that is unique across processes and retries (a Dask
worker's counter starts at 0 in every process; Ray's ``task_idx`` stays the same
when a task is retried), so every execution draws a random 48-bit attempt number:
two executions of one task collide with probability about ``2**-48`` per pair.

The writers here put one partition (a pandas frame) or one task's blocks (Arrow
tables) under a task attempt's work path through ``committer.fs``, optionally
partitioned Hive-style (``col=value/``) by pyarrow.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..committers import OutputCommitter, TaskAttempt, committer_for

log = logging.getLogger("magicfs.engines")

ATTEMPT_BITS = 48

#: File-name suffixes pandas adds for its compression names (``to_csv(compression=...)``).
COMPRESSION_SUFFIXES = {
    "gzip": ".gz",
    "bz2": ".bz2",
    "zip": ".zip",
    "xz": ".xz",
    "zstd": ".zst",
    "tar": ".tar",
}


def new_attempt_number() -> int:
    """A fresh attempt number for one execution of a task (random, 48 bits, never 0)."""
    return secrets.randbits(ATTEMPT_BITS) or 1


@dataclasses.dataclass(frozen=True)
class PartitionTask:
    """What a partition writer gets: its task attempt and the filesystem to write with.

    ``task.path("x.parquet")`` is where to write a file that appears as
    ``<dest>/x.parquet`` at job commit; ``task.fs`` writes it. One class for
    ``magicfs.dask.PartitionTask`` and ``magicfs.spark.PartitionTask``, so one writer
    serves both engines.
    """

    attempt: TaskAttempt
    fs: Any
    partition_id: int

    def path(self, relative: str) -> str:
        """Where to write ``relative``: it appears as ``<dest>/<relative>`` at job commit."""
        return self.attempt.path(relative)

    @property
    def work_path(self) -> str:
        """The attempt's output root (``base_dir`` for pyarrow's ``write_dataset``)."""
        return self.attempt.work_path


def job_committer(
    engine: str,
    dest: str,
    committer: str | OutputCommitter | None,
    storage_options: dict[str, Any] | None,
    conflict_mode: str | None,
    committer_options: Mapping[str, Any] | None,
    *,
    conflict_mode_given: bool = False,
) -> OutputCommitter:
    """The committer of an engine's job: ``committer`` itself when the caller built it
    (a ready-made committer), else :func:`magicfs.committer_for` of its name (``None``:
    the store's default) with the options; ``engine`` (``magicfs.dask``) is the job id's
    source and names the engine in messages.

    A ready-made committer has its storage and options already: giving them here too is
    refused (``TypeError`` naming them) rather than silently dropped. ``conflict_mode``
    counts as given only when ``conflict_mode_given`` (an engine whose parameter has a
    default cannot tell). Decision: whether ``committer`` is a name is asked, not what
    class it is (anything else is taken for a committer).
    """
    if committer is None or isinstance(committer, str):
        return committer_for(
            dest,
            committer=committer,
            storage_options=storage_options,
            conflict_mode=conflict_mode or "append",
            **{"job_id_source": engine, **dict(committer_options or {})},
        )
    given = [
        name
        for name, present in (
            ("storage_options=", storage_options is not None),
            ("conflict_mode=", conflict_mode_given),
            ("committer_options=", bool(committer_options)),
        )
        if present
    ]
    if given:
        raise TypeError(
            f"{engine}: a ready-made committer already has its storage and options; "
            f"pass {', '.join(given)} to magicfs.committer_for instead"
        )
    return committer


def rows_written(returned: object) -> int | None:
    """What a partition writer returned, as the rows it wrote (``_SUCCESS`` reports them):
    an ``int`` (not a ``bool``), else ``None``."""
    return returned if isinstance(returned, int) and not isinstance(returned, bool) else None


def abort_job_quietly(committer: OutputCommitter, failure: BaseException) -> bool:
    """Abort the job after ``failure``; if the abort fails too, say so on the failure.

    Returns whether the abort succeeded.
    """
    try:
        committer.abort_job()
        return True
    except Exception as abort_error:
        log.error("job %s: abort after failure failed: %s", committer.job_id, abort_error)
        failure.add_note(
            f"magicfs: aborting job {committer.job_id} at {committer.url} failed too "
            f"({type(abort_error).__name__}: {abort_error}); nothing was published, but "
            f"uploads or temporary files may remain: run `magicfs uploads abort --job "
            f"{committer.job_id} --force {committer.url}` (S3) or delete "
            f"{committer.url}/_temporary/{committer.job_id}"
        )
        return False


@dataclasses.dataclass(frozen=True)
class PartNames:
    """File names ``part-<index>-<job id><suffix>``, or the user's ``name_function(index)``.

    The index is zero-padded to at least 5 digits, so every reader (pandas and
    pyarrow sort file names as strings) reads the files back in partition order. The
    job id keeps two jobs appending to one destination from replacing each other's
    files.
    """

    job_id: str
    suffix: str
    width: int = 5
    name_function: Callable[[int], str] | None = None

    def __call__(self, index: int) -> str:
        if self.name_function is not None:
            name = self.name_function(index)
            if not isinstance(name, str) or not name:
                raise ValueError(
                    f"name_function({index}) returned {name!r}: it must return a non-empty "
                    "relative file name"
                )
            return name
        return f"part-{index:0{self.width}d}-{self.job_id}{self.suffix}"

    def template(self, index: int) -> str:
        """pyarrow's ``basename_template`` (one ``{i}`` per file written in a directory)."""
        name = self(index)
        stem, dot, extension = name.rpartition(".")
        if not dot or "/" in extension:
            return name + "-{i}"
        return f"{stem}-{{i}}.{extension}"


def padding_for(count: int) -> int:
    """Digits needed to number ``count`` partitions (at least 5)."""
    return max(5, len(str(max(count - 1, 0))))


def check_columns(kind: str, columns: Sequence[str], available: Iterable[str]) -> list[str]:
    """``columns`` as a list, each one present in ``available``."""
    present = set(available)
    missing = [c for c in columns if c not in present]
    if missing:
        raise ValueError(
            f"{kind} columns not in the data: {missing} (available: {sorted(present)})"
        )
    return list(columns)


# -- Arrow tables (Ray blocks) ------------------------------------------------------------------


def write_tables(
    fs: Any,
    task: TaskAttempt,
    tables: Iterable[Any],
    fmt: str,
    partition_cols: Sequence[str],
    names: PartNames,
    index: int,
) -> tuple[int, int]:
    """Write Arrow ``tables`` for ``task`` as ``fmt``; returns (rows, files) written.

    Without ``partition_cols`` everything goes into one file (``names(index)``);
    with them, pyarrow writes one file per Hive directory (``col=value/``), the
    partition columns living in the path only.
    """
    import pyarrow as pa

    iterator = iter(tables)
    first = next((t for t in iterator if t.num_rows), None)
    if first is None:
        return 0, 0
    schema = first.schema
    counter = _Counter()

    def batches() -> Iterator[pa.RecordBatch]:
        for table in _chain(first, iterator):
            if not table.num_rows:
                continue
            if table.schema != schema:
                table = table.cast(schema)
            counter.rows += table.num_rows
            yield from table.to_batches()

    if fmt == "json":
        files = _write_json(fs, task, batches(), list(partition_cols), names, index)
        return counter.rows, files
    if not partition_cols:
        with fs.open(task.path(names(index)), "wb") as handle:
            _write_single(handle, batches(), schema, fmt)
        return counter.rows, 1
    import pyarrow.dataset as ds

    written: list[str] = []
    ds.write_dataset(
        batches(),
        task.work_path,
        schema=schema,
        format=fmt,
        partitioning=list(partition_cols),
        partitioning_flavor="hive",
        filesystem=fs,
        basename_template=names.template(index),
        existing_data_behavior="overwrite_or_ignore",
        file_visitor=lambda written_file: written.append(written_file.path),
    )
    return counter.rows, len(written)


class _Counter:
    rows = 0


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _write_single(handle: Any, batches: Iterator[Any], schema: Any, fmt: str) -> None:
    """One Parquet or CSV file from a stream of record batches."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(handle, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
    else:
        import pyarrow.csv as pacsv

        with pacsv.CSVWriter(handle, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)


def _write_json(
    fs: Any,
    task: TaskAttempt,
    batches: Iterator[Any],
    partition_cols: list[str],
    names: PartNames,
    index: int,
) -> int:
    """JSON lines (pyarrow has no JSON writer): one file per Hive directory.

    Closed by an exception, magic S3 writers abort their uploads; on rename stores
    the partial files go with the aborted task attempt.
    """
    handles: dict[str, Any] = {}
    try:
        for batch in batches:
            frame = batch.to_pandas()
            groups = (
                frame.groupby(partition_cols, sort=False, dropna=False)
                if partition_cols
                else [((), frame)]
            )
            for values, rows in groups:
                values = values if isinstance(values, tuple) else (values,)
                directory = "/".join(
                    f"{column}={value}"
                    for column, value in zip(partition_cols, values, strict=True)
                )
                relative = f"{directory}/{names(index)}" if directory else names(index)
                if relative not in handles:
                    handles[relative] = fs.open(task.path(relative), "w", encoding="utf-8")
                body = rows.drop(columns=partition_cols).to_json(
                    orient="records", lines=True, date_format="iso"
                )
                handles[relative].write(body if body.endswith("\n") else body + "\n")
    except BaseException:
        for handle in handles.values():
            handle.close()
        raise
    for handle in handles.values():
        handle.close()
    return len(handles)
