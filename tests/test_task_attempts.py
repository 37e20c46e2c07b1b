"""Who may commit a task attempt, now that its set-up sends no request, and task records
carried by their commit messages (issue 39: the cost of safety).

The process that set an attempt up knows it did (and whether it has aborted or
committed it since): its commit needs nothing from the store. A commit in another
process needs the attempt's records on the store as proof (file mode: its files'
``.pending``), and is refused outright in ``in_memory`` mode, where the attempt's
commits stay in the process that set it up; a refused commit aborts nothing, so the
real one goes on. An abort from another process leaves the attempt's ``.aborted``
marker, which the commit's one listing finds. A task commit message carries its small
record, so job commit reads none. "Another process" here is a real one: the committer
is pickled to a child Python, as the engines ship it.

Runs on moto and Ceph RGW, in file mode and ``in_memory`` mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from helpers import Calls, pending_uploads, visible_keys
from helpers.elsewhere import run_code_elsewhere
from helpers.s3_targets import MOTO_AND_RGW, S3Target, magic_committer, s3_target

from magicfs.errors import (
    InvalidCommitData,
    JobCommitError,
    JobNotActiveError,
    NothingToCommitError,
)
from magicfs.paths import staged_name
from magicfs.protocol.attempts import CARRIED_RECORD_MAX
from magicfs.records import PendingSet
from magicfs.task_files import TASK_FILES


@pytest.fixture(params=MOTO_AND_RGW)
def target(request) -> S3Target:
    return s3_target(request)


MODES = pytest.mark.parametrize("in_memory", [False, True], ids=["file", "in_memory"])


committer_on = magic_committer


def elsewhere(committer, task, action: str, tmp_path) -> str:
    """``committer.<action>(task)`` in another process; what it printed."""
    return run_code_elsewhere(f"committer.{action}(task)", tmp_path, committer=committer, task=task)


def written(committer, task_id: int, *names: str):
    task = committer.task_attempt(task_id)
    committer.setup_task(task)
    for name in names:
        committer.fs.pipe_file(task.path(name), name.encode())
    return task


def one_file_written(target: S3Target, in_memory: bool):
    """A job set up here, with task 0 set up here and ``a.csv`` written and closed."""
    committer = committer_on(target, in_memory=in_memory)
    committer.setup_job()
    task = written(committer, 0, "a.csv")
    TASK_FILES.settle()
    return committer, task


def tree(target: S3Target, committer) -> list[str]:
    prefix = f"out/__magic_job-{committer.job_id}/"
    listed = target.client.list_objects_v2(Bucket=target.bucket, Prefix=prefix)
    return sorted(o["Key"].removeprefix(prefix) for o in listed.get("Contents", []))


@MODES
def test_set_up_sends_nothing_and_the_job_reads_no_task_record(target, in_memory):
    committer = committer_on(target, in_memory=in_memory)
    committer.setup_job()
    calls = Calls(committer.store_fs)
    task = committer.task_attempt(0)
    committer.setup_task(task)
    assert calls.made == []  # no started marker, no job check
    for n in range(5):
        committer.fs.pipe_file(task.path(f"f{n}.csv"), b"x")
    TASK_FILES.settle()
    calls.clear()
    message = committer.commit_task(task)
    if in_memory:  # its memory trusted: the pendingset, then the job check as one listing
        key = committer.flow.deferred.split
        assert calls.made == [
            ("PutObject", key(message.record)[1]),
            ("ListObjectsV2", key(committer.flow.layout.job_signals_prefix)[1]),
        ]
    else:  # the task's attempts listed, the pendingset, the job check
        assert calls.counts() == {"ListObjectsV2": 1, "PutObject": 1, "HeadObject": 1}
    assert message.record_json is not None and len(message.record_json) <= CARRIED_RECORD_MAX
    calls.clear()
    committer.commit_job([message])
    assert ("GetObject", message.record.partition("/")[2]) not in calls.made
    assert not [key for op, key in calls.made if op == "GetObject" and key.endswith(".pendingset")]
    assert visible_keys(target.client, target.bucket) == [
        "out/_SUCCESS",
        *(f"out/f{n}.csv" for n in range(5)),
    ]
    assert pending_uploads(target.client, target.bucket) == []


@pytest.mark.parametrize("messages", ["repeated", "none"])
def test_a_commit_repeated_after_a_lost_reply_keeps_every_file(target, messages):
    """It once saved an empty record over the first (the files' commits had been handed
    over): the job then published nothing of the task."""
    committer = committer_on(target, in_memory=True)
    committer.setup_job()
    task = written(committer, 0, "a.csv", "b.csv")
    first = committer.commit_task(task)
    second = committer.commit_task(task)
    assert second == first and (second.files, second.bytes) == (2, 10)
    summary = committer.commit_job([second] if messages == "repeated" else None)
    assert summary.files == 2
    assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS", "out/a.csv", "out/b.csv"]
    assert pending_uploads(target.client, target.bucket) == []


def test_in_memory_a_commit_in_another_process_is_refused_and_vetoes_nothing(target, tmp_path):
    committer, task = one_file_written(target, in_memory=True)
    said = elsewhere(committer, task, "commit_task", tmp_path)
    assert said.startswith("refused: FileNotFoundError")
    assert "in_memory=True a task commits in that process" in said
    assert not [k for k in tree(target, committer) if k.endswith((".pendingset", ".aborted"))]
    message = committer.commit_task(task)  # the process that set it up commits it
    committer.commit_job([message])
    assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS", "out/a.csv"]


@MODES
def test_an_abort_in_another_process_stops_the_commit_here(target, tmp_path, in_memory):
    committer, task = one_file_written(target, in_memory=in_memory)
    assert elsewhere(committer, task, "abort_task", tmp_path) == "done"
    aborted = f"job-{committer.job_id}/00/tasks/{task.attempt_id}.aborted"
    assert aborted in tree(target, committer)
    with pytest.raises(FileNotFoundError, match="never set up, or was aborted"):
        committer.commit_task(task)
    assert pending_uploads(target.client, target.bucket) == []  # its upload went with it
    assert committer.commit_job().files == 0  # the job has no committed task
    assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS"]
    assert tree(target, committer) == []


@MODES
def test_an_abort_after_the_job_ended_leaves_no_marker(target, tmp_path, in_memory):
    committer, task = one_file_written(target, in_memory=in_memory)
    committer.abort_job()
    assert elsewhere(committer, task, "abort_task", tmp_path) == "done"
    assert tree(target, committer) == []
    assert pending_uploads(target.client, target.bucket) == []


def test_file_mode_an_attempt_set_up_here_may_commit_elsewhere(target, tmp_path):
    """File mode's records let another process commit an attempt (its writer's process
    died, say): they are the proof that the attempt was set up."""
    committer = committer_on(target)
    committer.setup_job()
    task = written(committer, 0, "a.csv", "b.csv")
    TASK_FILES.settle()
    assert elsewhere(committer, task, "commit_task", tmp_path) == "done"
    assert committer.commit_job().files == 2  # lists the committed attempt's record
    assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS", "out/a.csv", "out/b.csv"]
    assert pending_uploads(target.client, target.bucket) == []


def test_file_mode_an_attempt_with_nothing_on_the_store_commits_only_where_set_up(target, tmp_path):
    """No records, no proof: another process is refused (and aborts nothing); the
    process that set the attempt up commits it, empty."""
    committer = committer_on(target)
    committer.setup_job()
    task = written(committer, 0)
    said = elsewhere(committer, task, "commit_task", tmp_path)
    assert said.startswith("refused: FileNotFoundError") and "never set up" in said
    assert not [k for k in tree(target, committer) if k.endswith((".pendingset", ".aborted"))]
    message = committer.commit_task(task)
    assert (message.files, message.bytes) == (0, 0)
    never = committer.task_attempt(1)
    with pytest.raises(FileNotFoundError, match="never set up, or was aborted"):
        committer.commit_task(never)  # here, but never set up: no records either
    committer.commit_job([message])
    assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS"]


def test_a_carried_record_of_another_attempt_fails_the_job(target):
    committer = committer_on(target)  # file mode carries its records too
    committer.setup_job()
    messages = [committer.commit_task(written(committer, n, f"part-{n}.csv")) for n in (0, 1)]
    swapped = dataclasses.replace(messages[0], record_json=messages[1].record_json)
    with pytest.raises(JobCommitError) as failed:
        committer.commit_job([swapped, messages[1]])
    cause = failed.value.__cause__
    assert isinstance(cause, InvalidCommitData) and cause.field == "extraData.task.attempt.id"
    assert messages[0].attempt_id in str(cause) and "commit message carried it" in str(cause)
    assert visible_keys(target.client, target.bucket) == []
    assert pending_uploads(target.client, target.bucket) == []


def test_carried_records_do_not_commit_an_aborted_job(target):
    """The carried records are used only once the job's end found it active."""
    committer = committer_on(target, in_memory=True)
    committer.setup_job()
    messages = [committer.commit_task(written(committer, 0, "a.csv"))]
    committer.abort_job()
    with pytest.raises((NothingToCommitError, JobCommitError)):
        committer.commit_job(messages)
    assert visible_keys(target.client, target.bucket) == []
    assert pending_uploads(target.client, target.bucket) == []


