"""PySpark integration against a real local SparkSession (``local[2,4]``: failed tasks retry).

Writes go to the moto S3 server (magic committer), one job also to Ceph RGW (a
production S3 implementation), and to local files (manifest committer). Failures are
injected by the tasks themselves (raising in a chosen attempt), as an executor crash or
a bug would.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from helpers import data_files, object_keys, pending_uploads, visible_keys
from helpers.s3_targets import store_fixture
from helpers.spark import local_session

import magicfs
from magicfs.integrations.spark.options import storage_options

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    session = local_session("magicfs-tests")
    # Executors cannot import this test module: ship its functions by value.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    import magicfs.spark

    magicfs.spark.register(session)
    yield session
    session.stop()


def s3_writer(frame, server):
    writer = frame.write.format("magicfs")
    for key, value in {
        "key": server.storage_options["key"],
        "secret": server.storage_options["secret"],
        "client_kwargs.endpoint_url": server.endpoint_url,
    }.items():
        writer = writer.option(f"storage_options.{key}", value)
    return writer


def sales(spark, rows: int = 1000, partitions: int = 4):
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id", "cast(id % 3 + 2023 as int) as year", "id * 1.5 as amount"
    )


def success(client, bucket: str, dest: str = "out") -> dict:
    return json.loads(client.get_object(Bucket=bucket, Key=f"{dest}/_SUCCESS")["Body"].read())


# --- the data source -------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["s3", pytest.param("rgw", marks=pytest.mark.rgw)])
def test_data_source_writes_partitioned_parquet_to_s3(spark, request, store):
    import s3fs

    server = store_fixture(request, store, "server")
    s3_client = store_fixture(request, store, "client")
    bucket = store_fixture(request, store, "bucket")
    s3 = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
    s3_writer(sales(spark), server).mode("append").option("partitionBy", "year").save(
        f"s3://{bucket}/out"
    )
    keys = visible_keys(s3_client, bucket)
    assert keys[0] == "out/_SUCCESS"
    assert {k.split("/")[1] for k in keys[1:]} == {"year=2023", "year=2024", "year=2025"}
    assert len(keys) == 1 + 3 * 4  # one file per Spark partition per year
    assert pending_uploads(s3_client, bucket) == []
    assert [k for k in object_keys(s3_client, bucket) if "__magic" in k] == []
    summary = success(s3_client, bucket)
    assert summary["committer"] == "magic"
    assert summary["metrics"]["rows"] == 1000 and summary["metrics"]["files"] == 12
    import pyarrow.dataset as ds  # (Spark itself cannot read s3a:// here: no hadoop-aws jars)

    table = ds.dataset(
        f"{bucket}/out", filesystem=s3, format="parquet", partitioning="hive"
    ).to_table()
    assert table.num_rows == 1000
    assert sorted(table.column("id").to_pylist()) == list(range(1000))


def test_a_failed_attempt_is_retried_and_its_output_never_appears(
    spark, s3_server, s3_client, bucket
):
    from pyspark.sql.functions import udf

    @udf("long")
    def fail_first_attempt_of_partition_one(value):
        from pyspark import TaskContext

        context = TaskContext.get()
        if context.partitionId() == 1 and context.attemptNumber() == 0 and value % 250 == 200:
            raise RuntimeError("executor lost mid-write")
        return value

    frame = sales(spark).withColumn("id", fail_first_attempt_of_partition_one("id"))
    s3_writer(frame, s3_server).mode("append").save(f"s3://{bucket}/out")
    keys = visible_keys(s3_client, bucket)
    assert len(keys) == 1 + 4  # _SUCCESS + one file per partition: the failed attempt left none
    assert success(s3_client, bucket)["metrics"]["rows"] == 1000
    assert pending_uploads(s3_client, bucket) == []


def test_a_failed_job_leaves_nothing(spark, s3_server, s3_client, bucket):
    from pyspark.sql.functions import udf

    @udf("long")
    def always_fail_in_partition_two(value):
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 2:
            raise RuntimeError("bad record")
        return value

    frame = sales(spark).withColumn("id", always_fail_in_partition_two("id"))
    with pytest.raises(Exception, match="bad record"):
        s3_writer(frame, s3_server).mode("append").save(f"s3://{bucket}/out")
    assert object_keys(s3_client, bucket) == []
    assert pending_uploads(s3_client, bucket) == []


def test_overwrite_replaces_old_data_only_when_the_job_succeeds(
    spark, s3_server, s3_client, bucket
):
    s3_client.put_object(Bucket=bucket, Key="out/old.csv", Body=b"old")
    from pyspark.sql.functions import udf

    @udf("long")
    def fail(value):
        raise RuntimeError("job fails")

    with pytest.raises(Exception, match="job fails"):
        s3_writer(sales(spark).withColumn("id", fail("id")), s3_server).mode("overwrite").save(
            f"s3://{bucket}/out"
        )
    assert visible_keys(s3_client, bucket) == ["out/old.csv"]  # nothing deleted by a failed job
    s3_writer(sales(spark), s3_server).mode("overwrite").option("format", "csv").save(
        f"s3://{bucket}/out"
    )
    keys = visible_keys(s3_client, bucket)
    assert "out/old.csv" not in keys and len(keys) == 5
    assert all(k.endswith(".csv") for k in keys[1:])


def test_jobs_started_back_to_back_have_distinct_ids(spark, s3_server, s3_client, bucket):
    ids = []
    for index in range(2):
        s3_writer(sales(spark, 10, 2), s3_server).mode("append").save(f"s3://{bucket}/out{index}")
        ids.append(success(s3_client, bucket, f"out{index}")["jobId"])
    assert ids[0] != ids[1]


def test_data_source_on_a_rename_store(spark, tmp_path):
    dest = f"file://{tmp_path}/out"
    sales(spark).write.format("magicfs").mode("append").option("format", "json").option(
        "partitionBy", "year"
    ).save(dest)
    files = sorted(
        data_files(
            os.path.relpath(os.path.join(root, name), tmp_path / "out")
            for root, _, names in os.walk(tmp_path / "out")
            for name in names
        )
    )
    assert files[0] == "_SUCCESS"
    assert all(f.startswith("year=") and f.endswith(".json") for f in files[1:])
    out = tmp_path / "out"
    rows = [json.loads(line) for f in files[1:] for line in (out / f).read_text().splitlines()]
    assert len(rows) == 1000 and "year" not in rows[0]  # the partition column lives in the path
    assert json.loads((out / "_SUCCESS").read_text())["metrics"]["rows"] == 1000
    assert not (tmp_path / "out" / "_temporary").exists()


def test_bad_options_fail_clearly(spark, tmp_path):
    with pytest.raises(Exception, match="unsupported format 'orc'"):
        sales(spark).write.format("magicfs").mode("append").option("format", "orc").save(
            f"file://{tmp_path}/out"
        )
    with pytest.raises(Exception, match="partitionBy columns not in the data"):
        sales(spark).write.format("magicfs").mode("append").option("partitionBy", "nope").save(
            f"file://{tmp_path}/out"
        )


def test_unknown_options_are_refused_listing_the_valid_ones(spark, tmp_path):
    """A misspelt option (``formt``) or one the source does not read must not be ignored."""
    for name, value in [("formt", "csv"), ("codec", "gzip")]:
        with pytest.raises(Exception) as refused:
            sales(spark, 10, 1).write.format("magicfs").mode("append").option(name, value).save(
                f"file://{tmp_path}/out"
            )
        message = str(refused.value)
        assert f"unknown option {name}" in message
        for valid in ("format:", "partitionBy:", "compression:", "storage_options.<name>"):
            assert valid.lower() in message.lower()
    assert not (tmp_path / "out").exists()  # refused before the job was set up
    # A store option that looks like JSON and is not (Python's quotes) names itself.
    with pytest.raises(Exception, match=r"option storage_options\.client_kwargs is not valid"):
        sales(spark, 10, 1).write.format("magicfs").mode("append").option(
            "storage_options.client_kwargs", "{'region_name': 'eu-west-1'}"
        ).save(f"file://{tmp_path}/out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(Exception, match="compression 'snappy' is not supported for csv"):
        sales(spark, 10, 1).write.format("magicfs").mode("append").option("format", "csv").option(
            "compression", "snappy"
        ).save(f"file://{tmp_path}/out")
    assert not (tmp_path / "out").exists()


def test_compression_option_for_csv_json_and_parquet(spark, tmp_path):
    import gzip

    import pyarrow.parquet as pq

    for fmt, codec in [("csv", "gzip"), ("json", "gzip"), ("parquet", "zstd")]:
        out = tmp_path / fmt
        sales(spark, 100, 2).write.format("magicfs").mode("append").option("format", fmt).option(
            "compression", codec
        ).option("partitionBy", "year").save(f"file://{out}")
        listed = data_files(out.rglob("*"))
        files = sorted(p for p in listed if p.is_file() and p.name != "_SUCCESS")
        assert {p.parent.name for p in files} == {"year=2023", "year=2024", "year=2025"}
        if fmt == "parquet":
            assert all(p.suffix == ".parquet" for p in files)
            assert {pq.read_metadata(p).row_group(0).column(0).compression for p in files} == {
                "ZSTD"
            }
            rows = sum(pq.read_metadata(p).num_rows for p in files)
        else:
            assert all(p.name.endswith(f".{fmt}.gz") for p in files)
            text = [gzip.decompress(p.read_bytes()).decode() for p in files]
            if fmt == "csv":
                assert all(t.startswith('"id","amount"\n') for t in text)
                rows = sum(len(t.splitlines()) - 1 for t in text)
            else:
                rows = sum(len(t.splitlines()) for t in text)
                assert set(json.loads(text[0].splitlines()[0])) == {"id", "amount"}
        assert rows == 100, fmt


def test_unpartitioned_parquet_is_one_file_per_task_with_whole_row_groups(spark, tmp_path):
    """Spark hands a Python writer 10,000-row Arrow batches; the file must not be 10,000-row
    row groups (Spark's own writer closes its row groups at 128 MiB), and a task given no
    rows writes no file."""
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    sales(spark, 50_000, 2).write.format("magicfs").mode("append").save(f"file://{out}")
    files = sorted(out.glob("*.parquet"))
    assert len(files) == 2
    for path in files:
        metadata = pq.read_metadata(path)
        assert (metadata.num_rows, metadata.num_row_groups) == (25_000, 1)
        assert metadata.row_group(0).column(0).compression == "SNAPPY"  # Spark's default
    table = pq.read_table(out, columns=["id", "year", "amount"])
    assert sorted(table.column("id").to_pylist()) == list(range(50_000))
    few = tmp_path / "few"
    sales(spark, 10, 4).where("id < 2").write.format("magicfs").mode("append").option(
        "compression", "zstd"
    ).save(f"file://{few}")
    files = sorted(few.glob("*.parquet"))
    assert len(files) == 1  # three tasks had no rows
    assert pq.read_metadata(files[0]).row_group(0).column(0).compression == "ZSTD"
    assert pq.read_table(files[0]).column("id").to_pylist() == [0, 1]


def test_readme_recipe_runs_without_pyspark_python(tmp_path):
    """The README's recipe from its venv, PYSPARK_PYTHON unset and no venv on PATH: Spark's
    default ``python3`` has no magicfs, so magicfs points a local master's workers at
    ``sys.executable`` (data source and ``write_partitions``)."""
    import subprocess

    script = """
import json, os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
import magicfs.spark
magicfs.spark.register(spark)
out = sys.argv[1]
spark.range(0, 10, numPartitions=2).write.format("magicfs").mode("append").save(f"file://{out}/ds")
def write(task, rows):
    with task.fs.open(task.path(f"part-{task.partition_id}.txt"), "w") as f:
        return sum(1 for row in rows if f.write(f"{row}\\n"))
summary = magicfs.spark.write_partitions(
    spark.sparkContext.parallelize(range(6), 2), write, f"file://{out}/rdd"
)
print(json.dumps({"python": spark.sparkContext.pythonExec, "rdd_files": summary.files}))
spark.stop()
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(
        d for d in env.get("PATH", "").split(os.pathsep) if os.path.abspath(d) != venv_bin
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"python": sys.executable, "rdd_files": 2}
    names = data_files(sorted(p.name for p in (tmp_path / "ds").iterdir()))
    assert names[0] == "_SUCCESS" and len(names) == 3
    assert all(name.endswith(".parquet") for name in names[1:])


# --- per-partition writers ---------------------------------------------------------------------


def write_csv(task, rows):
    """A custom writer: one CSV per partition; attempt 0 of partition 1 dies half-way."""
    from pyspark import TaskContext

    count = 0
    with task.fs.open(task.path(f"part-{task.partition_id:05d}.csv"), "w") as f:
        for row in rows:
            f.write(f"{row}\n")
            count += 1
            if task.partition_id == 1 and TaskContext.get().attemptNumber() == 0 and count == 5:
                raise RuntimeError("executor lost mid-write")
    return count


def test_write_partitions_commits_one_attempt_per_partition(spark, s3_options, s3_client, bucket):
    rdd = spark.sparkContext.parallelize(range(100), 4)
    summary = magicfs.spark.write_partitions(
        rdd,
        write_csv,
        f"s3://{bucket}/out",
        storage_options={**s3_options, "skip_instance_cache": True},
    )
    assert (summary.files, summary.tasks) == (4, 4)
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"] + [
        f"out/part-{p:05d}.csv" for p in range(4)
    ]
    body = s3_client.get_object(Bucket=bucket, Key="out/part-00001.csv")["Body"].read().decode()
    assert body.splitlines() == [str(n) for n in range(25, 50)]  # the retry, complete
    assert success(s3_client, bucket)["metrics"]["rows"] == 100
    assert pending_uploads(s3_client, bucket) == []


