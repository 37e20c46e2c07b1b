"""While a job runs, nothing of it looks like data to a reader globbing the destination.

A running job keeps, under its destination, what it needs until it commits: on S3, Azure
block lists and the in-process store a zero-byte intent marker per task file (S3 with
``intent_markers="always"``), on rename stores (local, memory, GCS, Azure without block
lists) the task files themselves, staged under ``_temporary``; and each closed deferred
file's ``.pending`` record. Each name's elements below ``__base`` are staged
(``_year=2024.magicfs-task``). Readers that glob the destination recursively for their
data by extension, partition directory or file-name prefix (``fs.glob("dest/**/*.parquet")``,
``dest/**/year=2024/*``, ``dest/*/year=2024/*``, ``dest/**/part-*``, DuckDB's
``read_parquet('dest/**/*.parquet')``, pyarrow's recursive listing and hive dataset,
polars) must find only committed files: each test commits one job, leaves a second one
running with a task committed and a file still open, and reads the destination the way
each reader does.

Readers, by store: fsspec's ``glob`` on every store; DuckDB (``read_parquet`` on the
glob) on every store, natively on a local disk and through the store's fsspec filesystem
registered on the connection elsewhere (DuckDB's own S3 and Azure extensions would be
downloaded); pyarrow's own recursive listing (``FileSelector(recursive=True)``) and
dataset on S3 (its native S3 filesystem) and a local disk (native), through fsspec
(``FSSpecHandler``) elsewhere; polars (``read_parquet`` and ``scan_parquet`` with hive
partitioning) on a local disk.

Trees written by 0.1.0 (markers at the task paths themselves, ``<file>.pending``,
rename-store task files at their own names) are still listed, committed, swept and
cleaned up.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import fsspec
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
from helpers import pending_uploads
from helpers.s3_targets import store_fixture

import magicfs
from magicfs.names import MARKER_SUFFIX, STAGED_SUFFIX
from magicfs.paths import task_path
from magicfs.task_files import TASK_FILES

#: The destination's partitioning, as a reader declares it (the files hold ``year`` too).
HIVE = ds.partitioning(pa.schema([("year", pa.int64())]), flavor="hive")

# -- destinations -----------------------------------------------------------------------------


@dataclass
class Dest:
    """A destination on one store, as its jobs and its readers see it."""

    store: str
    url: str  # the destination's URL
    raw: fsspec.AbstractFileSystem  # the store's own filesystem, a reader's
    new_job: Callable[..., Any]  # a committer for the destination, job not set up
    arrow: pafs.FileSystem  # pyarrow's filesystem for the store
    pending: Callable[[], list[str]]  # what is staged and not published, by final name
    deferred: bool  # markers (S3, Azure block lists, in-process) or staged files

    @property
    def root(self) -> str:
        return self.raw._strip_protocol(self.url).rstrip("/")

    def everything(self) -> list[str]:
        """Every file below the destination (the running job's included)."""
        self.raw.invalidate_cache()
        return sorted(self.raw.find(self.root))

    def glob(self, pattern: str) -> list[str]:
        self.raw.invalidate_cache()
        return sorted(self.raw.glob(f"{self.root}/{pattern}"))


def _s3(request: pytest.FixtureRequest, store: str) -> Dest:
    bucket = store_fixture(request, store, "bucket")
    server = store_fixture(request, store, "server")
    client = store_fixture(request, store, "client")
    options = {**server.storage_options, "skip_instance_cache": True}
    url = f"s3://{bucket}/sales"
    kwargs = options["client_kwargs"]
    arrow = pafs.S3FileSystem(
        access_key=options["key"],
        secret_key=options["secret"],
        endpoint_override=kwargs["endpoint_url"],
        region=kwargs.get("region_name", "us-east-1"),
        allow_bucket_creation=False,
    )
    return Dest(
        store,
        url,
        fsspec.filesystem("s3", **options),
        lambda **kw: magicfs.committer_for(
            url, storage_options=options, intent_markers="always", **kw
        ),
        arrow,
        lambda: sorted(u["Key"] for u in pending_uploads(client, bucket)),
        deferred=True,
    )


def _fsspec_dest(store: str, url: str, raw: Any, deferred: bool, **committer: Any) -> Dest:
    pending: Callable[[], list[str]] = list
    if store == "mem-deferred":
        bucket = url.split("://", 1)[1].split("/", 1)[0]
        pending = lambda: sorted(p for p, _ in raw.pending(f"{bucket}/"))  # noqa: E731
    return Dest(
        store,
        url,
        raw,
        lambda **kw: magicfs.committer_for(url, fs=raw, **committer, **kw),
        pafs.PyFileSystem(pafs.FSSpecHandler(raw)),
        pending,
        deferred,
    )


STORES = [
    "moto",
    pytest.param("rgw", marks=pytest.mark.rgw),
    "abfs-block-list",
    "abfs",
    "gcs",
    "file",
    "memory",
    "mem-deferred",
]


@pytest.fixture(params=STORES)
def dest(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Dest]:
    store = request.param
    if store in ("moto", "rgw"):
        yield _s3(request, "s3" if store == "moto" else store)
    elif store.startswith("abfs"):
        container = request.getfixturevalue("azure_container")
        fs = request.getfixturevalue("abfs")
        block_lists = store == "abfs-block-list"
        name = "block-list" if block_lists else "manifest"
        yield _fsspec_dest(store, f"abfs://{container}/sales", fs, block_lists, committer=name)
    elif store == "gcs":
        bucket = request.getfixturevalue("gcs_bucket")
        yield _fsspec_dest(store, f"gs://{bucket}/sales", request.getfixturevalue("gcs"), False)
    elif store == "file":
        local = fsspec.filesystem("file")
        yield Dest(
            store,
            f"file://{tmp_path}/sales",
            local,
            lambda **kw: magicfs.committer_for(f"file://{tmp_path}/sales", **kw),
            pafs.LocalFileSystem(),
            list,
            False,
        )
    elif store == "memory":
        raw = fsspec.filesystem("memory")
        yield _fsspec_dest(store, f"memory://t-{uuid.uuid4().hex}/sales", raw, False)
    else:
        raw = fsspec.filesystem("mem-deferred")
        yield _fsspec_dest(store, f"mem-deferred://t-{uuid.uuid4().hex}/sales", raw, True)


# -- jobs -----------------------------------------------------------------------------------------


def parquet(year: int, rows: int) -> bytes:
    out = io.BytesIO()
    pd.DataFrame({"id": range(rows), "year": [year] * rows}).to_parquet(out, index=False)
    return out.getvalue()


def write(job: Any, task: Any, relative: str, data: bytes) -> None:
    with job.fs.open(task.path(relative), "wb") as f:
        f.write(data)


def started(dest: Dest) -> tuple[Any, Any]:
    """A job set up on ``dest``, and its task 0's attempt, set up."""
    job = dest.new_job()
    job.setup_job()
    task = job.task_attempt(0)
    job.setup_task(task)
    return job, task


def committed_job(dest: Dest) -> None:
    """A job that commits ``year=2023/part-0.parquet`` (2 rows)."""
    job, task = started(dest)
    write(job, task, "year=2023/part-0.parquet", parquet(2023, 2))
    job.commit_job([job.commit_task(task)])


@dataclass
class Running:
    """A job left running: task 0 committed, task 1's file still open."""

    job: Any
    messages: list[Any]
    task: Any
    held: Any  # task 1's open file, its marker (or staged file) on the store


def running_job(dest: Dest) -> Running:
    job, first = started(dest)
    write(job, first, "year=2024/part-0.parquet", parquet(2024, 3))
    write(job, first, "year=2024/part-1.parquet", parquet(2024, 4))
    messages = [job.commit_task(first)]
    second = job.task_attempt(1)
    job.setup_task(second)
    held = job.fs.open(second.path("year=2025/part-0.parquet"), "wb")
    held.write(parquet(2025, 5))
    if dest.deferred:
        held._start.result(timeout=60)  # its marker and upload are on the store now
    else:
        held.flush()
    return Running(job, messages, second, held)


def finish(dest: Dest, running: Running) -> None:
    running.held.close()
    job = running.job
    job.commit_job([*running.messages, job.commit_task(running.task)])


# -- readers --------------------------------------------------------------------------------------


def read_with_duckdb(dest: Dest) -> int:
    """Rows DuckDB reads from ``<dest>/**/*.parquet`` (its own glob on a local disk, the
    registered fsspec filesystem's elsewhere)."""
    con = duckdb.connect()
    url = dest.url.removeprefix("file://")
    if dest.store != "file":
        con.register_filesystem(dest.raw)
    query = f"SELECT count(*) FROM read_parquet('{url}/**/*.parquet')"
    ((count,),) = con.execute(query).fetchall()
    return int(count)


def read_with_pyarrow(dest: Dest) -> tuple[list[str], int]:
    """pyarrow's recursive listing filtered as ``**/*.parquet`` would, and the rows of
    the dataset it makes."""
    listed = dest.arrow.get_file_info(pafs.FileSelector(dest.root, recursive=True))
    files = sorted(
        i.path for i in listed if i.type == pafs.FileType.File and i.path.endswith(".parquet")
    )
    rows = ds.dataset(files, format="parquet", filesystem=dest.arrow).count_rows() if files else 0
    return [f.split("/sales/", 1)[1] for f in files], rows


def relative(dest: Dest, paths: list[str]) -> list[str]:
    return [p[len(dest.root) + 1 :] for p in paths]


# -- the tests --------------------------------------------------------------------------------


def test_a_running_jobs_markers_and_staged_files_match_no_data_glob(dest: Dest) -> None:
    committed_job(dest)
    running = running_job(dest)
    try:
        # The running job really has its markers (or staged files) under the destination.
        suffix = STAGED_SUFFIX + (MARKER_SUFFIX if dest.deferred else "")
        kept = [p for p in dest.everything() if p.endswith(".parquet" + suffix)]
        # The open file's marker (on a local disk and in memory the file itself; GCS and
        # Azure create the object at close), and the committed task's files on rename stores.
        held = [p for p in kept if p.endswith(f"part-0.parquet{suffix}") and "2025" in p]
        assert len(held) == (0 if dest.store in ("abfs", "gcs") else 1), kept
        # (Azure's block lists drop a committed attempt's markers at task commit.)
        assert len(kept) - len(held) == (0 if dest.store == "abfs-block-list" else 2), kept
        data = ["year=2023/part-0.parquet"]
        assert relative(dest, dest.glob("**/*.parquet")) == data
        # Nor a glob of partition directories or of file names' prefixes: the running
        # job's tree repeats neither (its .pending records included).
        assert relative(dest, dest.glob("**/year=2024/*")) == []
        assert relative(dest, dest.glob("*/year=2024/*")) == []
        assert relative(dest, dest.glob("**/year=2023/*")) == data
        assert relative(dest, dest.glob("**/part-*")) == data
        assert read_with_duckdb(dest) == 2
        assert read_with_pyarrow(dest) == (data, 2)
        hive = ds.dataset(dest.root, filesystem=dest.arrow, format="parquet", partitioning=HIVE)
        assert hive.to_table().column("year").to_pylist() == [2023, 2023]
        if dest.store == "file":
            assert pl.read_parquet(f"{dest.root}/**/*.parquet").height == 2
            scanned = pl.scan_parquet(f"{dest.root}/**/*.parquet", hive_partitioning=True)
            assert scanned.collect().height == 2
        # The tasks still see their files under their own names (a committed attempt's on
        # Azure's block lists: none, its records were dropped at its commit).
        job = running.job

        def listed(task: Any) -> list[str]:
            return [p.rsplit("/__base/", 1)[1] for p in job.fs.find(task.work_path)]

        committed = ["year=2024/part-0.parquet", "year=2024/part-1.parquet"]
        expected = [] if dest.store == "abfs-block-list" else committed
        assert listed(job.task_attempt(0)) == expected
        if dest.deferred:
            assert listed(running.task) == ["year=2025/part-0.parquet"]
    except BaseException:
        running.held.discard()
        running.job.abort_job()
        raise
    finish(dest, running)
    assert relative(dest, dest.glob("**/*.parquet")) == [
        "year=2023/part-0.parquet",
        "year=2024/part-0.parquet",
        "year=2024/part-1.parquet",
        "year=2025/part-0.parquet",
    ]
    assert read_with_duckdb(dest) == 2 + 3 + 4 + 5
    assert not [p for p in dest.everything() if STAGED_SUFFIX in p]
    assert dest.pending() == []


# -- trees written by earlier versions ------------------------------------------------------


def to_earlier_names(dest: Dest) -> list[str]:
    """Move every marker and ``.pending`` record under the destination to the name 0.1.0
    gave it (the task path itself, ``<task path>.pending``), metadata kept; returns the
    markers' task paths."""
    moved = []
    for path in dest.everything():
        if path.endswith(MARKER_SUFFIX):
            earlier = task_path(path.removesuffix(MARKER_SUFFIX))
            moved.append(earlier)
        elif path.endswith(".pending") and STAGED_SUFFIX in path:
            earlier = task_path(path.removesuffix(".pending")) + ".pending"
        else:
            continue
        dest.raw.cp_file(path, earlier)
        dest.raw.rm_file(path)
    dest.raw.invalidate_cache()
    assert not [p for p in dest.everything() if STAGED_SUFFIX in p]
    return moved


DEFERRED = [
    "moto",
    pytest.param("rgw", marks=pytest.mark.rgw),
    "abfs-block-list",
    "mem-deferred",
]


@pytest.mark.parametrize("dest", DEFERRED, indirect=True)
def test_earlier_versions_markers_are_listed_and_committed(dest: Dest) -> None:
    job, task = started(dest)
    data = parquet(2024, 3)
    write(job, task, "year=2024/part-0.parquet", data)
    write(job, task, "part-1.parquet", parquet(2024, 4))
    TASK_FILES.settle()
    names = ("year=2024/part-0.parquet", "part-1.parquet")
    for name in names:  # as if another process had written them: the store is read
        TASK_FILES.discarded(job.fs._inner(task.path(name)))
    moved = to_earlier_names(dest)
    assert sorted(p.rsplit("/__base/", 1)[1] for p in moved) == sorted(names)
    listed = job.fs.find(task.work_path)
    assert [p.rsplit("/__base/", 1)[1] for p in listed] == ["part-1.parquet", *names[:1]]
    # (from its .pending; Azure's writers keep their records elsewhere, its size shows 0)
    size = 0 if dest.store == "abfs-block-list" else len(data)
    info = job.fs.info(task.path(names[0]))
    assert (info["name"], info["size"], info["type"]) == (
        job.fs._inner(task.path(names[0])),
        size,
        "file",
    )
    assert job.fs.ls(task.path("year=2024"), detail=False) == [job.fs._inner(task.path(names[0]))]
    message = job.commit_task(task)
    assert message.files == 2
    job.commit_job([message])
    assert relative(dest, dest.glob("**/*.parquet")) == ["part-1.parquet", *names[:1]]
    assert read_with_duckdb(dest) == 3 + 4
    assert [p for p in dest.everything() if "__magic_job-" in p] == []
    assert dest.pending() == []


@pytest.mark.parametrize(
    "dest", ["moto", pytest.param("rgw", marks=pytest.mark.rgw)], indirect=True
)
def test_a_killed_writers_upload_is_swept_by_its_earlier_versions_marker(
    dest: Dest, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    from test_shared_destinations import killed_writer

    store = "s3" if dest.store == "moto" else dest.store
    client = store_fixture(request, store, "client")
    bucket = store_fixture(request, store, "bucket")
    job, task = started(dest)
    write(job, task, "a.parquet", parquet(2024, 2))
    message = job.commit_task(task)
    other = job.task_attempt(1)
    key = killed_writer(job, other, "b.parquet", client, bucket, tmp_path)
    assert dest.pending() == sorted([key, "sales/a.parquet"])
    moved = to_earlier_names(dest)
    assert any(p.endswith("/__base/b.parquet") for p in moved)
    job.commit_job([message])  # its clean-up sweeps the uploads its markers name
    assert dest.pending() == []
    assert relative(dest, dest.glob("**/*.parquet")) == ["a.parquet"]
    assert [p for p in dest.everything() if "__magic_job-" in p] == []


@pytest.mark.parametrize("dest", ["file", "memory", "gcs"], indirect=True)
def test_task_files_staged_by_earlier_versions_commit_at_their_names(dest: Dest) -> None:
    job, task = started(dest)
    write(job, task, "year=2024/part-0.parquet", parquet(2024, 3))
    TASK_FILES.settle()
    staged = [p for p in dest.everything() if p.endswith(STAGED_SUFFIX)]
    assert len(staged) == 1
    attempt_dir = staged[0].split(".magicfs-task", 1)[0].rsplit("/", 1)[0]
    earlier = f"{attempt_dir}/year=2024/part-0.parquet"  # no suffix: an earlier version's
    if dest.store == "file":
        os.makedirs(os.path.dirname(earlier), exist_ok=True)
    dest.raw.mv(staged[0], earlier)
    TASK_FILES.discarded(staged[0])
    job.commit_job([job.commit_task(task)])
    assert relative(dest, dest.glob("**/*.parquet")) == ["year=2024/part-0.parquet"]
    assert read_with_duckdb(dest) == 3


# -- patterns over task paths ---------------------------------------------------------------


@pytest.mark.parametrize("dest", ["moto", "abfs-block-list", "mem-deferred"], indirect=True)
def test_a_pattern_rm_takes_another_processs_task_files_by_their_staged_names(dest: Dest) -> None:
    """``rm`` of a pattern over task paths (``year=2024/part-*.parquet``) deletes the task
    files of another process too: the store has only their markers and records, whose
    names the pattern does not match as it is (each element staged), so the view globs
    the pattern staged (:meth:`DeferredTaskView._suffixed_matches`). What they staged is
    thrown away; the file the pattern does not name commits alone."""
    job, task = started(dest)
    write(job, task, "year=2024/part-0.parquet", parquet(2024, 3))
    write(job, task, "year=2024/kept.parquet", parquet(2024, 4))
    TASK_FILES.settle()
    for name in ("year=2024/part-0.parquet", "year=2024/kept.parquet"):
        TASK_FILES.discarded(job.fs._inner(task.path(name)))  # as if written elsewhere
    job.fs.rm(task.path("year=2024/part-*.parquet"))
    dest.raw.invalidate_cache()
    assert [p.rsplit("/__base/", 1)[1] for p in job.fs.find(task.work_path)] == [
        "year=2024/kept.parquet"
    ]
    if dest.store != "abfs-block-list":  # (Azure cannot discard staged blocks)
        assert dest.pending() == sorted(p for p in dest.pending() if "kept" in p)
        assert len(dest.pending()) == 1
    message = job.commit_task(task)
    assert message.files == 1
    job.commit_job([message])
    assert relative(dest, dest.glob("**/*.parquet")) == ["year=2024/kept.parquet"]
    assert [p for p in dest.everything() if "__magic_job-" in p] == []


def test_the_names_of_a_task_files_marker_and_record_map_back_to_it() -> None:
    """This version's names and 0.1.0's both map back to the task path; none of this
    version's repeats a partition directory or starts or ends like the data file."""
    from magicfs.paths import marked_file, marker_path, pending_file, pending_path

    attempt = "s3://bkt/sales/__magic_job-7/job-7/00/tasks/attempt_7_0000_m_000000_0"
    file = f"{attempt}/__base/year=2024/part-0.parquet"
    for stored in (marker_path(file), pending_path(file)):
        below = stored.split("/__base/", 1)[1].split("/")
        assert below[0] == "_year=2024.magicfs-task"
        assert below[1].startswith("_part-0.parquet.magicfs-task.")
    assert stored.endswith(".pending")  # Hadoop's magic committer lists records by it
    assert marked_file(marker_path(file)) == file == pending_file(pending_path(file))
    assert marked_file(file) == file == pending_file(file + ".pending")  # 0.1.0's names
    assert marked_file(pending_path(file)) is None  # a record is no marker
    legacy = "bkt/out/__magic/job-1/task_01/p.csv"  # no __base: only the name is staged
    assert marker_path(legacy) == "bkt/out/__magic/job-1/task_01/_p.csv.magicfs-task" + (
        MARKER_SUFFIX
    )
    assert marked_file(marker_path(legacy)) == legacy
