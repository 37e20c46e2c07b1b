"""Large jobs: streamed job commit (records in a spool, on local disk once large),
throttling and a fixed rate cap.

The memory and rate figures themselves are measured by ``benchmarks/large_jobs.py``;
here every mechanism is checked by what it leaves: the committed objects, the spool
files in the temporary directory, the requests the store saw, the refusals.
"""

from __future__ import annotations

import asyncio
import glob
import json
import logging
import os
import tempfile
import threading
import time

import pytest
from helpers import pending_uploads, tamper_record, visible_keys

import magicfs
from magicfs.committers.magic_layout import delete_tree
from magicfs.errors import InvalidCommitData, JobCommitError, LocalSpoolError
from magicfs.records import PendingSet, SinglePendingCommit
from magicfs.stores import spool as spool_module
from magicfs.stores.commit_ops import Progress
from magicfs.stores.s3.rate import RateControl
from magicfs.stores.s3.retry import RetryPolicy
from magicfs.stores.spool import CommitSpool, KeySet, ListedOnce, OrderedPaths

FAST = RetryPolicy(attempts=6, base_delay=0.01, max_delay=0.05)


def commit(key: str, upload: str = "u") -> SinglePendingCommit:
    return SinglePendingCommit(
        uri=f"s3://b/{key}",
        upload_id=upload,
        bucket="b",
        destination_key=key,
        etags=["e"],
        length=3,
    )


# -- the spool ------------------------------------------------------------------------------


@pytest.fixture
def on_disk(monkeypatch):
    """Spools move to their file at their first row (as a large job's do)."""
    monkeypatch.setattr(spool_module, "SPILL_BYTES", 0)


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_spool_streams_back_every_commit_in_order_and_names_duplicates(
    where, monkeypatch, temp_dir
):
    if where == "disk":
        monkeypatch.setattr(spool_module, "SPILL_BYTES", 0)
    spool = CommitSpool()
    try:
        spool.add("s3://b/t0.pendingset", PendingSet("j", [commit("out/a", "u1"), commit("out/b")]))
        spool.add("s3://b/t1.pendingset", PendingSet("j", [commit("out/c"), commit("out/a", "u2")]))
        rows = [(src, i, c.destination_key, c.upload_id) for src, i, c in spool.rows()]
        assert rows == [
            ("s3://b/t0.pendingset", 0, "out/a", "u1"),
            ("s3://b/t0.pendingset", 1, "out/b", "u"),
            ("s3://b/t1.pendingset", 0, "out/c", "u"),
            ("s3://b/t1.pendingset", 1, "out/a", "u2"),
        ]
        assert (spool.files, spool.bytes, spool.records) == (
            4,
            12,
            ["s3://b/t0.pendingset", "s3://b/t1.pendingset"],
        )
        assert spool.first_duplicate() == (
            "b/out/a",
            ("s3://b/t0.pendingset", 0),
            ("s3://b/t1.pendingset", 1),
        )
        assert spool.first_destinations(2) == ["b/out/a", "b/out/a"]
        assert "u1" in spool and "u2" in spool and "u3" not in spool
        path = spool.path
        assert spools(temp_dir) == ([path] if where == "disk" else [])
    finally:
        spool.discard()
    assert spools(temp_dir) == []
    spool.discard()  # idempotent


