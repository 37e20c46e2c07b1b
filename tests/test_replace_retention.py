"""A replace job's old files: deleted only after the new snapshot is published, never lost.

Real jobs on a local disk and moto over HTTP. The old files go after the new record is
written: at once with ``replace_retention=0`` (the default), else by the next job that
commits on the destination or ``magicfs jobs vacuum`` once the retention has passed. A
committer SIGKILLed between its record and the deletes (held there by a filesystem that
blocks the first delete, ``helpers/retire_kill.py``) leaves the deletion to the same two.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import run_cli
from test_operator_paths import moto_cli
from test_snapshots import Store, _store

import magicfs
from magicfs.names import JOB_RECORDS_DIR, RETIRE_LIST_SUFFIX

TESTS = Path(__file__).parent


def retire_lists(store: Store) -> list[str]:
    """The retire lists under the destination's records (what is still to delete)."""
    store.fs.invalidate_cache()
    root = store.fs._strip_protocol(store.url).rstrip("/")
    try:
        names = store.fs.ls(f"{root}/{JOB_RECORDS_DIR}", detail=False, refresh=True)
    except FileNotFoundError:
        return []
    return [name for name in names if name.endswith(RETIRE_LIST_SUFFIX)]


@pytest.mark.parametrize("kind", ["s3", "local"])
def test_a_retention_keeps_the_old_files_for_the_next_job_or_vacuum(request, kind, tmp_path):
    """With a retention, the replace job returns at once, old files still there for
    readers of the old snapshot; a job committed before the retention passed leaves
    them, ``jobs vacuum`` says how long they stay, and deletes them when told to."""
    store = _store(request, kind, tmp_path)
    store.job({"old/1.csv": b"o1\n", "old/2.csv": b"o2\n"})
    store.job({"new/1.csv": b"n1\n"}, conflict_mode="replace", replace_retention=3600)
    assert store.listed() == {"old/1.csv", "old/2.csv", "new/1.csv"}
    assert store.snapshot() == {"new/1.csv": b"n1\n"}
    assert len(retire_lists(store)) == 1

    store.job({"more.csv": b"m\n"})  # the retention has not passed: the old files stay
    assert store.listed() == {"old/1.csv", "old/2.csv", "new/1.csv", "more.csv"}
    cli = _cli(request, kind)
    waiting = cli("jobs", "vacuum", "--json", store.url)
    assert waiting.code == 0, waiting.stderr
    (job,) = json.loads(waiting.stdout)["replaceJobs"]
    assert job["deleted"] == 0 and 3500 < job["waitingSeconds"] <= 3600
    assert store.listed() == {"old/1.csv", "old/2.csv", "new/1.csv", "more.csv"}

    done = cli("jobs", "vacuum", "--ignore-retention", store.url)
    assert done.code == 0, done.stderr
    assert "deleted 2 old files" in done.stdout
    assert store.listed() == {"new/1.csv", "more.csv"}
    assert retire_lists(store) == []
    assert store.snapshot() == {"new/1.csv": b"n1\n", "more.csv": b"m\n"}


def test_the_next_job_deletes_old_files_whose_retention_passed(tmp_path):
    """A retention of a millisecond has passed by the time the next job commits: that
    job deletes the old files, and keeps the one a later job wrote again."""
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    store.job({"old/1.csv": b"o1\n", "old/2.csv": b"o2\n"})
    store.job({"new.csv": b"n\n"}, conflict_mode="replace", replace_retention=0.001)
    store.job({"old/2.csv": b"again\n"})  # a later job writes an old name again
    assert store.listed() == {"new.csv", "old/2.csv"}
    assert not (tmp_path / "out" / "old" / "1.csv").exists()
    assert store.snapshot() == {"new.csv": b"n\n", "old/2.csv": b"again\n"}
    assert retire_lists(store) == []


def test_a_replace_killed_before_deleting_is_finished_by_the_next_job(tmp_path):
    store = _killed_replace(tmp_path)
    store.job({"later.csv": b"l\n"})
    assert store.listed() == {"new.csv", "later.csv"}
    assert not (tmp_path / "out" / "old").exists()  # its emptied directory went too
    assert retire_lists(store) == []
    assert store.snapshot() == {"new.csv": b"new\n", "later.csv": b"l\n"}


def test_a_replace_killed_before_deleting_is_finished_by_jobs_vacuum(tmp_path):
    store = _killed_replace(tmp_path)
    done = run_cli("jobs", "vacuum", store.url)
    assert done.code == 0, done.stderr
    assert "deleted 2 old files" in done.stdout
    assert store.listed() == {"new.csv"}
    assert retire_lists(store) == []
    again = run_cli("jobs", "vacuum", store.url)
    assert "no old files of a replace job left to delete" in again.stdout


def test_a_partition_replace_takes_only_its_partitions_out_of_the_snapshot(s3_server, bucket, s3):
    """The partitioned staging committer's ``replace`` replaces the partitions it
    writes: its record says so, and the snapshot keeps every other partition's files."""
    store = Store(f"s3://{bucket}/out", s3_server.storage_options, s3)
    store.job({"y=1/a.csv": b"1a\n", "y=2/b.csv": b"2b\n"}, committer="partitioned")
    store.job({"y=1/c.csv": b"1c\n"}, committer="partitioned", conflict_mode="replace")
    assert store.listed() == {"y=1/c.csv", "y=2/b.csv"}
    assert store.snapshot() == {"y=1/c.csv": b"1c\n", "y=2/b.csv": b"2b\n"}
    snap = magicfs.snapshot(store.url, storage_options=store.options)
    assert [(job.mode, job.partitions) for job in snap.jobs] == [
        ("append", []),
        ("replace-partitions", ["y=1"]),
    ]


def _killed_replace(tmp_path) -> Store:
    """A local destination whose replace job was SIGKILLed between its record and its
    first delete: the new snapshot published, the old files all still there."""
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    store.job({"old/1.csv": b"o1\n", "old/2.csv": b"o2\n"})
    child = subprocess.Popen(
        [sys.executable, "-m", "helpers.retire_kill", store.url],
        cwd=TESTS,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)])),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("deleting ") and "/old/" in line, line
        # the kill lands here: the record is written, nothing old deleted yet
        assert store.snapshot() == {"new.csv": b"new\n"}
        assert len(retire_lists(store)) == 1
        assert store.listed() == {"old/1.csv", "old/2.csv", "new.csv"}
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert store.listed() == {"old/1.csv", "old/2.csv", "new.csv"}
    return store


def _cli(request, kind: str):
    if kind == "local":
        return run_cli
    return moto_cli(request.getfixturevalue("s3_server"))
