"""Intent markers only when another job shares the destination (issue 28).

A magic job that finds no other job's tree at its destination or above it at set-up is
*unmarked*: its writers put no per-file intent marker, and its sweep finds their uploads
as those under the destination that were not pending when the job began (its snapshot,
``magicfs.stores.s3.tracking``, ``.sweep``); no store clock is read, so moto (which dates
every upload on one day of 2010) and Ceph RGW behave alike.

Killed writers are real processes killed with SIGKILL once their upload exists: they
leave an upload that no record names (and no marker either when the killed process set
up its own task attempt: only then does an unmarked writer skip its marker).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest
from helpers import Calls
from helpers.cli import run_cli

from magicfs.committers.magic_layout import MagicCommitter, MagicLayoutCommitter
from magicfs.errors import CommitFailedError
from magicfs.paths import marker_path, pending_path
from magicfs.task_files import TASK_FILES

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: A task writer that opens a file, writes to it and waits to be killed.
WRITER = textwrap.dedent(
    """
    import pickle, sys, time
    committer, path, mode, task = pickle.load(open(sys.argv[1], "rb"))
    if task is not None:
        committer.setup_task(task)  # this process sets up the attempt: no marker, unmarked
    try:
        f = committer.fs.open(path, mode)
        f.write(b"half a file")
        print("opened", flush=True)
    except FileExistsError as refused:
        print("refused:", refused, flush=True)
    time.sleep(600)
    """
)


#: A task writer in another process that writes a file and closes it.
#: A writer in another process (which did not set up the attempt): opens the path in the
#: given mode, writes, closes; prints "refused: ..." for FileExistsError, else "created".
CLOSER = textwrap.dedent(
    """
    import pickle, sys
    from magicfs.task_files import TASK_FILES
    committer, path, mode = pickle.load(open(sys.argv[1], "rb"))
    try:
        with committer.fs.open(path, mode) as f:
            f.write(b"from another process")
    except FileExistsError as refused:
        print("refused:", refused, flush=True)
    else:
        assert not [error for _, error in TASK_FILES.settle()]
        print("created", flush=True)
    """
)


def write_elsewhere(job, path: str, mode: str, tmp_path) -> str:
    """Run :data:`CLOSER` in a child process; what it printed."""
    spec = tmp_path / "closer.pkl"
    spec.write_bytes(pickle.dumps((job, path, mode)))
    done = subprocess.run(
        [sys.executable, "-c", CLOSER, str(spec)],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
        timeout=120,
    )
    return done.stdout


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def committer(fs, bucket: str, dest: str = "out", **options) -> MagicLayoutCommitter:
    return MagicCommitter(f"s3://{bucket}/{dest}", fs=fs, **options)


def write(job: MagicLayoutCommitter, task, name: str, data: bytes = b"x,y\n") -> None:
    with job.fs.open(task.path(name), "wb") as f:
        f.write(data)


def committed_task(job: MagicLayoutCommitter, task_id: int, *names: str):
    task = job.task_attempt(task_id)
    job.setup_task(task)
    for name in names:
        write(job, task, name)
    return job.commit_task(task)


def uploads(client, bucket: str) -> list[tuple[str, str]]:
    listed = client.list_multipart_uploads(Bucket=bucket).get("Uploads") or []
    return sorted((u["Key"], u["UploadId"]) for u in listed)


def objects(client, bucket: str, prefix: str = "") -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents") or []
    return sorted(o["Key"] for o in listed)


def visible(client, bucket: str) -> list[str]:
    """Objects outside the jobs' trees and the job commit records (kept by design)."""
    return [k for k in objects(client, bucket) if "__magic_job-" not in k and "/_magicfs/" not in k]


