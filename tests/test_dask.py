"""Dask integration (``magicfs.dask``) on real schedulers: threads, and a distributed
``LocalCluster`` of two worker processes whose workers really die (SIGKILL).

Destinations: the moto S3 server over HTTP (magic committer) and a local directory
(manifest committer). Every test asserts what a reader would see: the files listed in
the destination, their bytes read back with pandas, and the multipart uploads left.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import signal
import time
from dataclasses import dataclass
from typing import Any

import dask
import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import job_record, pending_uploads
from helpers.s3_targets import store_fixture

import magicfs
import magicfs.dask
from magicfs.committers import TaskCommitMessage

NPARTITIONS = 4
# Dask holds strings as pyarrow-backed; pandas 2 reads a "string" column back with
# python storage unless told otherwise (pandas 3 picks pyarrow itself).


def strings_as_dask_holds_them() -> Any:
    return pd.option_context("mode.string_storage", "pyarrow")


# -- data and destinations --------------------------------------------------------------------


def sales(rows: int = 400) -> pd.DataFrame:
    """A frame with the dtypes Parquet must keep: ints, floats, strings, categoricals,
    timestamps with a time zone, booleans and nullable integers."""
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype="int64"),
            "region": pd.Series([f"region-{i % 7}" for i in range(rows)], dtype="string"),
            "kind": pd.Categorical(["a", "b", "c", "d"] * (rows // 4)),
            "at": pd.date_range("2024-01-01", periods=rows, freq="h", tz="UTC"),
            "paid": [i % 3 == 0 for i in range(rows)],
            "units": pd.array([i if i % 5 else None for i in range(rows)], dtype="Int64"),
            "amount": np.linspace(0.0, 99.5, rows),
            "year": (np.arange(rows) % 3 + 2023).astype("int64"),
        }
    )


def sales_ddf(rows: int = 400, npartitions: int = NPARTITIONS) -> dd.DataFrame:
    return dd.from_pandas(sales(rows), npartitions=npartitions)


@dataclass
class Dest:
    """A destination as a reader sees it."""

    url: str
    storage_options: dict[str, Any] | None
    fs: fsspec.AbstractFileSystem
    bucket: str | None = None
    client: Any = None

    @property
    def root(self) -> str:
        return self.fs._strip_protocol(self.url).rstrip("/")

    def files(self) -> list[str]:
        """Every file below the destination, relative to it (temporary ones included)."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root)
        except FileNotFoundError:
            return []
        return sorted(r for p in found if not job_record(r := p[len(self.root) + 1 :]))

    def data_files(self) -> list[str]:
        """What readers see: no path element starts with ``_`` or ``.``."""
        return [f for f in self.files() if not any(e.startswith(("_", ".")) for e in f.split("/"))]

    def pending(self) -> list[dict]:
        """Multipart uploads waiting in the bucket (S3); a local disk has none."""
        return pending_uploads(self.client, self.bucket) if self.client else []

    def read_parquet(self, **kwargs: Any) -> pd.DataFrame:
        with strings_as_dask_holds_them():
            return pd.read_parquet(self.url, storage_options=self.storage_options, **kwargs)

    def success(self) -> dict:
        return json.loads(self.fs.cat_file(f"{self.root}/_SUCCESS"))


@pytest.fixture(params=["s3", "local"])
def dest(request, tmp_path) -> Dest:
    """moto (``s3``), a local directory, or Ceph RGW (``rgw``: by indirect parametrization)."""
    if request.param in ("s3", "rgw"):
        bucket = store_fixture(request, request.param, "bucket")
        server = store_fixture(request, request.param, "server")
        options = {**server.storage_options, "skip_instance_cache": True}
        return Dest(
            f"s3://{bucket}/sales",
            options,
            fsspec.filesystem("s3", **options),
            bucket,
            store_fixture(request, request.param, "client"),
        )
    return Dest(f"file://{tmp_path}/sales", None, fsspec.filesystem("file"))


