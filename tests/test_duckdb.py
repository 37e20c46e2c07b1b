"""DuckDB's ``COPY ... TO`` through magicfs (``magicfs.duckdb``), on S3 and a rename store.

Destinations: moto and Ceph RGW over HTTP (the magic committer) and a local directory
(the manifest committer). Every test asserts what a reader sees: the files under the
destination, their rows read back with DuckDB (through the same fsspec route) and with
pandas, and the multipart uploads left in the bucket. Failures are real: DuckDB's own
cast errors, a Python UDF raising, a store refusing parts (the fault front) or a disk
running full (a wrapper filesystem), and a process killed with SIGKILL during a COPY.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import duckdb
import fsspec
import pandas as pd
import pytest
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem
from helpers import job_record, pending_uploads

import magicfs
import magicfs.duckdb
from magicfs.errors import CommitConflictError
from magicfs.stores.s3.retry import RetryPolicy

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROWS = 3_000


# -- data and destinations ------------------------------------------------------------------------


def connect(rows: int = ROWS) -> duckdb.DuckDBPyConnection:
    """A connection holding table ``sales``: ints, doubles, strings (quotes, non-ASCII),
    timestamps, booleans and NULLs, partitioned by ``year`` and ``region``."""
    con = duckdb.connect()
    con.execute(
        f"""
        CREATE TABLE sales AS SELECT
            i::BIGINT AS id,
            2023 + i % 3 AS year,
            ['north', 'south'][1 + i % 2] AS region,
            CASE WHEN i % 7 = 0 THEN NULL ELSE i * 0.25 END::DOUBLE AS amount,
            'küstenstraße ''' || i AS note,
            TIMESTAMP '2024-01-01' + to_minutes(i) AS at,
            i % 5 = 0 AS paid
        FROM range({rows}) t(i)
        """
    )
    return con


def expected(con: duckdb.DuckDBPyConnection, where: str = "true") -> pd.DataFrame:
    return con.sql(f"FROM sales WHERE {where} ORDER BY id").df()


@dataclass
class Dest:
    """A destination as a reader sees it: the store's plain fsspec filesystem."""

    name: str
    url: str
    options: dict[str, Any] | None
    fs: fsspec.AbstractFileSystem
    client: Any = None
    bucket: str | None = None

    @property
    def root(self) -> str:
        return self.fs._strip_protocol(self.url).rstrip("/")

    def files(self) -> list[str]:
        """Every file below the destination, relative to it (the job's own included)."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root)
        except FileNotFoundError:
            return []
        return sorted(r for p in found if not job_record(r := p[len(self.root) + 1 :]))

    def data_files(self) -> list[str]:
        """What readers see: no path element starts with ``_`` or ``.``."""
        return [f for f in self.files() if not any(e.startswith(("_", ".")) for e in f.split("/"))]

    def pending(self) -> list[dict[str, str]]:
        return pending_uploads(self.client, self.bucket) if self.client else []

    def read_with_duckdb(self, pattern: str = "**/*.parquet", **options: Any) -> pd.DataFrame:
        """The files read back by DuckDB itself, through the store's plain fsspec
        filesystem registered on a fresh connection (DuckDB's S3 extension would need a
        download): ``read_parquet(..., hive_partitioning = true)``."""
        con = duckdb.connect()
        if self.client is not None:
            con.register_filesystem(self.fs)
        settings = ", ".join(f"{k} = {v}" for k, v in options.items())
        reader = "read_parquet" if pattern.endswith(".parquet") else "read_json_auto"
        query = (
            f"SELECT * FROM {reader}('{self.url}/{pattern}'{', ' if settings else ''}{settings})"
        )
        return con.sql(query + " ORDER BY id").df()

    def read_with_pandas(self) -> pd.DataFrame:
        frame = pd.read_parquet(self.url, storage_options=self.options)
        return frame.sort_values("id", ignore_index=True)


def s3_dest(request: Any, server_fixture: str, client_fixture: str, bucket_fixture: str) -> Dest:
    server = request.getfixturevalue(server_fixture)
    bucket = request.getfixturevalue(bucket_fixture)
    options = {**server.storage_options, "skip_instance_cache": True}
    fs = fsspec.filesystem("s3", **options)
    client = request.getfixturevalue(client_fixture)
    return Dest("s3", f"s3://{bucket}/sales", options, fs, client, bucket)


STORES = ["moto", pytest.param("rgw", marks=pytest.mark.rgw), "local"]


@pytest.fixture(params=STORES)
def dest(request, tmp_path) -> Dest:
    if request.param == "moto":
        return s3_dest(request, "s3_server", "s3_client", "bucket")
    if request.param == "rgw":
        return s3_dest(request, "rgw_server", "rgw_client", "rgw_bucket")
    return Dest("local", f"file://{tmp_path}/sales", None, fsspec.filesystem("file"))


@pytest.fixture(params=["moto", "local"])
def quick_dest(request, tmp_path) -> Dest:
    """moto and a local directory: for behaviour that does not depend on the S3 server."""
    if request.param == "moto":
        return s3_dest(request, "s3_server", "s3_client", "bucket")
    return Dest("local", f"file://{tmp_path}/sales", None, fsspec.filesystem("file"))


@pytest.fixture
def local_dest(tmp_path) -> Dest:
    """A local directory: for the conflict modes, which the job decides the same way on
    every store (the contract suite, tests/helpers/contract.py, runs them on each)."""
    return Dest("local", f"file://{tmp_path}/sales", None, fsspec.filesystem("file"))


def assert_nothing_left(dest: Dest) -> None:
    """A failed job: nothing at all under the destination, no upload parked."""
    assert dest.files() == []
    assert dest.pending() == []


def with_hive_types(frame: pd.DataFrame) -> pd.DataFrame:
    """pandas reads Hive directory values back as categoricals: make them plain again."""
    return frame.assign(
        year=frame["year"].astype("int32"), region=frame["region"].astype(str)
    ).astype({"note": object})


# -- the output, exactly --------------------------------------------------------------------------


def test_partitioned_copy_reads_back_exactly(dest):
    con = connect()
    summary = magicfs.duckdb.copy(
        "FROM sales",
        dest.url,
        connection=con,
        storage_options=dest.options,
        partition_by=["year", "region"],
        compression="zstd",
    )
    assert summary.committer == ("manifest" if dest.name == "local" else "magic")
    assert (summary.tasks, summary.files) == (1, 6)
    name = f"part-00000-{summary.job_id}-0.parquet"
    assert dest.data_files() == [
        f"year={y}/region={r}/{name}" for y in (2023, 2024, 2025) for r in ("north", "south")
    ]
    assert dest.files() == ["_SUCCESS", *dest.data_files()]
    assert json.loads(dest.fs.cat_file(f"{dest.root}/_SUCCESS"))["metrics"]["rows"] == ROWS
    source = expected(con)
    back = dest.read_with_duckdb(hive_partitioning="true")
    pd.testing.assert_frame_equal(back[source.columns], source, check_dtype=False)
    assert back["year"].dtype == "int64" and back["amount"].isna().sum() == ROWS // 7 + 1
    pandas_back = with_hive_types(dest.read_with_pandas())
    pd.testing.assert_frame_equal(
        pandas_back[source.columns],
        source.astype({"year": "int32", "note": object}),
        check_dtype=False,
    )
    assert dest.pending() == []


def test_several_copies_are_tasks_of_one_job_and_appear_together(quick_dest):
    """Three COPY statements (parquet, gzip CSV, zstd JSON written per thread): three
    task attempts of one job. While the job runs, after each COPY, readers see nothing;
    at job commit every file appears, with distinct names."""
    con = connect()
    seen_during_job = []
    with magicfs.duckdb.copy_job(
        quick_dest.url, connection=con, storage_options=quick_dest.options
    ) as job:
        job.copy("FROM sales WHERE year = 2023", partition_by="region")
        seen_during_job.append(quick_dest.data_files())
        job.copy("FROM sales WHERE year = 2024", format="csv", compression="gzip")
        seen_during_job.append(quick_dest.data_files())
        job.copy(
            "FROM sales WHERE year = 2025",
            "late",
            format="json",
            compression="zstd",
            per_thread_output=True,
        )
        seen_during_job.append(quick_dest.data_files())
    assert seen_during_job == [[], [], []]
    summary = job.summary
    assert summary is not None and (summary.tasks, summary.files) == (3, 4)
    job_id = summary.job_id
    files = quick_dest.data_files()
    assert files == sorted(
        [
            f"late/part-00002-{job_id}-0.json.zst",
            f"part-00001-{job_id}.csv.gz",
            f"region=north/part-00000-{job_id}-0.parquet",
            f"region=south/part-00000-{job_id}-0.parquet",
        ]
    )
    back_2023 = quick_dest.read_with_duckdb("region=*/*.parquet", hive_partitioning="true")
    source = expected(con, "year = 2023")
    pd.testing.assert_frame_equal(back_2023[source.columns], source, check_dtype=False)
    with quick_dest.fs.open(f"{quick_dest.root}/part-00001-{job_id}.csv.gz", "rb") as f:
        csv = pd.read_csv(f, compression="gzip")
    assert csv["id"].tolist() == expected(con, "year = 2024")["id"].tolist()
    json_back = quick_dest.read_with_duckdb("late/*.json.zst")
    assert json_back["id"].tolist() == expected(con, "year = 2025")["id"].tolist()
    assert quick_dest.pending() == []


def test_duckdbs_existence_probes_inside_a_running_copy_reach_no_store(s3_server, bucket):
    """Before writing, DuckDB asks ``isfile``/``isdir``/``info`` of every directory and
    file it makes (on S3 up to three requests each through the task view); inside the
    running attempt the route answers them from memory: none reaches the task filesystem."""
    options = {**s3_server.storage_options, "skip_instance_cache": True}
    con = connect()
    asked: list[str] = []
    with magicfs.duckdb.copy_job(
        f"s3://{bucket}/sales", connection=con, storage_options=options
    ) as job:
        task_fs = job.committer.fs
        info = task_fs.info
        task_fs.info = lambda path, **kwargs: (asked.append(path), info(path, **kwargs))[1]
        job.copy("FROM sales", partition_by=["year", "region"])
    assert asked == []
    assert job.summary is not None and job.summary.files == 6


def copy_year(con, dest, year: int, **options):
    """One COPY job of ``year``'s sales into ``dest``, partitioned by region."""
    return magicfs.duckdb.copy(
        f"FROM sales WHERE year = {year}",
        dest.url,
        connection=con,
        storage_options=dest.options,
        partition_by="region",
        **options,
    )


