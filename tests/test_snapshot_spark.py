"""Spark reads a snapshot in the one line ``docs/readers.md`` gives, and never a mix of two.

The race of ``tests/test_snapshot_engines.py`` (another process commits append, replace,
append while this one reads in a loop, every read checked to be one state, every job
whole), read by a real local SparkSession given the snapshot's files. Spark's own
``spark.read.parquet(dest)`` lists the directory, as any plain reader does, so the line
passes the files, and ``basePath`` keeps Hive-style partition columns (given files, Spark
takes each file's folder as its base and drops them). Spark takes each path as a Hadoop
glob pattern: names holding ``*?[]{}`` are escaped in the line for such names.

On a local disk only: Spark reads S3 through Hadoop's S3A connector (``hadoop-aws``), and
pyspark ships no S3A jars (nor ABFS or GCS ones); ``docs/readers.md`` gives the line for
those stores.
"""

from __future__ import annotations

import functools
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.spark import local_session
from test_snapshot_engines import run_race

import magicfs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    session = local_session("magicfs-snapshot-tests")
    yield session
    session.stop()


def read(spark, snap: magicfs.Snapshot):
    """The line ``docs/readers.md`` documents for Spark."""
    return spark.read.option("basePath", snap.url).parquet(*snap.urls())


def read_escaped(spark, snap: magicfs.Snapshot):
    """The line for names holding glob characters: each escaped for Hadoop's glob."""
    urls = [re.sub(r"([\\*?\[\]{}])", r"\\\1", url) for url in snap.urls()]
    return spark.read.option("basePath", snap.url).parquet(*urls)


def read_jobs(spark, snap: magicfs.Snapshot) -> list[int]:
    return [row.job for row in read(spark, snap).select("job").collect()]


def test_spark_reads_whole_snapshots_while_another_process_commits(spark, tmp_path):
    # Spark's first read in a session takes seconds (more on a busy machine): the replace
    # keeps the old files long enough for it, as docs/readers.md tells readers to.
    race = functools.partial(read_jobs, spark)
    seen = run_race(f"file://{tmp_path}/sales", {}, race, retention=120)
    assert len(seen) >= 2  # read before and after at least one commit


def commit(url: str, names: dict[str, float], mode: str = "append") -> None:
    """One job writing each ``name`` (relative to ``url``) with two rows of ``amount``."""
    with magicfs.write_job(url, conflict_mode=mode) as job, job.task(0) as task:
        for name, amount in names.items():
            table = pa.table({"amount": [amount, amount]})
            pq.write_table(table, task.path(name), filesystem=job.fs)


def test_partition_columns_come_through_and_only_the_snapshots_files(spark, tmp_path):
    url = f"file://{tmp_path}/sales"
    commit(url, {"year=2024/part-a.parquet": 1.5})
    commit(url, {"year=2025/part-b.parquet": 2.5})
    # A file no committed job wrote (another tool's, or a job's still committing):
    # Spark's own listing of the destination reads it; the snapshot's line does not.
    (tmp_path / "sales" / "year=2026").mkdir()
    pq.write_table(pa.table({"amount": [9.0]}), tmp_path / "sales/year=2026/stray.parquet")
    snap = magicfs.snapshot(url)

    rows = sorted(tuple(row) for row in read(spark, snap).select("year", "amount").collect())
    assert rows == [(2024, 1.5), (2024, 1.5), (2025, 2.5), (2025, 2.5)]
    listed = spark.read.parquet(snap.url).select("year").collect()
    assert sorted({row.year for row in listed}) == [2024, 2025, 2026]
    # Without basePath, Spark takes each file's folder as its base: no year column.
    assert spark.read.parquet(*snap.urls()).columns == ["amount"]
    # The form for stores Spark names otherwise (s3a://...): the same files, the same rows.
    base = snap.url
    files = [f"{base}/{entry.path}" for entry in snap.committed_files()]
    named = spark.read.option("basePath", base).parquet(*files).select("year", "amount")
    assert sorted(tuple(row) for row in named.collect()) == rows


def test_names_with_glob_characters_are_read_as_names(spark, tmp_path):
    url = f"file://{tmp_path}/sales"
    commit(url, {"a[1].parquet": 1.0, "b{2,3}.parquet": 2.0})
    for stray in ("a1.parquet", "b2.parquet"):  # what the names match as patterns
        pq.write_table(pa.table({"amount": [9.0]}), tmp_path / "sales" / stray)
    snap = magicfs.snapshot(url)

    escaped = read_escaped(spark, snap).collect()
    assert sorted(row.amount for row in escaped) == [1.0, 1.0, 2.0, 2.0]
    as_patterns = read(spark, snap).collect()  # each name matches the stray file instead
    assert sorted(row.amount for row in as_patterns) == [9.0, 9.0]


def test_a_file_replaced_under_an_old_snapshot_fails_the_read_and_drops_no_rows(spark, tmp_path):
    url = f"file://{tmp_path}/sales"
    commit(url, {"part-old.parquet": 1.0})
    old = magicfs.snapshot(url)
    commit(url, {"part-new.parquet": 2.0}, mode="replace")  # replace_retention=0: deleted

    assert not (tmp_path / "sales" / "part-old.parquet").exists()
    with pytest.raises(Exception, match=r"PATH_NOT_FOUND.*part-old\.parquet"):
        read(spark, old).collect()
    assert [row.amount for row in read(spark, magicfs.snapshot(url)).collect()] == [2.0, 2.0]


def test_a_snapshot_of_no_files_reads_as_no_rows_given_its_schema(spark, tmp_path):
    url = f"file://{tmp_path}/sales"
    commit(url, {"part-old.parquet": 1.0})
    commit(url, {}, mode="replace")  # a job that wrote nothing replaces everything
    snap = magicfs.snapshot(url)
    assert snap.urls() == []
    with pytest.raises(Exception, match="UNABLE_TO_INFER_SCHEMA"):
        read(spark, snap)
    reader = spark.read.schema("amount double").option("basePath", snap.url)
    assert reader.parquet(*snap.urls()).collect() == []