def killed_writer(
    job, task, name, client, bucket, tmp_path, mode="wb", *, set_up_there=True
) -> str:
    """A writer process killed once its upload exists; returns the upload's key.

    ``set_up_there``: the writer's process sets up the attempt itself (Spark's executor);
    else the attempt is the one this process set up."""
    spec = tmp_path / f"writer-{task.attempt_id}-{name.replace('/', '-')}.pkl"
    spec.write_bytes(pickle.dumps((job, task.path(name), mode, task if set_up_there else None)))
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(spec)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    key = f"{job.flow.dest_key}/{name}"
    try:
        deadline = time.monotonic() + 60
        while not any(k == key for k, _ in uploads(client, bucket)):
            assert time.monotonic() < deadline, "the writer never created its upload"
            assert process.poll() is None, "the writer process ended on its own"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return key


# --- the mode ----------------------------------------------------------------------------


@pytest.mark.rgw
@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "in-memory"])
def test_a_job_alone_sends_no_marker_per_file(rgw_s3, rgw_client, rgw_bucket, in_memory):
    job = committer(rgw_s3, rgw_bucket, in_memory=in_memory)
    job.setup_job()
    tree = f"out/__magic_job-{job.job_id}/"
    assert job.flow.store_hooks.unmarked
    assert f"{tree}_magicfs_unmarked" in objects(rgw_client, rgw_bucket, tree)
    assert job.storage_options["magic"]["intent_markers"] is False
    task = job.task_attempt(0)
    job.setup_task(task)
    calls = Calls(rgw_s3)
    write(job, task, "a.csv")
    TASK_FILES.settle()
    made = [(op, key) for op, key in calls.made]
    assert made[0] == ("CreateMultipartUpload", "out/a.csv")  # no marker before it
    expected = {"CreateMultipartUpload": 1, "UploadPart": 1}
    if not in_memory:  # (in memory, the writer's job check waits for its task commit's)
        expected.update(HeadObject=1, PutObject=1)
        assert made[-1] == (
            "PutObject",
            pending_path(f"{tree}job-{job.job_id}/00/tasks/{task.attempt_id}/__base/a.csv"),
        )
    assert calls.counts() == expected
    message = job.commit_task(task)
    job.commit_job([message])
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/a.csv"]
    assert objects(rgw_client, rgw_bucket, tree) == []
    assert uploads(rgw_client, rgw_bucket) == []


@pytest.mark.rgw
def test_a_job_sharing_its_destination_keeps_its_markers(rgw_s3, rgw_client, rgw_bucket):
    first = committer(rgw_s3, rgw_bucket)
    first.setup_job()
    second = committer(rgw_s3, rgw_bucket)
    calls = Calls(rgw_s3)
    second.setup_job()
    assert first.flow.store_hooks.unmarked and not second.flow.store_hooks.unmarked
    # set-up looked for other jobs' trees at the destination and each level above it
    assert ("ListObjectsV2", "out/__magic_job-") in calls.made
    assert ("ListObjectsV2", "__magic_job-") in calls.made
    assert "intent_markers" not in second.storage_options["magic"]
    task = second.task_attempt(0)
    second.setup_task(task)
    calls.clear()
    write(second, task, "b.csv")
    TASK_FILES.settle()
    marker = second.flow.deferred.split(marker_path(task.path("b.csv")))[1]
    assert calls.made[:2] == [("PutObject", marker), ("CreateMultipartUpload", "out/b.csv")]
    second.commit_job([second.commit_task(task)])
    first.commit_job([committed_task(first, 0, "a.csv")])
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/a.csv", "out/b.csv"]
    assert uploads(rgw_client, rgw_bucket) == []


@pytest.mark.rgw
def test_intent_markers_always_keeps_them(rgw_s3, rgw_client, rgw_bucket):
    job = committer(rgw_s3, rgw_bucket, intent_markers="always")
    calls = Calls(rgw_s3)
    job.setup_job()
    assert not job.flow.store_hooks.unmarked
    assert not any(op == "ListObjectsV2" for op, _ in calls.made)  # nothing to decide
    job.commit_job([committed_task(job, 0, "a.csv")])
    assert calls.counts()["PutObject"] >= 3  # job marker, intent marker, .pending, ...
    assert uploads(rgw_client, rgw_bucket) == []


