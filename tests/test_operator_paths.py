"""Operator paths (issue 53, item 5): what an operator types works the first time.

* Every ``magicfs jobs`` verb given a directory above the job's destination (the bucket's
  root included) acts on the job the index finds there, and refuses, changing nothing and
  naming each destination, a job id found at more than one (moto and a local disk).
* ``jobs recover --messages FILE`` takes the messages in the three shapes a driver saves
  them: one ``to_json()`` per line (the documented way), a JSON list of those strings and
  a JSON list of objects; each publishes exactly the attempt named.
* A multipart upload another tool started under the destination that a job's clean-up
  aborts is logged at WARNING with its key, upload id and initiation time, and counted
  (``JobSummary.foreign_uploads_aborted``, the CLI's line and JSON); the job's own uploads
  are not counted, and an upload pending before the job, or any other writer's upload
  with ``intent_markers="always"``, is left alone (moto and Ceph RGW: the listing's
  initiation times are the store's own).

The operator's commands run as operators run them (``python -m magicfs``, a process that
did not set the job up), checked by exit code, output and what the store holds.
"""

from __future__ import annotations

import json
import logging
import pathlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import data_files, object_keys, pending_uploads
from helpers.cli import CliResult, run_cli

import magicfs
from magicfs.protocol.attempts import TaskCommitMessage
from magicfs.task_files import TASK_FILES


@dataclass
class Place:
    """A store under test: the URL of its root, its filesystem, how to run the CLI on it
    and how to list every file it holds (bucket-relative)."""

    root: str
    fs: Any
    cli: Callable[..., CliResult]
    files: Callable[[], list[str]]

    def url(self, key: str) -> str:
        return f"{self.root}/{key}"

    def committer(self, key: str, **options: Any) -> magicfs.OutputCommitter:
        return magicfs.committer_for(self.url(key), fs=self.fs, **options)


@pytest.fixture(params=["s3", "local"])
def place(request, tmp_path) -> Place:
    if request.param == "local":
        root = tmp_path / "data"
        root.mkdir()

        def local_files() -> list[str]:
            files = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
            return sorted(data_files(files))

        fs = magicfs.committer_for(f"file://{root}/x").store_fs
        return Place(f"file://{root}", fs, run_cli, local_files)
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("bucket")
    client = request.getfixturevalue("s3_client")
    fs = request.getfixturevalue("s3")
    return Place(
        f"s3://{bucket}", fs, moto_cli(server), lambda: data_files(object_keys(client, bucket))
    )


def moto_cli(server) -> Callable[..., CliResult]:
    """``magicfs ARGS --endpoint-url <moto>``; credentials from the environment."""
    keys = {
        "AWS_ACCESS_KEY_ID": server.storage_options["key"],
        "AWS_SECRET_ACCESS_KEY": server.storage_options["secret"],
    }

    def run(*args: str) -> CliResult:
        return run_cli(*args, "--endpoint-url", server.endpoint_url, env=keys)

    return run


def one_task(committer: magicfs.OutputCommitter, index: int, name: str) -> TaskCommitMessage:
    """Commit task ``index`` writing ``name``; returns its message."""
    task = committer.task_attempt(index)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path(name), f"{committer.job_id} {name}\n".encode())
    return committer.commit_task(task)


def active_job(place: Place, key: str, job_id: str | None = None) -> magicfs.OutputCommitter:
    """A job at ``key`` whose driver stopped after committing one task."""
    committer = place.committer(key, job_id=job_id or f"op-{uuid.uuid4().hex[:8]}")
    committer.setup_job()
    one_task(committer, 0, "part-0.csv")
    return committer


# --- every verb from an ancestor ----------------------------------------------------------------


