"""Store failures that name the store's answer, and failures that end in bounded time.

Every error here is provoked for real: a completion with a wrong part ETag (the store
answers ``InvalidPart``), a port nothing listens on, a bucket that does not exist, a
store that refuses completions and aborts (the fault front, ``helpers.fault_front``).
Each test asserts what the user sees: the message (operation, ``s3://bucket/key``, HTTP
status, error code, endpoint, the uploads left and the command to release them), the
exception classes callers rely on, the exit codes of ``magicfs``, and that nothing is
left visible or parked.
"""

from __future__ import annotations

import pickle
import re
import select
import shlex
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import s3fs
from botocore.exceptions import ProfileNotFound
from fsspec.asyn import sync
from helpers import object_keys, pending_uploads, tamper_record, visible_keys
from helpers.cli import run_cli
from helpers.polling import wait_until

import magicfs
from magicfs.errors import (
    JobCommitError,
    MissingBucketError,
    StoreNotFoundError,
    StoreUnreachableError,
    UploadsLeftError,
)
from magicfs.integrations.local_server import s3_storage_options
from magicfs.stores.s3.retry import RetryPolicy, error_code
from magicfs.stores.s3.store import S3Store

#: The promise for an endpoint that is down: the job fails within this many seconds.
UNREACHABLE_BOUND = 10.0
WRONG_ETAG = '"0123456789abcdef0123456789abcdef"'