def test_intent_markers_must_be_auto_or_always():
    with pytest.raises(ValueError, match="intent_markers must be one of auto, always; got 'never'"):
        MagicCommitter("s3://b/out", intent_markers="never")


def test_set_up_snapshots_the_pending_uploads_and_reads_no_clock(
    s3, s3_client, bucket, request_log
):
    # moto lists every upload as initiated on one fixed day of 2010: no matter, no date
    # is read. Set-up lists the uploads under the destination once, and keeps their ids.
    old = s3_client.create_multipart_upload(Bucket=bucket, Key="out/old.bin")["UploadId"]
    elsewhere = s3_client.create_multipart_upload(Bucket=bucket, Key="other/x.bin")["UploadId"]
    request_log.attach(s3)
    job = committer(s3, bucket)
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    assert [op for op in request_log.operations if "Multipart" in op] == ["ListMultipartUploads"]
    record = f"out/__magic_job-{job.job_id}/_magicfs_unmarked"
    document = json.loads(s3_client.get_object(Bucket=bucket, Key=record)["Body"].read())
    assert document == {"jobId": job.job_id, "intentMarkers": False, "uploadsBefore": [old]}
    job.commit_job([committed_task(job, 0, "a.csv")])
    assert uploads(s3_client, bucket) == [("other/x.bin", elsewhere), ("out/old.bin", old)]
    for key, upload_id in [("out/old.bin", old), ("other/x.bin", elsewhere)]:
        s3_client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)


def test_more_than_a_page_of_pending_uploads_keeps_markers(s3, s3_client, bucket, caplog):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        made = list(
            pool.map(
                lambda n: s3_client.create_multipart_upload(Bucket=bucket, Key=f"out/old/{n}")[
                    "UploadId"
                ],
                range(1001),
            )
        )
    job = committer(s3, bucket)
    with caplog.at_level(logging.INFO, logger="magicfs.committer.magic"):
        job.setup_job()
    assert not job.flow.store_hooks.unmarked
    assert "more than 1000 uploads are pending under s3://" in caplog.text
    job.commit_job([committed_task(job, 0, "a.csv")])
    assert sorted(list_all_uploads(s3_client, bucket)) == sorted(made)  # none of them swept
    assert objects(s3_client, bucket, "out/a.csv") == ["out/a.csv"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda n: s3_client.abort_multipart_upload(
                    Bucket=bucket, Key=f"out/old/{n}", UploadId=made[n]
                ),
                range(len(made)),
            )
        )


def list_all_uploads(client, bucket: str) -> list[str]:
    paginator = client.get_paginator("list_multipart_uploads")
    return [
        u["UploadId"]
        for page in paginator.paginate(Bucket=bucket)
        for u in page.get("Uploads") or []
    ]


def test_an_unreadable_snapshot_spares_what_the_job_does_not_name(
    s3, s3_client, bucket, tmp_path, caplog
):
    job = committer(s3, bucket)
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    record = f"out/__magic_job-{job.job_id}/_magicfs_unmarked"
    s3_client.put_object(Bucket=bucket, Key=record, Body=b"{tampered")
    # a plain upload started during the job: unmarked, the job would take it; unreadable
    # snapshot, it cannot tell it from one that was pending before, so it spares it
    plain = s3_client.create_multipart_upload(Bucket=bucket, Key="out/plain.bin")["UploadId"]
    failed = job.task_attempt(1)
    job.setup_task(failed)
    killed = killed_writer(
        job, failed, "marked.csv", s3_client, bucket, tmp_path, set_up_there=False
    )
    message = committed_task(job, 0, "a.csv")
    # the job's commit in another driver (set-up's snapshot is not known there: read back)
    driver = committer(s3, bucket, job_id=job.job_id)
    with caplog.at_level(logging.WARNING, logger="magicfs.s3.tracking"):
        driver.setup_job(resume=True)
        assert driver.flow.store_hooks.unmarked
        driver.commit_job([message])
    assert f"s3://{bucket}/{record}: unreadable unmarked record" in caplog.text
    assert visible(s3_client, bucket) == ["out/_SUCCESS", "out/a.csv"]
    # the killed writer's upload went by its marker, the plain one is left
    assert uploads(s3_client, bucket) == [("out/plain.bin", plain)]
    assert killed == "out/marked.csv"
    s3_client.abort_multipart_upload(Bucket=bucket, Key="out/plain.bin", UploadId=plain)


