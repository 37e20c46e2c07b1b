"""An ``in_memory`` task commit that trusts its process's memory, and what makes it list.

The first attempt of a task, committed in the process that set it up, saves its
pendingset and makes one shared listing (the job check, which also finds the tasks other
processes or attempts *touched*): no listing of the attempt. Everything that listing
used to guard is tried here as a user would do it, with the other process a real one
(the committer pickled to a child Python, as the engines ship it): a later attempt of
the task committing first, a delete and an abort from another process, a zombie writer
of an ended job, a file written around magicfs. The writers of an attempt set up in their
own process make no job check of their own where their task's commit makes one soon
after (``CHECK_DELAY``): a zombie among them is undone all the same, when its check goes
alone, or at exit. Every test asserts what is published,
what is left in the job's tree and which uploads are pending.

Runs on moto, Ceph RGW and SeaweedFS.
"""

from __future__ import annotations

import concurrent.futures
import time

import pytest
from helpers import Calls, pending_uploads, visible_keys
from helpers.elsewhere import run_code_elsewhere
from helpers.s3_targets import S3_TARGETS, S3Target, magic_committer, s3_target

from magicfs import MagicCommitter
from magicfs.errors import JobCommitError, JobNotActiveError
from magicfs.stores.deferred_writer import CHECK_DELAY, finish_checks_at_exit
from magicfs.stores.s3 import writer as s3_writer
from magicfs.task_files import TASK_FILES


@pytest.fixture(params=S3_TARGETS)
def target(request) -> S3Target:
    return s3_target(request)


def committer_on(target: S3Target, **options) -> MagicCommitter:
    return magic_committer(target, in_memory=True, **options)


def elsewhere(job, path: str, code: str, tmp_path) -> str:
    """``code`` run in another process (``job``, ``path`` bound); what it printed."""
    return run_code_elsewhere(code, tmp_path, job=job, path=path)


def one_task(target: S3Target, *names: str, **options):
    """A job set up here, its task 0 set up here with ``names`` written and closed."""
    job = committer_on(target, **options)
    job.setup_job()
    task = written(job, 0, *names)
    TASK_FILES.settle()
    return job, task


def written(job, task_id: int, *names: str, attempt: int = 0):
    task = job.task_attempt(task_id, attempt)
    job.setup_task(task)
    for name in names:
        job.fs.pipe_file(task.path(name), f"{name} of {attempt}".encode())
    return task


def tree(target: S3Target, job) -> list[str]:
    prefix = f"out/__magic_job-{job.job_id}/"
    listed = target.client.list_objects_v2(Bucket=target.bucket, Prefix=prefix)
    return sorted(o["Key"].removeprefix(prefix) for o in listed.get("Contents", []))


def published(target: S3Target) -> dict[str, bytes]:
    return {
        key: target.client.get_object(Bucket=target.bucket, Key=key)["Body"].read()
        for key in visible_keys(target.client, target.bucket)
        if not key.endswith("_SUCCESS")
    }


def touched(job, task) -> str:
    return "_magicfs_job.touched/" + task.task_id


def test_tasks_committing_at_once_list_no_attempt_and_share_their_job_checks(target):
    job = committer_on(target)
    job.setup_job()
    tasks = [written(job, n, f"f{n}.csv") for n in range(8)]
    TASK_FILES.settle()
    calls = Calls(job.store_fs)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        messages = list(pool.map(job.commit_task, tasks))
    listings = [key for op, key in calls.made if op == "ListObjectsV2"]
    signals = job.flow.deferred.split(job.flow.layout.job_signals_prefix)[1]
    assert set(listings) == {signals}  # never a task's attempts
    # Shared: fewer listings than tasks (a listing per task is what no sharing makes;
    # runs here made 2 to 4 for the 8 tasks on moto and RGW).
    assert 1 <= len(listings) < len(tasks)
    assert sorted(k for op, k in calls.made if op == "PutObject") == sorted(
        job.flow.deferred.split(m.record)[1] for m in messages
    )
    assert [op for op, _ in calls.made if op not in ("ListObjectsV2", "PutObject")] == []
    job.commit_job(messages)
    assert published(target) == {f"out/f{n}.csv": f"f{n}.csv of 0".encode() for n in range(8)}
    assert pending_uploads(target.client, target.bucket) == []
    assert tree(target, job) == []


@pytest.mark.parametrize("first", [0, 1])
def test_without_messages_the_last_committed_attempt_wins_in_either_order(target, first):
    """A later attempt marks its task touched and lists it; the first attempt, committing
    after it, finds the mark, lists, and saves the task's record: the last commit wins."""
    job = committer_on(target)
    job.setup_job()
    attempts = [written(job, 0, "a.csv", "b.csv", attempt=n) for n in (0, 1)]
    TASK_FILES.settle()
    job.commit_task(attempts[first])
    job.commit_task(attempts[1 - first])
    assert touched(job, attempts[0]) in tree(target, job)
    summary = job.commit_job()
    last = 1 - first
    assert summary.files == 2
    assert published(target) == {
        "out/a.csv": f"a.csv of {last}".encode(),
        "out/b.csv": f"b.csv of {last}".encode(),
    }
    assert pending_uploads(target.client, target.bucket) == []


def test_a_file_deleted_by_another_process_is_left_out_and_its_upload_aborted(target, tmp_path):
    """With intent markers on (another job shares the destination, or ``"always"``) a
    file written here has a marker another process can delete through ``job.fs``."""
    job, task = one_task(target, "keep.csv", "gone.csv", intent_markers="always")
    assert elsewhere(job, task.path("gone.csv"), "job.fs.rm(path)", tmp_path) == "done"
    assert touched(job, task) in tree(target, job)
    message = job.commit_task(task)
    assert message.files == 1
    job.commit_job([message])
    assert published(target) == {"out/keep.csv": b"keep.csv of 0"}
    assert pending_uploads(target.client, target.bucket) == []
    assert tree(target, job) == []