def closed_port() -> int:
    """A loopback port nothing listens on (bound, taken, closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unreachable_options(port: int) -> dict:
    options = s3_storage_options(f"http://127.0.0.1:{port}", region="us-east-1")
    return {**options, "skip_instance_cache": True}


def write_files(committer, count: int = 3) -> list:
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for n in range(count):
        committer.fs.pipe_file(task.path(f"f{n}.csv"), f"{n}\n".encode())
    return [committer.commit_task(task)]


def spoil_etag(committer, message, index: int = 0):
    """Give one commit of the task's record a wrong part ETag, as saved and as its message
    carries it; returns its destination key and the message the job is given."""
    spoiled: dict = {}

    def change(document: dict) -> None:
        commit = document["commits"][index]
        commit["etags"] = [WRONG_ETAG]
        spoiled["key"] = commit["destinationKey"]

    message = tamper_record(committer.store_fs, message, change)
    return spoiled["key"], message


def assert_rolled_back(client, bucket: str) -> None:
    assert visible_keys(client, bucket) == []
    assert pending_uploads(client, bucket) == []
    assert [k for k in object_keys(client, bucket) if "__magic_job-" in k] == []


# --- a completion the store refuses: InvalidPart --------------------------------------------


def refused_completion(storage_options: dict, client, bucket: str) -> None:
    committer = magicfs.committer_for(
        f"s3://{bucket}/out", storage_options={**storage_options, "skip_instance_cache": True}
    )
    messages = write_files(committer, count=1)
    key, messages[0] = spoil_etag(committer, messages[0])
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    message = str(failure.value)
    assert re.search(
        rf"CompleteMultipartUpload s3://{bucket}/{re.escape(key)} \(upload [^)]+\): "
        r"HTTP 400 InvalidPart",
        message,
    ), message
    assert "None" not in message.replace("NoneMatch", "")  # not s3fs's "[Errno 22] None"
    assert "nothing of it is visible" in message and not failure.value.recoverable
    cause = failure.value.__cause__
    assert error_code(failure.value) == "InvalidPart"  # found through the cause chain
    assert isinstance(cause, OSError)
    assert_rolled_back(client, bucket)


def test_refused_completion_names_operation_object_status_and_code(s3_options, s3_client, bucket):
    refused_completion(s3_options, s3_client, bucket)


def test_refused_completion_on_ceph_rgw(rgw_server, rgw_client, rgw_bucket):
    # RGW's InvalidPart carries a code and no message: s3fs alone says "[Errno 22] None".
    refused_completion(rgw_server.storage_options, rgw_client, rgw_bucket)


def test_store_errors_keep_their_classes_and_codes(s3, bucket):
    store = S3Store(s3)
    with pytest.raises(StoreNotFoundError) as missing:
        store.run(
            store.acall("abort_multipart_upload", Bucket=bucket, Key="k", UploadId="no-such-upload")
        )
    assert isinstance(missing.value, FileNotFoundError)
    assert error_code(missing.value) == "NoSuchUpload" and missing.value.code == "NoSuchUpload"
    assert missing.value.status == 404
    assert str(missing.value).startswith(
        f"AbortMultipartUpload s3://{bucket}/k (upload no-such-upload): HTTP 404 NoSuchUpload"
    )
    assert store.read(f"{bucket}/absent.json", 100) is None  # NoSuchKey: nothing there
    # Errors cross process boundaries (Spark, Dask, Ray): class, message and fields survive.
    copy = pickle.loads(pickle.dumps(missing.value))
    assert type(copy) is StoreNotFoundError and str(copy) == str(missing.value)
    assert (copy.code, copy.status, copy.operation) == ("NoSuchUpload", 404, "AbortMultipartUpload")


# --- a bucket that does not exist -----------------------------------------------------------


def test_missing_bucket_names_the_bucket_and_the_key(s3_options):
    committer = magicfs.committer_for(
        "s3://no-such-bucket-b/out", storage_options={**s3_options, "skip_instance_cache": True}
    )
    with pytest.raises(MissingBucketError) as failure:
        committer.setup_job()
    message = str(failure.value)
    assert "HTTP 404 NoSuchBucket: bucket no-such-bucket-b does not exist" in message
    # a fresh job's first request deletes the destination's old _SUCCESS: named in full
    assert message.startswith("DeleteObjects s3://no-such-bucket-b/out/_SUCCESS: ")
    assert not isinstance(failure.value, FileNotFoundError)  # never "nothing there yet"
    assert error_code(failure.value) == "NoSuchBucket"


def test_a_failed_batch_delete_names_its_first_key_and_how_many_more(s3):
    store = S3Store(s3)
    with pytest.raises(MissingBucketError) as failure:
        store.run(store.adelete_objects("no-such-bucket-d", ["out/a", "out/b", "out/c"]))
    assert str(failure.value).startswith(
        "DeleteObjects s3://no-such-bucket-d/out/a (and 2 more keys): HTTP 404 NoSuchBucket"
    )


def test_write_job_to_a_missing_bucket(s3_options):
    with (
        pytest.raises(MissingBucketError, match="bucket no-such-bucket-c does not exist"),
        magicfs.write_job("s3://no-such-bucket-c/sales", storage_options=s3_options),
    ):
        pass


# --- an endpoint that refuses connections --------------------------------------------------


def test_closed_port_fails_setup_fast_naming_the_endpoint():
    port = closed_port()
    committer = magicfs.committer_for("s3://bkt/out", storage_options=unreachable_options(port))
    start = time.monotonic()
    with pytest.raises(StoreUnreachableError) as failure:
        committer.setup_job()
    assert time.monotonic() - start < UNREACHABLE_BOUND
    message = str(failure.value)
    assert f"no answer from the store at http://127.0.0.1:{port}: connection refused" in message
    assert message.startswith("DeleteObjects s3://bkt/out/_SUCCESS: ")
    assert isinstance(failure.value, ConnectionError) and failure.value.attempts == 1


def test_closed_port_fails_write_job_fast():
    port = closed_port()
    start = time.monotonic()
    with (
        pytest.raises(StoreUnreachableError, match=rf"http://127\.0\.0\.1:{port}"),
        magicfs.write_job("s3://bkt/sales", storage_options=unreachable_options(port)),
    ):
        pass
    assert time.monotonic() - start < UNREACHABLE_BOUND


def established(sockets: list[socket.socket]) -> bool:
    """Has one of these non-blocking sockets finished connecting (writable, no error)?"""
    _, writable, _ = select.select([], sockets, [], 0)
    return any(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for s in writable)


def test_endpoint_that_does_not_answer_fails_setup_fast():
    # A listening socket whose accept queue is full: Linux drops further SYNs, so a
    # client's connection attempt gets no answer at all (a firewalled or dead host).
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        # Full once a filler's connection is established (listen(0) queues one).
        wait_until(lambda: established(fillers), "a filler's connection fills the queue")
        try:
            committer = magicfs.committer_for(
                "s3://bkt/out", storage_options=unreachable_options(port)
            )
            start = time.monotonic()
            with pytest.raises(StoreUnreachableError) as failure:
                committer.setup_job()
            assert time.monotonic() - start < UNREACHABLE_BOUND
        finally:
            for filler in fillers:
                filler.close()
    message = str(failure.value)
    assert f"no answer from the store at http://127.0.0.1:{port}: connection timed out" in (message)
    assert failure.value.attempts == 1  # no magicfs retries around it


def test_user_client_settings_are_kept(s3_options):
    options = {
        **s3_options,
        "config_kwargs": {"connect_timeout": 7, "retries": {"max_attempts": 1}},
    }
    committer = magicfs.committer_for("s3://bkt/out", storage_options=options)
    config = committer.store_fs.config_kwargs
    assert config["connect_timeout"] == 7 and config["retries"] == {"max_attempts": 1}
    default = magicfs.committer_for("s3://bkt/out", storage_options=s3_options)
    assert default.store_fs.config_kwargs["connect_timeout"] == 1.5


def test_the_store_client_pool_follows_the_committers_threads(s3_options):
    """The constructor builds the store's filesystem from its arguments: the pool size
    comes from ``threads`` and the caller's options are not changed by magicfs's
    defaults."""
    options = {k: v for k, v in s3_options.items() if k != "config_kwargs"}
    committer = magicfs.committer_for("s3://bkt/out", storage_options=options, threads=32)
    assert committer.store_fs.config_kwargs["max_pool_connections"] == 64
    assert committer.options.threads == 32
    assert "config_kwargs" not in committer.options.store_options
    assert "config_kwargs" not in options


def test_committers_share_one_copy_of_botocores_models_and_keep_a_session_of_their_own(
    s3_options, s3_client, bucket
):
    """Each job's filesystem gets the session s3fs would make (its own credentials and
    settings), reading botocore's JSON data through one loader per process."""
    options = {**s3_options, "skip_instance_cache": True}
    jobs = [magicfs.committer_for(f"s3://{bucket}/out{n}", storage_options=options) for n in (0, 1)]
    for n, job in enumerate(jobs):
        job.setup_job()
        task = job.task_attempt(0)
        job.setup_task(task)
        job.fs.pipe_file(task.path("part-0"), b"bytes %d" % n)
        job.commit_job([job.commit_task(task)])
    first, second = (job.store_fs.session for job in jobs)
    assert jobs[0].store_fs is not jobs[1].store_fs and first is not second
    assert first.get_component("data_loader") is second.get_component("data_loader")
    for n in (0, 1):
        body = s3_client.get_object(Bucket=bucket, Key=f"out{n}/part-0")["Body"].read()
        assert body == b"bytes %d" % n


