"""Ray Data integration (``magicfs.ray.CommittedDatasink``) on a real local Ray cluster
(two CPUs, worker processes that really die: SIGKILL).

Destinations: the moto S3 server over HTTP (magic committer) and a local directory
(manifest committer). Every test asserts what a reader would see: the files listed in
the destination, their contents read back with pandas, and the multipart uploads left.

The cluster talks to nothing but 127.0.0.1 (checked with strace while writing this):
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray use the loopback address as its
node address (by default it picks the machine's outward address, found by a UDP
"connect" to 8.8.8.8), usage stats are off, and the dashboard's cloud probe (HTTP to
169.254.169.254 and metadata.google.internal, made even with usage stats off unless
``~/ray_bootstrap_config.yaml`` exists) is skipped by giving the cluster a HOME
holding that file.
"""

from __future__ import annotations

import os

# Read by Ray when it is imported: they must be set before `import ray` below.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import inspect
import json
import pathlib
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pandas as pd
import pytest
import ray
import ray.data
from helpers import job_record, pending_uploads
from helpers.s3_targets import store_fixture

import magicfs
import magicfs.ray
from magicfs.errors import CommitFailedError
from magicfs.layouts.manifest import unstaged

pytestmark = pytest.mark.slow

BLOCKS = 4
ROWS = 400


@pytest.fixture(scope="module", autouse=True)
def ray_cluster(tmp_path_factory) -> Iterator[None]:
    """A local Ray cluster on 127.0.0.1 with two CPUs (see the module docstring)."""
    home = tmp_path_factory.mktemp("ray-home")
    (home / "ray_bootstrap_config.yaml").write_text("{}\n")
    saved_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
        # Workers cannot import this test module: ship its classes and functions by value.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        yield
    finally:
        ray.shutdown()
        if saved_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = saved_home


# -- data and destinations --------------------------------------------------------------------


def sales(rows: int = ROWS) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype="int64"),
            "region": [f"region-{i % 7}" for i in range(rows)],
            "amount": np.linspace(0.0, 99.5, rows),
            "year": (np.arange(rows) % 3 + 2023).astype("int64"),
            "at": pd.date_range("2024-01-01", periods=rows, freq="h", tz="UTC"),
            "paid": [i % 3 == 0 for i in range(rows)],
        }
    )


def dataset(rows: int = ROWS, blocks: int = BLOCKS) -> ray.data.Dataset:
    """``rows`` rows in ``blocks`` blocks: one write task per block."""
    frame = sales(rows)
    size = rows // blocks
    return ray.data.from_pandas([frame.iloc[i * size : (i + 1) * size] for i in range(blocks)])


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
        return pending_uploads(self.client, self.bucket) if self.client else []

    def read_parquet(self) -> pd.DataFrame:
        return pd.read_parquet(self.url, storage_options=self.storage_options)

    def success(self) -> dict:
        return json.loads(self.fs.cat_file(f"{self.root}/_SUCCESS"))

    def sink(self, **options: Any) -> magicfs.ray.CommittedDatasink:
        return magicfs.ray.CommittedDatasink(
            self.url, storage_options=self.storage_options, **options
        )


def _s3_dest(request, store: str = "s3") -> Dest:
    """A destination on moto (``s3``) or Ceph RGW (``rgw``)."""
    bucket = store_fixture(request, store, "bucket")
    options = {
        **store_fixture(request, store, "server").storage_options,
        "skip_instance_cache": True,
    }
    return Dest(
        f"s3://{bucket}/sales",
        options,
        fsspec.filesystem("s3", **options),
        bucket,
        store_fixture(request, store, "client"),
    )


@pytest.fixture(params=["s3", "local"])
def dest(request, tmp_path) -> Dest:
    """moto (``s3``), a local directory, or Ceph RGW (``rgw``: by indirect parametrization)."""
    if request.param in ("s3", "rgw"):
        return _s3_dest(request, request.param)
    return Dest(f"file://{tmp_path}/sales", None, fsspec.filesystem("file"))


@pytest.fixture
def s3_dest(request) -> Dest:
    return _s3_dest(request)