def test_an_abort_in_another_process_after_the_commit_here_withdraws_it(target, tmp_path):
    """The abort's listing follows its touched and aborted markers: it finds the
    pendingset this commit saved and aborts what it names."""
    job, task = one_task(target, "a.csv")
    message = job.commit_task(task)
    code = f"job.abort_task(job.task_attempt({task.task_index}))"
    assert elsewhere(job, "", code, tmp_path) == "done"
    assert pending_uploads(target.client, target.bucket) == []
    with pytest.raises(JobCommitError, match=r"stage publish: .*out/a\.csv"):
        job.commit_job([message])  # what the aborted attempt staged is gone
    assert published(target) == {}
    assert pending_uploads(target.client, target.bucket) == []


def test_a_zombie_writer_of_an_ended_job_leaves_no_touched_marker(target, tmp_path):
    job, task = one_task(target, "a.csv")
    job.commit_job([job.commit_task(task)])
    code = "job.fs.pipe_file(path, b'late')"
    assert elsewhere(job, task.path("late.csv"), code, tmp_path).startswith(
        "refused: JobNotActiveError"
    )
    assert tree(target, job) == []
    assert published(target) == {"out/a.csv": b"a.csv of 0"}
    assert pending_uploads(target.client, target.bucket) == []


def test_a_file_written_around_magicfs_is_never_published_and_goes_with_the_tree(target):
    """What no mark can say: a plain PUT into the attempt's directory. The commit that
    trusts its memory does not see it (file mode refuses it at task commit); it is never
    published, and the job's clean-up deletes it."""
    job, task = one_task(target, "good.csv")
    key = job.flow.deferred.split(task.path("around.csv"))[1]
    target.client.put_object(Bucket=target.bucket, Key=key, Body=b"plain write")
    message = job.commit_task(task)
    assert message.files == 1
    job.commit_job([message])
    assert published(target) == {"out/good.csv": b"good.csv of 0"}
    assert pending_uploads(target.client, target.bucket) == []
    assert tree(target, job) == []


def test_writers_whose_task_commits_soon_send_no_job_check_of_their_own(target, monkeypatch):
    """Their checks wait for their task commit's listing, which answers them.

    The wait is widened to a minute here, so a machine busy enough to take more than the
    second it normally is between a file's close and its task's commit still shows what
    the test is about; whatever is left waiting afterwards is then started at once, as at
    the interpreter's exit, so a check that the commit had not answered would be seen."""
    monkeypatch.setattr(s3_writer, "CHECK_DELAY", 60.0)
    job = committer_on(target)
    job.setup_job()
    calls = Calls(job.store_fs)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        commits = [pool.submit(commit_three_files, job, n) for n in range(4)]
        messages = [c.result() for c in commits]
    marker = job.flow.deferred.split(job.flow.layout.job_marker)[1]
    signals = job.flow.deferred.split(job.flow.layout.job_signals_prefix)[1]
    assert [op for op, key in calls.made if key == marker] == []  # no HEAD of the marker
    assert {key for op, key in calls.made if op == "ListObjectsV2"} == {signals}
    finish_checks_at_exit()  # none left waiting either
    assert [op for op, key in calls.made if key == marker] == []
    job.commit_job(messages)
    assert len(published(target)) == 12
    assert pending_uploads(target.client, target.bucket) == []


def commit_three_files(job, task_id: int):
    task = written(job, task_id, *(f"t{task_id}-{n}.csv" for n in range(3)))
    return job.commit_task(task)


def test_a_zombie_writer_here_is_undone_when_its_check_goes_alone(target, tmp_path):
    """The job ended (aborted in another process) before the file was written; the task
    is neither committed nor aborted: its writer's check, its delay up, finds the job
    gone and aborts the upload. Its task commit then fails."""
    job = committer_on(target)
    job.setup_job()
    task = job.task_attempt(0)
    job.setup_task(task)
    assert elsewhere(job, "", "job.abort_job()", tmp_path) == "done"
    job.fs.pipe_file(task.path("late.csv"), b"late")  # its close does not wait for it
    assert TASK_FILES.settle(job.job_id, task.attempt_id) == []  # closed; its check to come
    assert [u["Key"] for u in pending_uploads(target.client, target.bucket)] == ["out/late.csv"]
    deadline = time.monotonic() + CHECK_DELAY + 10
    while pending_uploads(target.client, target.bucket) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pending_uploads(target.client, target.bucket) == []
    with pytest.raises(JobNotActiveError, match="ended before task attempt"):
        job.commit_task(task)
    assert published(target) == {}
    assert pending_uploads(target.client, target.bucket) == []


def test_a_zombie_writer_whose_process_exits_at_once_is_undone_at_exit(target, tmp_path):
    """A script that writes for an ended job and exits before its writer's check was due:
    the check runs at exit and aborts the upload."""
    job = committer_on(target)
    job.setup_job()
    job.abort_job()
    code = (
        "task = job.task_attempt(0)\n"
        "job.setup_task(task)\n"
        "job.fs.pipe_file(task.path('late.csv'), b'late')\n"
    )
    assert elsewhere(job, "", code, tmp_path) == "done"  # the check was still to come
    assert pending_uploads(target.client, target.bucket) == []
    assert published(target) == {}
