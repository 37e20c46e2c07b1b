"""Jobs through a misbehaving S3: throttling, errors, lost replies, transient and persistent.

The faults are injected on the wire by the fault front (``helpers.fault_front``) between
s3fs and the store: moto, and two production S3 implementations, Ceph RGW and SeaweedFS.
Transient faults must leave the exact output of a clean run and nothing parked (magicfs's
retry policy, :mod:`magicfs.stores.s3.retry`, on top of botocore's); a fault that never
goes away must end in an error that names what failed and what is left, and the command
that finishes the job once the store is healthy again.
"""

from __future__ import annotations

import json

import pytest
import s3fs
from helpers import object_keys, pending_uploads, visible_keys
from helpers.s3_targets import store_fixture

import magicfs
from conftest import _checked_bucket
from magicfs.committers.jobs import find_jobs
from magicfs.errors import JobCommitError, StoreCallError
from magicfs.integrations.cli.common import read_limited
from magicfs.stores.s3.retry import RetryPolicy

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)
TASKS = {t: {f"t{t}/f{n}.csv": f"{t},{n}\n".encode() for n in range(5)} for t in range(4)}
ALL = {f"out/{name}": data for files in TASKS.values() for name, data in files.items()}


#: The stores every scenario runs on: moto, Ceph RGW and SeaweedFS, each behind its own
#: fault front.
S3_STORES = ["s3", "rgw", "seaweed"]


@pytest.fixture(params=S3_STORES)
def store(request) -> str:
    """The store of each scenario; this module's ``s3_client``, ``bucket`` and
    ``faults_front`` follow it."""
    return request.param


@pytest.fixture
def server(request, store):
    return store_fixture(request, store, "server")


@pytest.fixture
def s3_client(server):
    """A client straight to the store (never through the front), to observe it."""
    return server.boto3_client()


@pytest.fixture
def bucket(request, s3_client):
    yield from _checked_bucket(request, s3_client)


@pytest.fixture
def faults_front(request, store):
    """The store's fault front with no rules and zeroed statistics; cleared afterwards."""
    front = store_fixture(request, store, "front")
    front.clear()
    yield front
    front.clear()


def committer_via(front, bucket, *, client_attempts=None, **options):
    storage = {**front.storage_options, "skip_instance_cache": True}
    if client_attempts is not None:  # fewer botocore attempts: persistent faults fail fast
        storage["config_kwargs"] = {
            "retries": {"total_max_attempts": client_attempts, "mode": "standard"}
        }
    committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=storage, **options)
    committer.store_fs.retries = 1  # s3fs's own SlowDown retries: botocore's are enough here
    return committer


def run_job(committer):
    committer.setup_job()
    messages = []
    for index, files in TASKS.items():
        task = committer.task_attempt(index)
        committer.setup_task(task)
        for name, data in files.items():
            committer.fs.pipe_file(task.path(name), data)
        messages.append(committer.commit_task(task))
    return messages


def published(s3_client, bucket):
    return {
        key: s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
        for key in visible_keys(s3_client, bucket)
        if not key.endswith("_SUCCESS")
    }


def assert_nothing_left(s3_client, bucket):
    assert pending_uploads(s3_client, bucket) == []
    assert [k for k in object_keys(s3_client, bucket) if "__magic_job-" in k] == []


# --- transient faults: the exact output, nothing parked -------------------------------------


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_lost_create_replies_leave_nothing_parked(faults_front, s3_client, bucket, rate):
    faults_front.add_rule("CreateMultipartUpload", "reset-after", rate=rate)
    committer = committer_via(faults_front, bucket, retry_policy=FAST)
    committer.commit_job(run_job(committer))
    assert faults_front.stats()["CreateMultipartUpload"]["faults"]["reset-after"] >= 2
    assert published(s3_client, bucket) == ALL
    assert_nothing_left(s3_client, bucket)  # every orphaned duplicate was swept by key


@pytest.mark.parametrize(
    ("action", "rate"),
    [("503", 0.3), ("500", 0.1), ("500-after", 0.1), ("reset-before", 0.1), ("reset-after", 0.1)],
)
def test_transient_faults_on_every_write_operation(faults_front, s3_client, bucket, action, rate):
    operations = ["UploadPart", "PutObject", "CompleteMultipartUpload", "ListObjectsV2"]
    faults_front.add_rule(operations, action, rate=rate)
    committer = committer_via(faults_front, bucket, retry_policy=FAST)
    summary = committer.commit_job(run_job(committer))
    assert sum(s["faults"].get(action, 0) for s in faults_front.stats().values()) >= 3
    assert summary.files == 20 and summary.cleanup_incomplete is None
    assert published(s3_client, bucket) == ALL
    assert_nothing_left(s3_client, bucket)