#: moto, a local directory and, for one job, a production S3 implementation (Ceph RGW).
WITH_RGW = ["s3", "local", pytest.param("rgw", marks=pytest.mark.rgw)]


@pytest.fixture
def s3_dest(bucket, s3_options, s3_client) -> Dest:
    options = {**s3_options, "skip_instance_cache": True}
    return Dest(
        f"s3://{bucket}/sales", options, fsspec.filesystem("s3", **options), bucket, s3_client
    )


def assert_clean(dest: Dest) -> None:
    """No multipart upload parked, no temporary tree left behind."""
    assert dest.pending() == []
    assert [f for f in dest.files() if f.startswith(("__magic", "_temporary"))] == []


def assert_nothing_left(dest: Dest) -> None:
    """A failed job: nothing at all under the destination, nothing parked."""
    assert dest.files() == []
    assert dest.pending() == []


# -- writers that run on the workers (module level: they pickle by reference) ------------------


def parquet_bytes(frame: pd.DataFrame, attempt_id: str) -> bytes:
    """The partition as Parquet, its writer's attempt id in the file's metadata."""
    table = pa.Table.from_pandas(frame)
    table = table.replace_schema_metadata(
        {**table.schema.metadata, b"magicfs.test.attempt": attempt_id.encode()}
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def written_by(dest: Dest, relative: str) -> str:
    """The attempt id recorded in a published Parquet file."""
    with dest.fs.open(f"{dest.root}/{relative}", "rb") as handle:
        return pq.read_metadata(handle).metadata[b"magicfs.test.attempt"].decode()


def wait_until_recorded(task: magicfs.dask.PartitionTask, path: str) -> None:
    """Until the open file exists in the store (S3: the upload's marker is saved)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        task.fs.fs.invalidate_cache()
        if task.fs.exists(path):
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@dataclass(frozen=True)
class ParquetPerPartition:
    """Writes each partition as one Parquet file; optionally dies half-way, once.

    ``die_in`` names a partition whose first execution writes half its bytes, waits
    until its upload (or file) is recorded, notes its attempt id in ``marker`` and
    SIGKILLs its own process — a worker lost mid-write. Later executions see the
    marker and write normally.
    """

    marker: str = ""
    die_in: int | None = None

    def __call__(self, task: magicfs.dask.PartitionTask, frame: pd.DataFrame) -> int:
        relative = f"part-{task.partition_id:05d}.parquet"
        data = parquet_bytes(frame, task.attempt.attempt_id)
        with task.fs.open(task.path(relative), "wb") as handle:
            if task.partition_id == self.die_in and not os.path.exists(self.marker):
                handle.write(data[: len(data) // 2])
                handle.flush()
                wait_until_recorded(task, task.path(relative))
                pathlib.Path(self.marker).write_text(task.attempt.attempt_id)
                os.kill(os.getpid(), signal.SIGKILL)
            handle.write(data)
        return len(frame)


def record_what_readers_see(
    frame: pd.DataFrame,
    url: str,
    storage_options: dict | None,
    log_dir: str,
    partition_info: dict | None = None,
) -> pd.DataFrame:
    """Runs inside each partition's task, before its write: what is in the destination?"""
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    fs.invalidate_cache()
    try:
        files = [path[len(root) + 1 :] for path in fs.find(root)]
    except FileNotFoundError:
        files = []
    visible = [f for f in files if not any(e.startswith(("_", ".")) for e in f.split("/"))]
    committed = [
        f for f in files if "/tasks/" in f and f.endswith((".pendingset", "-manifest.json"))
    ]
    number = partition_info["number"] if partition_info else -1
    report = {"visible": visible, "committed_attempts": len(committed)}
    pathlib.Path(log_dir, f"partition-{number}.json").write_text(json.dumps(report))
    return frame


def fail_in_partition(
    frame: pd.DataFrame, victim: int | None, partition_info: dict | None = None
) -> pd.DataFrame:
    """Raise in partition ``victim`` (in every partition for ``None``)."""
    number = partition_info["number"] if partition_info else -1
    if victim is None or number == victim:
        raise RuntimeError(f"bad record in partition {number}")
    return frame


def fail_last(
    frame: pd.DataFrame,
    victim: int,
    url: str,
    storage_options: dict | None,
    partition_info: dict | None = None,
) -> pd.DataFrame:
    """Partition ``victim`` waits until every other partition is written (a visible
    file, or a committed task attempt), then raises: a job failing at its end."""
    if partition_info["number"] != victim:
        return frame
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        fs.invalidate_cache()
        try:
            files = fs.find(root)
        except FileNotFoundError:
            files = []
        visible = [f for f in files if f.endswith(".parquet") and "/_" not in f]
        committed = [f for f in files if "/tasks/" in f and f.endswith(".pendingset")]
        written = visible + committed
        if len(written) >= NPARTITIONS - 1:
            break
        time.sleep(0.05)
    raise RuntimeError(f"bad record in partition {victim}")


def failing(ddf: dd.DataFrame, victim: int | None) -> dd.DataFrame:
    return ddf.map_partitions(fail_in_partition, victim, meta=ddf._meta)


def die_once_in_partition(
    frame: pd.DataFrame, victim: int, marker: str, partition_info: dict | None = None
) -> pd.DataFrame:
    """SIGKILL the worker the first time partition ``victim`` is computed."""
    if partition_info and partition_info["number"] == victim and not os.path.exists(marker):
        pathlib.Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return frame


# -- a distributed cluster of real worker processes ----------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    """Two single-threaded worker processes under nannies (which restart killed workers)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            worker_dashboard_address=None,
        ) as local_cluster,
        Client(local_cluster, set_as_default=False) as client,
    ):
        yield client


