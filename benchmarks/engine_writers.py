"""Dask, Ray and DuckDB: each engine's own Parquet writer against its magicfs route.

    python benchmarks/engine_writers.py                          # all three, local and moto, 3 runs
    python benchmarks/engine_writers.py --engines dask --runs 5
    python benchmarks/engine_writers.py --quick                  # 1,000,000 rows, one run

The same table (``--rows`` rows of the Spark benchmark's 4 columns: ``id`` bigint,
``year`` int, ``amount`` double, ``region`` string), built once in memory, written as
Parquet (snappy) in ``--partitions`` parts by each engine twice in the same run, the
two routes interleaved (their order alternating), after one warm-up run of each; each
timed from the call until it returns (every file visible), and every run's output
checked (its rows, read back from the files' footers):

* **Dask** (threaded scheduler): ``ddf.to_parquet(dest, storage_options=...)``, Dask's
  own writer (each partition written at its final name), against
  ``magicfs.dask.to_parquet(ddf, dest, storage_options=...)``.
* **Ray** (``ray.init(num_cpus=2)`` on this machine, the dataset materialised first):
  ``ds.write_parquet(dest, filesystem=...)`` (Ray's own writer; on S3 through s3fs as a
  pyarrow filesystem) against ``ds.write_datasink(magicfs.ray.CommittedDatasink(...))``.
* **DuckDB**: ``COPY t TO dest (FORMAT parquet, PER_THREAD_OUTPUT true)`` with DuckDB's
  own file writer on local disk; on S3 through plain s3fs registered on the connection
  (DuckDB's ``httpfs`` extension is downloaded on first use, which this machine cannot
  do), against ``magicfs.duckdb.copy("FROM t", dest, per_thread_output=True, ...)``.
  DuckDB runs ``--partitions`` threads.

The native routes are unsafe: a failed job leaves the files written so far, and a
retried task may leave two. Destinations (``--stores``): ``local`` (a temporary
directory), ``moto`` (the embedded server of ``magicfs.local_s3()``, in its own process, no added
latency) and ``rgw`` (Ceph RGW, memstore, from ``tests/helpers/rgw.py``, no added
latency; skipped with a message where Ceph is not installed). moto copies a whole
object in Python when it completes a multipart upload, which every file of the magic
committer is, where a native writer's file of less than s3fs's 50 MiB block is one
``PutObject``: RGW shows what a production store charges for that.

Reported per (engine, store): median seconds of ``--runs`` (min-max), rows per second,
and magicfs's time divided by the native route's. The load average is printed: on a
shared machine compare only the two routes of one row.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for folder in (ROOT, HERE):
    if folder not in sys.path:
        sys.path.insert(0, folder)

import fsspec  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from bench_servers import started  # noqa: E402

import magicfs  # noqa: E402

ENGINES = ("dask", "ray", "duckdb")
STORES = ("local", "moto", "rgw")
BUCKET = "bench-engines"


@dataclass
class Store:
    """One destination: its root URL and fsspec options."""

    name: str
    root: str
    options: dict[str, Any]

    def fs(self) -> Any:
        fs = fsspec.core.url_to_fs(self.root, **self.options)[0]
        fs.invalidate_cache()
        return fs

    def check(self, dest: str, rows: int) -> None:
        """Exactly ``rows`` rows in the Parquet files under ``dest`` (read from footers)."""
        fs, path = fsspec.core.url_to_fs(dest, **self.options)
        fs.invalidate_cache()
        written = 0
        files = [p for p in fs.find(path) if p.endswith(".parquet")]
        for name in files:
            with fs.open(name, "rb") as f:
                written += pq.ParquetFile(f).metadata.num_rows
        if written != rows:
            raise SystemExit(f"{dest}: {written} rows in {len(files)} files, not {rows}")
        fs.rm(path, recursive=True)


@contextlib.contextmanager
def stores_started(names: list[str]) -> Iterator[list[Store]]:
    with contextlib.ExitStack() as stack:
        result = []
        for name in names:
            if name == "local":
                directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="engine-bench-"))
                result.append(Store("local", f"file://{directory}", {}))
            elif name == "moto":
                result.append(Store("moto", f"s3://{BUCKET}", magicfs.local_s3(bucket=BUCKET)))
            elif name == "rgw":
                target = stack.enter_context(started("rgw", 0.0, 0.0))
                if target is None:
                    continue  # Ceph is not installed: skipped, with a message
                target.warm_up()
                target.boto3_client().create_bucket(Bucket=BUCKET)
                result.append(Store("rgw", f"s3://{BUCKET}", target.storage_options))
            else:
                raise SystemExit(f"--stores: unknown store {name!r}; choose from {STORES}")
        yield result


def table(rows: int) -> pa.Table:
    """The Spark benchmark's 4 columns, made with numpy (not constant: no column that
    Parquet's dictionary or run-length encoding reduces to nothing)."""
    ids = np.arange(rows, dtype=np.int64)
    regions = np.array([f"region-{i}" for i in range(97)], dtype=object)
    return pa.table(
        {
            "id": ids,
            "year": (ids % 3 + 2023).astype(np.int32),
            "amount": ids * 1.5,
            "region": pa.array(regions[ids % 97], pa.string()),
        }
    )