# --- writers in another process than the attempt's set-up ---------------------------------


def test_a_writer_in_the_set_up_process_sends_no_marker(s3, bucket, request_log):
    job = committer(s3, bucket)
    job.setup_job()
    task = job.task_attempt(0)
    job.setup_task(task)
    request_log.attach(s3)
    write(job, task, "a.csv")
    TASK_FILES.settle()
    assert request_log.counts() == {
        "CreateMultipartUpload": 1,
        "UploadPart": 1,
        "HeadObject": 1,
        "PutObject": 1,  # the .pending, no marker
    }
    job.commit_job([job.commit_task(task)])


@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "in-memory"])
def test_a_writer_killed_in_another_process_is_refused_at_task_commit(
    s3, s3_client, bucket, tmp_path, in_memory
):
    job = committer(s3, bucket, in_memory=in_memory)
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    task = job.task_attempt(0)
    job.setup_task(task)  # here; the writer below runs in another process
    write(job, task, "done.csv")
    killed_writer(job, task, "killed.csv", s3_client, bucket, tmp_path, set_up_there=False)
    with pytest.raises(CommitFailedError) as refused:
        job.commit_task(task)
    assert f"s3://{task.path('killed.csv')}" in str(refused.value)
    why = "were not written by this process" if in_memory else "opened but not closed"
    assert why in str(refused.value), str(refused.value)
    job.abort_job()
    assert uploads(s3_client, bucket) == []
    assert visible(s3_client, bucket) == []


def test_an_in_memory_file_closed_in_another_process_is_refused(s3, s3_client, bucket, tmp_path):
    job = committer(s3, bucket, in_memory=True)
    job.setup_job()
    task = job.task_attempt(0)
    job.setup_task(task)
    write_elsewhere(job, task.path("a.csv"), "wb", tmp_path)
    with pytest.raises(CommitFailedError, match=r"a\.csv: in in_memory mode a task must commit"):
        job.commit_task(task)
    job.abort_job()
    assert uploads(s3_client, bucket) == []


# --- two jobs on one destination ---------------------------------------------------------


@pytest.mark.rgw
@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "in-memory"])
@pytest.mark.parametrize("ends_first", ["alone", "marked"])
def test_two_jobs_on_one_destination_never_abort_each_others_uploads(
    rgw_s3, rgw_client, rgw_bucket, tmp_path, ends_first, in_memory
):
    """A job that ends first aborts its own uploads, those of its committed tasks too
    (named by their task records only where no ``.pending`` was saved: in memory, or a
    file whose task commit waited for it), and none of the other job's."""
    alone = committer(rgw_s3, rgw_bucket, in_memory=in_memory)
    alone.setup_job()
    marked = committer(rgw_s3, rgw_bucket, in_memory=in_memory)
    marked.setup_job()
    assert alone.flow.store_hooks.unmarked and not marked.flow.store_hooks.unmarked
    messages = {
        "alone": [committed_task(alone, 0, "alone.csv")],
        "marked": [committed_task(marked, 0, "marked.csv")],
    }
    jobs = {"alone": alone, "marked": marked}
    for name, job in jobs.items():
        task = job.task_attempt(1)
        job.setup_task(task)
        killed_writer(job, task, f"{name}-killed.csv", rgw_client, rgw_bucket, tmp_path)
    other = "marked" if ends_first == "alone" else "alone"
    jobs[ends_first].abort_job()
    left = [key for key, _ in uploads(rgw_client, rgw_bucket)]
    assert f"out/{other}.csv" in left  # the other job's committed task is untouched
    assert f"out/{ends_first}.csv" not in left
    jobs[other].commit_job(messages[other])
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", f"out/{other}.csv"]
    assert uploads(rgw_client, rgw_bucket) == []
    assert objects(rgw_client, rgw_bucket, "out/__magic_job-") == []