def test_a_callers_own_session_and_profile_are_what_the_job_uses(
    s3_server, s3_client, bucket, tmp_path, monkeypatch
):
    from aiobotocore.session import AioSession

    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[magicfs-test]\naws_access_key_id = profile-key\naws_secret_access_key = s\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))  # none
    endpoint = {"client_kwargs": s3_server.storage_options["client_kwargs"]}
    by_profile = magicfs.committer_for(
        f"s3://{bucket}/out", storage_options={**endpoint, "profile": "magicfs-test"}
    )
    by_profile.setup_job()
    fs = by_profile.store_fs
    assert sync(fs.loop, fs.session.get_credentials).access_key == "profile-key"
    by_profile.abort_job()

    mine = AioSession()
    fs = s3fs.S3FileSystem(skip_instance_cache=True, session=mine, **s3_server.storage_options)
    given = magicfs.committer_for(f"s3://{bucket}/out", fs=fs)
    given.setup_job()
    assert given.store_fs.session is mine
    given.abort_job()

    missing = magicfs.committer_for(
        f"s3://{bucket}/out", storage_options={**endpoint, "profile": "no-such-profile"}
    )
    with pytest.raises(ProfileNotFound, match="no-such-profile"):  # as s3fs raises it
        missing.setup_job()
    assert s3_client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0


# --- the CLI: a missing bucket and a closed port exit non-zero ------------------------------


@pytest.mark.parametrize("command", [("jobs", "list"), ("uploads", "list")])
def test_cli_on_a_missing_bucket_exits_1(s3_server, command):
    store = ["--endpoint-url", s3_server.endpoint_url, "-o", "key=testing", "-o", "secret=testing"]
    result = run_cli(*command, *store, "s3://no-such-bucket-d/x")
    assert result.code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "no-such-bucket-d" in lines[0] and "no such bucket" in lines[0]


@pytest.mark.parametrize("command", [("jobs", "list"), ("uploads", "list")])
def test_cli_on_a_closed_port_exits_1(command):
    port = closed_port()
    store = ["--endpoint-url", f"http://127.0.0.1:{port}", "-o", "key=t1234", "-o", "secret=t5678"]
    start = time.monotonic()
    result = run_cli(*command, *store, "s3://bkt/x")
    assert time.monotonic() - start < UNREACHABLE_BOUND + 5  # plus the interpreter's start
    assert result.code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and f"http://127.0.0.1:{port}" in lines[0], result.stderr
    assert "t5678" not in result.output


# --- a store refusing every completion and every abort (moto and RGW, behind a front) ---------

FILES = 40


@dataclass
class Outage:
    """A store behind its fault front: the front, a client straight to the store, a bucket."""

    front: Any
    client: Any
    bucket: str

    def committer(self, policy: RetryPolicy):
        storage = {**self.front.storage_options, "skip_instance_cache": True}
        committer = magicfs.committer_for(
            f"s3://{self.bucket}/out", storage_options=storage, retry_policy=policy
        )
        committer.store_fs.retries = 1  # s3fs's own SlowDown retries: the policy's are enough
        return committer

    def cli(self, command: str):
        key, secret = self.front.credentials
        store = ["--endpoint-url", self.front.endpoint_url, "-o", f"key={key}"]
        return run_cli(*shlex.split(command)[1:], *store, "-o", f"secret={secret}")