def test_a_spool_moves_to_its_file_once_past_its_memory_bound_and_keeps_every_row(
    monkeypatch, temp_dir
):
    """A small job's spools stay in memory (no file); a large job's move to disk, rows
    added before the move included, and are read back alike."""
    monkeypatch.setattr(spool_module, "SPILL_BYTES", 256 << 10)
    listing = iter([["p-first"], [f"p{n:05d}" for n in range(20000)]])
    spool, keys, pages = CommitSpool(), KeySet(), ListedOnce(listing)
    try:
        spool.add("r0", PendingSet("j", [commit("out/first", "u-first")]))
        keys.update(["k-first", "k-first"])
        first_pass = iter(pages)
        assert next(first_pass) == ["p-first"]
        assert (spool.path, keys.path, pages.path) == (None, None, None)
        assert spools(temp_dir) == []

        spool.add("r1", PendingSet("j", [commit(f"out/{n:05d}", f"u{n}") for n in range(5000)]))
        keys.update(f"k{n}" for n in range(20000))
        assert list(first_pass) == [[f"p{n:05d}" for n in range(20000)]]
        assert sorted(spools(temp_dir)) == sorted([spool.path, keys.path, pages.path])

        rows = [(source, c.upload_id) for source, _, c in spool.rows()]
        assert rows == [("r0", "u-first")] + [("r1", f"u{n}") for n in range(5000)]
        assert spool.files == 5001 and "u-first" in spool and "u4999" in spool
        assert spool.first_duplicate() is None
        assert len(keys) == 20001 and "k-first" in keys and "k19999" in keys
        assert list(pages) == [["p-first"], [f"p{n:05d}" for n in range(20000)]]
    finally:
        for each in (spool, keys, pages):
            each.discard()
    assert spools(temp_dir) == []


def test_spool_reads_back_more_rows_than_one_batch():
    spool = CommitSpool()
    try:
        spool.add("r", PendingSet("j", [commit(f"out/{n:05d}", f"u{n}") for n in range(2500)]))
        assert [c.upload_id for c in spool.commits()] == [f"u{n}" for n in range(2500)]
        assert spool.first_duplicate() is None
    finally:
        spool.discard()


def test_key_set_on_disk(on_disk):
    keys = KeySet()
    try:
        keys.update(["a", "b", "a"])
        keys.update(f"k{n}" for n in range(3000))
        assert len(keys) == 3002 and "a" in keys and "k2999" in keys and "c" not in keys
    finally:
        keys.discard()
    assert not os.path.exists(keys.path)


def test_ordered_paths_come_back_rank_by_rank_never_two_ranks_in_a_batch(on_disk):
    paths = OrderedPaths()
    try:
        paths.add([(3, "j/journal"), (1, "j/t2"), (2, "j/page-1"), (1, "j/t1")])
        paths.add((1, f"j/r{n:04d}") for n in range(2500))
        batches = list(paths.batches(1000))
    finally:
        paths.discard()
    assert [len(b) for b in batches] == [1000, 1000, 502, 1, 1]
    assert batches[0][:2] == ["j/r0000", "j/r0001"] and batches[2][-2:] == ["j/t1", "j/t2"]
    assert batches[3:] == [["j/page-1"], ["j/journal"]]
    assert not os.path.exists(paths.path)


def test_ordered_paths_share_batches_from_a_rank_on_the_highest_rank_last():
    """A committed job's clean-up: its mode and the journal's pages share the journal's
    batches; the journal, the highest rank, is in the last one however many pages."""
    paths = OrderedPaths()
    try:
        paths.add([(3, "j/_journal"), (0, "j/f1"), (2, "j/zz-mode")])
        paths.add((2, f"j/page-{n:04d}") for n in range(1500))
        shared = list(paths.batches(1000, shared_from=2))
        alone = list(paths.batches(1000))
    finally:
        paths.discard()
    assert [len(b) for b in shared] == [1, 1000, 502]
    assert shared[0] == ["j/f1"] and shared[2][-2:] == ["j/zz-mode", "j/_journal"]
    assert [len(b) for b in alone] == [1, 1000, 501, 1] and alone[-1] == ["j/_journal"]