@pytest.mark.parametrize(("client_attempts", "s3fs_retries"), [(None, 1), (1, 1), (1, 5)])
def test_a_part_sent_again_is_sent_whole(
    faults_front, s3_client, bucket, client_attempts, s3fs_retries
):
    # A part goes out as views of the caller's pieces (magicfs.stores.s3.body), read to
    # the end by each attempt: the store took the whole first attempt, then answered 500.
    # Whoever repeats it (botocore, s3fs, or magicfs's retry policy once botocore and
    # s3fs give up), the store must get every byte again, not what is left after the end.
    committer = committer_via(
        faults_front, bucket, client_attempts=client_attempts, retry_policy=FAST
    )
    committer.store_fs.retries = s3fs_retries
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    pieces = [bytes([n]) * (1 << 20) for n in range(9)] + [b"tail"]  # parts of 8 MiB, 1 MiB
    faults_front.add_rule("UploadPart", "500-after", count=2)
    with committer.fs.open(task.path("big.bin"), "wb") as f:
        for piece in pieces:
            f.write(piece)
    committer.commit_job([committer.commit_task(task)])
    assert faults_front.stats()["UploadPart"]["faults"] == {"500-after": 2}
    assert published(s3_client, bucket) == {"out/big.bin": b"".join(pieces)}
    assert_nothing_left(s3_client, bucket)


def test_completions_answered_with_an_error_in_a_200_reply(faults_front, s3_client, bucket):
    # S3 documents this for CompleteMultipartUpload: the status line went out before
    # the work failed. One file must not undo the others: it is retried.
    faults_front.add_rule("CompleteMultipartUpload", "error-200", rate=0.3)
    committer = committer_via(faults_front, bucket, retry_policy=FAST)
    committer.commit_job(run_job(committer))
    assert faults_front.stats()["CompleteMultipartUpload"]["faults"]["error-200"] >= 3
    assert published(s3_client, bucket) == ALL
    assert_nothing_left(s3_client, bucket)


def test_exclusive_create_whose_marker_reply_was_lost(faults_front, s3_client, bucket):
    # The conditional PUT of the marker happened, its reply was lost, botocore repeated
    # it: the repeat sees a marker and must recognise it as its own.
    committer = committer_via(faults_front, bucket, retry_policy=FAST)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    faults_front.add_rule(
        "PutObject", "reset-after", key=r"__base/_x\.csv\.magicfs-task\.magicfs-marker$", count=1
    )
    with committer.fs.open(task.path("x.csv"), "xb") as f:
        f.write(b"exclusive")
    assert faults_front.stats()["PutObject"]["faults"]["reset-after"] == 1
    committer.commit_job([committer.commit_task(task)])
    assert published(s3_client, bucket) == {"out/x.csv": b"exclusive"}
    assert_nothing_left(s3_client, bucket)


# --- persistent faults: a precise error, nothing lost, one command to finish ----------------


def test_a_task_commit_whose_listing_fails_aborts_the_attempt_and_a_retry_commits(
    faults_front, s3_client, bucket
):
    # The attempt's listing starts while its files finish closing; failing for good, it
    # fails the commit with the store's error, the attempt is aborted (its uploads too)
    # and the task's next attempt commits.
    committer = committer_via(faults_front, bucket, client_attempts=1, retry_policy=FAST)
    committer.setup_job()
    first = committer.task_attempt(0)
    committer.setup_task(first)
    for name, data in TASKS[0].items():
        committer.fs.pipe_file(first.path(name), data)
    faults_front.add_rule("ListObjectsV2", "500", count=FAST.attempts)
    with pytest.raises(StoreCallError, match="InternalError"):
        committer.commit_task(first)
    assert faults_front.stats()["ListObjectsV2"]["faults"] == {"500": FAST.attempts}
    assert pending_uploads(s3_client, bucket) == []
    retry = committer.task_attempt(0, 1)
    committer.setup_task(retry)
    for name, data in TASKS[0].items():
        committer.fs.pipe_file(retry.path(name), data)
    committer.commit_job([committer.commit_task(retry)])
    assert published(s3_client, bucket) == {f"out/{n}": d for n, d in TASKS[0].items()}
    assert_nothing_left(s3_client, bucket)


