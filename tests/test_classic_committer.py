"""FileOutputCommitter v1 and v2 (the classic baseline), on a local disk, in memory and on S3."""

from __future__ import annotations

import uuid

import fsspec
import pytest

from magicfs import committer_for
from magicfs.errors import CommitFailedError


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