@pytest.mark.parametrize(
    ("files", "committed", "at_once", "sizes"),
    [
        (3, True, True, [6]),
        (3, True, False, [4, 2]),
        (3, False, True, [3, 1, 1, 1]),
        (1500, True, True, [998, 505]),
        (1500, True, False, [998, 503, 2]),
        (1500, False, True, [997, 503, 1, 1, 1]),
    ],
)
def test_a_tree_deleted_at_once_sends_its_last_files_with_its_journal(
    files, committed, at_once, sizes
):
    """Where the store deletes a batch in one request (S3's DeleteObjects), a committed
    job's journal takes the last files that fit in its request: a small tree goes in one.
    The journal is always in the last request; an uncommitted job keeps its ranks apart
    (files, task records, the job's mode, the journal). Listed in pages of 1,000."""
    tree = [f"j/{name}" for name in ("_magicfs_commit.json", "_magicfs_unmarked", "t.pendingset")]
    tree += [f"j/f{n:04d}.pending" for n in range(files)]
    sent: list[list[str]] = []
    pages = [tree[i : i + 1000] for i in range(0, len(tree), 1000)]
    delete_tree(pages, sent.append, None, committed=committed, at_once=at_once)
    assert [len(batch) for batch in sent] == sizes
    assert sorted(p for batch in sent for p in batch) == sorted(tree)
    assert sent[-1][-1] == "j/_magicfs_commit.json"


def test_a_listing_listed_once_is_read_back_from_disk_on_every_later_pass(on_disk):
    pulled = []

    def listing():
        for number in range(3):
            pulled.append(number)
            yield [f"t/{number}-{n:04d}" for n in range(1500 if number == 1 else 2)]

    pages = ListedOnce(listing())
    try:
        first = next(iter(pages))  # a pass that stops early: the next goes on from there
        assert pulled == [0]
        again = list(pages)
        assert pulled == [0, 1, 2] and again[0] == first and len(again[1]) == 1500
        assert list(pages) == again and pulled == [0, 1, 2]  # not listed again
    finally:
        pages.discard()
    assert not os.path.exists(pages.path)


def test_a_listing_read_ahead_is_taken_on_another_thread_and_its_failure_raised_by_the_pass(
    on_disk, temp_dir
):
    threads = []

    def listing(fail: bool):
        threads.append(threading.get_ident())
        yield ["t/a", "t/b"]
        if fail:
            raise OSError("listing failed")
        yield ["t/c"]

    pages = ListedOnce(listing(False)).read_ahead()
    try:
        assert list(pages) == [["t/a", "t/b"], ["t/c"]] and list(pages) == list(pages)
        assert threads and threads[0] != threading.get_ident()
    finally:
        pages.discard()
    assert not os.path.exists(pages.path)
    failing = ListedOnce(listing(True)).read_ahead()
    try:
        with pytest.raises(OSError, match="listing failed"):
            list(failing)
    finally:
        failing.discard()
    assert not os.path.exists(failing.path)
    unread = ListedOnce(listing(True)).read_ahead()
    unread.discard()  # never read: its failure is nobody's to raise, and the file goes
    assert not os.path.exists(unread.path)
    assert spools(temp_dir) == []