# -- DuckDB's options for a target holding data: the job's conflict modes -------------------------


def test_overwrite_replaces_the_old_data_at_job_commit(local_dest):
    con = connect()
    old = copy_year(con, local_dest, 2023)
    new = copy_year(con, local_dest, 2024, overwrite=True)
    assert old.job_id != new.job_id
    assert local_dest.data_files() == [
        f"region={r}/part-00000-{new.job_id}-0.parquet" for r in ("north", "south")
    ]
    back = local_dest.read_with_duckdb(hive_partitioning="true")
    assert back["id"].tolist() == expected(con, "year = 2024")["id"].tolist()


@pytest.mark.parametrize("option", ["overwrite_or_ignore", "append"])
def test_overwrite_or_ignore_and_append_add_files(local_dest, option):
    con = connect()
    first = copy_year(con, local_dest, 2023)
    second = copy_year(con, local_dest, 2024, **{option: True})
    assert local_dest.data_files() == sorted(
        f"region={r}/part-00000-{job}-0.parquet"
        for r in ("north", "south")
        for job in (first.job_id, second.job_id)
    )
    back = local_dest.read_with_duckdb(hive_partitioning="true")
    assert back["id"].tolist() == expected(con, "year in (2023, 2024)")["id"].tolist()


def test_a_directory_copy_without_option_refuses_a_destination_with_data(local_dest):
    """DuckDB refuses a non-empty target directory without one of its options: the job's
    conflict mode is then ``fail``, checked before anything is written."""
    con = connect()
    magicfs.duckdb.copy(
        "FROM sales",
        local_dest.url,
        connection=con,
        storage_options=local_dest.options,
        partition_by="year",
    )
    before = local_dest.files()
    with pytest.raises(CommitConflictError, match=r"already holds data.*'fail'"):
        magicfs.duckdb.copy(
            "FROM sales",
            local_dest.url,
            connection=con,
            storage_options=local_dest.options,
            partition_by="year",
        )
    assert local_dest.files() == before
    assert local_dest.pending() == []


