"""The magic committer against Hadoop's commit-protocol scenarios (reference §7.1-7.2).

Every test asserts on what the store shows: objects visible in the destination, their
bytes, the pending multipart uploads and the ``_SUCCESS`` JSON.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import subprocess
import sys
import threading

import pytest
from helpers import object_keys, pending_uploads, visible_keys

import magicfs
from magicfs import MagicCommitter, TaskCommitMessage, committer_for, write_job
from magicfs.committers import MagicLayoutCommitter
from magicfs.errors import CommitFailedError, JobNotActiveError
from magicfs.records import SuccessData
from magicfs.stores.s3.retry import RetryPolicy
from magicfs.task_files import TASK_FILES

# The text Hadoop's protocol tests write and check (AbstractITCommitProtocol).
EXPECTED_TEXT = "key1\tval1\nval1\nval2\nkey2\nkey1\nkey2\tval2\n"


@pytest.fixture
def options(s3_options):
    # A fresh s3fs instance per committer: fault hooks must not leak between tests.
    return {**s3_options, "skip_instance_cache": True}


@pytest.fixture
def make_committer(bucket, options):
    def make(dest: str = "out", **kwargs) -> MagicLayoutCommitter:
        return MagicCommitter(f"s3://{bucket}/{dest}", storage_options=options, **kwargs)

    return make


def write_text(committer, task, name: str = "part-m-00000", text: str = EXPECTED_TEXT) -> None:
    with committer.fs.open(task.path(name), "w") as f:
        f.write(text)


def read(client, bucket: str, key: str) -> str:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()


def success_of(client, bucket: str, dest: str = "out") -> SuccessData:
    body = client.get_object(Bucket=bucket, Key=f"{dest}/_SUCCESS")["Body"].read()
    return SuccessData.from_json(body)


# --- the lifecycle ------------------------------------------------------------------------


def test_commit_job_without_messages_lists_the_committed_tasks(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    for index in range(3):
        task = committer.task_attempt(index)
        committer.setup_task(task)
        write_text(committer, task, f"part-{index}", f"task {index}\n")
        committer.commit_task(task)
    summary = committer.commit_job()
    assert summary.files == 3
    assert [read(s3_client, bucket, f"out/part-{i}") for i in range(3)] == [
        f"task {i}\n" for i in range(3)
    ]
    assert pending_uploads(s3_client, bucket) == []


def task_records(client, bucket: str, committer) -> list[str]:
    """The committed-task records in the job's tree: the attempts' and the tasks'."""
    prefix = committer.flow.deferred.split(committer.flow.layout.job_attempt_dir)[1] + "/"
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"][len(prefix) :] for o in listed if o["Key"].endswith(".pendingset"))


def two_attempts_written(committer):
    """A job set up, and attempts 0 and 1 of task 0 each writing ``part-0`` (their own
    text: "first", "second"), neither committed yet."""
    committer.setup_job()
    first, second = committer.task_attempt(0, 0), committer.task_attempt(0, 1)
    for task, text in ((first, "first\n"), (second, "second\n")):
        committer.setup_task(task)
        write_text(committer, task, "part-0", text)
    return first, second


def test_a_task_committed_once_saves_one_record_and_a_later_attempt_two(
    make_committer, s3_client, bucket
):
    committer = make_committer()
    first, second = two_attempts_written(committer)
    committer.commit_task(first)
    # the task's only committed attempt: its own record, no task record
    assert task_records(s3_client, bucket, committer) == [f"tasks/{first.attempt_id}.pendingset"]
    committer.commit_task(second)
    # the second sees the first in its listing: its own record and the task's
    assert task_records(s3_client, bucket, committer) == sorted(
        [
            f"{first.task_id}.pendingset",
            f"tasks/{first.attempt_id}.pendingset",
            f"tasks/{second.attempt_id}.pendingset",
        ]
    )
    assert committer.commit_job().files == 1  # without messages: the last committed wins
    assert read(s3_client, bucket, "out/part-0") == "second\n"
    assert pending_uploads(s3_client, bucket) == []