def test_a_large_record_is_named_not_carried(target):
    committer = committer_on(target)
    committer.setup_job()
    names = [f"file-with-a-long-name-{n:04d}.csv" for n in range(60)]
    message = committer.commit_task(written(committer, 0, *names))
    saved = target.client.get_object(Bucket=target.bucket, Key=message.record.partition("/")[2])
    assert len(saved["Body"].read()) > CARRIED_RECORD_MAX
    assert message.record_json is None
    assert json.loads(message.to_json())["record_json"] is None
    calls = Calls(committer.store_fs)
    committer.commit_job([message])
    assert ("GetObject", message.record.partition("/")[2]) in calls.made
    assert len(visible_keys(target.client, target.bucket)) == 61


@MODES
def test_an_attempt_set_up_after_its_job_ended_cannot_commit(target, in_memory):
    """Set-up sends nothing, so it cannot refuse an ended job: the commit does (its job
    check after the save), and takes its record back."""
    committer = committer_on(target, in_memory=in_memory)
    committer.setup_job()
    committer.abort_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with pytest.raises(JobNotActiveError, match="ended before task attempt"):
        committer.commit_task(task)
    assert tree(target, committer) == []
    assert visible_keys(target.client, target.bucket) == []


def test_an_abort_after_a_commit_where_set_up_leaves_no_marker(target):
    """The process that set the attempt up and committed it aborts it (an engine whose
    job failed later): it knows the attempt is its own, so it writes no ``.aborted``."""
    committer = committer_on(target)
    committer.setup_job()
    task = written(committer, 0, "a.csv")
    committer.commit_task(task)
    calls = Calls(committer.store_fs)
    committer.abort_task(task)
    assert not [key for op, key in calls.made if op == "PutObject"]
    assert not [k for k in tree(target, committer) if k.endswith(".aborted")]
    assert committer.commit_job().files == 0  # the abort took the attempt's record
    assert pending_uploads(target.client, target.bucket) == []