# -- job commit through the spool ------------------------------------------------------------


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """The temporary directory spools go to, private to the test."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def run_tasks(committer, tasks):
    messages = []
    for index, names in tasks.items():
        task = committer.task_attempt(index)
        committer.setup_task(task)
        for name in names:
            committer.fs.pipe_file(task.path(name), name.encode())
        messages.append(committer.commit_task(task))
    return messages


def spools(directory) -> list[str]:
    return glob.glob(os.path.join(directory, "magicfs-*.sqlite"))


@pytest.mark.parametrize("committer_name", ["magic", "directory"])
def test_committed_job_leaves_no_spool_and_lists_the_first_files(
    committer_name, s3_options, s3_client, bucket, temp_dir, on_disk
):
    committer = magicfs.committer_for(
        f"s3://{bucket}/out", committer=committer_name, storage_options=s3_options
    )
    committer.setup_job()
    names = {t: [f"part-{t}-{n:03d}" for n in range(40)] for t in range(3)}
    summary = committer.commit_job(run_tasks(committer, names))
    assert summary.files == 120
    success = json.loads(s3_client.get_object(Bucket=bucket, Key="out/_SUCCESS")["Body"].read())
    everything = sorted(f"/out/{n}" for files in names.values() for n in files)
    assert success["filenames"] == everything[:100]
    assert len(visible_keys(s3_client, bucket)) == 121
    assert pending_uploads(s3_client, bucket) == []
    assert spools(temp_dir) == []


def test_failed_validation_leaves_no_spool_and_nothing_visible(
    s3_options, s3_client, bucket, temp_dir, on_disk
):
    committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=s3_options)
    committer.setup_job()
    messages = run_tasks(committer, {0: ["a", "b"], 1: ["c"]})
    # Task 1's record now also claims task 0's file: refused before anything completes.
    record = messages[1].record
    bucket_name = record.partition("/")[0]
    first = json.loads(
        s3_client.get_object(Bucket=bucket_name, Key=messages[0].record.partition("/")[2])[
            "Body"
        ].read()
    )
    messages[1] = tamper_record(
        committer.store_fs, messages[1], lambda d: d["commits"].append(first["commits"][0])
    )
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    cause = failure.value.__cause__
    assert isinstance(cause, InvalidCommitData)
    assert cause.field == "commits[1].destinationKey" and "two tasks write" in str(cause)
    assert cause.source is not None and cause.source.startswith(f"s3://{record}")
    assert visible_keys(s3_client, bucket) == []
    assert pending_uploads(s3_client, bucket) == []
    assert spools(temp_dir) == []


# A temporary directory with no room, made real: the child process may write files of
# 1 KiB at most (RLIMIT_FSIZE, SIGXFSZ ignored so that the write fails with EFBIG, as
# on a full disk, rather than killing the process).
NO_ROOM = (
    "import resource, signal\n"
    "def no_room():\n"
    "    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)\n"
    "    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))\n"
    "    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))\n"
)


def run_child(code: str, *args: str) -> list[dict]:
    """Run ``code`` (after :data:`NO_ROOM`) in a child Python; the JSON lines it printed."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", NO_ROOM + code, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("when", ["moving to disk", "after the move"])
def test_a_spool_that_cannot_be_written_names_its_file_and_the_way_out(when, temp_dir):
    """The move to disk fails (its file removed, the rows still in memory), or a write to
    the file after it: either way the error names the file, its directory and TMPDIR."""
    code = (
        "import json, os, sys, tempfile\n"
        "tempfile.tempdir = sys.argv[1]\n"
        "from magicfs.stores import spool\n"
        "from magicfs.errors import LocalSpoolError\n"
        "keys = spool.KeySet()\n"
        "keys.update(['first'])\n"
        "if sys.argv[2] == 'after the move':\n"
        "    spool.SPILL_BYTES = 0\n"
        "    keys.update(['second'])\n"
        "room = no_room()\n"
        "moved = keys.path\n"
        "try:\n"
        "    keys.update(f'key-{n:07d}' * 8 for n in range(60_000))\n"
        "    keys.update(['last'])\n"
        "except LocalSpoolError as error:\n"
        "    failure = str(error)\n"
        "room()\n"
        "print(json.dumps({'failure': failure, 'moved': moved, 'path': keys.path,\n"
        "    'files': sorted(os.listdir(sys.argv[1])), 'first': 'first' in keys}))\n"
        "keys.discard()\n"
        "print(json.dumps({'files': sorted(os.listdir(sys.argv[1]))}))\n"
    )
    failed, discarded = run_child(code, str(temp_dir), when)
    assert str(temp_dir) in failed["failure"] and "is full" in failed["failure"]
    assert "set TMPDIR to a directory with room" in failed["failure"]
    assert failed["first"] is True  # the rows written before are all there
    if when == "moving to disk":
        assert failed["moved"] is None and failed["path"] is None  # still in memory
        assert failed["files"] == []  # the file it began is gone (no journal either)
    else:
        assert failed["moved"] == failed["path"] and failed["path"] in failed["failure"]
        assert failed["files"] == [os.path.basename(failed["path"])]
    assert discarded["files"] == []