# -- the routes: (native, magicfs) per engine, each ``(dest) -> None`` -------------------------


Route = Callable[[str], None]


def dask_routes(data: pa.Table, partitions: int, store: Store) -> tuple[Route, Route]:
    import dask
    import dask.dataframe as dd

    import magicfs.dask

    dask.config.set(scheduler="threads", num_workers=2)
    ddf = dd.from_pandas(data.to_pandas(), npartitions=partitions).persist()

    def native(dest: str) -> None:
        ddf.to_parquet(dest, storage_options=store.options, write_index=False)

    def committed(dest: str) -> None:
        magicfs.dask.to_parquet(ddf, dest, storage_options=store.options, write_index=False)

    return native, committed


def ray_routes(data: pa.Table, partitions: int, store: Store) -> tuple[Route, Route]:
    import ray
    import ray.data
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    import magicfs.ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
    dataset = ray.data.from_arrow(data).repartition(partitions).materialize()
    filesystem = PyFileSystem(FSSpecHandler(store.fs())) if store.name != "local" else None

    def native(dest: str) -> None:
        path = dest.split("://", 1)[1]
        if filesystem is None:
            dataset.write_parquet(path)
        else:
            dataset.write_parquet(path, filesystem=filesystem)

    def committed(dest: str) -> None:
        sink = magicfs.ray.CommittedDatasink(dest, storage_options=store.options)
        dataset.write_datasink(sink)

    return native, committed


def duckdb_routes(data: pa.Table, partitions: int, store: Store) -> tuple[Route, Route]:
    import duckdb

    import magicfs.duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {partitions}")
    con.register("arrow_data", data)
    con.execute("CREATE TABLE t AS FROM arrow_data")
    con.unregister("arrow_data")

    def native(dest: str) -> None:
        target = dest.split("://", 1)[1] if store.name == "local" else dest
        if store.name != "local":
            con.register_filesystem(store.fs())
        try:
            con.execute(
                f"COPY t TO '{target}' (FORMAT parquet, PER_THREAD_OUTPUT true, "
                "OVERWRITE_OR_IGNORE true)"
            )
        finally:
            if store.name != "local":
                con.unregister_filesystem("s3")

    def committed(dest: str) -> None:
        magicfs.duckdb.copy(
            "FROM t",
            dest,
            connection=con,
            storage_options=store.options,
            format="parquet",
            per_thread_output=True,
        )

    return native, committed


ROUTES = {"dask": dask_routes, "ray": ray_routes, "duckdb": duckdb_routes}


# -- the runs -----------------------------------------------------------------------------------


@dataclass
class Row:
    engine: str
    store: str
    rows: int
    partitions: int
    native: list[float]
    magicfs: list[float]
    load: list[float]


def timed(route: Route, store: Store, rows: int) -> float:
    dest = f"{store.root}/run-{uuid.uuid4().hex[:8]}"
    started_at = time.perf_counter()
    route(dest)
    seconds = time.perf_counter() - started_at
    store.check(dest, rows)
    return seconds


def measure(engine: str, data: pa.Table, partitions: int, store: Store, runs: int) -> Row:
    native, committed = ROUTES[engine](data, partitions, store)
    timed(native, store, data.num_rows)  # warm-up: imports, workers, connections
    timed(committed, store, data.num_rows)
    row = Row(engine, store.name, data.num_rows, partitions, [], [], [])
    for run in range(runs):
        order = [("native", native), ("magicfs", committed)]
        for name, route in order if run % 2 == 0 else order[::-1]:
            getattr(row, name).append(timed(route, store, data.num_rows))
        row.load.append(os.getloadavg()[0])
    return row


def report(row: Row) -> None:
    native, ours = statistics.median(row.native), statistics.median(row.magicfs)
    print(
        f"\n{row.engine} to {row.store}: {row.rows:,} rows in {row.partitions} parts; load "
        f"average {min(row.load):.1f}-{max(row.load):.1f} on {os.cpu_count()} cores"
    )
    for name, values in (("native", row.native), ("magicfs", row.magicfs)):
        spread = f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
        rate = row.rows / statistics.median(values)
        print(f"  {name:<8} {spread:>20} s {rate:>12,.0f} rows/s")
    print(f"  magicfs x native: {ours / native:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--stores", default="local,moto", help=f"from {', '.join(STORES)}")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1,000,000 rows, one run")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.runs = 1_000_000, 1
    data = table(args.rows)
    with stores_started(args.stores.split(",")) as stores:
        for engine in args.engines.split(","):
            if engine not in ROUTES:
                raise SystemExit(f"--engines: unknown engine {engine!r}; choose from {ENGINES}")
            for store in stores:
                report(measure(engine, data, args.partitions, store, args.runs))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