@pytest.mark.parametrize(
    ("job_mode", "option", "wanted"),
    [
        ("append", "overwrite", "replace"),
        ("fail", "overwrite", "replace"),
        ("replace", "append", "append"),
        ("replace", "overwrite_or_ignore", "append"),
    ],
)
def test_an_option_against_the_jobs_conflict_mode_is_refused(local_dest, job_mode, option, wanted):
    con = connect()
    refused = f"build the job with conflict_mode='{wanted}'"
    job = magicfs.duckdb.copy_job(local_dest.url, connection=con, conflict_mode=job_mode)
    with pytest.raises(ValueError, match=refused) as raised, job:
        job.copy("FROM sales", partition_by="year", **{option: True})
    assert option.upper() in str(raised.value) and f"is {job_mode!r}" in str(raised.value)
    assert_nothing_left(local_dest)
    assert not con.filesystem_is_registered("magic")


def test_replace_keeps_the_old_data_when_the_copy_fails_where_duckdb_alone_loses_it(tmp_path):
    """A COPY with OVERWRITE failing on a late row: DuckDB writing to a local directory by
    itself has deleted the old dataset before failing; through magicfs (conflict mode
    ``replace``) the old data stays, untouched."""
    con = connect()
    failing = "SELECT *, CASE WHEN id < 2900 THEN id::VARCHAR ELSE 'x' END::BIGINT AS v FROM sales"
    plain, committed = tmp_path / "plain", tmp_path / "magicfs"
    con.execute(f"COPY sales TO '{plain}' (FORMAT parquet, PARTITION_BY (year))")
    magicfs.duckdb.copy("FROM sales", str(committed), connection=con, partition_by="year")
    with pytest.raises(duckdb.ConversionException):
        con.execute(
            f"COPY ({failing}) TO '{plain}' (FORMAT parquet, PARTITION_BY (year), OVERWRITE)"
        )
    assert [p for p in plain.rglob("*") if p.is_file()] == []
    before = data_files_under(committed)
    with pytest.raises(duckdb.ConversionException):
        magicfs.duckdb.copy(
            failing, str(committed), connection=con, partition_by="year", overwrite=True
        )
    assert data_files_under(committed) == before and len(before) == 3
    back = con.sql(f"FROM read_parquet('{committed}/*/*.parquet') ORDER BY id").df()
    assert back["id"].tolist() == list(range(ROWS))