def test_a_spool_whose_temporary_directory_is_gone_names_it(temp_dir, monkeypatch, on_disk):
    """The file cannot even be made (``TMPDIR`` names no directory): the same error,
    naming the directory, and the spool's rows are still there in memory."""
    missing = temp_dir / "gone"
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    keys = KeySet()
    try:
        with pytest.raises(LocalSpoolError, match="set TMPDIR") as failure:
            keys.update(["first"])
        assert str(missing) in str(failure.value)
        assert keys.path is None and "first" in keys
    finally:
        keys.discard()
    assert list(temp_dir.iterdir()) == []


def test_a_job_commit_with_no_room_for_its_spool_fails_and_commits_once_there_is(
    s3_options, s3_client, bucket, temp_dir
):
    """A user's job on a machine whose temporary directory is full: the commit fails in
    its load stage, names the spool's file and TMPDIR, publishes nothing, and the same
    ``commit_job`` succeeds once there is room (the advice followed)."""
    code = (
        "import json, sys, tempfile\n"
        "tempfile.tempdir = sys.argv[1]\n"
        "import magicfs\n"
        "from magicfs.stores import spool\n"
        "spool.SPILL_BYTES = 0  # the spools move to disk at their first row\n"
        "committer = magicfs.committer_for(sys.argv[3], storage_options=json.loads(sys.argv[2]))\n"
        "committer.setup_job()\n"
        "messages = []\n"
        "for t in range(2):\n"
        "    task = committer.task_attempt(t)\n"
        "    committer.setup_task(task)\n"
        "    committer.fs.pipe_file(task.path(f'part-{t}'), b'x' * 10)\n"
        "    messages.append(committer.commit_task(task))\n"
        "room = no_room()\n"
        "try:\n"
        "    committer.commit_job(messages)\n"
        "    print(json.dumps({'error': None}))\n"
        "except Exception as error:\n"
        "    print(json.dumps({'error': type(error).__name__, 'stage': error.stage,\n"
        "        'message': str(error), 'cause': type(error.__cause__).__name__}), flush=True)\n"
        "input()  # the test looks at the bucket\n"
        "room()\n"
        "print(json.dumps({'files': committer.commit_job(messages).files}))\n"
    )
    import subprocess
    import sys

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            NO_ROOM + code,
            str(temp_dir),
            json.dumps(s3_options),
            f"s3://{bucket}/out",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        failed = json.loads(child.stdout.readline())
        assert failed["error"] == "JobCommitError" and failed["stage"] == "load", failed
        assert failed["cause"] == "LocalSpoolError"
        assert str(temp_dir) in failed["message"] and "set TMPDIR" in failed["message"]
        assert visible_keys(s3_client, bucket) == []  # nothing published
        assert spools(temp_dir) == []
        committed, _ = child.communicate("\n", timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, child.stderr.read() if child.stderr else ""
    assert json.loads(committed.splitlines()[-1]) == {"files": 2}
    assert sorted(visible_keys(s3_client, bucket)) == ["out/_SUCCESS", "out/part-0", "out/part-1"]
    assert pending_uploads(s3_client, bucket) == []
    assert spools(temp_dir) == []


# -- throttling and the rate cap ---------------------------------------------------------------


def committer_via(front, bucket, **options):
    storage = {**front.storage_options, "skip_instance_cache": True}
    committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=storage, **options)
    committer.store_fs.retries = 1  # s3fs's own SlowDown retries: leave them to botocore
    return committer