def test_attempts_that_did_not_see_each_other_publish_one_of_them_whole(
    make_committer, s3_client, bucket
):
    """Two attempts of a task that committed at the same moment (each listing before the
    other's save) leave no task record: a job without messages publishes the higher
    attempt, whole, and sweeps the other's uploads."""
    committer = make_committer()
    committer.setup_job()
    attempts = [committer.task_attempt(0, n) for n in (0, 1)]
    for task in attempts:
        committer.setup_task(task)
        write_text(committer, task, "a", f"a of {task.attempt_number}\n")
        write_text(committer, task, "b", f"b of {task.attempt_number}\n")
    for task in reversed(attempts):  # attempt 1 first: attempt 0's commit then sees it
        committer.commit_task(task)
    task_record = committer.flow.deferred.split(
        committer.flow.layout.pendingset(attempts[0].task_id)
    )[1]
    s3_client.delete_object(Bucket=bucket, Key=task_record)  # as if it had not seen it
    assert committer.commit_job().files == 2
    assert [read(s3_client, bucket, f"out/{n}") for n in "ab"] == ["a of 1\n", "b of 1\n"]
    assert pending_uploads(s3_client, bucket) == []


def test_an_aborted_later_attempt_leaves_the_earlier_one_to_publish(
    make_committer, s3_client, bucket
):
    """The later attempt's abort deletes its records and the task's record (it names
    that attempt); the earlier attempt's own record is what a job without messages then
    publishes, whole, and the aborted attempt's uploads are gone."""
    committer = make_committer()
    first, second = two_attempts_written(committer)
    committer.commit_task(first)
    committer.commit_task(second)
    committer.abort_task(second)
    assert task_records(s3_client, bucket, committer) == [f"tasks/{first.attempt_id}.pendingset"]
    assert committer.commit_job().files == 1
    assert read(s3_client, bucket, "out/part-0") == "first\n"
    assert pending_uploads(s3_client, bucket) == []


def test_paths_carry_the_job_id(make_committer, bucket):
    committer = make_committer()
    task = committer.task_attempt(3, 1)
    assert f"/__magic_job-{committer.job_id}/" in task.work_path
    assert task.attempt_id in task.work_path
    assert task.attempt_id == f"attempt_{committer.job_id}_0000_m_000003_1"
    assert task.task_id == f"task_{committer.job_id}_0000_m_000003"
    assert task.work_path.endswith("/__base")
    assert "_temporary" not in task.work_path
    assert task.path("year=2024/a.csv") == f"{task.work_path}/year=2024/a.csv"


@pytest.mark.parametrize(
    "bad", ["../escape.csv", "/abs.csv", "a/../../b", "", "x/__magic/y", "s3://b/k"]
)
def test_task_paths_cannot_escape_the_destination(make_committer, bad):
    task = make_committer().task_attempt(0)
    with pytest.raises(ValueError):
        task.path(bad)


def test_job_ids_are_unique_and_validated(make_committer):
    ids = {make_committer().job_id for _ in range(50)}
    assert len(ids) == 50
    with pytest.raises(ValueError, match="invalid job id"):
        make_committer(job_id="a/b")


def test_committer_for_picks_magic_for_s3(bucket, options):
    chosen = committer_for(f"s3://{bucket}/out", storage_options=options)
    assert isinstance(chosen, MagicLayoutCommitter) and chosen.name == "magic"
    with pytest.raises(ValueError, match="unknown conflict_mode 'merge'"):
        committer_for(f"s3://{bucket}/out", storage_options=options, conflict_mode="merge")


def test_write_job_commits_on_success(bucket, options, s3_client):
    with write_job(f"s3://{bucket}/out", storage_options=options) as job:
        for index in range(2):
            with job.task(index) as task:
                job.fs.pipe_file(task.path(f"part-{index}.csv"), b"a,b\n")
    assert job.summary.files == 2
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/part-0.csv", "out/part-1.csv"]
    assert pending_uploads(s3_client, bucket) == []


def test_write_job_aborts_on_error(bucket, options, s3_client):
    with (
        pytest.raises(RuntimeError, match="driver failed"),
        write_job(f"s3://{bucket}/out", storage_options=options) as job,
    ):
        with job.task(0) as task:
            job.fs.pipe_file(task.path("part-0.csv"), b"a,b\n")
        with job.task(1) as task:
            job.fs.pipe_file(task.path("part-1.csv"), b"a,b\n")
        raise RuntimeError("driver failed")
    assert object_keys(s3_client, bucket) == []
    assert pending_uploads(s3_client, bucket) == []