def test_foreach_partition_with_partition_task(spark, s3_options, s3_client, bucket):
    committer = magicfs.committer_for(
        f"s3://{bucket}/out", storage_options={**s3_options, "skip_instance_cache": True}
    )
    committer.setup_job()

    def write(rows):
        from magicfs.spark import partition_task

        with partition_task(committer) as task:
            write_csv(task, rows)

    spark.sparkContext.parallelize(range(100), 4).foreachPartition(write)
    committer.commit_job()  # lists the committed tasks: one attempt per partition
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"] + [
        f"out/part-{p:05d}.csv" for p in range(4)
    ]
    assert pending_uploads(s3_client, bucket) == []


# --- options ------------------------------------------------------------------------------


def test_storage_options_are_nested_and_decoded():
    options = {
        "path": "s3://b/out",
        "storage_options.key": "k",
        "storage_options.client_kwargs.endpoint_url": "http://127.0.0.1:1",
        "storage_options.use_ssl": "false",
        "storage_options.config_kwargs": '{"max_pool_connections": 20}',
        "format": "parquet",
    }
    assert storage_options(options) == {
        "key": "k",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:1"},
        "use_ssl": False,
        "config_kwargs": {"max_pool_connections": 20},
    }


def test_partition_task_outside_a_spark_task_says_where_it_must_run(tmp_path):
    from magicfs.spark import partition_task

    committer = magicfs.committer_for(f"file://{tmp_path}/out")
    committer.setup_job()
    outside = pytest.raises(RuntimeError, match=r"partition_task\(\) must run inside a Spark")
    with outside, partition_task(committer):
        pass
    committer.abort_job()
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").rglob("*")) == []