def test_a_throttled_commit_slows_down_and_loses_nothing(
    faults_front, s3_client, bucket, caplog, monkeypatch
):
    committer = committer_via(faults_front, bucket, retry_policy=FAST, threads=8)
    committer.setup_job()
    names = {t: [f"f{t}-{n}" for n in range(10)] for t in range(4)}
    messages = run_tasks(committer, names)
    assert committer.store_fs.s3.meta.config.retries["mode"] == "standard"
    # no limit before the store throttles
    assert committer.flow.store_hooks.store.rate.rate() is None
    faults_front.add_rule("CompleteMultipartUpload", "503", rate=0.15)
    monkeypatch.setattr(Progress, "every", 0.0)  # a progress line per completion
    with caplog.at_level(logging.INFO, logger="magicfs.s3.commit"):
        summary = committer.commit_job(messages)
    answered = faults_front.stats()["CompleteMultipartUpload"]["faults"]["503"]
    assert summary.files == 40 and answered >= 2
    assert (
        committer.flow.store_hooks.store.throttled == answered
    )  # every SlowDown seen, retries included
    assert (
        committer.flow.store_hooks.store.rate.cuts >= 1
        and committer.flow.store_hooks.store.rate.rate() is not None
    )
    assert summary.counters["store_io_throttled"] == answered  # and in _SUCCESS's statistics
    keys = visible_keys(s3_client, bucket)
    assert sorted(keys) == sorted(
        ["out/_SUCCESS"] + [f"out/{n}" for v in names.values() for n in v]
    )
    assert pending_uploads(s3_client, bucket) == []
    lines = [r.getMessage() for r in caplog.records]
    assert any("of 40 files" in line and "throttled replies" in line for line in lines)
    assert any(f"the store throttled {answered} replies" in line for line in lines)


def test_a_store_that_does_not_count_throttling_reports_no_count(monkeypatch, caplog):
    """``store_io_throttled`` (and the progress line's count) only where the store counts
    throttled replies (``counts_throttling``): the in-process store does not, and a 0 in
    ``_SUCCESS`` would claim a count nobody made."""
    committer = magicfs.committer_for("mem-deferred://uncounted/out")
    assert not committer.flow.deferred.capabilities.counts_throttling
    committer.setup_job()
    with committer.attempt(0) as run, committer.fs.open(run.task.path("a.bin"), "wb") as f:
        f.write(b"x")
    monkeypatch.setattr(Progress, "every", 0.0)  # a progress line per completion
    with caplog.at_level(logging.INFO, logger="magicfs.s3.commit"):
        summary = committer.commit_job([run.message])
    assert summary.files == 1
    assert "store_io_throttled" not in summary.counters
    lines = [r.getMessage() for r in caplog.records]
    assert any("of 1 files" in line for line in lines)
    assert not any("throttled" in line for line in lines)


def test_max_request_rate_caps_the_calls_of_job_commit(faults_front, s3_client, bucket):
    rate = 25.0
    committer = committer_via(faults_front, bucket, max_request_rate=rate, threads=8)
    committer.setup_job()
    messages = run_tasks(committer, {t: [f"f{t}-{n}" for n in range(6)] for t in range(3)})
    before = sum(s["requests"] for s in faults_front.stats().values())
    start = time.monotonic()
    committer.commit_job(messages)
    seconds = time.monotonic() - start
    calls = sum(s["requests"] for s in faults_front.stats().values()) - before
    assert calls >= 18  # at least one completion per file
    # Calls through the committer's store are spaced 1/rate apart (s3fs's own listings,
    # e.g. the conflict check, are not: they are fewer than a tenth of the calls here).
    assert seconds >= (18 - 1) / rate
    assert len(visible_keys(s3_client, bucket)) == 19


