"""Writing a stream of Arrow record batches into one task attempt, as Parquet, CSV or JSON.

Used by the Spark data source: each Spark task hands its rows over as Arrow batches;
they are written with pyarrow through the committer's filesystem under the task's
magic work path, partitioned Hive-style (``col=value/``) when asked. File names carry
the partition number and the job id, so no two tasks or jobs ever pick the same name.
Compression (the ``compression`` option): Parquet records its codec inside the file;
CSV and JSON lines are compressed as whole files named for their codec
(``part-00000-<job>-0.csv.gz``), as Spark's own writers do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from fsspec.compression import compr

from ...committers import TaskAttempt


class RowCounter:
    """Passes batches through and counts their rows."""

    def __init__(self, batches: Iterable[pa.RecordBatch]):
        self._batches = batches
        self.rows = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            self.rows += batch.num_rows
            yield batch


#: Spark's codec names -> pyarrow's, for Parquet (the codec is recorded in the file).
PARQUET_CODECS = {
    "snappy": "snappy",
    "gzip": "gzip",
    "zstd": "zstd",
    "lz4_raw": "lz4",  # pyarrow's "lz4" is Parquet's LZ4_RAW
    "brotli": "brotli",
    "none": "none",
    "uncompressed": "none",
}
#: Spark's codec names -> (fsspec's codec, file-name suffix), for CSV and JSON lines.
TEXT_CODECS = {
    "gzip": ("gzip", ".gz"),
    "bzip2": ("bz2", ".bz2"),
    "zstd": ("zstd", ".zst"),
    "none": (None, ""),
    "uncompressed": (None, ""),
}


def check_compression(fmt: str, value: str | None) -> str | None:
    """The ``compression`` option for ``fmt``, as the writer takes it; refused clearly.

    Parquet: pyarrow's codec name (``None``: pyarrow's default, snappy, as Spark's).
    CSV/JSON: the Spark name of a codec in :data:`TEXT_CODECS` (``None``: uncompressed).
    Hadoop-framed codecs (Spark's ``lz4``, ``snappy``, ``deflate`` for text) are not
    written: a reader outside Hadoop could not open them under their usual suffixes.
    """
    if value is None:
        return None
    name = value.lower()
    codecs: dict[str, Any] = PARQUET_CODECS if fmt == "parquet" else TEXT_CODECS
    if name not in codecs:
        raise ValueError(
            f"magicfs: compression {value!r} is not supported for {fmt} (nothing was written): "
            f"use one of {', '.join(codecs)}"
        )
    if fmt != "parquet" and codecs[name][0] is not None and codecs[name][0] not in compr:
        raise ValueError(
            f"magicfs: compression {value!r} for {fmt} needs the {name} library, which is "
            f"not installed here (pip install zstandard)"
        )
    return str(codecs[name]) if fmt == "parquet" else name


def write_batches(
    fs: Any,
    task: TaskAttempt,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    fmt: str,
    partition_by: list[str],
    basename: str,
    compression: str | None = None,
) -> int:
    """Write ``batches`` for ``task``; returns the number of rows written.

    ``compression`` as :func:`check_compression` returns it. Unpartitioned Parquet is
    one file per task (:func:`_write_parquet_file`); partitioned Parquet and uncompressed
    CSV are written by pyarrow's dataset writer; JSON lines and compressed CSV file by
    file, each through a compressing stream when asked (``part-...-0.csv.gz``).
    """
    counted = RowCounter(batches)
    if fmt == "parquet" and not partition_by:
        _write_parquet_file(fs, task, counted, schema, f"{basename}-0.parquet", compression)
        return counted.rows
    if fmt == "parquet":
        options = None
        if compression is not None:
            options = ds.ParquetFileFormat().make_write_options(compression=compression)
        _write_dataset(fs, task, counted, schema, fmt, partition_by, basename, options)
        return counted.rows
    codec, suffix = TEXT_CODECS[compression or "none"]
    if fmt == "csv" and codec is None:
        _write_dataset(fs, task, counted, schema, fmt, partition_by, basename, None)
    else:
        name = f"{basename}.json" if fmt == "json" else f"{basename}-0.csv"
        _write_lines(fs, task, counted, schema, fmt, partition_by, name + suffix, codec)
    return counted.rows


#: A row group is written when this many rows are buffered (pyarrow's own largest
#: row group) ...
ROW_GROUP_ROWS = 1 << 20
#: ... or this many bytes of Arrow data, whichever comes first: what a task holds in
#: memory. Spark's own writer closes its row groups at 128 MiB of encoded data.
ROW_GROUP_BYTES = 64 << 20


def _write_parquet_file(
    fs: Any,
    task: TaskAttempt,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    name: str,
    compression: str | None,
) -> None:
    """One Parquet file, with pyarrow's ``ParquetWriter`` on the task file.

    Why not the dataset writer, as for partitioned output: for one file it took about
    30% more time and 20% more CPU (250,000 rows of the Spark benchmark's 4 columns, in
    10,000-row batches, through a task attempt: 0.53 s against 0.36-0.39 s; see
    docs/benchmarks.md, Spark), and it writes every Arrow batch Spark hands over
    (10,000 rows, ``spark.sql.execution.arrow.maxRecordsPerBatch``) as its own row
    group. Here batches are buffered into row groups of up to :data:`ROW_GROUP_ROWS`
    rows or :data:`ROW_GROUP_BYTES` bytes, as a reader of Spark's own files expects. A
    task that received no rows writes no file, as Spark's writer.
    """
    writer: pq.ParquetWriter | None = None
    handle: Any = None
    buffered: list[pa.RecordBatch] = []
    rows = size = 0
    try:
        for batch in batches:
            if writer is None:
                handle = fs.open(task.path(name), "wb")
                writer = pq.ParquetWriter(handle, schema, compression=compression or "snappy")
            buffered.append(batch)
            rows, size = rows + batch.num_rows, size + batch.nbytes
            if rows >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
                writer.write_table(pa.Table.from_batches(buffered, schema), ROW_GROUP_ROWS)
                buffered, rows, size = [], 0, 0
        if writer is not None:
            if buffered:
                writer.write_table(pa.Table.from_batches(buffered, schema), ROW_GROUP_ROWS)
            writer.close()
    except BaseException:
        # Closed while the error propagates: magic S3 writers abort their uploads; on
        # rename stores the partial file goes with the aborted task attempt.
        if handle is not None:
            handle.close()
        raise
    if handle is not None:
        handle.close()


def _write_dataset(
    fs: Any,
    task: TaskAttempt,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    fmt: str,
    partition_by: list[str],
    basename: str,
    options: Any,
) -> None:
    """pyarrow's dataset writer: Parquet, or CSV without compression."""
    ds.write_dataset(
        batches,
        task.work_path,
        schema=schema,
        format=fmt,
        file_options=options,
        partitioning=partition_by or None,
        partitioning_flavor="hive" if partition_by else None,
        filesystem=fs,
        basename_template=f"{basename}-{{i}}.{fmt}",
        existing_data_behavior="overwrite_or_ignore",
    )


def _write_lines(
    fs: Any,
    task: TaskAttempt,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    fmt: str,
    partition_by: list[str],
    name: str,
    codec: str | None,
) -> None:
    """JSON lines (pyarrow has no JSON writer) or CSV: one file per Hive partition.

    Each file is opened through ``fsspec.core.OpenFile``, which stacks the compressor
    over the task file; closing the ``OpenFile`` closes both (closing the compressor
    alone would leave the task file open).
    """
    columns = [field.name for field in schema if field.name not in partition_by]
    file_schema = pa.schema([schema.field(c) for c in columns])
    opened: dict[str, fsspec.core.OpenFile] = {}
    handles: dict[str, Any] = {}
    writers: dict[str, Any] = {}
    try:
        for batch in batches:
            frame = batch.to_pandas()
            groups = (
                frame.groupby(partition_by, sort=False, dropna=False)
                if partition_by
                else [((), frame)]
            )
            for values, rows in groups:
                values = values if isinstance(values, tuple) else (values,)
                directory = "/".join(f"{c}={v}" for c, v in zip(partition_by, values, strict=True))
                relative = f"{directory}/{name}" if directory else name
                if relative not in handles:
                    opened[relative] = fsspec.core.OpenFile(
                        fs, task.path(relative), "wb", compression=codec
                    )
                    handles[relative] = opened[relative].open()
                    if fmt == "csv":
                        writers[relative] = pa_csv.CSVWriter(handles[relative], file_schema)
                data = rows[columns]
                if fmt == "csv":
                    table = pa.Table.from_pandas(data, schema=file_schema, preserve_index=False)
                    writers[relative].write_table(table)
                else:
                    body = data.to_json(orient="records", lines=True)
                    handles[relative].write((body if body.endswith("\n") else body + "\n").encode())
    except BaseException:
        # Closed while the error propagates: magic S3 writers abort their uploads; on
        # rename stores the partial files go with the aborted task attempt.
        for stack in opened.values():
            stack.close()
        raise
    for writer in writers.values():
        writer.close()
    for stack in opened.values():
        stack.close()