# -- to_parquet / to_csv with the threaded scheduler ----------------------------------------------


@pytest.mark.parametrize("dest", WITH_RGW, indirect=True)
def test_to_parquet_round_trips_exactly(dest):
    ddf = sales_ddf()
    with dask.config.set(scheduler="threads"):
        summary = magicfs.dask.to_parquet(ddf, dest.url, storage_options=dest.storage_options)
    assert (summary.files, summary.tasks) == (NPARTITIONS, NPARTITIONS)
    assert summary.committer == ("magic" if dest.bucket else "manifest")
    assert dest.data_files() == [
        f"part-{p:05d}-{summary.job_id}.parquet" for p in range(NPARTITIONS)
    ]
    assert dest.files() == ["_SUCCESS", *dest.data_files()]
    pd.testing.assert_frame_equal(dest.read_parquet(), ddf.compute())
    back = dd.read_parquet(dest.url, storage_options=dest.storage_options)
    pd.testing.assert_frame_equal(back.compute(), ddf.compute())
    success = dest.success()
    assert success["jobId"] == summary.job_id and success["metrics"]["rows"] == 400
    assert_clean(dest)


def test_to_parquet_with_the_process_scheduler(tmp_path):
    ddf = sales_ddf()
    dest = f"file://{tmp_path}/sales"
    summary = magicfs.dask.to_parquet(
        ddf, dest, compute_kwargs={"scheduler": "processes", "num_workers": 2}
    )
    assert summary.files == NPARTITIONS
    with strings_as_dask_holds_them():
        pd.testing.assert_frame_equal(pd.read_parquet(dest), ddf.compute())


def test_to_parquet_partition_on(dest):
    ddf = sales_ddf()
    summary = magicfs.dask.to_parquet(
        ddf, dest.url, storage_options=dest.storage_options, partition_on=["year"]
    )
    files = dest.data_files()
    assert {f.split("/")[0] for f in files} == {"year=2023", "year=2024", "year=2025"}
    assert len(files) == summary.files == 3 * NPARTITIONS  # one per partition per year
    back = dest.read_parquet()
    assert isinstance(back["year"].dtype, pd.CategoricalDtype)  # from the directory names
    back = back.assign(year=back["year"].astype("int64")).sort_values("id", ignore_index=True)
    expected = ddf.compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(back[expected.columns], expected)
    assert_clean(dest)