class Clock:
    """A clock the test moves (RateControl's arithmetic, without waiting for it)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def start_calls(control: RateControl, clock: Clock, count: int, seconds: float) -> None:
    """``count`` calls that start evenly over ``seconds`` (their slots are not waited for)."""
    for _ in range(count):
        control._next = -1.0  # the slot is the test's to give: start now
        asyncio.run(control.acquire())
        clock.now += seconds / count


def test_the_adaptive_rate_cuts_to_90_percent_of_the_started_rate_then_grows():
    clock = Clock()
    control = RateControl(clock=clock)
    start_calls(control, clock, 400, 2.0)  # 200 calls/s, unthrottled: no limit
    assert control.rate() is None
    assert len(control._starts) == 128  # the last calls only: flat memory at any job size
    control.throttled()
    assert control.rate() == pytest.approx(180.0, rel=0.02) and control.cuts == 1
    control.throttled()  # an answer to a call started before the cut: no second cut
    clock.now += 0.5
    control.throttled()
    assert control.cuts == 1
    clock.now += 0.5  # clean replies: slow growth near the cut, faster further from it
    assert control.rate() == pytest.approx(180.0 * 1.044, rel=0.02)
    assert control.rate(clock.now + 5.0) == pytest.approx(180.0 * (1 + 0.24 + 0.864), rel=0.02)
    start_calls(control, clock, 190, 1.0)
    control.throttled()  # a new cut, from the rate the calls started at
    assert control.cuts == 2 and control.rate() == pytest.approx(171.0, rel=0.02)


def test_the_fixed_cap_bounds_the_adaptive_rate_and_spaces_calls():
    clock = Clock()
    control = RateControl(max_rate=50.0, clock=clock)
    assert control.rate() == 50.0
    start_calls(control, clock, 100, 1.0)  # 100 started in a second: cut from the cap
    control.throttled()
    assert control.rate() == pytest.approx(45.0)
    clock.now += 10.0  # regrowing, but never above the cap
    assert control.rate() == 50.0
    # Idle for 10 s (too few calls to measure): a throttled reply cuts from the rate,
    # not to nothing; the call repeated takes a slot of its own (the next waits 1/rate).
    control._next = clock.now
    control.throttled_call()
    assert control.cuts == 2 and control.rate() == pytest.approx(45.0)
    assert control._next == pytest.approx(clock.now + 1 / 45.0)
    unthrottled = RateControl(clock=clock)
    unthrottled.throttled()  # no call started: no rate to cut
    assert unthrottled.rate() is None and unthrottled.cuts == 0


def test_max_request_rate_must_be_positive(s3_options, bucket):
    with pytest.raises(ValueError, match="must be positive"):
        magicfs.committer_for(f"s3://{bucket}/out", storage_options=s3_options, max_request_rate=0)


def disk_spool() -> CommitSpool:
    """A spool that has moved to its file (``SPILL_BYTES`` is 0: at its first row)."""
    made = CommitSpool()
    made.add("r", PendingSet("j", [commit("out/a")]))
    assert made.path is not None
    return made


def test_a_killed_commit_s_spool_is_removed_by_the_next_one(temp_dir, monkeypatch, on_disk):
    """... the next one that moves to disk and looks: a process looks once a minute at
    most (each look lists the whole temporary directory, on a commit's critical path)."""
    import subprocess
    import sys

    from magicfs.stores import spool

    clock = [1000.0]
    monkeypatch.setattr(spool, "_now", lambda: clock[0])

    # A process that made a spool and was killed (SIGKILL: nothing of it ran after).
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, tempfile, time; tempfile.tempdir = sys.argv[1]\n"
            "from magicfs.stores import spool\n"
            "from magicfs.records import PendingSet, SinglePendingCommit\n"
            "spool.SPILL_BYTES = 0; made = spool.CommitSpool()\n"
            "made.add('r', PendingSet('j', [SinglePendingCommit("
            "uri='s3://b/k', upload_id='u', bucket='b', destination_key='k', etags=['e'], "
            "length=1)]))\n"
            "print(made.path, flush=True); time.sleep(60)",
            str(temp_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    orphan = child.stdout.readline().strip()
    live = disk_spool()  # while the child runs, its spool is not an orphan
    try:
        assert os.path.exists(orphan)
        child.kill()
        child.wait()
        assert os.path.exists(orphan)
        clock[0] += spool.ORPHANS_EVERY - 1
        disk_spool().discard()  # this process looked less than a minute ago
        assert os.path.exists(orphan)
        clock[0] += 1
        disk_spool().discard()
        assert not os.path.exists(orphan)
        assert os.path.exists(live.path)  # this process's own spool stays
    finally:
        live.discard()
        child.stdout.close()