def by_id(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("id", ignore_index=True)


def assert_clean(dest: Dest) -> None:
    assert dest.pending() == []
    assert [f for f in dest.files() if f.startswith(("__magic", "_temporary"))] == []


def assert_nothing_left(dest: Dest) -> None:
    assert dest.files() == []
    assert dest.pending() == []


def committed_attempts(fs: fsspec.AbstractFileSystem, root: str) -> list[str]:
    """Task attempts of the running job that have committed (their own records)."""
    fs.invalidate_cache()
    try:
        files = fs.find(root)
    except FileNotFoundError:
        return []
    return [f for f in files if "/tasks/" in f and f.endswith((".pendingset", "-manifest.json"))]


def wait_for_attempt_file(fs: fsspec.AbstractFileSystem, root: str, task: int) -> None:
    """Until a file of an attempt of write task ``task`` exists: on S3 its upload (a job
    alone on its destination puts no marker), elsewhere its file in the attempt's tree."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        fs.invalidate_cache()
        files = fs.find(root) if fs.exists(root) else []
        # (rename stores stage it as _<name>.magicfs-task: magicfs.layouts.manifest)
        staged = [unstaged(f) for f in files]
        if any(f"_m_{task:06d}_" in f and f.endswith(".parquet") for f in staged):
            return
        if hasattr(fs, "list_multipart_uploads"):  # s3fs
            bucket, prefix = root.split("/", 1)
            keys = [u["Key"] for u in fs.list_multipart_uploads(bucket)]
            names = [k.rsplit("/", 1)[-1] for k in keys if k.startswith(prefix + "/")]
            if any(re.match(rf"part-0*{task}-.*\.parquet$", n) for n in names):
                return
        time.sleep(0.05)
    raise AssertionError(f"no file of write task {task} appeared under {root}")


# -- sinks with failures injected into their write tasks (shipped to Ray workers by value) -------


class DieMidWriteSink(magicfs.ray.CommittedDatasink):
    """Write task ``victim``'s first execution dies (SIGKILL) half-way through its file:
    after its first block is written, its upload recorded, before its second block."""

    def __init__(self, dest: str, marker: str, victim: int = 1, **options: Any):
        super().__init__(dest, **options)
        self.marker, self.victim = marker, victim

    def write(self, blocks, ctx):
        return super().write(self._dying(blocks, ctx.task_idx), ctx)

    def _dying(self, blocks, task: int):
        for number, block in enumerate(blocks):
            yield block
            if number == 0 and task == self.victim and not os.path.exists(self.marker):
                committer = self.committer
                wait_for_attempt_file(committer.store_fs, committer.dest, task)
                pathlib.Path(self.marker).write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)


class FailingSink(magicfs.ray.CommittedDatasink):
    """Write task ``victim`` raises after writing part of its blocks."""

    def __init__(self, dest: str, victim: int = 2, **options: Any):
        super().__init__(dest, **options)
        self.victim = victim

    def write(self, blocks, ctx):
        return super().write(self._failing(blocks, ctx.task_idx), ctx)

    def _failing(self, blocks, task: int):
        for block in blocks:
            yield block
            if task == self.victim:
                raise ValueError(f"cannot encode a row of write task {task}")


def tampered(blocks):
    """The same blocks with every amount negated: data no reader may ever see."""
    for block in blocks:
        frame = block.to_pandas() if hasattr(block, "to_pandas") else block
        yield frame.assign(amount=-frame["amount"])


class DuplicateAttemptSink(magicfs.ray.CommittedDatasink):
    """Write task ``victim`` runs an extra attempt first (a zombie or speculative copy)
    that writes different data and commits; Ray only ever sees the second attempt."""

    def __init__(self, dest: str, victim: int = 1, **options: Any):
        super().__init__(dest, **options)
        self.victim = victim

    def write(self, blocks, ctx):
        if ctx.task_idx != self.victim:
            return super().write(blocks, ctx)
        blocks = list(blocks)
        super().write(tampered(blocks), ctx)  # committed, its message dropped
        return super().write(blocks, ctx)


class CommitThenDieSink(magicfs.ray.CommittedDatasink):
    """Write task ``victim``'s first execution writes different data, commits its
    attempt, and dies (SIGKILL) before Ray gets its result; Ray runs the task again."""

    def __init__(self, dest: str, marker: str, victim: int = 1, **options: Any):
        super().__init__(dest, **options)
        self.marker, self.victim = marker, victim

    def write(self, blocks, ctx):
        if ctx.task_idx != self.victim or os.path.exists(self.marker):
            return super().write(blocks, ctx)
        message = super().write(tampered(blocks), ctx)
        pathlib.Path(self.marker).write_text(message.attempt_id)
        os.kill(os.getpid(), signal.SIGKILL)


class WatchingSink(magicfs.ray.CommittedDatasink):
    """Records what readers see when every write task has committed, before job commit."""

    def on_write_complete(self, write_result):
        committer = self.committer
        fs, root = committer.store_fs, committer.dest
        fs.invalidate_cache()
        files = [f[len(root) + 1 :] for f in fs.find(root)]
        self.seen_before_commit = {
            "visible": [f for f in files if not any(e[:1] in "_." for e in f.split("/"))],
            "committed": len(committed_attempts(fs, root)),
        }
        super().on_write_complete(write_result)


def fail_last(batch: pd.DataFrame, url: str, storage_options: dict | None) -> pd.DataFrame:
    """The block holding the last rows waits until every other block is written (a
    visible file, or a committed task attempt), then raises: a job failing at its end."""
    if batch["id"].max() < ROWS - 1:
        return batch
    fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        fs.invalidate_cache()
        files = fs.find(root) if fs.exists(root) else []
        visible = [f for f in files if f.endswith(".parquet") and "/_" not in f]
        if len(visible) + len(committed_attempts(fs, root)) >= BLOCKS - 1:
            break
        time.sleep(0.05)
    raise RuntimeError("bad record in the last block")


# -- the sink -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dest", ["s3", "local", pytest.param("rgw", marks=pytest.mark.rgw)], indirect=True
)
def test_parquet_round_trips(dest):
    sink = dest.sink()
    dataset().write_datasink(sink)
    summary = sink.summary
    assert (summary.files, summary.tasks) == (BLOCKS, BLOCKS)
    assert summary.committer == ("magic" if dest.bucket else "manifest")
    assert dest.data_files() == [f"part-{t:05d}-{summary.job_id}.parquet" for t in range(BLOCKS)]
    assert dest.files() == ["_SUCCESS", *dest.data_files()]
    pd.testing.assert_frame_equal(by_id(dest.read_parquet()), sales())
    for name in dest.data_files():  # rows keep their order within each write task
        ids = pd.read_parquet(dest.fs.open(f"{dest.root}/{name}", "rb"))["id"]
        assert ids.is_monotonic_increasing
    assert dest.success()["metrics"]["rows"] == ROWS
    assert_clean(dest)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_formats_partitioned_by_column(s3_dest, fmt):
    sink = s3_dest.sink(format=fmt, partition_cols=["year"])
    dataset().write_datasink(sink)
    files = s3_dest.data_files()
    assert len(files) == sink.summary.files == 3 * BLOCKS
    assert {f.split("/")[0] for f in files} == {"year=2023", "year=2024", "year=2025"}
    assert all(f.endswith(f".{fmt}") for f in files)
    parts = []
    for name in files:
        year = int(name.split("/")[0].removeprefix("year="))
        with s3_dest.fs.open(f"{s3_dest.root}/{name}", "rb") as handle:
            if fmt == "parquet":
                part = pd.read_parquet(handle)
            elif fmt == "csv":
                part = pd.read_csv(handle, parse_dates=["at"])
            else:
                part = pd.read_json(handle, lines=True, dtype=False)
        assert "year" not in part.columns  # it lives in the directory name
        parts.append(part.assign(year=year))
    back = by_id(pd.concat(parts, ignore_index=True))
    expected = sales()
    if fmt != "parquet":  # text formats: compare values, not storage types
        back["at"] = pd.to_datetime(back["at"], utc=True).astype(expected["at"].dtype)
        back["region"] = back["region"].astype(expected["region"].dtype)
    pd.testing.assert_frame_equal(back[expected.columns], expected)
    assert_clean(s3_dest)


def test_nothing_is_visible_until_the_job_commits(dest):
    sink = WatchingSink(dest.url, storage_options=dest.storage_options)
    dataset().write_datasink(sink)
    assert sink.seen_before_commit == {"visible": [], "committed": BLOCKS}
    assert len(dest.data_files()) == BLOCKS


def test_a_worker_killed_mid_write_is_retried_and_published_once(dest, tmp_path):
    marker = tmp_path / "killed"
    sink = DieMidWriteSink(dest.url, str(marker), storage_options=dest.storage_options)
    dataset().write_datasink(sink)
    assert marker.exists()  # write task 1's first execution really died mid-write
    assert (sink.summary.files, sink.summary.tasks) == (BLOCKS, BLOCKS)
    assert len(dest.data_files()) == BLOCKS
    pd.testing.assert_frame_equal(by_id(dest.read_parquet()), sales())
    assert_clean(dest)  # the dead attempt's upload was swept


def test_a_failing_task_aborts_the_job(dest):
    sink = FailingSink(dest.url, storage_options=dest.storage_options)
    with pytest.raises(Exception, match="cannot encode a row of write task 2") as raised:
        dataset().write_datasink(sink)
    assert "magicfs.ray: write task 2: task attempt attempt_" in str(raised.value)
    assert sink.summary is None
    assert_nothing_left(dest)


def test_a_duplicate_attempt_commits_but_only_the_reported_one_is_published(s3_dest):
    sink = DuplicateAttemptSink(s3_dest.url, storage_options=s3_dest.storage_options)
    dataset().write_datasink(sink)
    assert sink.summary.files == BLOCKS
    assert len(s3_dest.data_files()) == BLOCKS
    pd.testing.assert_frame_equal(by_id(s3_dest.read_parquet()), sales())  # no negated amounts
    assert_clean(s3_dest)  # the duplicate's upload was aborted, not completed


def test_a_task_killed_after_committing_is_published_once(s3_dest, tmp_path):
    """Ray retries the dead task; both executions committed. The job publishes the
    one Ray reported; the first committed attempt's upload is aborted."""
    marker = tmp_path / "committed-then-killed"
    sink = CommitThenDieSink(s3_dest.url, str(marker), storage_options=s3_dest.storage_options)
    dataset().write_datasink(sink)
    assert marker.read_text().startswith("attempt_")  # the first execution committed
    assert sink.summary.files == BLOCKS
    assert len(s3_dest.data_files()) == BLOCKS
    pd.testing.assert_frame_equal(by_id(s3_dest.read_parquet()), sales())
    assert_clean(s3_dest)


def test_a_sink_writes_one_job(s3_dest):
    sink = s3_dest.sink()
    dataset(40, 2).write_datasink(sink)
    with pytest.raises(RuntimeError, match="create a new sink"):
        dataset(40, 2).write_datasink(sink)
    assert len(s3_dest.data_files()) == 2
    with pytest.raises(ValueError, match="unsupported format 'orc'"):
        s3_dest.sink(format="orc")


def test_results_without_commit_messages_are_refused(s3_dest):
    """What Ray before 2.41 hands to on_write_complete: no write results to commit."""
    sink = s3_dest.sink()
    sink.on_write_start()
    with pytest.raises(CommitFailedError, match=r"Ray 2\.41 or later"):
        sink.on_write_complete([])
    assert_nothing_left(s3_dest)  # the job was aborted


# -- what plain ds.write_parquet does under the same failures -------------------------------------


def test_plain_ray_failure_leaves_partial_output_magicfs_leaves_none(s3_dest):
    """Plain ``write_parquet``: the blocks written before the failure stay, and readers
    take them for the dataset. ``CommittedDatasink``: nothing."""
    failing = dataset().map_batches(
        fail_last, fn_args=(s3_dest.url, s3_dest.storage_options), batch_format="pandas"
    )
    with pytest.raises(Exception, match="bad record in the last block"):
        failing.write_parquet(s3_dest.url, filesystem=arrow_fs(s3_dest))
    assert len(s3_dest.data_files()) == BLOCKS - 1
    assert len(s3_dest.read_parquet()) == ROWS - ROWS // BLOCKS  # rows silently missing
    s3_dest.fs.rm(s3_dest.root, recursive=True)

    with pytest.raises(Exception, match="bad record in the last block"):
        failing.write_datasink(s3_dest.sink())
    assert_nothing_left(s3_dest)


def test_plain_ray_overwrite_loses_the_old_data_when_the_job_fails(s3_dest):
    """``mode="overwrite"`` deletes the old data before writing, so a failing job
    leaves no old data (and part of the new). ``conflict_mode="replace"`` deletes it
    only at job commit: a failing job leaves it untouched."""
    # The Ray the test extra installs has write_parquet(mode=...): this comparison always runs.
    assert "mode" in inspect.signature(ray.data.Dataset.write_parquet).parameters, ray.__version__
    old = dataset(40, 2)
    old.write_parquet(s3_dest.url, filesystem=arrow_fs(s3_dest))
    old_files = s3_dest.data_files()
    failing = dataset().map_batches(
        fail_last, fn_args=(s3_dest.url, s3_dest.storage_options), batch_format="pandas"
    )
    with pytest.raises(Exception, match="bad record"):
        failing.write_parquet(s3_dest.url, filesystem=arrow_fs(s3_dest), mode="overwrite")
    assert not set(old_files) & set(s3_dest.data_files())  # the old data is gone
    s3_dest.fs.rm(s3_dest.root, recursive=True)

    old.write_parquet(s3_dest.url, filesystem=arrow_fs(s3_dest))
    old_files = s3_dest.data_files()
    with pytest.raises(Exception, match="bad record"):
        failing.write_datasink(s3_dest.sink(conflict_mode="replace"))
    assert s3_dest.data_files() == old_files
    pd.testing.assert_frame_equal(by_id(s3_dest.read_parquet()), sales(40))
    assert s3_dest.pending() == []


def arrow_fs(dest: Dest) -> Any:
    """Ray's own writers take a pyarrow filesystem: the same store, through fsspec."""
    import pyarrow.fs

    return pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(dest.fs))