def data_files_under(root: pathlib.Path) -> list[str]:
    """The data files below ``root`` (job setup deletes an old ``_SUCCESS``, by design)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))


# -- failures: nothing visible, nothing parked ----------------------------------------------------

#: A query whose rows fail late, after DuckDB has written several files of the COPY.
LATE_ROWS = 200_000
FILES_AS_THEY_GO = {"file_size_bytes": "160KB", "row_group_size": 10_000}


def late_cast_error(con: duckdb.DuckDBPyConnection) -> str:
    return (
        f"SELECT i AS id, CASE WHEN i < {LATE_ROWS - 20_000} THEN i::VARCHAR ELSE 'x' END::BIGINT "
        f"AS v FROM range({LATE_ROWS}) t(i)"
    )


def late_udf_error(con: duckdb.DuckDBPyConnection) -> str:
    def checked(value: int) -> int:
        if value == LATE_ROWS - 20_000:
            raise RuntimeError(f"bad record {value}")
        return value

    con.create_function("checked", checked, ["BIGINT"], "BIGINT")
    return f"SELECT i AS id, checked(i) AS v FROM range({LATE_ROWS}) t(i)"


class OpenCounter:
    """Counts the task files DuckDB opened: evidence that the failure came mid-COPY."""

    def __init__(self, fs: Any) -> None:
        self.opened: list[str] = []
        original = fs.open

        def counting_open(path: str, mode: str = "rb", **kwargs: Any) -> Any:
            if "w" in mode:
                self.opened.append(path)
            return original(path, mode, **kwargs)

        fs.open = counting_open


FAILURES = {
    "cast-error": (late_cast_error, duckdb.ConversionException, "Could not convert string 'x'"),
    "udf-raises": (late_udf_error, duckdb.InvalidInputException, "bad record 180000"),
}


@pytest.mark.parametrize(
    ("dest", "failure"),
    [
        ("moto", "cast-error"),
        pytest.param("rgw", "cast-error", marks=pytest.mark.rgw),
        ("local", "cast-error"),
        ("moto", "udf-raises"),
        ("local", "udf-raises"),
    ],
    indirect=["dest"],
)
def test_a_copy_failing_late_leaves_nothing(dest, failure):
    query_of, error, message = FAILURES[failure]
    con = duckdb.connect()
    query = query_of(con)
    job = magicfs.duckdb.copy_job(dest.url, connection=con, storage_options=dest.options)
    with pytest.raises(error, match=message) as raised, job:
        counter = OpenCounter(job.committer.fs)  # the filesystem DuckDB writes through
        job.copy(query, **FILES_AS_THEY_GO)
    assert len(counter.opened) >= 3  # DuckDB had written files before the bad row
    notes = "\n".join(raised.value.__notes__)
    assert "COPY #0" in notes and f"job {job.job_id}" in notes and "was aborted" in notes
    assert_nothing_left(dest)
    assert not con.filesystem_is_registered("magic")


FAST = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05)


@pytest.mark.parametrize("store", ["moto", pytest.param("rgw", marks=pytest.mark.rgw)])
def test_a_store_refusing_every_part_fails_the_copy_and_leaves_nothing(request, store):
    """Every UploadPart answered 500 by the fault front (retries exhausted): the task's
    files cannot be saved, its attempt and the job are aborted; nothing is visible and
    no upload is parked on the store behind the front."""
    suffix = "" if store == "moto" else "rgw_"
    front = request.getfixturevalue(f"{suffix}fault_front")
    client = request.getfixturevalue(f"{suffix}client" if suffix else "s3_client")
    bucket = request.getfixturevalue(f"{suffix}bucket" if suffix else "bucket")
    options = {
        **front.storage_options,
        "skip_instance_cache": True,
        "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}},
    }
    front.clear()
    front.add_rule("UploadPart", "500")
    con = connect()
    try:
        with pytest.raises(magicfs.errors.CommitFailedError):
            magicfs.duckdb.copy(
                "FROM sales",
                f"s3://{bucket}/sales",
                connection=con,
                storage_options=options,
                partition_by="year",
                committer_options={"retry_policy": FAST},
            )
        assert front.stats()["UploadPart"]["faults"]["500"] >= 3
    finally:
        front.clear()
    assert pending_uploads(client, bucket) == []
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


class DiskFullFileSystem(LocalFileSystem):
    """A local disk that runs full: a file's writes fail with ENOSPC past ``budget`` bytes."""

    cachable = False
    budget = 300_000

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        opened = super()._open(path, mode, **kwargs)
        if "w" in mode:
            return _FillingFile(opened, self.budget)
        return opened