def test_every_completion_and_abort_failing(faults_front, s3_client, bucket, s3_options, capsys):
    committer = committer_via(faults_front, bucket, client_attempts=2, retry_policy=FAST)
    messages = run_job(committer)
    faults_front.add_rule(["CompleteMultipartUpload", "AbortMultipartUpload"], "503")
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    message = str(failure.value)
    job = committer.job_id
    assert f"job {job}: commit to s3://{bucket}/out failed in stage publish" in message
    assert "could not complete s3://" in message and "failed 3 times" in message
    assert "Rolling the job back failed too" in message
    assert "could not abort 20 of 20 uploads" in message  # exactly what is parked
    assert f"magicfs jobs rollback --job {job} s3://{bucket}/out" in message
    assert failure.value.recoverable
    assert published(s3_client, bucket) == {}  # nothing visible
    assert len(pending_uploads(s3_client, bucket)) == 20  # parked, and recorded

    faults_front.clear()  # the store recovers; the operator runs the command
    from magicfs.integrations.cli import main

    endpoint = faults_front.storage_options["client_kwargs"]["endpoint_url"]
    key, secret = faults_front.credentials
    store_args = ["--endpoint-url", endpoint, "-o", f"key={key}", "-o", f"secret={secret}"]
    assert main(["jobs", "rollback", "--job", job, *store_args, f"s3://{bucket}/out"]) == 0
    assert published(s3_client, bucket) == {}
    assert_nothing_left(s3_client, bucket)


def test_one_file_whose_completion_keeps_failing(faults_front, s3_client, bucket):
    committer = committer_via(faults_front, bucket, client_attempts=2, retry_policy=FAST)
    messages = run_job(committer)
    faults_front.add_rule("CompleteMultipartUpload", "500", key=r"out/t2/f3\.csv$")
    with pytest.raises(JobCommitError, match=r"could not complete s3://.*/out/t2/f3\.csv") as e:
        committer.commit_job(messages)
    assert "failed in stage publish" in str(e.value) and not e.value.recoverable
    assert published(s3_client, bucket) == {}  # rolled back: nothing half-visible
    assert_nothing_left(s3_client, bucket)


def test_a_store_outage_fails_the_job_once_its_retry_budget_is_spent(
    faults_front, s3_client, bucket
):
    # Each call alone could retry 100 times; the job's budget of retry waits stops them.
    patient = RetryPolicy(attempts=100, base_delay=0.05, max_delay=0.05, budget=0.5)
    committer = committer_via(faults_front, bucket, client_attempts=1, retry_policy=patient)
    messages = run_job(committer)
    faults_front.add_rule("CompleteMultipartUpload", "503")
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    message = str(failure.value)
    assert "failed in stage publish" in message
    assert "the retry budget of 0.5 s for this job is spent" in message
    assert committer.flow.store_hooks.store.retry_waits <= 0.5
    # at most a budget's worth of retries reached the store, not 20 x 100
    assert faults_front.stats()["CompleteMultipartUpload"]["requests"] < 200
    assert published(s3_client, bucket) == {}  # rolled back: nothing half-visible
    assert_nothing_left(s3_client, bucket)


