"""A driver killed (SIGKILL) at an exact point of job commit; the job finished or rolled back.

Each test runs a job in a child process (``helpers.crash_job``) that kills itself at a
chosen request of its commit, then recovers in this process with a fresh committer for
the same job id — ``commit_job()`` (finish) or ``abort_job()`` (roll back), or the
``magicfs jobs`` command — and asserts the exact destination, zero pending uploads and
no job state left. Randomised kills at any moment of a job are in
``tests/test_kill_recovery.py``; here each point is chosen, so each outcome is exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest
from helpers import object_keys, pending_uploads, visible_keys

import magicfs
from magicfs.errors import JobAlreadyActiveError, JobCommitError, NothingToCommitError

TESTS = os.path.dirname(__file__)
TASKS = [{f"t{t}/f{n}.csv": f"task {t} file {n}\n" for n in range(3)} for t in range(4)]
ALL = {name: text.encode() for files in TASKS for name, text in files.items()}


def run_crashing_job(tmp_path, dest, die, **spec) -> list[magicfs.TaskCommitMessage]:
    """Run the job until it kills itself at ``die``; returns the messages it had saved."""
    messages = tmp_path / f"messages-{uuid.uuid4().hex}.jsonl"
    document = {"dest": dest, "tasks": TASKS, "messages": str(messages), "die": die, **spec}
    result = subprocess.run(
        [sys.executable, "-m", "helpers.crash_job", json.dumps(document)],
        cwd=TESTS,
        # This checkout's magicfs, not whichever one is installed.
        env={**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.path.dirname(TESTS)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == -9, f"the job did not die where asked:\n{result.stderr[-3000:]}"
    lines = messages.read_text().splitlines() if messages.exists() else []
    return [magicfs.TaskCommitMessage.from_json(line) for line in lines]


# --- S3, magic committer -------------------------------------------------------------------


#: The S3 stores the chosen kill points also run on: moto and Ceph RGW (a production S3).
S3_STORES = ["s3", "rgw"]


@pytest.fixture
def store() -> str:
    """The S3 store of ``s3_job``: moto, unless a test parametrizes it (``S3_STORES``)."""
    return "s3"


@pytest.fixture
def s3_job(request, store, tmp_path):
    """The job: ``dest``, ``run(die)``, ``committer(**options)``, ``contents()``, ``left()``,
    on ``store`` (``bucket``, ``client`` and ``options`` of that store)."""
    on_rgw = store == "rgw"
    bucket = request.getfixturevalue("rgw_bucket" if on_rgw else "bucket")
    s3_client = request.getfixturevalue("rgw_client" if on_rgw else "s3_client")
    s3_options = request.getfixturevalue("rgw_server" if on_rgw else "s3_server").storage_options
    dest = f"s3://{bucket}/out"
    job_id = f"crash-{uuid.uuid4().hex[:8]}"

    def run(die, **spec):
        return run_crashing_job(
            tmp_path, dest, die, job_id=job_id, storage_options=s3_options, **spec
        )

    def committer(**options):
        return magicfs.committer_for(
            dest,
            job_id=job_id,
            storage_options={**s3_options, "skip_instance_cache": True},
            **options,
        )

    def contents():
        return {
            key.removeprefix("out/"): s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
            for key in visible_keys(s3_client, bucket, "out/")
            if not key.removeprefix("out/").startswith("_")
        }

    def left():
        """Pending uploads and job state: must be empty after any recovery."""
        state = [k for k in object_keys(s3_client, bucket) if "__magic_job-" in k]
        return pending_uploads(s3_client, bucket), state

    return SimpleNamespace(
        dest=dest,
        run=run,
        committer=committer,
        contents=contents,
        left=left,
        bucket=bucket,
        client=s3_client,
        options=s3_options,
    )


@pytest.mark.parametrize("store", S3_STORES)
@pytest.mark.parametrize("conflict_mode", ["append", "fail", "replace"])
@pytest.mark.parametrize("with_messages", [True, False])
def test_killed_mid_publish_then_commit_job_finishes_exactly(s3_job, conflict_mode, with_messages):
    job = s3_job
    if conflict_mode != "fail":
        job.client.put_object(Bucket=job.bucket, Key="out/old.csv", Body=b"old data")
    messages = job.run({"op": "CompleteMultipartUpload", "nth": 5}, conflict_mode=conflict_mode)
    assert len(messages) == 4
    # half published: 5 files, beside the old data (replace deletes it after its record)
    assert len(job.contents()) == 5 + (conflict_mode != "fail")
    summary = job.committer(conflict_mode=conflict_mode).commit_job(
        messages if with_messages else None
    )
    expected = dict(ALL)
    if conflict_mode == "append":
        expected["old.csv"] = b"old data"
    assert job.contents() == expected
    assert summary.files == 12
    success = json.loads(
        job.client.get_object(Bucket=job.bucket, Key="out/_SUCCESS")["Body"].read()
    )
    assert success["jobId"] == summary.job_id
    assert job.left() == ([], [])
    with pytest.raises(NothingToCommitError, match="already been committed"):
        job.committer().commit_job()


@pytest.mark.parametrize("store", S3_STORES)
@pytest.mark.parametrize("conflict_mode", ["append", "fail"])
def test_killed_mid_publish_then_abort_job_rolls_back_exactly(s3_job, conflict_mode):
    job = s3_job
    before = {}
    if conflict_mode == "append":
        job.client.put_object(Bucket=job.bucket, Key="out/old.csv", Body=b"old data")
        before = {"old.csv": b"old data"}
    job.run({"op": "CompleteMultipartUpload", "nth": 7}, conflict_mode=conflict_mode)
    assert len(job.contents()) == len(before) + 7
    job.committer(conflict_mode=conflict_mode).abort_job()
    assert job.contents() == before
    assert job.left() == ([], [])
    job.committer().abort_job()  # again: harmless
    assert job.contents() == before


@pytest.mark.parametrize("store", S3_STORES)
def test_replace_killed_after_deleting_old_data_is_finished_not_rolled_back(s3_job):
    job = s3_job
    for n in range(3):
        job.client.put_object(Bucket=job.bucket, Key=f"out/old-{n}.csv", Body=b"old")
    job.client.put_object(
        Bucket=job.bucket, Key="out/t0/f0.csv", Body=b"an old file the job replaces"
    )
    job.run({"op": "CompleteMultipartUpload", "nth": 2}, conflict_mode="replace")
    assert len(job.contents()) == 2  # old data deleted, 2 new files visible
    with pytest.raises(JobCommitError, match=r"already deleted .*commit_job\(\)") as refused:
        job.committer(conflict_mode="replace").abort_job()
    assert refused.value.recoverable
    assert len(job.contents()) == 2  # the refusal changed nothing
    with pytest.raises(JobCommitError, match="did not finish"):
        job.committer().cleanup_job()
    job.committer(conflict_mode="replace").commit_job()
    assert job.contents() == ALL  # the new file t0/f0.csv was not deleted again
    assert job.left() == ([], [])


def test_replace_killed_before_deleting_rolls_back_to_the_old_data(s3_job, s3_client, bucket):
    job = s3_job
    s3_client.put_object(Bucket=bucket, Key="out/old.csv", Body=b"old")
    # The first DeleteObjects would delete the old data.
    job.run({"op": "DeleteObjects", "nth": 1, "when": "before"}, conflict_mode="replace")
    job.committer(conflict_mode="replace").abort_job()
    assert job.contents() == {"old.csv": b"old"}
    assert job.left() == ([], [])


@pytest.mark.parametrize("when", ["before", "after"])
def test_killed_during_clean_up_is_finished_without_publishing_again(
    s3_job, s3_client, bucket, request_log, when
):
    """The clean-up's DeleteObjects come after _SUCCESS (ending the job deletes its
    marker with one DeleteObject): the journal says committed, so the files, the task
    records, the job's mode and the journal go in one request where they fit (a larger
    tree keeps the journal for its last: ``test_large_jobs``). Killed before it, a retried
    commit only finishes the clean-up; killed after it, nothing is left and a retried
    commit says the job is committed."""
    job = s3_job
    job.run({"op": "DeleteObjects", "nth": 1, "when": when})
    tree = {key.rsplit("/", 1)[-1] for key in job.left()[1]}
    assert job.contents() == ALL
    retry = job.committer()
    request_log.attach(retry.store_fs)
    if when == "before":
        assert "_magicfs_commit.json" in tree and any(n.endswith(".pendingset") for n in tree)
        summary = retry.commit_job()
        assert (summary.files, summary.tasks) == (12, 4)
    else:  # the one request took the whole tree
        assert tree == set()
        with pytest.raises(NothingToCommitError, match="already been committed"):
            retry.commit_job()
    assert "CompleteMultipartUpload" not in request_log.counts()  # nothing published again
    assert job.contents() == ALL and job.left() == ([], [])
    with pytest.raises(JobAlreadyActiveError, match="already committed"):
        job.committer().setup_job()  # the committed job's id is not used again


@pytest.mark.parametrize("store", S3_STORES)
def test_killed_with_the_journal_saved_and_the_marker_not_yet_deleted(s3_job):
    """Messages that carry their records: the marker's delete goes on while the journal
    is saved. Killed right after the journal's save with the delete held back, the job
    reads as a commit under way; a retried commit ends it and finishes it."""
    job = s3_job
    job.run(
        {"op": "PutObject", "nth": 1, "when": "after"},
        hold={"op": "DeleteObject", "seconds": 60},
    )
    tree = {key.rsplit("/", 1)[-1] for key in job.left()[1]}
    assert {"_magicfs_job.json", "_magicfs_commit.json"} <= tree
    assert job.contents() == {}
    retry = job.committer()
    assert retry.job_state() == "committing"
    summary = retry.commit_job()
    assert (summary.files, summary.tasks) == (12, 4)
    assert job.contents() == ALL and job.left() == ([], [])


def test_in_memory_killed_mid_publish_then_rolled_back(s3_job, s3_client, bucket):
    job = s3_job
    job.run({"op": "CompleteMultipartUpload", "nth": 4}, options={"in_memory": True})
    job.committer(in_memory=True).abort_job()
    assert job.contents() == {}
    assert job.left() == ([], [])


@pytest.mark.parametrize("store", S3_STORES)
def test_jobs_command_lists_and_recovers(s3_job, capsys):
    from magicfs.integrations.cli import main

    job = s3_job
    job.run({"op": "CompleteMultipartUpload", "nth": 3})
    store_args = _cli_store_options(job.options)
    assert main(["jobs", "list", "--json", *store_args, job.dest]) == 0
    listed = json.loads(capsys.readouterr().out)["jobs"]
    job_id = job.committer().job_id
    assert [(j["jobId"], j["state"], j["phase"], j["taskRecords"]) for j in listed] == [
        (job_id, "committing", "publishing", 4)
    ]
    assert main(["jobs", "cleanup", "--job", job_id, *store_args, job.dest]) == 1  # refused
    assert "did not finish" in capsys.readouterr().err
    assert main(["jobs", "recover", "--json", "--job", job_id, *store_args, job.dest]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert (outcome["stateBefore"], outcome["files"]) == ("committing", 12)
    assert job.contents() == ALL and job.left() == ([], [])
    assert main(["jobs", "list", "--fail-if-any", *store_args, job.dest]) == 0


@pytest.mark.parametrize("store", S3_STORES)
def test_jobs_command_rolls_back(s3_job, capsys):
    from magicfs.integrations.cli import main

    job = s3_job
    job.run({"op": "CompleteMultipartUpload", "nth": 3})
    store_args = _cli_store_options(job.options)
    assert main(["jobs", "list", "--fail-if-any", *store_args, job.dest]) == 1
    assert "magicfs jobs recover --job" in capsys.readouterr().out
    assert main(["jobs", "rollback", "--job", job.committer().job_id, *store_args, job.dest]) == 0
    assert job.contents() == {} and job.left() == ([], [])


def _cli_store_options(options: dict) -> list[str]:
    """``magicfs jobs`` options naming the store of ``options`` (s3fs storage options)."""
    endpoint = options["client_kwargs"]["endpoint_url"]
    key, secret = options["key"], options["secret"]
    return ["--endpoint-url", endpoint, "-o", f"key={key}", "-o", f"secret={secret}"]


# --- a local disk, manifest committer ----------------------------------------------------------


@pytest.fixture
def local_job(tmp_path):
    dest = f"file://{tmp_path}/out"
    job_id = f"crash-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "out"

    def run(die, **spec):
        return run_crashing_job(tmp_path, dest, die, job_id=job_id, **spec)

    def committer(**options):
        return magicfs.committer_for(dest, job_id=job_id, **options)

    def contents():
        found = {}
        for path in root.rglob("*"):
            relative = path.relative_to(root).as_posix()
            if path.is_file() and not any(e.startswith(("_", ".")) for e in relative.split("/")):
                found[relative] = path.read_bytes()
        return found

    def left():
        return (
            sorted(p.name for p in (root / "_temporary").glob("*"))
            if (root / "_temporary").exists()
            else []
        )

    return SimpleNamespace(
        dest=dest, run=run, committer=committer, contents=contents, left=left, root=root
    )


@pytest.mark.parametrize("conflict_mode", ["append", "fail", "replace"])
def test_manifest_killed_mid_rename_then_finished(local_job, conflict_mode):
    job = local_job
    if conflict_mode != "fail":
        job.root.mkdir()
        (job.root / "old.csv").write_bytes(b"old")
    job.run({"op": "mv", "nth": 6}, conflict_mode=conflict_mode)
    # 5 renamed, beside the old data (replace deletes it after its record)
    assert len(job.contents()) == 5 + (conflict_mode != "fail")
    job.committer(conflict_mode=conflict_mode).commit_job()
    expected = {**ALL, **({"old.csv": b"old"} if conflict_mode == "append" else {})}
    assert job.contents() == expected
    assert job.left() == []


def test_manifest_killed_mid_rename_then_rolled_back(local_job):
    job = local_job
    job.root.mkdir()
    (job.root / "old.csv").write_bytes(b"old")
    job.run({"op": "mv", "nth": 9})
    assert len(job.contents()) == 9
    job.committer().abort_job()
    assert job.contents() == {"old.csv": b"old"}
    assert job.left() == []


def test_manifest_jobs_command(local_job, capsys):
    from magicfs.integrations.cli import main

    job = local_job
    job.run({"op": "mv", "nth": 2})
    assert main(["jobs", "list", job.dest]) == 0
    out = capsys.readouterr().out
    assert "manifest  committing, phase publishing" in out
    assert main(["jobs", "recover", "--job", job.committer().job_id, job.dest]) == 0
    assert job.contents() == ALL and job.left() == []


# --- reusing a job id ------------------------------------------------------------------------


def test_setting_up_an_active_job_again_is_refused(s3_options, bucket):
    options = {**s3_options, "skip_instance_cache": True}
    first = magicfs.committer_for(f"s3://{bucket}/out", job_id="same", storage_options=options)
    first.setup_job()
    second = magicfs.committer_for(f"s3://{bucket}/out", job_id="same", storage_options=options)
    with pytest.raises(JobAlreadyActiveError, match=r"already active .* setup_job\(resume=True\)"):
        second.setup_job()
    second.setup_job(resume=True)  # explicitly continuing it is fine
    task = second.task_attempt(0)
    second.setup_task(task)
    second.fs.pipe_file(task.path("x.csv"), b"x")
    first.commit_job([second.commit_task(task)])
    with pytest.raises(JobAlreadyActiveError, match="already committed"):
        magicfs.committer_for(
            f"s3://{bucket}/out", job_id="same", storage_options=options
        ).setup_job()


# --- S3, staging committer -------------------------------------------------------------------


@pytest.fixture
def staging_job(s3_job, tmp_path):
    """The S3 job of ``s3_job``, with the staging committer and a shared buffer directory."""
    options = {"buffer_dir": str(tmp_path / "staging")}
    run, committer = s3_job.run, s3_job.committer
    s3_job.run = lambda die, **spec: run(die, committer="directory", options=options, **spec)
    s3_job.committer = lambda **more: committer(committer="directory", **options, **more)
    return s3_job


def test_staging_killed_mid_publish_then_finished(staging_job):
    job = staging_job
    job.run({"op": "CompleteMultipartUpload", "nth": 6})
    assert len(job.contents()) == 6  # killed right after the 6th completion
    job.committer().commit_job()
    assert job.contents() == ALL
    assert job.left() == ([], [])


def test_staging_killed_mid_publish_then_rolled_back(staging_job):
    job = staging_job
    job.run({"op": "CompleteMultipartUpload", "nth": 6})
    job.committer().abort_job()
    assert job.contents() == {}
    assert job.left() == ([], [])


def test_staging_task_killed_mid_upload_leaves_nothing_parked(staging_job, s3_client, bucket):
    # Task 2's commit dies after its 2nd part upload: its uploads exist, no record names
    # them — only the intent its commit saved before uploading.
    job = staging_job
    messages = job.run({"op": "UploadPart", "nth": 2, "during": "task_commit", "task": 2})
    assert len(messages) == 2 and len(pending_uploads(s3_client, bucket)) >= 2
    job.committer().abort_job()
    assert job.contents() == {}
    assert job.left() == ([], [])