@pytest.mark.rgw
@pytest.mark.parametrize("ends_first", ["outer", "nested"])
def test_nested_jobs_never_abort_each_others_uploads(
    rgw_s3, rgw_client, rgw_bucket, tmp_path, ends_first
):
    nested = committer(rgw_s3, rgw_bucket, "out/sub")
    nested.setup_job()
    outer = committer(rgw_s3, rgw_bucket, "out")
    outer.setup_job()
    # Neither sees the other at set-up (a nested tree is below the outer job's listing,
    # and the nested job looked before the outer one existed): both are unmarked.
    assert nested.flow.store_hooks.unmarked and outer.flow.store_hooks.unmarked
    messages = {
        "outer": [committed_task(outer, 0, "sub/outer.csv", "top.csv")],
        "nested": [committed_task(nested, 0, "nested.csv")],
    }
    jobs = {"outer": outer, "nested": nested}
    for name, job in jobs.items():
        task = job.task_attempt(1)
        job.setup_task(task)
        relative = f"sub/{name}-killed.csv" if name == "outer" else f"{name}-killed.csv"
        killed_writer(job, task, relative, rgw_client, rgw_bucket, tmp_path)
    other = "nested" if ends_first == "outer" else "outer"
    jobs[ends_first].abort_job()
    left = {key for key, _ in uploads(rgw_client, rgw_bucket)}
    kept = {"outer": {"out/sub/outer.csv", "out/top.csv"}, "nested": {"out/sub/nested.csv"}}
    assert kept[other] <= left
    assert not kept[ends_first] & left
    jobs[other].commit_job(messages[other])
    files = {"outer": ["out/_SUCCESS", "out/sub/outer.csv", "out/top.csv"]}
    files["nested"] = ["out/sub/_SUCCESS", "out/sub/nested.csv"]
    assert visible(rgw_client, rgw_bucket) == files[other]
    assert uploads(rgw_client, rgw_bucket) == []  # the killed writers' too


# --- the sweep by snapshot -----------------------------------------------------------------


@pytest.mark.rgw
def test_uploads_older_than_the_job_are_spared(rgw_s3, rgw_client, rgw_bucket):
    old = rgw_client.create_multipart_upload(Bucket=rgw_bucket, Key="out/old.bin")["UploadId"]
    job = committer(rgw_s3, rgw_bucket)  # at once: no clock, no margin
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    # What the unmarked mode gives up: a plain upload started during the job is its.
    during = rgw_client.create_multipart_upload(Bucket=rgw_bucket, Key="out/during.bin")
    job.commit_job([committed_task(job, 0, "a.csv")])
    assert uploads(rgw_client, rgw_bucket) == [("out/old.bin", old)]
    assert during["UploadId"] not in {u for _, u in uploads(rgw_client, rgw_bucket)}
    rgw_client.abort_multipart_upload(Bucket=rgw_bucket, Key="out/old.bin", UploadId=old)


