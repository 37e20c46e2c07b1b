"""Spark's own Parquet writer against the ``magicfs`` data source, on the same DataFrame.

    python benchmarks/spark_writer.py                        # local, moto, rgw; 3 runs
    python benchmarks/spark_writer.py --quick                # local and moto, one size, 1 run
    python benchmarks/spark_writer.py --rows 2000000 --partitions 8 --profile

One SparkSession (``local[2]``) writes the same DataFrame (``--rows`` rows of 4 columns:
``id`` bigint, ``year`` int, ``amount`` double, ``region`` string, made by Spark from
``range``) as Parquet (snappy) by each route below, each timed from the ``save()`` call
until it returns (the job committed, every file visible):

* ``spark``: ``df.write.parquet("file://...")``, Spark's own writer and Hadoop's
  FileOutputCommitter, on local disk. Spark's writer cannot reach S3 here: the S3A
  connector (``hadoop-aws`` and the AWS SDK) is not in the pyspark wheel and this machine
  cannot download it, so on S3 the ratio is against Spark's writer *on local disk* in the
  same run (a floor Spark's writer to S3 could not beat: S3A's magic committer adds its
  own requests).
* ``spark-noop``: ``df.write.format("noop")``: Spark makes every row and drops it, in
  the JVM. What every route pays before writing.
* ``python-noop``: a Python data source (the Arrow writer API, as magicfs's) whose
  tasks only iterate over their record batches: what *any* Python data source pays on
  top of ``spark-noop``, the rows' trip to a Python worker as Arrow batches. No data
  source written in Python can be faster.
* ``python-direct``: a Python data source writing each task's batches with pyarrow
  straight to the destination through plain fsspec (local files or s3fs): no task
  attempt, no commit, nothing hidden; a failed or speculative task leaves its file. The
  fastest a Python writer can be without a committer.
* ``magicfs``: ``df.write.format("magicfs")``: the manifest committer on local disk, the
  magic committer on S3.

Destinations (``--stores``): ``local`` (a temporary directory), ``moto`` (the embedded
server of ``magicfs.local_s3()``, in its own process, no added latency) and ``rgw``
(Ceph RGW, memstore, from ``tests/helpers/rgw.py``; skipped with a message where Ceph is
not installed). Every row is one (store, rows, partitions); the routes run interleaved,
their order rotating from run to run, after one warm-up run of each (the JVM's JIT, the
Python workers), so each ratio compares runs under the same load. Reported: the median
seconds of ``--runs`` runs (min-max), rows per second and the ratio to ``spark`` (the
same run's, on local disk for the S3 stores). The load average is printed with every
row: on a shared machine a ratio is only meaningful between routes of the same row.

``--profile`` times the magicfs route's stages for one extra run per row, from inside
the Python workers (see :class:`ProfiledWriter`): job set-up, each task's time waiting
for its batches (Spark making the rows and sending them as Arrow), writing them
(pyarrow's encoding and the file's bytes), task commit, and job commit.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for folder in (ROOT, HERE):
    if folder not in sys.path:
        sys.path.insert(0, folder)

import fsspec  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from bench_servers import started  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceArrowWriter,
    WriterCommitMessage,
)

import magicfs.spark  # noqa: E402
from magicfs.integrations.spark.datasource import MagicfsWriter  # noqa: E402
from magicfs.protocol.tasks import TaskLifecycle  # noqa: E402

ROUTES = ("spark", "spark-noop", "python-noop", "python-direct", "magicfs")
STORES = ("local", "moto", "rgw")
BUCKET = "bench-spark"


# -- the baselines' data sources --------------------------------------------------------------


class NoopSource(DataSource):
    """``format("bench-noop")``: a Python data source whose tasks only consume their rows."""

    @classmethod
    def name(cls) -> str:
        return "bench-noop"

    def writer(self, schema: Any, overwrite: bool) -> NoopWriter:
        return NoopWriter()


class NoopWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        rows = sum(batch.num_rows for batch in iterator)
        return CountMessage(rows)


@dataclasses.dataclass
class CountMessage(WriterCommitMessage):
    rows: int


class DirectSource(DataSource):
    """``format("bench-direct")``: each task writes its batches with pyarrow straight to
    ``path``/part-<partition>.parquet through plain fsspec. No commit protocol."""

    @classmethod
    def name(cls) -> str:
        return "bench-direct"

    def writer(self, schema: Any, overwrite: bool) -> DirectWriter:
        options = json.loads(self.options.get("fsspec", "{}"))
        return DirectWriter(self.options["path"], options)


class DirectWriter(DataSourceArrowWriter):
    def __init__(self, dest: str, options: dict[str, Any]) -> None:
        self.dest = dest.rstrip("/")
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        fs, path = fsspec.core.url_to_fs(self.dest, **self.options)
        fs.makedirs(path, exist_ok=True)  # local disks; nothing on S3
        rows = 0
        writer = None
        with fs.open(f"{path}/part-{context.partitionId():05d}.parquet", "wb") as f:
            for batch in iterator:
                if writer is None:
                    writer = pq.ParquetWriter(f, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is not None:
                writer.close()
        return CountMessage(rows)


# -- the magicfs route's stages --------------------------------------------------------------


class ProfiledSource(DataSource):
    """``format("bench-magicfs-profiled")``: the magicfs data source, its stages timed."""

    @classmethod
    def name(cls) -> str:
        return "bench-magicfs-profiled"

    def writer(self, schema: Any, overwrite: bool) -> ProfiledWriter:
        options = dict(self.options)
        log = options.pop("profile_log")
        started_at = time.perf_counter()
        writer = ProfiledWriter(options, schema, overwrite)
        writer.log = log
        record(log, "job set-up", time.perf_counter() - started_at)
        return writer


class ProfiledWriter(MagicfsWriter):
    """Times, inside the Python worker: waiting for each batch (Spark's side: making the
    rows, sending them as Arrow), the rest of ``write()`` before the attempt's commit
    (pyarrow writing), the task commit (the committer's ``commit_task``), and ``commit()``."""

    log = ""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MagicfsCommitMessage:
        waited = [0.0]

        def timed() -> Iterator[pa.RecordBatch]:
            source = iter(iterator)
            while True:
                started_at = time.perf_counter()
                try:
                    batch = next(source)
                except StopIteration:
                    waited[0] += time.perf_counter() - started_at
                    return
                waited[0] += time.perf_counter() - started_at
                yield batch

        committing = [0.0]
        lifecycle_commit = TaskLifecycle.commit_task

        def commit_task(lifecycle: TaskLifecycle, task: Any) -> Any:
            started_at = time.perf_counter()
            try:
                return lifecycle_commit(lifecycle, task)
            finally:
                committing[0] += time.perf_counter() - started_at

        # A Python worker runs one task at a time: patched for this task only.
        TaskLifecycle.commit_task = commit_task  # type: ignore[method-assign]
        try:
            started_at = time.perf_counter()
            message = super().write(timed())
            total = time.perf_counter() - started_at
        finally:
            TaskLifecycle.commit_task = lifecycle_commit  # type: ignore[method-assign]
        record(self.log, "tasks: waiting for batches", waited[0])
        record(self.log, "tasks: task commit", committing[0])
        record(self.log, "tasks: writing", total - waited[0] - committing[0])
        return message

    def commit(self, messages: list[Any]) -> None:
        started_at = time.perf_counter()
        super().commit(messages)
        record(self.log, "job commit", time.perf_counter() - started_at)


MagicfsCommitMessage = magicfs.spark.MagicfsCommitMessage


def record(log: str, stage: str, seconds: float) -> None:
    """Append one stage's seconds to ``log`` (a local file: workers are on this machine)."""
    with open(log, "a") as f:
        f.write(json.dumps({"stage": stage, "seconds": seconds}) + "\n")


# -- destinations ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Store:
    """One destination: where each route writes, with what options, and how it is emptied."""

    name: str
    root: str  # "file:///tmp/..." or "s3://bucket"
    options: dict[str, Any]
    describe: str

    def fs(self) -> Any:
        return fsspec.core.url_to_fs(self.root, **self.options)[0]

    def parquet_rows(self, dest: str) -> tuple[int, int]:
        """(files, rows) of the Parquet files under ``dest``, read from their footers."""
        fs, path = fsspec.core.url_to_fs(dest, **self.options)
        fs.invalidate_cache()
        files = [p for p in fs.find(path) if p.endswith(".parquet")]
        rows = 0
        for name in files:
            with fs.open(name, "rb") as f:
                rows += pq.ParquetFile(f).metadata.num_rows
        return len(files), rows

    def remove(self, dest: str) -> None:
        fs, path = fsspec.core.url_to_fs(dest, **self.options)
        fs.invalidate_cache()
        if fs.exists(path):
            fs.rm(path, recursive=True)


@contextlib.contextmanager
def stores_started(names: list[str]) -> Iterator[list[Store]]:
    """The stores asked for, running (RGW is skipped with a message where Ceph is missing)."""
    with contextlib.ExitStack() as stack:
        result: list[Store] = []
        for name in names:
            if name == "local":
                directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-bench-"))
                result.append(Store("local", f"file://{directory}", {}, "local disk"))
            elif name == "moto":
                options = magicfs.local_s3(bucket=BUCKET)
                result.append(
                    Store(
                        "moto", f"s3://{BUCKET}", options, "moto (magicfs.local_s3()), no latency"
                    )
                )
            elif name == "rgw":
                target = stack.enter_context(started("rgw", 0.0, 0.0))
                if target is None:
                    continue
                target.warm_up()
                target.boto3_client().create_bucket(Bucket=BUCKET)
                result.append(
                    Store("rgw", f"s3://{BUCKET}", target.storage_options, "Ceph RGW (memstore)")
                )
            else:
                raise SystemExit(f"--stores: unknown store {name!r}; choose from {STORES}")
        yield result


# -- the runs -------------------------------------------------------------------------------------


def session(cores: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("magicfs-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    magicfs.spark.register(spark)
    for source in (NoopSource, DirectSource, ProfiledSource):
        spark.dataSource.register(source)
    return spark


def frame(spark: Any, rows: int, partitions: int) -> Any:
    """4 columns made by Spark from ``range``: cheap to make, not constant (no run of one
    value that Parquet's dictionary or run-length encoding would reduce to nothing)."""
    return spark.range(0, rows, 1, partitions).selectExpr(
        "id",
        "cast(id % 3 + 2023 as int) as year",
        "id * 1.5 as amount",
        "concat('region-', cast(id % 97 as string)) as region",
    )


def with_store_options(writer: Any, prefix: str, options: dict[str, Any]) -> Any:
    for name, value in options.items():
        writer = writer.option(f"{prefix}{name}", json.dumps(value))
    return writer


def write(route: str, df: Any, store: Store, dest: str, log: str | None = None) -> None:
    """One save() by ``route`` to ``dest``."""
    if route == "spark":
        df.write.mode("overwrite").parquet(dest)
    elif route == "spark-noop":
        df.write.format("noop").mode("overwrite").save()
    elif route == "python-noop":
        df.write.format("bench-noop").mode("append").save()
    elif route == "python-direct":
        writer = df.write.format("bench-direct").mode("append")
        writer.option("fsspec", json.dumps(store.options)).save(dest)
    elif route == "magicfs":
        source = "magicfs" if log is None else "bench-magicfs-profiled"
        writer = df.write.format(source).mode("overwrite")
        if log is not None:
            writer = writer.option("profile_log", log)
        with_store_options(writer, "storage_options.", store.options).save(dest)
    else:
        raise ValueError(route)


def writes_files(route: str) -> bool:
    return route in ("spark", "python-direct", "magicfs")


@dataclasses.dataclass
class Row:
    store: str
    rows: int
    partitions: int
    seconds: dict[str, list[float]]
    load: list[float]
    profile: dict[str, float] = dataclasses.field(default_factory=dict)


def timed_run(route: str, df: Any, store: Store, rows: int) -> float:
    """Seconds of one save() by ``route``; checks what it wrote (every row, once)."""
    dest = f"{store.root}/{route}-{uuid.uuid4().hex[:8]}"
    started_at = time.perf_counter()
    write(route, df, store, dest)
    seconds = time.perf_counter() - started_at
    if writes_files(route):
        files, written = store.parquet_rows(dest)
        if written != rows or files < 1:
            raise SystemExit(
                f"{route} on {store.name}: {written} rows in {files} files, not {rows}"
            )
        store.remove(dest)
    return seconds


def measure(
    spark: Any, stores: list[Store], rows: int, partitions: int, runs: int, profile: bool
) -> list[Row]:
    """Every route on every store for one (rows, partitions); the routes interleaved."""
    df = frame(spark, rows, partitions)
    local = next((s for s in stores if s.name == "local"), None)
    plan: list[tuple[str, Store]] = []
    for store in stores:
        for route in ROUTES:
            if route == "spark" and store.name != "local":
                continue
            if route in ("spark-noop", "python-noop") and store is not stores[0]:
                continue  # nothing is written: once per row is enough
            plan.append((route, store))
    if local is None:
        plan = [step for step in plan if step[0] != "spark"]
    for route, store in plan:  # warm-up: the JIT, the Python workers, the servers
        timed_run(route, df, store, rows)
    seconds: dict[tuple[str, str], list[float]] = {step_key(s): [] for s in plan}
    load: list[float] = []
    for run in range(runs):
        shift = run % len(plan)
        for route, store in plan[shift:] + plan[:shift]:
            seconds[step_key((route, store))].append(timed_run(route, df, store, rows))
        load.append(os.getloadavg()[0])
    result = []
    for store in stores:
        shared = ("spark", "spark-noop", "python-noop")  # run once per row, shown on each store
        mine = {r: seconds[(r, s.name)] for r, s in plan if s is store or r in shared}
        row = Row(store.name, rows, partitions, mine, load)
        if profile:
            row.profile = profiled(df, store, rows)
        result.append(row)
    return result


def step_key(step: tuple[str, Store]) -> tuple[str, str]:
    return step[0], step[1].name


def profiled(df: Any, store: Store, rows: int) -> dict[str, float]:
    """The magicfs route's stages, summed over its tasks, for one run."""
    with tempfile.NamedTemporaryFile(prefix="spark-bench-profile-", delete=False) as f:
        log = f.name
    dest = f"{store.root}/profiled-{uuid.uuid4().hex[:8]}"
    try:
        started_at = time.perf_counter()
        write("magicfs", df, store, dest, log=log)
        wall = time.perf_counter() - started_at
        stages: dict[str, float] = {"wall": wall}
        with open(log) as lines:
            for line in lines:
                entry = json.loads(line)
                stages[entry["stage"]] = stages.get(entry["stage"], 0.0) + entry["seconds"]
    finally:
        os.unlink(log)
        store.remove(dest)
    return stages


# -- the report -----------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(rows: list[Row], spark_local: Callable[[Row], list[float] | None]) -> None:
    for row in rows:
        reference = spark_local(row)
        print(
            f"\n{row.store}: {row.rows:,} rows, {row.partitions} partitions; load average "
            f"{min(row.load):.1f}-{max(row.load):.1f} on {os.cpu_count()} cores"
        )
        print(f"  {'route':<14} {'median s (min-max)':>22} {'rows/s':>12} {'x spark':>9}")
        for route in ROUTES:
            values = row.seconds.get(route)
            if not values:
                continue
            ratio = f"{median(values) / median(reference):.2f}x" if reference else "-"
            spread = f"{median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
            print(f"  {route:<14} {spread:>22} {row.rows / median(values):>12,.0f} {ratio:>9}")
        if row.profile:
            print("  magicfs's stages, one run (tasks' seconds summed over the tasks):")
            for stage, value in row.profile.items():
                print(f"    {stage:<28} {value:7.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="local,moto,rgw")
    parser.add_argument("--rows", default="2000000,8000000", help="sizes, comma-separated")
    parser.add_argument("--partitions", default="2,8,32", help="comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2, help="local[N]")
    parser.add_argument("--profile", action="store_true", help="time magicfs's stages")
    parser.add_argument("--quick", action="store_true", help="local and moto, 2M rows, 8, 1 run")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.quick:
        args.stores, args.rows, args.partitions, args.runs = "local,moto", "2000000", "8", 1
    sizes = [int(v) for v in args.rows.split(",")]
    partition_counts = [int(v) for v in args.partitions.split(",")]
    spark = session(args.cores)
    results: list[Row] = []
    with stores_started(args.stores.split(",")) as stores:
        for store in stores:
            print(f"{store.name}: {store.describe}")
        for rows in sizes:
            for partitions in partition_counts:
                measured = measure(spark, stores, rows, partitions, args.runs, args.profile)
                results.extend(measured)
                report(measured, lambda row: row.seconds.get("spark"))
                sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=1)
    spark.stop()


if __name__ == "__main__":
    main()