def test_failing_task_is_aborted_and_the_job_commits_the_rest(bucket, options, s3_client):
    with write_job(f"s3://{bucket}/out", storage_options=options) as job:
        with job.task(0) as task:
            job.fs.pipe_file(task.path("good.csv"), b"ok\n")
        with pytest.raises(ValueError), job.task(1) as task:
            with job.fs.open(task.path("bad.csv"), "wb") as f:
                f.write(b"half")
            job.fs.pipe_file(task.path("also-bad.csv"), b"written before the failure")
            raise ValueError("task failed")
        with job.task(1, attempt=1) as task:
            job.fs.pipe_file(task.path("retried.csv"), b"ok\n")
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/good.csv", "out/retried.csv"]
    assert pending_uploads(s3_client, bucket) == []


# --- duplicate and competing task commits ------------------------------------------------


def test_duplicate_task_commit_is_harmless(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write_text(committer, task)
    first = committer.commit_task(task)
    second = committer.commit_task(task)
    assert first == second
    committer.commit_job([second])
    assert read(s3_client, bucket, "out/part-m-00000") == EXPECTED_TEXT
    # after the job, the task can no longer commit
    with pytest.raises(JobNotActiveError):
        committer.commit_task(task)
    assert read(s3_client, bucket, "out/part-m-00000") == EXPECTED_TEXT
    assert pending_uploads(s3_client, bucket) == []


def test_unreported_attempts_are_swept(make_committer, s3_client, bucket):
    # moto answers a part of an aborted upload with 500 (S3: NoSuchUpload, final), which
    # is retried: a short retry policy keeps the straggler's doomed close quick.
    committer = make_committer(retry_policy=RetryPolicy(attempts=2, base_delay=0.01))
    committer.setup_job()
    reported = committer.task_attempt(0)
    committer.setup_task(reported)
    write_text(committer, reported, "reported")
    message = committer.commit_task(reported)
    # wrote and committed, but its message was lost (Spark's None)
    lost = committer.task_attempt(1)
    committer.setup_task(lost)
    write_text(committer, lost, "lost")
    committer.commit_task(lost)
    # still writing when the job commits
    straggler = committer.task_attempt(2)
    committer.setup_task(straggler)
    write_text(committer, straggler, "straggler-closed")
    still_open = committer.fs.open(straggler.path("straggler-open"), "wb")
    still_open.write(b"data")

    committer.commit_job([message])
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/reported"]
    assert pending_uploads(s3_client, bucket) == []
    # its upload is gone: aborted by the job's sweep, or by its own job check; its close
    # says so, now or when it finishes in the background
    with contextlib.suppress(OSError, JobNotActiveError):
        still_open.close()
    assert [error for _, error in TASK_FILES.settle()] != []
    assert pending_uploads(s3_client, bucket) == []
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS", "out/reported"]


def test_messages_must_belong_to_the_job(make_committer, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    message = committer.commit_task(task)
    foreign = TaskCommitMessage(**{**message.__dict__, "job_id": "another-job"})
    with pytest.raises(CommitFailedError, match="comes from job another-job"):
        committer.commit_job([foreign])

    committer = make_committer()
    committer.setup_job()
    outside = TaskCommitMessage(**{**message.__dict__, "job_id": committer.job_id})
    with pytest.raises(CommitFailedError, match="names a record outside this job"):
        committer.commit_job([outside])

    committer = make_committer()
    committer.setup_job()
    with pytest.raises(CommitFailedError, match="message 0 is missing"):
        committer.commit_job([None])


# --- aborts -----------------------------------------------------------------------------------


def test_commit_job_but_not_task(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write_text(committer, task)
    committer.commit_job()
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"]
    assert success_of(s3_client, bucket).filenames == []
    assert pending_uploads(s3_client, bucket) == []


def test_abort_task_then_job(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write_text(committer, task)
    committer.abort_task(task)
    assert pending_uploads(s3_client, bucket) == []
    assert [k for k in object_keys(s3_client, bucket) if "/tasks/" in k] == []
    committer.abort_job()
    assert object_keys(s3_client, bucket) == []  # no __magic_job-<id> left either
    assert pending_uploads(s3_client, bucket) == []


def test_abort_after_task_commit_withdraws_it(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write_text(committer, task)
    committer.commit_task(task)
    committer.abort_task(task)
    assert pending_uploads(s3_client, bucket) == []
    committer.commit_job()  # lists: the task has no committed attempt any more
    assert visible_keys(s3_client, bucket) == ["out/_SUCCESS"]


def test_aborts_are_idempotent(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write_text(committer, task)
    committer.abort_task(task)
    committer.abort_task(task)
    committer.abort_job()
    committer.abort_job()
    committer.cleanup_job()
    assert object_keys(s3_client, bucket) == []
    assert pending_uploads(s3_client, bucket) == []


def test_abort_task_with_nothing_written(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.abort_job()  # never set up: fine
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.abort_task(task)
    committer.abort_job()
    assert object_keys(s3_client, bucket) == []


def test_a_task_of_a_job_never_set_up_cannot_write_or_commit(make_committer, s3_client, bucket):
    """Task set-up sends nothing, so it cannot refuse: the first file does (its writer's
    job check), and so does the commit (its job check after the save); nothing stays."""
    committer = make_committer()
    other = make_committer()  # a different, self-generated job id
    committer.setup_job()
    task = other.task_attempt(0)
    other.setup_task(task)
    other.fs.pipe_file(task.path("a.csv"), b"a")  # closes in the background
    [(path, error)] = TASK_FILES.settle(other.job_id, task.attempt_id)
    assert path == task.path("a.csv") and isinstance(error, JobNotActiveError)
    with pytest.raises(CommitFailedError, match="could not be saved"):
        other.commit_task(task)
    assert [k for k in object_keys(s3_client, bucket) if other.job_id in k] == []
    assert pending_uploads(s3_client, bucket) == []
    other.abort_task(task)  # still allowed
    with pytest.raises(ValueError, match="belongs to job"):
        committer.commit_task(task)


# --- concurrency -----------------------------------------------------------------------------


def test_concurrent_task_commits_with_subdirectories(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    messages, errors = [], []

    def run(index: int) -> None:
        try:
            task = committer.task_attempt(index)
            committer.setup_task(task)
            for n in range(3):
                write_text(committer, task, f"SUB_DIR/part-{index}-{n}")
            messages.append(committer.commit_task(task))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    committer.commit_job(messages)
    keys = visible_keys(s3_client, bucket)
    assert keys == sorted(
        ["out/_SUCCESS"] + [f"out/SUB_DIR/part-{i}-{n}" for i in range(2) for n in range(3)]
    )
    assert not any("SUB_DIR/SUB_DIR" in k for k in keys)
    assert all(read(s3_client, bucket, k) == EXPECTED_TEXT for k in keys if "part-" in k)


def test_parallel_jobs_to_adjacent_destinations(make_committer, s3_client, bucket):
    job1, job2 = make_committer("dest1"), make_committer("dest2")
    job1.setup_job()
    job2.setup_job()
    tasks = {}
    for number, committer in ((2, job2), (1, job1)):
        task = committer.task_attempt(0)
        committer.setup_task(task)
        write_text(committer, task, f"part-of-job-{number}")
        tasks[number] = committer.commit_task(task)
    job1.commit_job([tasks[1]])
    assert pending_uploads(s3_client, bucket, "dest1/") == []
    assert len(pending_uploads(s3_client, bucket, "dest2/")) == 1  # job 2 untouched
    job2.commit_job([tasks[2]])
    assert visible_keys(s3_client, bucket) == [
        "dest1/_SUCCESS",
        "dest1/part-of-job-1",
        "dest2/_SUCCESS",
        "dest2/part-of-job-2",
    ]
    assert pending_uploads(s3_client, bucket) == []


def test_parallel_jobs_to_the_same_destination(make_committer, s3_client, bucket):
    # HADOOP-17318: two jobs, one destination; job 2 is still writing while job 1 commits.
    job1, job2 = make_committer(), make_committer()
    assert job1.job_id != job2.job_id
    job1.setup_job()
    job2.setup_job()
    task1, task2 = job1.task_attempt(0), job2.task_attempt(0)
    assert task1.work_path != task2.work_path
    job1.setup_task(task1)
    job2.setup_task(task2)
    write_text(job1, task1, "from-job-1")
    message1 = job1.commit_task(task1)
    open_in_job2 = job2.fs.open(task2.path("from-job-2"), "w")
    open_in_job2.write(EXPECTED_TEXT)

    job1.commit_job([message1])
    assert len(pending_uploads(s3_client, bucket)) == 1  # job 2's open upload survives

    open_in_job2.close()
    job2.commit_job([job2.commit_task(task2)])
    assert read(s3_client, bucket, "out/from-job-1") == EXPECTED_TEXT
    assert read(s3_client, bucket, "out/from-job-2") == EXPECTED_TEXT
    assert pending_uploads(s3_client, bucket) == []


# --- pickling: committers and messages travel to other processes ------------------------


def test_committer_and_messages_cross_process_boundaries(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    script = """
import pickle, sys
committer = pickle.loads(sys.stdin.buffer.read())
task = committer.task_attempt(5)
committer.setup_task(task)
with committer.fs.open(task.path("from-executor.csv"), "w") as f:
    f.write("written in another process\\n")
sys.stdout.write(committer.commit_task(task).to_json())
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(committer),
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    message = TaskCommitMessage.from_json(result.stdout.decode())
    assert pickle.loads(pickle.dumps(message)) == message
    assert json.loads(message.to_json())["files"] == 1
    committer.commit_job([message])
    assert read(s3_client, bucket, "out/from-executor.csv") == "written in another process\n"


def test_public_api_names(bucket):
    for name in ("committer_for", "write_job", "MagicFileSystem", "install", "uninstall"):
        assert hasattr(magicfs, name)


def test_empty_and_large_files_commit_exactly(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    big = bytes(range(256)) * (40 * 1024 + 3)  # ~10 MiB: two parts
    committer.fs.touch(task.path("empty.csv"))
    committer.fs.pipe_file(task.path("big.bin"), big)
    committer.commit_job([committer.commit_task(task)])
    empty = s3_client.get_object(Bucket=bucket, Key="out/empty.csv")
    assert empty["ContentLength"] == 0 and empty["Body"].read() == b""
    assert s3_client.get_object(Bucket=bucket, Key="out/big.bin")["Body"].read() == big
    assert pending_uploads(s3_client, bucket) == []


def test_progress_bar_reports_job_commit(make_committer, capfd):
    committer = make_committer(progress=True)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for n in range(5):
        committer.fs.pipe_file(task.path(f"f{n}"), b"x")
    committer.commit_job([committer.commit_task(task)])
    assert "completing uploads" in capfd.readouterr().err


def test_progress_bar_reports_job_abort(make_committer, s3_client, bucket, capfd):
    committer = make_committer(progress=True)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for n in range(3):
        committer.fs.pipe_file(task.path(f"f{n}"), b"x")
    committer.abort_job()
    assert "aborting uploads" in capfd.readouterr().err
    assert pending_uploads(s3_client, bucket) == []


def test_no_progress_bar_when_disabled(make_committer, capfd):
    committer = make_committer(progress=False)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("f"), b"x")
    committer.commit_job([committer.commit_task(task)])
    assert "completing uploads" not in capfd.readouterr().err


def test_credentials_are_never_logged_or_written(bucket, s3_options, s3, s3_client, caplog):
    import logging

    secret = "SECRET-7f3a9c-DO-NOT-LEAK"
    options = {**s3_options, "secret": secret, "skip_instance_cache": True}
    # moto accepts any secret: the job works, and we look for the secret everywhere.
    caplog.set_level(logging.DEBUG, logger="magicfs")
    committer = MagicCommitter(f"s3://{bucket}/out", storage_options=options)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    write_text(committer, task)
    committer.commit_task(task)
    other = committer.task_attempt(1)
    committer.setup_task(other)
    write_text(committer, other, "aborted")
    committer.abort_task(other)

    def everything_stored() -> bytes:
        keys = object_keys(s3_client, bucket)
        bodies = [s3_client.get_object(Bucket=bucket, Key=key) for key in keys]
        return b"".join(b["Body"].read() + repr(b["Metadata"]).encode() for b in bodies)

    during = everything_stored()  # markers, .pending, pendingsets, the job marker
    assert b"pendingset" in b"".join(k.encode() for k in object_keys(s3_client, bucket))
    summary = committer.commit_job()
    assert caplog.records and secret not in caplog.text
    assert secret.encode() not in during
    assert secret.encode() not in everything_stored()
    assert secret not in repr(summary) and secret not in repr(committer)