@pytest.mark.rgw
def test_hidden_names_are_never_swept_by_snapshot_and_keep_their_markers(
    rgw_s3, rgw_client, rgw_bucket, tmp_path
):
    job = committer(rgw_s3, rgw_bucket)
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    # another committer's upload under a hidden name (FileOutputCommitter's _temporary)
    other = rgw_client.create_multipart_upload(Bucket=rgw_bucket, Key="out/_temporary/0/x")
    failed = job.task_attempt(1)
    job.setup_task(failed)
    killed_writer(job, failed, "_meta/killed.csv", rgw_client, rgw_bucket, tmp_path)
    task = job.task_attempt(0)
    job.setup_task(task)
    calls = Calls(rgw_s3)
    write(job, task, "_meta/kept.csv")
    TASK_FILES.settle()
    marker = ("PutObject", job.flow.deferred.split(marker_path(task.path("_meta/kept.csv")))[1])
    assert calls.made.index(marker) < calls.made.index(
        ("CreateMultipartUpload", "out/_meta/kept.csv")
    )
    job.commit_job([job.commit_task(task)])
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/_meta/kept.csv"]
    # the killed writer's upload went by its marker; the other committer's is left
    assert uploads(rgw_client, rgw_bucket) == [("out/_temporary/0/x", other["UploadId"])]
    rgw_client.abort_multipart_upload(
        Bucket=rgw_bucket, Key="out/_temporary/0/x", UploadId=other["UploadId"]
    )


@pytest.mark.rgw
def test_the_mode_survives_resume(rgw_s3, rgw_client, rgw_bucket):
    job = committer(rgw_s3, rgw_bucket)
    job.setup_job()
    resumed = committer(rgw_s3, rgw_bucket, job_id=job.job_id)
    assert not resumed.flow.store_hooks.unmarked  # not known before it reads the store
    resumed.setup_job(resume=True)
    assert resumed.flow.store_hooks.unmarked
    assert resumed.storage_options["magic"]["intent_markers"] is False
    calls = Calls(rgw_s3)
    message = committed_task(resumed, 0, "a.csv")
    assert not any(
        op == "PutObject" and key.endswith("__base/_a.csv.magicfs-task.magicfs-marker")
        for op, key in calls.made
    )
    resumed.commit_job([message])
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/a.csv"]


@pytest.mark.rgw
def test_task_commit_finds_the_unmarked_files_of_another_process_by_their_records(
    rgw_s3, rgw_client, rgw_bucket, tmp_path
):
    job = committer(rgw_s3, rgw_bucket)
    job.setup_job()
    task = job.task_attempt(0)
    job.setup_task(task)
    write_elsewhere(job, task.path("a.csv"), "wb", tmp_path)
    tree = objects(rgw_client, rgw_bucket, f"out/__magic_job-{job.job_id}/")
    file = task.path("a.csv").split("/", 1)[1]
    # not the process that set up the attempt: that writer kept its marker
    assert [k for k in tree if "/__base/" in k] == [marker_path(file), pending_path(file)]
    elsewhere = committer(rgw_s3, rgw_bucket, job_id=job.job_id)
    assert not elsewhere.flow.store_hooks.unmarked  # it learns the mode from the tree
    message = elsewhere.commit_task(elsewhere.task_attempt(0))
    job.commit_job([message])
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/a.csv"]
    assert uploads(rgw_client, rgw_bucket) == []


@pytest.mark.rgw
def test_create_only_files_keep_their_marker_and_are_refused_across_writers(
    rgw_s3, rgw_client, rgw_bucket, tmp_path
):
    job = committer(rgw_s3, rgw_bucket)
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    task = job.task_attempt(0)
    job.setup_task(task)
    calls = Calls(rgw_s3)
    first = job.fs.open(task.path("once.csv"), "xb")
    marker = ("PutObject", job.flow.deferred.split(marker_path(task.path("once.csv")))[1])
    assert calls.made.index(marker) < calls.made.index(("CreateMultipartUpload", "out/once.csv"))
    spec = tmp_path / "second.pkl"
    spec.write_bytes(pickle.dumps((job, task.path("once.csv"), "xb", None)))
    second = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(spec)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    try:
        line = second.stdout.readline()
    finally:
        second.kill()
        second.wait()
    assert line.startswith("refused:") and "another writer has already opened" in line
    first.write(b"1")
    first.close()
    job.commit_job([job.commit_task(task)])
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/once.csv"]


# --- operators: the mode read back from the tree -------------------------------------------