def test_to_csv_round_trips(dest):
    ddf = sales_ddf()[["id", "region", "amount", "year"]]
    summary = magicfs.dask.to_csv(
        ddf, dest.url, storage_options=dest.storage_options, index=False, compression="gzip"
    )
    names = dest.data_files()
    assert names == [f"part-{p:05d}-{summary.job_id}.csv.gz" for p in range(NPARTITIONS)]
    expected = ddf.compute()
    with strings_as_dask_holds_them():
        back = pd.concat(
            [
                pd.read_csv(
                    dest.fs.open(f"{dest.root}/{name}", "rb"),
                    compression="gzip",
                    dtype={"id": "int64", "region": "string", "amount": "float64", "year": "int64"},
                )
                for name in names
            ],
            ignore_index=True,
        )
    pd.testing.assert_frame_equal(back, expected.reset_index(drop=True))
    assert_clean(dest)


def test_nothing_is_visible_until_the_job_commits(dest, tmp_path):
    """Each partition's task looks at the destination before writing: while earlier
    partitions have committed their attempts, readers still see nothing."""
    log_dir = tmp_path / "seen"
    log_dir.mkdir()
    ddf = sales_ddf()
    checked = ddf.map_partitions(
        record_what_readers_see, dest.url, dest.storage_options, str(log_dir), meta=ddf._meta
    )
    magicfs.dask.to_parquet(
        checked,
        dest.url,
        storage_options=dest.storage_options,
        compute_kwargs={"scheduler": "sync"},  # partitions one after another
    )
    reports = [json.loads(p.read_text()) for p in sorted(log_dir.glob("partition-*.json"))]
    assert len(reports) == NPARTITIONS
    assert all(report["visible"] == [] for report in reports)
    # the later partitions did run after earlier ones had committed their attempts
    assert sorted(r["committed_attempts"] for r in reports) == list(range(NPARTITIONS))
    assert len(dest.data_files()) == NPARTITIONS


def test_a_failing_partition_aborts_the_job(dest):
    ddf = failing(sales_ddf(), 2)
    with pytest.raises(RuntimeError, match="bad record in partition 2") as raised:
        magicfs.dask.to_parquet(ddf, dest.url, storage_options=dest.storage_options)
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "was aborted: nothing of it is visible" in notes and dest.root in notes
    assert_nothing_left(dest)


def test_replace_keeps_the_old_data_when_the_job_fails(dest):
    old = sales_ddf(40, 2)
    magicfs.dask.to_parquet(old, dest.url, storage_options=dest.storage_options)
    before = dest.data_files()
    broken = failing(sales_ddf(), 3)
    with pytest.raises(RuntimeError, match="bad record"):
        magicfs.dask.to_parquet(
            broken, dest.url, storage_options=dest.storage_options, conflict_mode="replace"
        )
    assert dest.data_files() == before
    pd.testing.assert_frame_equal(dest.read_parquet(), old.compute())
    magicfs.dask.to_parquet(
        sales_ddf(), dest.url, storage_options=dest.storage_options, conflict_mode="replace"
    )
    pd.testing.assert_frame_equal(dest.read_parquet(), sales_ddf().compute())
    assert_clean(dest)


def test_fail_mode_refuses_a_destination_with_data(dest):
    magicfs.dask.to_parquet(sales_ddf(40, 2), dest.url, storage_options=dest.storage_options)
    with pytest.raises(magicfs.errors.CommitConflictError, match="already holds data"):
        magicfs.dask.to_parquet(
            sales_ddf(), dest.url, storage_options=dest.storage_options, conflict_mode="fail"
        )
    assert len(dest.data_files()) == 2
    assert_clean(dest)