class _FillingFile:
    def __init__(self, inner: LocalFileOpener, budget: int) -> None:
        self._inner, self._left = inner, budget

    def write(self, data: bytes) -> int:
        self._left -= len(data)
        if self._left < 0:
            raise OSError(errno.ENOSPC, "No space left on device", self._inner.path)
        return int(self._inner.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> _FillingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


def test_a_disk_running_full_fails_the_copy_and_leaves_nothing(tmp_path):
    dest = Dest("local", f"file://{tmp_path}/sales", None, fsspec.filesystem("file"))
    con = duckdb.connect()
    with pytest.raises(duckdb.Error, match="No space left on device"):
        magicfs.duckdb.copy(
            "SELECT i AS id, i % 4 AS g FROM range(2000000) t(i)",
            dest.url,
            connection=con,
            committer_options={"fs": DiskFullFileSystem()},
            partition_by="g",
        )
    assert_nothing_left(dest)


# -- a process killed during COPY, rolled back from another ---------------------------------------

CHILD = r"""
import json, sys
import duckdb
import magicfs, magicfs.duckdb

spec = json.loads(sys.argv[1])
print("MAGICFS", magicfs.__file__, flush=True)
con = duckdb.connect()
rows = [0]

def progress(batch):  # called by DuckDB's threads, one vector at a time
    rows[0] += len(batch)
    sys.stdout.write(f"ROWS {rows[0]}\n")
    sys.stdout.flush()
    return batch

con.create_function("progress", progress, ["BIGINT"], "BIGINT", type="arrow")
with magicfs.duckdb.copy_job(
    spec["url"], connection=con, storage_options=spec["options"], job_id=spec["job_id"]
) as job:
    job.copy(
        f"SELECT progress(i) AS id, i % 4 AS g FROM range({spec['rows']}) t(i)",
        file_size_bytes="128KB", row_group_size=10000,
    )
print("DONE", flush=True)
"""


def run_and_kill(dest: Dest, job_id: str, rows: int, kill_at: int) -> list[str]:
    """Run the COPY job in a child; SIGKILL it once DuckDB has passed ``kill_at`` rows."""
    spec = {"url": dest.url, "options": dest.options, "job_id": job_id, "rows": rows}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    assert child.stdout is not None
    for line in child.stdout:
        lines.append(line.strip())
        passed = re.fullmatch(r"ROWS (\d+)", line.strip())
        if passed and int(passed[1]) >= kill_at:
            child.send_signal(signal.SIGKILL)
            break
    child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL, (
        lines[-5:],
        child.stderr.read() if child.stderr else "",
    )
    assert lines[0] == f"MAGICFS {ROOT / 'magicfs' / '__init__.py'}"
    return lines


def test_a_process_killed_during_copy_is_rolled_back_from_another(dest):
    """SIGKILL at a random point of the COPY (seeded, printed); then, from this process,
    ``abort_job()`` on a committer rebuilt with the job id: nothing visible, no upload
    parked, no job tree or attempt directory left."""
    seed = random.randrange(1 << 30)
    rows = 1_000_000
    kill_at = random.Random(seed).randrange(rows // 4, rows * 3 // 4)
    print(f"seed {seed}: killed after {kill_at} rows")
    job_id = str(uuid.uuid4())
    run_and_kill(dest, job_id, rows, kill_at)
    assert dest.data_files() == []
    left_by_the_killed_job = dest.pending() if dest.client else dest.files()
    assert left_by_the_killed_job != []  # it died mid-write
    committer = magicfs.committer_for(dest.url, storage_options=dest.options, job_id=job_id)
    committer.abort_job()
    assert_nothing_left(dest)


# -- bad input: refused before anything is written ------------------------------------------------


def test_bad_input_is_refused_before_anything_is_written(local_dest, tmp_path):
    url = local_dest.url
    con = connect()
    cases = [
        ({"format": "xlsx"}, ValueError, "format='xlsx' is not one of parquet, csv, json"),
        ({"use_tmp_file": True}, ValueError, "use_tmp_file= is refused: job commit"),
        ({"overwrite": True, "append": True}, ValueError, "OVERWRITE and APPEND exclude"),
        ({"partition_by": [1]}, TypeError, r"partition_by=\[1\]: give a bool"),
        ({"bad name": 1}, ValueError, "'bad name' is not a COPY option name"),
        ({"Format": "csv", "FORMAT": "json"}, ValueError, "format= given twice"),
    ]
    for options_given, error, message in cases:
        with pytest.raises(error, match=message):
            magicfs.duckdb.copy("FROM sales", url, connection=con, **options_given)
    with pytest.raises(ValueError, match="non-empty SQL query"):
        magicfs.duckdb.copy(" ; ", url, connection=con)
    with pytest.raises(ValueError, match="file-v1 committer writes task files with"):
        magicfs.duckdb.copy_job(url, connection=con, committer="file-v1")
    ready = magicfs.committer_for(url)
    with pytest.raises(TypeError, match="ready-made committer already has its storage"):
        magicfs.duckdb.copy_job(url, connection=con, committer=ready, conflict_mode="replace")
    assert local_dest.files() == []
    other = magicfs.duckdb.copy_job(f"file://{tmp_path}/other", connection=con.cursor())
    registered = "already has a filesystem 'magic' registered"
    with (
        magicfs.duckdb.copy_job(url, connection=con) as job,
        pytest.raises(RuntimeError, match=registered),
    ):
        other.__enter__()
    assert job.summary is not None and job.summary.files == 0
    with pytest.raises(RuntimeError, match="call copy\\(\\) inside"):
        job.copy("FROM sales")
    assert local_dest.files() == ["_SUCCESS"] and not (tmp_path / "other").exists()