def held_parts(committer) -> list[bool]:
    """Delays every UploadPart by half a second while the returned list is not empty
    (an asynchronous botocore hook: the other requests go on meanwhile), so a file closed
    then is still closing when its task commit begins."""
    armed: list[bool] = []

    async def held(**_) -> None:
        if armed:
            await asyncio.sleep(0.5)

    committer.store_fs.s3.meta.events.register("before-call.s3.UploadPart", held)
    return armed


@pytest.mark.parametrize("then", ["commit_job", "abort_task"])
def test_a_file_whose_task_commit_waits_for_it_saves_no_pending_record(target, then):
    """File mode: a file closed before its task commit saves its ``.pending``; one whose
    last part is still uploading when the commit (in the process that set the attempt
    up) begins hands its record to that commit, which saves it in the task's
    ``.pendingset``: one request and one round trip less. Published whole by job commit;
    an abort after the commit still aborts its upload at once (it reads the pendingset)."""
    committer = committer_on(target)
    committer.setup_job()
    armed = held_parts(committer)
    calls = Calls(committer.store_fs)
    task = written(committer, 0, "a.csv")
    TASK_FILES.settle()
    armed.append(True)
    committer.fs.pipe_file(task.path("b.csv"), b"b" * 1000)
    assert TASK_FILES.closing_paths()  # still uploading as the commit begins
    message = committer.commit_task(task)
    saved = sorted(key.rsplit("/", 1)[-1] for op, key in calls.made if op == "PutObject")
    assert saved == [staged_name("a.csv") + ".pending", f"{task.attempt_id}.pendingset"]
    commits = PendingSet.from_json(message.record_json.encode()).commits
    assert [c.destination_key for c in commits] == ["out/a.csv", "out/b.csv"]
    if then == "abort_task":
        committer.abort_task(task)
        assert pending_uploads(target.client, target.bucket) == []
        assert committer.commit_job().files == 0
        assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS"]
    else:
        committer.commit_job([message])
        assert visible_keys(target.client, target.bucket) == [
            "out/_SUCCESS",
            "out/a.csv",
            "out/b.csv",
        ]
        body = target.client.get_object(Bucket=target.bucket, Key="out/b.csv")["Body"].read()
        assert body == b"b" * 1000
    assert pending_uploads(target.client, target.bucket) == []
    assert tree(target, committer) == []


def test_a_failed_task_commit_aborts_the_file_it_waited_for(target):
    """The failure path: a file whose record went to its waiting task commit, and that
    commit's ``.pendingset`` save fails (injected by a botocore hook). The attempt is
    aborted: the file's upload with it, nothing of it visible, no record left."""
    committer = committer_on(target)
    committer.setup_job()
    armed = held_parts(committer)

    def refuse(params, model, **_) -> None:
        if model.name == "PutObject" and params["Key"].endswith(".pendingset"):
            raise OSError("injected: the task record cannot be saved")

    committer.store_fs.s3.meta.events.register("provide-client-params.s3.PutObject", refuse)
    task = committer.task_attempt(0)
    committer.setup_task(task)
    armed.append(True)
    committer.fs.pipe_file(task.path("b.csv"), b"b" * 1000)
    assert TASK_FILES.closing_paths()  # still uploading as the commit begins
    with pytest.raises(OSError, match="injected"):
        committer.commit_task(task)
    assert pending_uploads(target.client, target.bucket) == []
    assert [k for k in tree(target, committer) if k.endswith((".pending", ".pendingset"))] == []
    committer.abort_job()
    assert visible_keys(target.client, target.bucket) == []
    assert tree(target, committer) == []