def test_a_duplicate_attempt_commits_but_only_the_reported_one_is_published(s3_dest):
    """A partition executed twice, both executions committing (a speculative copy, or
    a zombie worker): the job publishes the one whose message reached the client."""
    committer = magicfs.committer_for(s3_dest.url, storage_options=s3_dest.storage_options)
    committer.setup_job()
    writer = ParquetPerPartition()
    duplicates: list[TaskCommitMessage] = []

    def write(frame: pd.DataFrame, index: int) -> TaskCommitMessage:
        if index == 1:  # an extra execution that commits, but whose result Dask drops
            duplicates.append(magicfs.dask.write_partition(committer, writer, frame, index))
        return magicfs.dask.write_partition(committer, writer, frame, index)

    ddf = sales_ddf()
    tasks = [dask.delayed(write)(part, i) for i, part in enumerate(ddf.to_delayed())]
    messages = list(dask.compute(*tasks, scheduler="threads"))
    assert duplicates[0].task_id == messages[1].task_id
    assert duplicates[0].attempt_id != messages[1].attempt_id  # two committed attempts
    summary = committer.commit_job(messages)
    assert summary.files == NPARTITIONS
    assert s3_dest.data_files() == [f"part-{p:05d}.parquet" for p in range(NPARTITIONS)]
    assert written_by(s3_dest, "part-00001.parquet") == messages[1].attempt_id
    pd.testing.assert_frame_equal(s3_dest.read_parquet(), ddf.compute())
    assert_clean(s3_dest)  # the duplicate's upload was aborted, not completed


def test_bad_arguments_fail_before_anything_is_written(s3_dest):
    ddf = sales_ddf()
    with pytest.raises(TypeError, match="conflict_mode='replace'"):
        magicfs.dask.to_parquet(ddf, s3_dest.url, overwrite=True)
    with pytest.raises(TypeError, match="single_file"):
        magicfs.dask.to_csv(ddf, s3_dest.url, single_file=True)
    with pytest.raises(ValueError, match=r"partition_on columns not in the data: \['nope'\]"):
        magicfs.dask.to_parquet(ddf, s3_dest.url, partition_on="nope")
    with pytest.raises(ValueError, match="pyarrow"):
        magicfs.dask.to_parquet(ddf, s3_dest.url, engine="fastparquet")
    assert s3_dest.files() == []


def test_committers_and_attempts_pickle_with_unique_attempt_numbers(s3_dest):
    import pickle

    committer = magicfs.committer_for(s3_dest.url, storage_options=s3_dest.storage_options)
    clone = pickle.loads(pickle.dumps(committer))
    assert (clone.job_id, clone.url) == (committer.job_id, committer.url)
    from magicfs.integrations.engines import new_attempt_number

    numbers = {new_attempt_number() for _ in range(10_000)}
    assert len(numbers) == 10_000 and all(0 < n < 2**48 for n in numbers)
    attempt = committer.task_attempt(3, new_attempt_number())
    assert pickle.loads(pickle.dumps(attempt)) == attempt


# -- dask.distributed: two worker processes, killed for real ---------------------------------------


@pytest.mark.slow
def test_distributed_to_parquet_round_trips(cluster, dest):
    ddf = sales_ddf()
    with cluster.as_current():
        summary = magicfs.dask.to_parquet(ddf, dest.url, storage_options=dest.storage_options)
    assert summary.files == NPARTITIONS
    pd.testing.assert_frame_equal(dest.read_parquet(), ddf.compute())
    assert_clean(dest)


@pytest.mark.slow
def test_distributed_in_memory_tasks_commit_on_their_workers(cluster, s3_dest):
    """``in_memory=True`` on worker processes: each task is set up, written and committed
    on one worker, so its commits never leave it, and the job publishes every partition."""
    ddf = sales_ddf()
    with cluster.as_current():
        summary = magicfs.dask.to_parquet(
            ddf,
            s3_dest.url,
            storage_options=s3_dest.storage_options,
            committer_options={"in_memory": True},
        )
    assert (summary.files, summary.tasks) == (NPARTITIONS, NPARTITIONS)
    assert s3_dest.success()["diagnostics"]["magicfs.in_memory"] == "true"
    pd.testing.assert_frame_equal(s3_dest.read_parquet(), ddf.compute())
    assert_clean(s3_dest)