@pytest.mark.rgw
def test_uploads_abort_job_takes_an_unmarked_jobs_killed_writers_only(
    rgw_server, rgw_s3, rgw_client, rgw_bucket, tmp_path
):
    dead = committer(rgw_s3, rgw_bucket)
    dead.setup_job()
    live = committer(rgw_s3, rgw_bucket)
    live.setup_job()
    assert dead.flow.store_hooks.unmarked and not live.flow.store_hooks.unmarked
    task = dead.task_attempt(0)
    dead.setup_task(task)
    killed_writer(dead, task, "dead.csv", rgw_client, rgw_bucket, tmp_path)
    live_messages = [committed_task(live, 0, "live.csv")]
    keys = {
        "AWS_ACCESS_KEY_ID": rgw_server.storage_options["key"],
        "AWS_SECRET_ACCESS_KEY": rgw_server.storage_options["secret"],
    }
    url = f"s3://{rgw_bucket}/out"
    aborted = run_cli(
        "uploads",
        "abort",
        "--force",
        "--job",
        dead.job_id,
        url,
        "--json",
        "--endpoint-url",
        rgw_server.endpoint_url,
        env=keys,
    )
    assert aborted.code == 0, aborted.output
    assert [u["key"] for u in aborted.json()["uploads"]] == ["out/dead.csv"]
    cleaned = run_cli(
        "jobs",
        "cleanup",
        "--job",
        dead.job_id,
        url,
        "--endpoint-url",
        rgw_server.endpoint_url,
        env=keys,
    )
    assert cleaned.code == 0, cleaned.output
    assert objects(rgw_client, rgw_bucket, f"out/__magic_job-{dead.job_id}/") == []
    live.commit_job(live_messages)
    assert visible(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/live.csv"]
    assert uploads(rgw_client, rgw_bucket) == []


# --- review findings: nested open files, hidden names, xb against unmarked wb --------------


@pytest.mark.rgw
def test_an_outer_jobs_sweep_spares_a_nested_jobs_file_no_record_names(
    rgw_s3, rgw_client, rgw_bucket
):
    nested = committer(rgw_s3, rgw_bucket, "out/sub", in_memory=True)
    nested.setup_job()
    outer = committer(rgw_s3, rgw_bucket, "out")
    outer.setup_job()
    assert nested.flow.store_hooks.unmarked and outer.flow.store_hooks.unmarked
    task = nested.task_attempt(0)
    nested.setup_task(task)
    write(nested, task, "nested.csv")  # closed: its record lives in this process only
    TASK_FILES.settle()
    outer.commit_job([committed_task(outer, 0, "top.csv")])
    # the outer job found the nested one's tree unmarked: its upload is not the outer's
    assert [k for k, _ in uploads(rgw_client, rgw_bucket)] == ["out/sub/nested.csv"]
    nested.commit_job([nested.commit_task(task)])
    assert "out/sub/nested.csv" in visible(rgw_client, rgw_bucket)
    assert uploads(rgw_client, rgw_bucket) == []


@pytest.mark.rgw
def test_a_hidden_upload_one_job_spares_is_not_left_parked_by_the_other(
    rgw_s3, rgw_client, rgw_bucket, tmp_path
):
    first = committer(rgw_s3, rgw_bucket)
    first.setup_job()
    second = committer(rgw_s3, rgw_bucket)
    second.setup_job()
    assert first.flow.store_hooks.unmarked and not second.flow.store_hooks.unmarked
    task = second.task_attempt(0)
    second.setup_task(task)
    killed_writer(second, task, "_meta/killed.csv", rgw_client, rgw_bucket, tmp_path)
    # the unmarked job never takes hidden names by snapshot, so it may not own this one:
    # the marked job, whose marker names it, aborts it
    second.abort_job()
    assert uploads(rgw_client, rgw_bucket) == []
    first.commit_job([committed_task(first, 0, "a.csv")])
    assert uploads(rgw_client, rgw_bucket) == []


def test_xb_elsewhere_is_refused_when_an_unmarked_writer_closed_the_path(
    s3, s3_client, bucket, tmp_path
):
    job = committer(s3, bucket)
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    task = job.task_attempt(0)
    job.setup_task(task)
    write(job, task, "a.csv", b"first")  # this process set up the attempt: no marker
    TASK_FILES.settle()
    answer = write_elsewhere(job, task.path("a.csv"), "xb", tmp_path)
    assert answer.startswith("refused:") and "another writer has already written" in answer
    job.commit_job([job.commit_task(task)])
    body = s3_client.get_object(Bucket=bucket, Key="out/a.csv")["Body"].read()
    assert body == b"first"
    assert uploads(s3_client, bucket) == []


@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "in-memory"])
def test_a_path_written_here_unmarked_and_elsewhere_is_refused_at_task_commit(
    s3, s3_client, bucket, tmp_path, in_memory
):
    job = committer(s3, bucket, in_memory=in_memory)
    job.setup_job()
    assert job.flow.store_hooks.unmarked
    task = job.task_attempt(0)
    job.setup_task(task)
    mine = job.fs.open(task.path("a.csv"), "wb")  # still open: nothing on the store for xb
    mine.write(b"first")
    assert write_elsewhere(job, task.path("a.csv"), "xb", tmp_path).startswith("created")
    mine.close()
    TASK_FILES.settle()
    with pytest.raises(CommitFailedError, match="written both by this process and by another"):
        job.commit_task(task)
    job.abort_job()
    assert visible(s3_client, bucket) == []
    assert uploads(s3_client, bucket) == []