@pytest.fixture(params=["s3", "rgw"])
def outage(request) -> Iterator[Outage]:
    rgw = request.param == "rgw"
    front = request.getfixturevalue("rgw_fault_front" if rgw else "fault_front")
    bucket = request.getfixturevalue("rgw_bucket" if rgw else "bucket")
    client = request.getfixturevalue("rgw_client" if rgw else "s3_client")
    front.clear()
    yield Outage(front, client, bucket)
    front.clear()


def test_refused_completions_and_aborts_end_within_the_budget(outage):
    committer = outage.committer(
        RetryPolicy(attempts=4, base_delay=0.05, max_delay=0.2, budget=2.0)
    )
    messages = write_files(committer, count=FILES)
    outage.front.add_rule(["CompleteMultipartUpload", "AbortMultipartUpload"], "503")
    start = time.monotonic()
    with pytest.raises(JobCommitError) as failure:
        committer.commit_job(messages)
    took = time.monotonic() - start
    assert took < 60, took
    message = str(failure.value)
    assert "failed in stage publish" in message and failure.value.recoverable
    assert "HTTP 503 SlowDown" in message
    # The roll-back's error names the uploads left parked and how to release them.
    match = re.search(r"could not abort (\d+) of (\d+) uploads, left parked: (s3://\S+)", message)
    assert match, message
    assert int(match.group(1)) == int(match.group(2)) == FILES
    assert match.group(3).startswith(f"s3://{outage.bucket}/out/f")
    command = f"magicfs uploads abort --force --job {committer.job_id} s3://{outage.bucket}/out"
    assert command in message
    assert len(pending_uploads(outage.client, outage.bucket)) == FILES
    aborts = outage.front.stats()["AbortMultipartUpload"]["requests"]
    assert aborts < FILES * 12  # not every abort waited out its own retries

    outage.front.clear()  # the store accepts aborts again; the operator runs the command
    result = outage.cli(command)
    assert result.code == 0, result.output
    assert f"Total: {FILES} uploads aborted" in result.stdout
    assert pending_uploads(outage.client, outage.bucket) == []
    assert visible_keys(outage.client, outage.bucket) == []


def test_abort_job_with_aborts_refused_lists_the_uploads_left(outage):
    committer = outage.committer(RetryPolicy(attempts=3, base_delay=0.05, max_delay=0.1))
    write_files(committer, count=FILES)
    outage.front.add_rule("AbortMultipartUpload", "500")
    with pytest.raises(UploadsLeftError) as failure:
        committer.abort_job()
    left = failure.value
    assert len(left.uploads) == FILES
    assert {key for _, key, _ in left.uploads} == {f"out/f{n}.csv" for n in range(FILES)}
    assert left.command == (
        f"magicfs uploads abort --force --job {committer.job_id} s3://{outage.bucket}/out"
    )
    assert "HTTP 500 InternalError" in str(left) and "were not waited for" in str(left)
    # One window of aborts was tried (each through its retries), not every upload.
    assert outage.front.stats()["AbortMultipartUpload"]["requests"] < FILES * 3 * 3
    assert len(pending_uploads(outage.client, outage.bucket)) == FILES

    outage.front.clear()
    committer.abort_job()  # the store is back: the roll-back finishes
    assert_rolled_back(outage.client, outage.bucket)


def test_the_registry_reads_an_error_the_way_its_store_does():
    """``registry.explain``: S3's reading (:mod:`magicfs.stores.s3.failures`) of its
    replies and of a connection never made; ``None`` for an error no store claims, so
    the CLI's messages above the stores need no store's module."""
    import botocore.exceptions

    from magicfs.stores.registry import explain, store_exceptions

    assert botocore.exceptions.BotoCoreError in store_exceptions()
    assert explain(FileNotFoundError(2, "no such file", "/tmp/x")) is None
    reply = botocore.exceptions.ClientError(
        {
            "Error": {"Code": "AccessDenied", "Message": "no"},
            "ResponseMetadata": {"HTTPStatusCode": 403},
        },
        "GetObject",
    )
    denied = PermissionError(13, "no")
    denied.__cause__ = reply
    failure = explain(denied)
    assert failure is not None and failure.answered and not failure.missing_bucket
    assert (failure.code, failure.status, failure.answer) == (
        "AccessDenied",
        403,
        "HTTP 403 AccessDenied: no",
    )
    unreachable = botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:9/bkt")
    failure = explain(unreachable)
    assert failure is not None and failure.not_connected and not failure.answered
    assert failure.answer.startswith("no answer from the store at http://127.0.0.1:9: ")
