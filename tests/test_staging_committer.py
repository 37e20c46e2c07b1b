"""The staging committers (directory, partitioned) against Hadoop's staging suites (§7.3)."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys

import pytest
from helpers import pending_uploads, visible_keys
from helpers.elsewhere import ROOT
from helpers.faults import Faults

from magicfs import committer_for
from magicfs.committers.staging import StagingCommitter, add_uuid, partitions_of
from magicfs.errors import CommitConflictError, CommitFailedError, NothingToCommitError
from magicfs.layouts.manifest import staged_names
from magicfs.records import PendingSet


@pytest.fixture
def make_committer(bucket, s3_options, tmp_path):
    def make(name: str = "directory", dest: str = "out", **options) -> StagingCommitter:
        return committer_for(
            f"s3://{bucket}/{dest}",
            committer=name,
            storage_options={**s3_options, "skip_instance_cache": True},
            buffer_dir=str(tmp_path / "buffer"),
            **options,
        )

    return make


def write(committer, task, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        with committer.fs.open(task.path(relative), "wb") as f:
            f.write(data)


def run_tasks(committer, files_per_task: dict[int, dict[str, bytes]]):
    committer.setup_job()
    messages = []
    for index, files in files_per_task.items():
        task = committer.task_attempt(index)
        committer.setup_task(task)
        write(committer, task, files)
        messages.append(committer.commit_task(task))
    return messages


# --- TestPaths ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/part-0000", "/part-0000-UUID"),
        ("/part-0000.gz.csv", "/part-0000-UUID.gz.csv"),
        ("/parent.dir/part-0000", "/parent.dir/part-0000-UUID"),
        ("/dir/part-0000-UUID.csv", "/dir/part-0000-UUID.csv"),
        ("part-0000.parquet", "part-0000-UUID.parquet"),
    ],
)
def test_add_uuid(path, expected):
    assert add_uuid(path, "UUID") == expected


@pytest.mark.parametrize(("path", "uuid"), [("/dest/", "UUID"), ("", "UUID"), ("/p", "")])
def test_add_uuid_refuses(path, uuid):
    with pytest.raises(ValueError):
        add_uuid(path, uuid)


def test_partitions():
    assert partitions_of(["year=2017/month=10/a", "year=2017/month=10/b", "top.csv"]) == {
        "year=2017/month=10",
        "table_root",
    }


# --- task commit ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "files",
    [
        {"part-0000": b"single"},
        {"part-0000": b""},
        {"a/part-0000": b"1", "a/part-0001": b"22", "b/part-0002": b"333"},
    ],
    ids=["single", "empty", "multi"],
)
def test_task_commit_uploads_without_completing(make_committer, s3_client, bucket, files):
    committer = make_committer(unique_filenames=True)
    committer.setup_job()
    task = committer.task_attempt(2)
    committer.setup_task(task)
    write(committer, task, files)
    message = committer.commit_task(task)
    uploads = pending_uploads(s3_client, bucket)
    assert len(uploads) == len(files)
    assert visible_keys(s3_client, bucket) == []
    # uploaded: removed
    assert not os.path.exists(committer.flow.local_attempt_dir(task.attempt_id))
    pendingset = PendingSet.from_json(
        committer.flow.wrapped.flow.store.read_bytes(message.record, 1 << 20)
    )
    assert message.record.endswith(f"/{task.task_id}/{task.task_id}.pendingset")
    keys = sorted(c.destination_key for c in pendingset.commits)
    assert keys == sorted(f"out/{add_uuid(r, committer.job_id)}" for r in files)
    assert {c.upload_id for c in pendingset.commits} == {u["UploadId"] for u in uploads}
    assert all(c.bucket == bucket and len(c.etags) == 1 for c in pendingset.commits)
    committer.commit_job([message])
    for relative, data in files.items():
        body = s3_client.get_object(
            Bucket=bucket, Key=f"out/{add_uuid(relative, committer.job_id)}"
        )
        assert body["Body"].read() == data
    assert pending_uploads(s3_client, bucket) == []


def test_hidden_local_files_are_not_uploaded(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.commit_job(
        run_tasks(
            committer, {0: {"year=2017/month=10/a": b"1", "_metadata": b"m", ".x.partial": b"p"}}
        )
    )
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/year=2017/month=10/a"]


@pytest.mark.parametrize("nth", [1, 2])
def test_upload_failure_aborts_every_upload_and_removes_local_data(
    make_committer, s3_client, bucket, nth
):
    committer = make_committer(threads=1)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write(committer, task, {"a": b"1", "b": b"2", "c": b"3"})
    Faults(committer.store_fs).fail("UploadPart", nth=nth)
    with pytest.raises(OSError, match="injected"):
        committer.commit_task(task)
    assert pending_uploads(s3_client, bucket) == []
    assert not os.path.exists(committer.flow.local_attempt_dir(task.attempt_id))


def test_task_abort_removes_local_data(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write(committer, task, {"a": b"1"})
    committer.abort_task(task)
    assert not os.path.exists(committer.flow.local_attempt_dir(task.attempt_id))
    assert pending_uploads(s3_client, bucket) == []


def test_task_files_are_local_and_an_attempt_commits_once(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write(committer, task, {"year=2024/a.csv": b"a"})
    staged = staged_names(["year=2024", "a.csv"])
    local = os.path.join(committer.flow.local_attempt_dir(task.attempt_id), *staged)
    with open(local, "rb") as f:  # a plain local file (task.path is routed to it, names staged)
        assert f.read() == b"a"
    assert committer.fs.cat_file(task.path("year=2024/a.csv")) == b"a"  # read back
    message = committer.commit_task(task)
    # Its local files were uploaded and removed: a second commit would replace its record
    # with an empty one.
    with pytest.raises(FileNotFoundError, match="has already committed"):
        committer.commit_task(task)
    committer.commit_job([message])
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/year=2024/a.csv"]


def test_buffer_directory_is_private(make_committer, tmp_path):
    committer = make_committer()
    committer.setup_job()
    committer.setup_task(committer.task_attempt(0))
    assert stat.S_IMODE(os.stat(tmp_path / "buffer").st_mode) == 0o700


# --- job commit and abort ----------------------------------------------------------------------


def four_tasks_three_files(committer):
    return run_tasks(
        committer, {t: {f"t{t}/f{n}": f"{t}{n}".encode() for n in range(3)} for t in range(4)}
    )


def test_job_commit_from_listing(make_committer, s3_client, bucket):
    committer = make_committer()
    four_tasks_three_files(committer)
    assert committer.commit_job().files == 12


def test_job_commit_failure_reverts_and_aborts(make_committer, s3_client, bucket):
    committer = make_committer(threads=1)
    messages = four_tasks_three_files(committer)
    Faults(committer.store_fs).fail("CompleteMultipartUpload", nth=5)
    with pytest.raises(
        CommitFailedError, match=r"stage publish: .*4 files it had made visible were deleted again"
    ):
        committer.commit_job(messages)
    assert visible_keys(s3_client, bucket) == []
    assert pending_uploads(s3_client, bucket) == []


# --- conflict modes -------------------------------------------------------------------------------


def test_unknown_conflict_mode(make_committer):
    with pytest.raises(ValueError, match="unknown conflict_mode 'merge'"):
        make_committer(conflict_mode="merge")


def test_directory_append_and_default(make_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/old", Body=b"old")
    committer = make_committer()
    assert committer.options.conflict_mode == "append"
    committer.commit_job(run_tasks(committer, {0: {"new": b"n"}}))
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/new", "out/old"]


PARTITIONED_FILES = {
    "dateint=20161115/hour=14/a.parquet": b"1",
    "dateint=20161116/hour=15/b.parquet": b"2",
}


def test_partitioned_fail_at_task_commit(make_committer, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="out/dateint=20161115/hour=14/old", Body=b"old")
    committer = make_committer("partitioned", conflict_mode="fail")
    committer.setup_job()  # no check at setup for the partitioned committer
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write(committer, task, PARTITIONED_FILES)
    with pytest.raises(
        CommitConflictError, match="dateint=20161115/hour=14: partition already exists"
    ):
        committer.commit_task(task)
    assert pending_uploads(s3_client, bucket) == []  # refused before any upload
    s3_client.delete_object(Bucket=bucket, Key="out/dateint=20161115/hour=14/old")
    retry = committer.task_attempt(0, 1)
    committer.setup_task(retry)
    write(committer, retry, PARTITIONED_FILES)
    committer.commit_job([committer.commit_task(retry)])
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"] + [
        f"out/{k}" for k in sorted(PARTITIONED_FILES)
    ]


def test_partitioned_replace_deletes_exactly_the_written_partitions(
    make_committer, s3_client, bucket
):
    for key in (
        "out/dateint=20161115/hour=14/old",
        "out/dateint=20161115/hour=13/untouched",
        "out/top-level-old",
    ):
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"old")
    committer = make_committer("partitioned", conflict_mode="replace")
    committer.commit_job(run_tasks(committer, {0: {**PARTITIONED_FILES, "top.csv": b"t"}}))
    assert visible_keys(s3_client, bucket) == sorted(
        [
            "out/_SUCCESS",
            "out/dateint=20161115/hour=13/untouched",
            "out/top-level-old",  # files at the top are appended
            "out/top.csv",
            *[f"out/{k}" for k in PARTITIONED_FILES],
        ]
    )


# --- a driver killed at the last line of its clean-up ----------------------------------------

#: A job committed in a child process that is SIGKILLed the moment its clean-up goes to
#: remove the job's local directory: after the journal went (with the wrapped job's
#: records), before the directory did. The kill is injected at ``shutil.rmtree``.
KILLED_IN_CLEAN_UP = """
import os, pickle, shutil, signal, sys
from magicfs import committer_for
url, options, buffer_dir, job_id = pickle.load(open(sys.argv[1], "rb"))
committer = committer_for(url, committer="directory", storage_options=options,
                          buffer_dir=buffer_dir, job_id=job_id)
