"""Each engine reads a snapshot in one line, and never a mix of two.

Another process (``helpers/snapshot_writer.py``) commits jobs to the destination,
appending and replacing, while this one reads it in a loop through one engine's own
reader, given the snapshot's file list (the one line ``docs/readers.md`` documents for
it). Every job writes three files of ten rows tagged with its number, so each read is
checked against the states the destination passes through: a read must hold exactly
the rows of the jobs of one state, every job whole. A plain listing read the same way
is shown to see half-committed jobs in ``docs/readers.md``; here only the snapshot is
held to the promise.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import magicfs

HELPER = os.path.join(os.path.dirname(__file__), "helpers", "snapshot_writer.py")
ROWS_PER_JOB = 30  # three files of ten rows (helpers/snapshot_writer.py)
#: What the writer commits after the first job (committed before readers start).
PLAN = [["append", 2], ["replace", 3], ["append", 4]]


def states(first: list[Any], plan: list[list[Any]]) -> list[frozenset[int]]:
    """The job numbers a snapshot holds after each commit, in order."""
    jobs: list[int] = []
    found = []
    for mode, number in [first, *plan]:
        jobs = [number] if mode == "replace" else [*jobs, number]
        found.append(frozenset(jobs))
    return found


def read_pyarrow(snap: magicfs.Snapshot) -> list[int]:
    return snap.dataset().to_table().column("job").to_pylist()


def read_pandas(snap: magicfs.Snapshot) -> list[int]:
    import pandas as pd

    return pd.read_parquet(snap.paths(), filesystem=snap.fs)["job"].tolist()


def read_polars(snap: magicfs.Snapshot) -> list[int]:
    import polars as pl

    return pl.scan_pyarrow_dataset(snap.dataset()).collect()["job"].to_list()


def read_duckdb(snap: magicfs.Snapshot) -> list[int]:
    import duckdb

    con = duckdb.connect()
    con.register_filesystem(snap.fs)
    rows = con.read_parquet(snap.urls()).select("job").fetchall()
    return [row[0] for row in rows]


def read_dask(snap: magicfs.Snapshot) -> list[int]:
    import dask
    import dask.dataframe as dd

    with dask.config.set(scheduler="synchronous"):
        frame = dd.read_parquet(snap.urls(), storage_options=snap.storage_options)
        return frame["job"].compute().tolist()


ENGINES: dict[str, Callable[[magicfs.Snapshot], list[int]]] = {
    "pyarrow": read_pyarrow,
    "pandas": read_pandas,
    "polars": read_polars,
    "duckdb": read_duckdb,
    "dask": read_dask,
}


def run_race(
    url: str,
    options: dict[str, Any],
    read: Callable[[magicfs.Snapshot], list[int]],
    retention: float = 5.0,
):
    """Commit job 1, then let the writer commit the plan while reading in a loop; every
    read must be one state, whole. ``retention``: the replace jobs' ``replace_retention``,
    longer than one read takes here. Returns the states seen, in order."""
    first = ["append", 1]
    done = subprocess.run(
        [sys.executable, HELPER, url, json.dumps(options), json.dumps([first]), "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    valid = states(first, PLAN)
    writer = subprocess.Popen(
        [sys.executable, HELPER, url, json.dumps(options), json.dumps(PLAN), str(retention)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[frozenset[int]] = []
    try:
        while True:
            finished = writer.poll() is not None
            snap = magicfs.snapshot(url, storage_options=options)
            counts = collections.Counter(read(snap))
            jobs = frozenset(counts)
            assert jobs in valid, f"read jobs {sorted(jobs)}: no state had them"
            assert all(n == ROWS_PER_JOB for n in counts.values()), f"a job read in part: {counts}"
            if not seen or seen[-1] != jobs:
                seen.append(jobs)
            if finished:
                break
    finally:
        if writer.poll() is None:
            writer.kill()
        _, errors = writer.communicate(timeout=60)
    assert writer.returncode == 0, errors
    assert seen[-1] == valid[-1]  # the read after the writer ended: its last state
    assert [valid.index(state) for state in seen] == sorted(valid.index(s) for s in seen)
    return seen


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_engine_reads_whole_snapshots_while_another_process_commits_on_s3(
    engine, s3_server, bucket
):
    seen = run_race(f"s3://{bucket}/sales", s3_server.storage_options, ENGINES[engine])
    assert len(seen) >= 2  # read before and after at least one commit


@pytest.mark.parametrize("engine", ["pyarrow", "duckdb"])
def test_an_engine_reads_whole_snapshots_while_another_process_commits_locally(engine, tmp_path):
    seen = run_race(f"file://{tmp_path}/sales", {}, ENGINES[engine])
    assert len(seen) >= 2
