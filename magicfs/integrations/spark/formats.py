"""Writing a stream of Arrow record batches into one task attempt, as Parquet, CSV or JSON.

Used by the Spark data source: each Spark task hands its rows over as Arrow batches;
they are written with pyarrow through the committer's filesystem under the task's
magic work path, partitioned Hive-style (``col=value/``) when asked. File names carry
the partition number and the job id, so no two tasks or jobs ever pick the same name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

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


def write_batches(
    fs: Any,
    task: TaskAttempt,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    fmt: str,
    partition_by: list[str],
    basename: str,
) -> int:
    """Write ``batches`` for ``task``; returns the number of rows written."""
    counted = RowCounter(batches)
    if fmt == "json":
        _write_json(fs, task, counted, partition_by, basename)
    else:
        ds.write_dataset(
            counted,
            task.work_path,
            schema=schema,
            format=fmt,
            partitioning=partition_by or None,
            partitioning_flavor="hive" if partition_by else None,
            filesystem=fs,
            basename_template=f"{basename}-{{i}}.{fmt}",
            existing_data_behavior="overwrite_or_ignore",
        )
    return counted.rows


def _write_json(
    fs: Any,
    task: TaskAttempt,
    batches: Iterable[pa.RecordBatch],
    partition_by: list[str],
    basename: str,
) -> None:
    """JSON lines (pyarrow has no JSON writer): one file per Hive partition."""
    handles: dict[str, Any] = {}
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
                relative = f"{directory}/{basename}.json" if directory else f"{basename}.json"
                if relative not in handles:
                    handles[relative] = fs.open(task.path(relative), "w", encoding="utf-8")
                body = rows.drop(columns=partition_by).to_json(orient="records", lines=True)
                handles[relative].write(body if body.endswith("\n") else body + "\n")
    except BaseException:
        # Closed while the error propagates: magic S3 writers abort their uploads; on
        # rename stores the partial files go with the aborted task attempt.
        for handle in handles.values():
            handle.close()
        raise
    for handle in handles.values():
        handle.close()