def test_every_verb_from_an_ancestor_acts_on_the_job_the_index_finds(place):
    root = place.root
    # recover: refused without a choice (naming the job's own destination), then done
    deep = active_job(place, "deep/out")
    before = place.files()
    refused = place.cli("jobs", "recover", "--job", deep.job_id, root + "/")
    assert refused.code == 1
    assert (
        f"magicfs jobs recover --all-committed-tasks --job {deep.job_id} {deep.url}"
        in refused.stderr
    )
    assert place.files() == before
    recovered = place.cli("jobs", "recover", "--all-committed-tasks", "--job", deep.job_id, root)
    assert recovered.code == 0, recovered.output
    assert recovered.stdout.startswith(f"job {deep.job_id} at {deep.url}: committed 1 file")
    assert place.files() == ["deep/out/_SUCCESS", "deep/out/part-0.csv"]

    # rollback from the bucket's root, with and without its trailing "/"
    for given in (root + "/", root):
        nested = active_job(place, "a/b/c/out")
        rolled = place.cli("jobs", "rollback", "--json", "--job", nested.job_id, given)
        assert rolled.code == 0, rolled.output
        document = rolled.json()
        assert (document["destination"], document["stateBefore"]) == (nested.url, "active")
        assert place.files() == ["deep/out/_SUCCESS", "deep/out/part-0.csv"]

    # cleanup from a directory between the root and the destination
    left = place.committer("x/y/out", job_id="left-cleanup", cleanup="off")
    left.setup_job()
    left.commit_job([one_task(left, 0, "part-0.csv")])
    assert any("left-cleanup" in f for f in place.files())  # its tree is still there
    cleaned = place.cli("jobs", "cleanup", "--job", "left-cleanup", place.url("x"))
    assert cleaned.code == 0, cleaned.output
    assert f"job left-cleanup at {left.url}: cleaned up (it was committed)" in cleaned.stdout
    assert place.files() == [
        "deep/out/_SUCCESS",
        "deep/out/part-0.csv",
        "x/y/out/_SUCCESS",
        "x/y/out/part-0.csv",
    ]
    # "x/y/ou" is not above "x/y/out": a prefix matches whole path elements
    other = active_job(place, "x/y/out", job_id="whole-elements")
    partial = place.cli("jobs", "rollback", "--job", "whole-elements", place.url("x/y/ou"))
    assert partial.code == 1
    assert "no job whole-elements at" in partial.stderr
    other.abort_job()


def test_an_id_found_at_two_destinations_below_is_refused_naming_both(place):
    twins = [active_job(place, key, job_id="twin-job") for key in ("p/out", "q/out")]
    before = place.files()
    for verb in ("recover", "rollback", "cleanup"):
        refused = place.cli("jobs", verb, "--job", "twin-job", place.root)
        assert refused.code == 1, refused.output
        assert f"job twin-job: found at 2 destinations below {place.root}: " in refused.stderr
        for twin in twins:
            assert f"{twin.url} (" in refused.stderr
        assert "Nothing was changed" in refused.stderr
        assert place.files() == before
    # one level down, the id is no longer ambiguous: only p's job is rolled back
    rolled = place.cli("jobs", "rollback", "--job", "twin-job", place.url("p"))
    assert rolled.code == 0, rolled.output
    assert [f for f in place.files() if f.startswith("p/")] == []
    assert [f for f in place.files() if f.startswith("q/")] == [
        f for f in before if f.startswith("q/")
    ]
    twins[1].abort_job()


# --- --messages: the three shapes ---------------------------------------------------------------


def _lines(messages: list[TaskCommitMessage], path: pathlib.Path) -> None:
    """The documented way (docs/recovery.md): append each message as its task commits."""
    for message in messages:
        with path.open("a", encoding="utf-8") as saved:
            saved.write(message.to_json() + "\n")


def _strings(messages: list[TaskCommitMessage], path: pathlib.Path) -> None:
    path.write_text(json.dumps([m.to_json() for m in messages]))


def _objects(messages: list[TaskCommitMessage], path: pathlib.Path) -> None:
    path.write_text(json.dumps([json.loads(m.to_json()) for m in messages]))


@pytest.mark.parametrize("save", [_lines, _strings, _objects])
def test_recover_takes_messages_in_each_shape_a_driver_saves(
    save, s3_server, s3, s3_client, bucket, tmp_path
):
    cli = moto_cli(s3_server)
    place = Place(f"s3://{bucket}", s3, cli, lambda: data_files(object_keys(s3_client, bucket)))
    job = place.committer("out")
    job.setup_job()
    first = one_task(job, 0, "part-0.csv")
    one_task(job, 1, "part-1.csv")  # committed, but not among the messages given
    saved = tmp_path / "messages.saved"
    save([first], saved)
    recovered = place.cli("jobs", "recover", "--messages", str(saved), "--job", job.job_id, job.url)
    assert recovered.code == 0, recovered.output
    assert "committed 1 file" in recovered.stdout
    assert "exactly the attempts the messages name" in recovered.stdout
    assert place.files() == ["out/_SUCCESS", "out/part-0.csv"]
    body = s3_client.get_object(Bucket=bucket, Key="out/part-0.csv")["Body"].read()
    assert body == f"{job.job_id} part-0.csv\n".encode()
    assert pending_uploads(s3_client, bucket) == []  # task 1's upload aborted


def test_a_list_of_strings_that_are_not_messages_is_refused_naming_the_entry(
    s3_server, s3, s3_client, bucket, tmp_path
):
    job = magicfs.committer_for(f"s3://{bucket}/out", fs=s3)
    job.setup_job()
    good = one_task(job, 0, "part-0.csv")
    before = object_keys(s3_client, bucket)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([good.to_json(), "{not json"]))
    refused = moto_cli(s3_server)(
        "jobs", "recover", "--messages", str(wrong), "--job", job.job_id, job.url
    )
    assert refused.code == 1
    assert f"--messages {wrong}: entry 1: a string that is not a message's JSON" in refused.stderr
    assert object_keys(s3_client, bucket) == before
    job.abort_job()


