"""FileOutputCommitter v1 and v2 (the classic baseline), on a local disk, in memory and on S3."""

from __future__ import annotations

import uuid

import fsspec
import pytest

from magicfs import committer_for
from magicfs.errors import (
    CommitConflictError,
    CommitFailedError,
    JobAlreadyActiveError,
    JobCommitError,
    NothingToCommitError,
)


@pytest.fixture(params=["file", "memory", "s3"])
def dest(request, tmp_path) -> tuple[fsspec.AbstractFileSystem, str]:
    if request.param == "file":
        return fsspec.filesystem("file"), f"file://{tmp_path}/out"
    if request.param == "memory":
        return fsspec.filesystem("memory"), f"memory://c-{uuid.uuid4().hex}/out"
    bucket = request.getfixturevalue("bucket")
    options = {**request.getfixturevalue("s3_options"), "skip_instance_cache": True}
    return fsspec.filesystem("s3", **options), f"s3://{bucket}/out"


def make(dest, algorithm: int, **options):
    fs, url = dest
    return committer_for(url, committer=f"file-v{algorithm}", fs=fs, **options)


def files(dest) -> list[str]:
    fs, url = dest
    root = fs._strip_protocol(url)
    fs.invalidate_cache()
    try:
        return sorted(p[len(root) + 1 :] for p in fs.find(root))
    except FileNotFoundError:
        return []


def visible(dest) -> list[str]:
    return [f for f in files(dest) if not any(e.startswith("_") for e in f.split("/"))]


def write_task(committer, index: int, attempt: int = 0, names=("part-0", "year=2024/part-1")):
    task = committer.task_attempt(index, attempt)
    committer.setup_task(task)
    for name in names:
        with committer.fs.open(task.path(f"{name}-{index}"), "wb") as f:
            f.write(f"{name} of task {index}".encode())
    return task


@pytest.mark.parametrize("algorithm", [1, 2])
def test_lifecycle(dest, algorithm):
    committer = make(dest, algorithm)
    committer.setup_job()
    messages = [committer.commit_task(write_task(committer, i)) for i in range(3)]
    if algorithm == 1:
        assert visible(dest) == []  # v1: committed tasks wait under _temporary
    else:
        assert len(visible(dest)) == 6  # v2: visible as soon as each task commits
    summary = committer.commit_job(messages)
    assert files(dest) == [
        "_SUCCESS",
        *sorted([f"part-0-{i}" for i in range(3)] + [f"year=2024/part-1-{i}" for i in range(3)]),
    ]
    fs, url = dest
    assert fs.cat_file(f"{fs._strip_protocol(url)}/_SUCCESS") == b""  # zero bytes, as Hadoop
    assert summary.files == 6


def test_v1_job_commit_lists_committed_tasks_and_merges_into_existing_directories(dest):
    fs, url = dest
    root = fs._strip_protocol(url)
    fs.makedirs(f"{root}/year=2024", exist_ok=True)
    fs.pipe_file(f"{root}/year=2024/old", b"old")
    committer = make(dest, 1)
    committer.setup_job()
    for index in range(2):
        committer.commit_task(write_task(committer, index))
    committer.commit_job()
    assert visible(dest) == [
        "part-0-0",
        "part-0-1",
        "year=2024/old",
        "year=2024/part-1-0",
        "year=2024/part-1-1",
    ]


def test_v1_later_attempt_of_a_task_replaces_the_earlier(dest):
    committer = make(dest, 1)
    committer.setup_job()
    committer.commit_task(write_task(committer, 0, 0, names=("from-attempt-0",)))
    committer.commit_task(write_task(committer, 0, 1, names=("from-attempt-1",)))
    committer.commit_job()
    assert visible(dest) == ["from-attempt-1-0"]


@pytest.mark.parametrize("algorithm", [1, 2])
def test_abort_task_and_job(dest, algorithm):
    committer = make(dest, algorithm)
    committer.setup_job()
    committer.abort_task(write_task(committer, 0))
    assert not committer.needs_task_commit(committer.task_attempt(0))
    committer.abort_job()
    assert files(dest) == []