# --- a sibling destination whose name starts with the same letters ---------------------------


def test_the_pending_writes_under_a_destination_are_not_a_siblings(s3, s3_client, bucket):
    """The adapter's ``alist_pending("bkt/out/")`` lists what lies below ``out/``: not
    ``out10/``'s uploads (s3fs's path stripping drops the ``/``), in one request."""
    from magicfs.stores.deferred import collect
    from magicfs.stores.operator_view import no_scratch
    from magicfs.stores.s3.deferred import S3Deferred

    for key in ("out/a.bin", "out10/b.bin"):
        s3_client.create_multipart_upload(Bucket=bucket, Key=key)
    adapter = S3Deferred.for_job(s3, "", no_scratch)
    calls = Calls(s3)
    listed = adapter.run(collect(adapter.alist_pending(f"{bucket}/out/")))
    assert [write.path for write in listed] == [f"{bucket}/out/a.bin"]
    assert calls.counts() == Counter({"ListMultipartUploads": 1})
    calls.clear()
    listed = adapter.run(collect(adapter.alist_pending(f"{bucket}/out")))  # a prefix: both
    assert sorted(write.path for write in listed) == [
        f"{bucket}/out/a.bin",
        f"{bucket}/out10/b.bin",
    ]
    assert calls.counts() == Counter({"ListMultipartUploads": 1})
    for key, upload_id in uploads(s3_client, bucket):
        s3_client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)


@pytest.mark.parametrize("name", ["magic", "magic-layout"])
def test_a_jobs_clean_up_leaves_a_sibling_destinations_uploads(s3, s3_client, bucket, name):
    """A job at ``bkt/out`` commits and cleans up while a job at ``bkt/out10`` has a
    committed task: that task's upload survives, and its job then commits it."""
    import magicfs

    jobs = {
        dest: magicfs.committer_for(f"s3://{bucket}/{dest}", committer=name, fs=s3)
        for dest in ("out", "out10")
    }
    messages = {}
    for dest, job in jobs.items():
        job.setup_job()
        messages[dest] = [committed_task(job, 0, f"{dest}.csv")]
    jobs["out"].commit_job(messages["out"])
    assert [key for key, _ in uploads(s3_client, bucket)] == ["out10/out10.csv"]
    jobs["out10"].commit_job(messages["out10"])
    assert visible(s3_client, bucket) == [
        "out/_SUCCESS",
        "out/out.csv",
        "out10/_SUCCESS",
        "out10/out10.csv",
    ]
    assert uploads(s3_client, bucket) == []
