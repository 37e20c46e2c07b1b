"""The ``magicfs`` Spark data source (Spark 4 Python data source API, Arrow writer).

::

    magicfs.spark.register(spark)
    (df.write.format("magicfs").mode("overwrite")
       .option("format", "parquet").option("partitionBy", "year,region")
       .option("storage_options.endpoint_url", url)
       .save("s3://bkt/out"))

How Spark drives it (verified on PySpark 4.3): ``writer()`` runs once, in a Python
worker on the driver side: it builds the committer and sets up the job. Every task
attempt, retries and speculative copies included, runs ``write()`` in full on an
executor: it writes its rows under its own task attempt (named by
``TaskContext.taskAttemptId()``, unique even across stage retries, SPARK-24552),
commits it, and returns the commit message. Spark's commit coordinator keeps exactly
one message per partition and hands them to ``commit()`` (another worker on the driver
host, with the pickled writer), which commits exactly those attempts; every other
attempt's output is swept. On failure ``abort()`` gets ``None`` for tasks that never
reported, so it aborts the whole job by its records, not by the messages.

Modes: ``append`` (conflict mode ``append``, or the ``conflict_mode`` option) and
``overwrite`` (``replace``: the destination's old data is deleted at job commit, after
every task succeeded; a job that fails deletes nothing). Spark rejects ``error`` and
``ignore`` for Python data sources.

Options (:data:`.options.OPTIONS`): ``format``, ``partitionBy``, ``compression``
(:func:`.formats.check_compression`), ``conflict_mode``, ``threads`` and
``storage_options.*``. Any other name is refused before the job is set up, listing
these: Spark itself accepts and ignores unknown options. Spark's own
``.partitionBy(...)`` method cannot be supported: Spark 4 checks it against the
table's partitioning before calling a Python data source (which has none), and fails
with "The provided partitioning or clustering columns do not match the existing
table's" before magicfs runs; use ``.option("partitionBy", "year")``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from ...committers import TaskCommitMessage, committer_for
from .formats import check_compression, write_batches
from .options import check_format, check_options, split_columns, storage_options
from .partitions import spark_task
from .python import use_driver_python


@dataclasses.dataclass
class MagicfsCommitMessage(WriterCommitMessage):
    """One committed task attempt, as Spark carries it from executor to driver."""

    task: TaskCommitMessage


class MagicfsDataSource(DataSource):
    """``df.write.format("magicfs")``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "magicfs"

    def writer(self, schema: StructType, overwrite: bool) -> MagicfsWriter:
        return MagicfsWriter(dict(self.options), schema, overwrite)


class MagicfsWriter(DataSourceArrowWriter):
    """Holds the committer; pickled to every executor and to the driver's commit worker."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool):
        lowered = {key.lower(): value for key, value in options.items()}
        dest = lowered.get("path")
        if not dest:
            raise ValueError("magicfs: no destination: use .save(path) or .option('path', ...)")
        check_options(options)
        self.format = check_format(lowered.get("format"))
        self.compression = check_compression(self.format, lowered.get("compression"))
        self.partition_by = split_columns(lowered.get("partitionby"))
        missing = [c for c in self.partition_by if c not in schema.fieldNames()]
        if missing:
            raise ValueError(f"magicfs: partitionBy columns not in the data: {missing}")
        self.schema = to_arrow_schema(schema)
        conflict_mode = "replace" if overwrite else lowered.get("conflict_mode", "append")
        self.committer = committer_for(
            dest,
            storage_options=storage_options(options),
            threads=int(lowered.get("threads", 8)),
            conflict_mode=conflict_mode,
            job_id_source="magicfs Spark data source",
            progress=False,
        )
        self.committer.setup_job()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MagicfsCommitMessage:
        context = spark_task("the magicfs data source's writer")
        committer = self.committer
        with committer.attempt(
            context.partitionId(),
            context.taskAttemptId(),
            context=f"magicfs Spark data source: partition {context.partitionId()}",
        ) as run:
            run.rows = write_batches(
                committer.fs,
                run.task,
                iterator,
                self.schema,
                self.format,
                self.partition_by,
                basename=f"part-{run.task.task_index:05d}-{committer.job_id}",
                compression=self.compression,
            )
        assert run.message is not None
        return MagicfsCommitMessage(run.message)

    def commit(self, messages: list[Any]) -> None:
        self.committer.commit_job([None if m is None else m.task for m in messages])

    def abort(self, messages: list[Any]) -> None:
        self.committer.abort_job()


def register(spark: Any) -> None:
    """Make ``df.write.format("magicfs")`` available in ``spark``.

    On a ``local`` master with no ``PYSPARK_PYTHON`` set, the Python workers are pointed
    at this interpreter (the one that has magicfs): see :mod:`.python`.
    """
    use_driver_python(spark.sparkContext)
    spark.dataSource.register(MagicfsDataSource)