def test_v2_is_unsafe_a_failed_job_leaves_its_output_visible(dest):
    """Why magicfs does not recommend v2: task output is published at task commit."""
    committer = make(dest, 2)
    committer.setup_job()
    committer.commit_task(write_task(committer, 0))  # task 0 committed...
    write_task(committer, 1)  # ...task 1 still running when the job fails
    committer.abort_job()
    assert visible(dest) == ["part-0-0", "year=2024/part-1-0"]  # half a job, and no _SUCCESS
    assert "_SUCCESS" not in files(dest)


def test_v1_failed_job_leaves_nothing_visible(dest):
    committer = make(dest, 1)
    committer.setup_job()
    committer.commit_task(write_task(committer, 0))
    committer.abort_job()
    assert files(dest) == []


def test_a_missing_task_message_is_refused_by_name_and_publishes_nothing(dest):
    # Spark hands None for a task that never reported.
    committer = make(dest, 1)
    committer.setup_job()
    message = committer.commit_task(write_task(committer, 0))
    with pytest.raises(CommitFailedError, match="message 1 is missing: a task did not report"):
        committer.commit_job([message, None])
    assert visible(dest) == []


@pytest.mark.parametrize("algorithm", [1, 2])
def test_the_job_marker_says_which_job_is_active_on_every_store(dest, algorithm):
    committer = make(dest, algorithm)
    committer.setup_job()
    assert committer.flow.job_active()
    marker = f"_temporary/0/_magicfs_job-{committer.job_id}.json"
    assert marker in files(dest)
    with pytest.raises(JobAlreadyActiveError, match="already active"):
        make(dest, algorithm, job_id=committer.job_id).setup_job()
    assert not make(dest, algorithm).flow.job_active()  # another job id: not this marker
    committer.commit_job([committer.commit_task(write_task(committer, 0))])
    assert not committer.flow.job_active() and marker not in files(dest)
    aborted = make(dest, algorithm)
    aborted.setup_job()
    aborted.abort_job()
    assert not aborted.flow.job_active()
    assert [f for f in files(dest) if f.startswith("_temporary")] == []


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_second_commit_is_refused_and_changes_nothing(dest, algorithm):
    committer = make(dest, algorithm)
    committer.setup_job()
    messages = [committer.commit_task(write_task(committer, 0))]
    assert committer.commit_job(messages).files == 2
    before = files(dest)
    for again in (lambda: committer.commit_job(), lambda: committer.commit_job(messages)):
        with pytest.raises(NothingToCommitError, match="already been committed") as refused:
            again()
        assert committer.job_id in str(refused.value)
    never_set_up = make(dest, algorithm)
    with pytest.raises(NothingToCommitError, match="never set up"):
        never_set_up.commit_job()
    assert files(dest) == before


@pytest.mark.parametrize("algorithm", [1, 2])
def test_a_message_of_another_job_is_refused_and_the_log_says_what_happened(
    dest, algorithm, caplog
):
    other = make(dest, algorithm)
    other.setup_job()
    foreign = other.commit_task(write_task(other, 7))
    committer = make(dest, algorithm)
    committer.setup_job()
    message = committer.commit_task(write_task(committer, 0))
    with pytest.raises(JobCommitError, match=f"comes from job {other.job_id}") as failed:
        committer.commit_job([message, foreign])
    assert failed.value.stage == "load"
    assert f"the {committer.name} committer cannot take them back" in str(failed.value)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors and all("rolled back" not in e and "job was aborted" in e for e in errors)


def test_v2_refuses_conflict_mode_replace_and_names_the_alternatives(dest):
    fs, url = dest
    root = fs._strip_protocol(url)
    fs.makedirs(root, exist_ok=True)
    fs.pipe_file(f"{root}/old.csv", b"old")
    with pytest.raises(ValueError, match="conflict_mode 'replace' is not supported") as refused:
        make(dest, 2, conflict_mode="replace")
    assert "file-v1" in str(refused.value) and "manifest" in str(refused.value)
    assert files(dest) == ["old.csv"]


def test_v2_checks_conflict_mode_fail_at_job_setup_only(dest):
    committer = make(dest, 2, conflict_mode="fail")
    committer.setup_job()
    messages = [committer.commit_task(write_task(committer, 0))]
    assert len(visible(dest)) == 2  # published by the task: not a conflict at job commit
    committer.commit_job(messages)
    assert len(visible(dest)) == 2
    with pytest.raises(CommitConflictError, match="checked at job setup"):
        make(dest, 2, conflict_mode="fail").setup_job()