@pytest.mark.slow
def test_distributed_worker_killed_mid_write_is_rerun(cluster, dest, tmp_path):
    """Partition 1's first execution dies (SIGKILL) half-way through its file, its
    upload recorded; the nanny restarts the worker, Dask runs partition 1 again, and
    only the complete re-run is published. The dead attempt's upload is swept."""
    marker = tmp_path / "killed"
    ddf = sales_ddf()
    with cluster.as_current():
        summary = magicfs.dask.write_partitions(
            ddf,
            ParquetPerPartition(str(marker), die_in=1),
            dest.url,
            storage_options=dest.storage_options,
        )
    killed_attempt = marker.read_text()  # the first execution really died mid-write
    assert (summary.files, summary.tasks) == (NPARTITIONS, NPARTITIONS)
    assert dest.data_files() == [f"part-{p:05d}.parquet" for p in range(NPARTITIONS)]
    rerun = written_by(dest, "part-00001.parquet")
    assert rerun != killed_attempt and rerun.split("_")[-2] == killed_attempt.split("_")[-2]
    pd.testing.assert_frame_equal(dest.read_parquet(), ddf.compute())
    assert dest.success()["metrics"]["rows"] == 400
    assert_clean(dest)


def commit_then_die(
    frame: pd.DataFrame, committer: Any, marker: str, partition_info: dict | None = None
) -> pd.DataFrame:
    """The recipe for your own graphs; partition 1's first execution commits its
    attempt and then loses its worker before the result reaches the client."""
    index = partition_info["number"]
    message = magicfs.dask.write_partition(committer, ParquetPerPartition(), frame, index)
    if index == 1 and not os.path.exists(marker):
        pathlib.Path(marker).write_text(message.attempt_id)
        os.kill(os.getpid(), signal.SIGKILL)
    return pd.DataFrame({"message": [message.to_json()]})


@pytest.mark.slow
def test_distributed_duplicate_committed_attempt_is_never_published(cluster, s3_dest, tmp_path):
    """Partition 1 commits, then its worker dies: Dask runs it again and that
    execution commits too. The job commits the message Dask delivered; the first
    committed attempt's upload is aborted, never completed."""
    marker = tmp_path / "committed-then-killed"
    committer = magicfs.committer_for(s3_dest.url, storage_options=s3_dest.storage_options)
    committer.setup_job()
    ddf = sales_ddf()
    meta = pd.DataFrame({"message": pd.Series([], dtype=object)})
    with cluster.as_current():
        result = ddf.map_partitions(commit_then_die, committer, str(marker), meta=meta).compute()
    messages = [TaskCommitMessage.from_json(m) for m in result["message"]]
    first_attempt = marker.read_text()
    assert messages[1].attempt_id != first_attempt  # two committed attempts of partition 1
    summary = committer.commit_job(messages)
    assert summary.files == NPARTITIONS
    assert s3_dest.data_files() == [f"part-{p:05d}.parquet" for p in range(NPARTITIONS)]
    assert written_by(s3_dest, "part-00001.parquet") == messages[1].attempt_id
    pd.testing.assert_frame_equal(s3_dest.read_parquet(), ddf.compute())
    assert_clean(s3_dest)


