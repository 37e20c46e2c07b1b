"""The request counts the docs claim, on each S3 store: moto, Ceph RGW and SeaweedFS.

"Job commit costs one request per file" (README, docs/index.md), task commit in the
writing process is O(1), a task committed elsewhere reads one record per file, and
``in_memory=True`` writes a small file in five requests (docs/stores/s3.md, "Requests
per file"). The requests are counted on the client (botocore's ``before-call`` event,
``request_log``), so a store that needed more (a retry, a lookup) would show here.
"""

from __future__ import annotations

from helpers import as_another_process, pending_uploads, visible_keys

from magicfs.task_files import TASK_FILES


def write_only(committer, names: list[str]):
    """Write the files; the task will commit in another process (it reads their records)."""
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for name in names:
        committer.fs.pipe_file(task.path(name), name.encode())
    as_another_process(committer, task)
    return task


def test_requests_per_small_file(make_committer, target, request_log):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for n in range(20):
        committer.fs.pipe_file(task.path(f"f{n}"), b"x")
    TASK_FILES.settle()  # the files' closes finish in the background
    request_log.attach(committer.store_fs)
    message = committer.commit_task(task)
    task_commit = request_log.counts()
    request_log.clear()
    committer.commit_job([message])
    job_commit = request_log.counts()

    # task commit in the writing process: O(1), the commits are known here: one listing
    # of every attempt of the task (its started marker with it), one PUT (the attempt's
    # record: no other attempt of the task committed), one HEAD of the job marker
    assert task_commit == {"ListObjectsV2": 1, "PutObject": 1, "HeadObject": 1}
    # job commit: one completion per file, plus O(1) for the task and the job (alone on
    # its destination the job is unmarked: its record is deleted in a batch of its own)
    assert job_commit["CompleteMultipartUpload"] == 20
    assert sum(job_commit.values()) - 20 <= 13
    assert "CopyObject" not in job_commit and "UploadPartCopy" not in job_commit


def test_task_commit_in_another_process_reads_each_record(make_committer, target, request_log):
    committer = make_committer()
    task = write_only(committer, [f"f{n}" for n in range(20)])  # then "another process"
    request_log.attach(committer.store_fs)
    message = committer.commit_task(task)
    # one GET per .pending, plus O(1): a listing, one PUT, the job marker's HEAD
    assert request_log.counts() == {
        "ListObjectsV2": 1,
        "GetObject": 20,
        "PutObject": 1,
        "HeadObject": 1,
    }
    committer.commit_job([message])
    assert len(visible_keys(target.client, target.bucket)) == 21


def test_in_memory_mode_needs_five_requests_per_small_file(make_committer, target, request_log):
    committer = make_committer(in_memory=True)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    request_log.attach(committer.store_fs)
    for n in range(20):
        committer.fs.pipe_file(task.path(f"f{n}"), b"x")
    message = committer.commit_task(task)
    committer.commit_job([message])
    counts = request_log.counts()
    per_file = {
        op: counts[op] for op in ("CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload")
    }
    assert per_file == {
        "CreateMultipartUpload": 20,
        "UploadPart": 20,
        "CompleteMultipartUpload": 20,
    }
    # the job check of each writer (and its intent marker in a marked job); no .pending,
    # no GET at task commit
    assert counts["PutObject"] - 20 <= 8 and counts["HeadObject"] - 20 <= 4
    assert counts["GetObject"] <= 2
    assert sum(counts.values()) - 100 <= 15  # everything else is per task or per job
    assert visible_keys(target.client, target.bucket) == [
        "out/_SUCCESS",
        *sorted(f"out/f{n}" for n in range(20)),
    ]
    assert pending_uploads(target.client, target.bucket) == []