committer.setup_job()
for index in range(3):
    task = committer.task_attempt(index)
    committer.setup_task(task)
    with committer.fs.open(task.path(f"part-{index}"), "wb") as f:
        f.write(b"x" * (index + 1))
    committer.commit_task(task)
rmtree = shutil.rmtree
def killing_rmtree(path, *args, **kwargs):
    if os.path.basename(str(path).rstrip("/")) == job_id:
        os.kill(os.getpid(), signal.SIGKILL)
    return rmtree(path, *args, **kwargs)
shutil.rmtree = killing_rmtree
committer.commit_job()
"""


def test_a_retried_commit_removes_the_local_directory_a_killed_clean_up_left(
    make_committer, s3_client, bucket, s3_options, tmp_path
):
    buffer_dir = tmp_path / "buffer"
    spec = tmp_path / "job.pkl"
    options = {**s3_options, "skip_instance_cache": True}
    spec.write_bytes(pickle.dumps((f"s3://{bucket}/out", options, str(buffer_dir), "killed-1")))
    child = subprocess.run(
        [sys.executable, "-c", KILLED_IN_CLEAN_UP, str(spec)],
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr[-2000:]
    # What the kill left: the output complete, and the job's local directory.
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"] + [f"out/part-{i}" for i in range(3)]
    assert (buffer_dir / "killed-1").is_dir()

    with pytest.raises(NothingToCommitError, match="nothing to commit"):
        make_committer(job_id="killed-1").commit_job()

    assert not (buffer_dir / "killed-1").exists()
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"] + [f"out/part-{i}" for i in range(3)]
    assert pending_uploads(s3_client, bucket) == []