@dataclass(frozen=True)
class FailingWriter:
    """Writes half of partition ``victim`` and raises (a bug, a full disk, a bad row)."""

    victim: int

    def __call__(self, task: magicfs.dask.PartitionTask, frame: pd.DataFrame) -> int:
        with task.fs.open(task.path(f"part-{task.partition_id:05d}.parquet"), "wb") as handle:
            data = parquet_bytes(frame, task.attempt.attempt_id)
            handle.write(data[: len(data) // 2])
            if task.partition_id == self.victim:
                raise ValueError(f"cannot encode a row of partition {self.victim}")
            handle.write(data[len(data) // 2 :])
        return len(frame)


@pytest.mark.slow
def test_distributed_failure_aborts_after_every_task_has_stopped(cluster, dest):
    """The first partition fails at once while the other seven are still to run or
    running: the job is aborted only after all of them stopped, so nothing written by
    a straggler survives."""
    with cluster.as_current(), pytest.raises(ValueError, match="partition 0") as raised:
        magicfs.dask.write_partitions(
            sales_ddf(800, 8), FailingWriter(0), dest.url, storage_options=dest.storage_options
        )
    notes = "\n".join(raised.value.__notes__)
    assert "magicfs.dask: partition 0: task attempt attempt_" in notes
    assert "attempt was aborted" in notes
    assert_nothing_left(dest)


# -- what plain ddf.to_parquet does under the same failures ----------------------------------------


def test_plain_dask_failure_leaves_partial_output_magicfs_leaves_none(s3_dest):
    """Plain ``ddf.to_parquet``: the partitions written before the failure stay, and
    ``read_parquet`` reads them as if they were the dataset. magicfs: nothing."""
    source = sales_ddf()
    ddf = source.map_partitions(
        fail_last, NPARTITIONS - 1, s3_dest.url, s3_dest.storage_options, meta=source._meta
    )
    with pytest.raises(RuntimeError, match="bad record"):
        ddf.to_parquet(s3_dest.url, storage_options=s3_dest.storage_options)
    assert s3_dest.data_files() == [f"part.{p}.parquet" for p in range(NPARTITIONS - 1)]
    assert len(s3_dest.read_parquet()) == 300  # a quarter of the rows silently missing
    s3_dest.fs.rm(s3_dest.root, recursive=True)

    with pytest.raises(RuntimeError, match="bad record"):
        magicfs.dask.to_parquet(ddf, s3_dest.url, storage_options=s3_dest.storage_options)
    assert_nothing_left(s3_dest)


def test_plain_dask_overwrite_deletes_old_data_before_a_failing_job(s3_dest):
    """``overwrite=True`` deletes the destination before writing: a failing job loses
    the old data. ``conflict_mode="replace"`` deletes it only at job commit."""
    old = sales_ddf(40, 2)
    old.to_parquet(s3_dest.url, storage_options=s3_dest.storage_options)
    assert len(s3_dest.data_files()) == 2
    broken = failing(sales_ddf(), None)  # every partition fails
    with pytest.raises(RuntimeError, match="bad record"):
        broken.to_parquet(s3_dest.url, storage_options=s3_dest.storage_options, overwrite=True)
    assert s3_dest.data_files() == []  # the old dataset is gone, no new one written

    old.to_parquet(s3_dest.url, storage_options=s3_dest.storage_options)
    with pytest.raises(RuntimeError, match="bad record"):
        magicfs.dask.to_parquet(
            broken, s3_dest.url, storage_options=s3_dest.storage_options, conflict_mode="replace"
        )
    kept = s3_dest.read_parquet().reset_index(drop=True)  # (dask stores its own index name)
    pd.testing.assert_frame_equal(kept, old.compute().reset_index(drop=True))
    assert s3_dest.pending() == []


def test_a_ready_made_committer_is_used_as_it_is_and_options_beside_it_are_refused(tmp_path):
    """The engines' one ready-made-committer rule (``engines.job_committer``): a committer
    the caller built is the job's; options given beside it are refused by name, never
    dropped; a name builds one with the engine as its job id's source."""
    from magicfs.integrations.engines import job_committer

    url = f"file://{tmp_path}/out"
    ready = magicfs.committer_for(url)
    assert job_committer("magicfs.dask", url, ready, None, "append", None) is ready
    with pytest.raises(TypeError, match=r"magicfs\.ray: .*pass storage_options=, committer_opt"):
        job_committer("magicfs.ray", url, ready, {}, None, {"threads": 2})
    with pytest.raises(TypeError, match=r"pass conflict_mode= to magicfs\.committer_for"):
        job_committer("magicfs.duckdb", url, ready, None, "replace", None, conflict_mode_given=True)
    built = job_committer("magicfs.dask", url, "manifest", None, None, {"threads": 3})
    assert (built.name, built.options.threads, built.options.conflict_mode) == (
        "manifest",
        3,
        "append",
    )
    assert built is not ready and not (tmp_path / "out").exists()  # nothing written yet