def test_retry_policy_refuses_nonsense():
    with pytest.raises(ValueError, match="attempts must be at least 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="budget must be None or >= 0"):
        RetryPolicy(budget=-1)


def test_success_file_that_cannot_be_written(faults_front, s3_client, bucket):
    committer = committer_via(faults_front, bucket, client_attempts=2, retry_policy=FAST)
    messages = run_job(committer)
    faults_front.add_rule("PutObject", "503", key=r"out/_SUCCESS$")
    with pytest.raises(JobCommitError, match=r"stage success: .*PutObject s3://.*/out/_SUCCESS"):
        committer.commit_job(messages)
    assert published(s3_client, bucket) == {}
    assert_nothing_left(s3_client, bucket)


def test_a_job_end_that_cannot_delete_its_marker(faults_front, s3_client, bucket):
    """The marker's delete goes on while the journal is saved; its failure is the end_job
    stage's, before anything is published, and rolls nothing back: the job's commit is
    left under way (its journal saved) and a retried commit_job() finishes it."""
    committer = committer_via(faults_front, bucket, client_attempts=2, retry_policy=FAST)
    messages = run_job(committer)
    faults_front.add_rule("DeleteObject", "503", key=r"/_magicfs_job\.json$")
    with pytest.raises(JobCommitError, match="failed in stage end_job") as failure:
        committer.commit_job(messages)
    assert failure.value.recoverable and "run commit_job() again" in str(failure.value)
    assert f"from any process magicfs jobs recover --job {committer.job_id} " in str(failure.value)
    assert "CompleteMultipartUpload" not in faults_front.stats()  # nothing published
    assert published(s3_client, bucket) == {}
    tree = {k.rsplit("/", 1)[-1] for k in object_keys(s3_client, bucket) if "__magic_job-" in k}
    assert {"_magicfs_job.json", "_magicfs_commit.json"} <= tree
    faults_front.clear()
    again = committer_via(faults_front, bucket, job_id=committer.job_id)
    assert again.job_state() == "committing"
    assert again.commit_job().files == 20
    assert published(s3_client, bucket) == ALL
    assert_nothing_left(s3_client, bucket)


def test_clean_up_that_cannot_delete_the_job_tree(faults_front, s3_client, bucket):
    committer = committer_via(faults_front, bucket, client_attempts=2, retry_policy=FAST)
    messages = run_job(committer)
    faults_front.add_rule("DeleteObjects", "503")  # the clean-up's batched deletes
    summary = committer.commit_job(messages)
    # The output is complete and says so; the summary says what is left and what to run.
    assert published(s3_client, bucket) == ALL
    success = json.loads(s3_client.get_object(Bucket=bucket, Key="out/_SUCCESS")["Body"].read())
    assert success["success"] is True
    assert summary.cleanup_incomplete is not None
    assert f"magicfs jobs cleanup --job {committer.job_id}" in summary.cleanup_incomplete
    faults_front.clear()
    again = committer_via(faults_front, bucket, job_id=committer.job_id)
    assert again.commit_job().files == 20  # finishes the clean-up, publishes nothing again
    assert_nothing_left(s3_client, bucket)


# --- the store's calls outside job commit: retried by magicfs, not only by botocore --------


def _one_attempt_storage(front):
    """Storage options whose client makes one attempt per call (no botocore retries)."""
    return {
        **front.storage_options,
        "skip_instance_cache": True,
        "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}},
    }


def test_magicfs_jobs_listings_and_marker_read_are_retried(faults_front, s3_client, bucket):
    # `magicfs jobs` lists the job trees and task records and reads the job marker through
    # the store: an InternalError (which neither s3fs nor a one-attempt client retries)
    # is retried by the store's policy, and the job is found as it is.
    committer = committer_via(faults_front, bucket, retry_policy=FAST)
    run_job(committer)
    faults_front.add_rule("ListObjectsV2", "500", count=2)
    faults_front.add_rule("GetObject", "500", key=r"_magicfs_job\.json$", count=1)

    jobs = find_jobs(f"s3://{bucket}/out", storage_options=_one_attempt_storage(faults_front))

    assert [(j.job_id, j.state, j.task_records) for j in jobs] == [
        (committer.job_id, "active", len(TASKS))
    ]
    assert jobs[0].host  # the marker was read, after its failed GET
    stats = faults_front.stats()
    assert stats["ListObjectsV2"]["faults"] == {"500": 2}
    assert stats["GetObject"]["faults"] == {"500": 1}
    faults_front.clear()
    committer.abort_job()
    assert_nothing_left(s3_client, bucket)


def test_cli_record_reads_on_s3_are_retried(faults_front, s3_client, bucket):
    # `magicfs success` / `inspect` read a record with a HEAD and a GET, both retried.
    committer = committer_via(faults_front, bucket, retry_policy=FAST)
    committer.commit_job(run_job(committer))
    fs = s3fs.S3FileSystem(**_one_attempt_storage(faults_front))
    faults_front.add_rule(["HeadObject", "GetObject"], "500", key=r"_SUCCESS$", count=2)

    data = read_limited(fs, f"{bucket}/out/_SUCCESS", 1 << 20, f"s3://{bucket}/out/_SUCCESS")

    assert data == s3_client.get_object(Bucket=bucket, Key="out/_SUCCESS")["Body"].read()
    assert len(json.loads(data)["filenames"]) == len(ALL)
    assert sum(s["faults"].get("500", 0) for s in faults_front.stats().values()) == 2