# --- uploads the job did not start --------------------------------------------------------------


@dataclass
class S3Place:
    client: Any
    fs: Any
    bucket: str


@pytest.fixture(params=["moto", "rgw"])
def s3_place(request) -> S3Place:
    if request.param == "moto":
        names = ("s3_client", "s3", "bucket")
    else:
        names = ("rgw_client", "rgw_s3", "rgw_bucket")
    client, fs, bucket = (request.getfixturevalue(name) for name in names)
    return S3Place(client, fs, bucket)


def initiated(client, bucket: str, upload_id: str) -> str:
    """The upload's initiation time as the store lists it (ISO 8601)."""
    for upload in client.list_multipart_uploads(Bucket=bucket)["Uploads"]:
        if upload["UploadId"] == upload_id:
            return upload["Initiated"].isoformat()
    raise AssertionError(f"upload {upload_id} is not pending")


def foreign_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "magicfs.s3.sweep"
        and r.levelno == logging.WARNING
        and "did not start" in r.getMessage()
    ]


@pytest.mark.parametrize("markers", ["auto", "always"])
def test_an_upload_the_job_did_not_start_is_logged_and_counted(s3_place, markers, caplog):
    client, bucket = s3_place.client, s3_place.bucket
    earlier = client.create_multipart_upload(Bucket=bucket, Key="out/earlier.bin")["UploadId"]
    job = magicfs.committer_for(f"s3://{bucket}/out", fs=s3_place.fs, intent_markers=markers)
    job.setup_job()
    tool = client.create_multipart_upload(Bucket=bucket, Key="out/tool/other.bin")["UploadId"]
    when = initiated(client, bucket, tool)
    message = one_task(job, 0, "part-0.csv")
    failed = job.task_attempt(1)  # an attempt of the job's own that never commits
    job.setup_task(failed)
    job.fs.pipe_file(failed.path("part-1.csv"), b"never published\n")
    assert TASK_FILES.settle(job.job_id) == []  # its close (in the background) is done
    pending = {u["Key"] for u in pending_uploads(client, bucket)}
    assert pending == {"out/earlier.bin", "out/tool/other.bin", "out/part-0.csv", "out/part-1.csv"}
    with caplog.at_level(logging.WARNING, logger="magicfs"):
        summary = job.commit_job([message])
    left = {u["UploadId"] for u in pending_uploads(client, bucket)}
    if markers == "always":  # the job takes only uploads on the keys it writes
        assert left == {earlier, tool}
        assert summary.foreign_uploads_aborted == 0 and foreign_warnings(caplog) == []
    else:
        assert left == {earlier}  # pending before the job: in its snapshot, never taken
        assert summary.foreign_uploads_aborted == 1  # the failed attempt's is not counted
        (warning,) = foreign_warnings(caplog)
        assert f"job {job.job_id}: aborted multipart upload {tool} of " in warning
        assert f"s3://{bucket}/out/tool/other.bin (initiated {when})" in warning
    assert data_files(object_keys(client, bucket, "out/")) == ["out/_SUCCESS", "out/part-0.csv"]
    for upload_id, key in ((earlier, "out/earlier.bin"), (tool, "out/tool/other.bin")):
        if upload_id in left:
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)


def test_background_clean_up_counts_once_it_ends(s3_client, s3, bucket):
    job = magicfs.committer_for(f"s3://{bucket}/out", fs=s3, cleanup="background")
    job.setup_job()
    tool = s3_client.create_multipart_upload(Bucket=bucket, Key="out/tool.bin")["UploadId"]
    summary = job.commit_job([one_task(job, 0, "part-0.csv")])
    assert job.wait_cleanup() is None
    assert summary.foreign_uploads_aborted == 1
    assert tool not in {u["UploadId"] for u in pending_uploads(s3_client, bucket)}


def test_the_cli_names_and_counts_the_uploads_a_rollback_took(s3_server, s3_client, s3, bucket):
    job = magicfs.committer_for(f"s3://{bucket}/out", fs=s3)
    job.setup_job()
    one_task(job, 0, "part-0.csv")
    tool = s3_client.create_multipart_upload(Bucket=bucket, Key="out/tool.bin")["UploadId"]
    when = initiated(s3_client, bucket, tool)
    rolled = moto_cli(s3_server)("jobs", "rollback", "--job", job.job_id, f"s3://{bucket}")
    assert rolled.code == 0, rolled.output
    assert "also aborted 1 multipart upload under the destination that the job did not start" in (
        rolled.stdout
    )
    assert " WARNING magicfs.s3.sweep: " in rolled.stderr
    assert f"aborted multipart upload {tool} of s3://{bucket}/out/tool.bin (initiated {when})" in (
        rolled.stderr
    )
    assert pending_uploads(s3_client, bucket) == []
    assert data_files(object_keys(s3_client, bucket)) == []
    job.abort_job()  # idempotent; this process forgets the job
