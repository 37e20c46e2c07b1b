"""Checksums of deferred files, end to end (issue 25, item 3): :mod:`magicfs.stores.s3.checksums`.

What the writer sends and what job commit sends are observed on the requests themselves
(botocore hooks); what the store made of them on the store (moto computes a multipart
object's composite checksum itself, and HEAD with ``ChecksumMode=ENABLED`` reports it).
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET

import botocore.compat
import pytest
from helpers import pending_uploads, visible_keys
from helpers.reference_documents import PENDING

from magicfs import MagicCommitter, MagicFileSystem
from magicfs.errors import InvalidCommitData, JobCommitError
from magicfs.records import SinglePendingCommit
from magicfs.stores.s3 import checksums

MiB = 1 << 20
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class Requests:
    """The headers (and completion bodies) of every request an s3fs client signs."""

    def __init__(self, fs) -> None:
        self.sent: list[tuple[str, dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        fs.s3.meta.events.register("before-sign.s3", self._record)

    def _record(self, request, operation_name, **_) -> None:
        body = request.body if isinstance(request.body, bytes) else b""
        keep = body if operation_name == "CompleteMultipartUpload" else b""
        with self._lock:
            self.sent.append((operation_name, dict(request.headers.items()), keep))

    def of(self, operation: str) -> list[tuple[dict[str, str], bytes]]:
        return [(headers, body) for op, headers, body in self.sent if op == operation]


@pytest.fixture
def make_committer(bucket, s3_options):
    def make(**kwargs) -> MagicCommitter:
        options = {**s3_options, "skip_instance_cache": True}
        return MagicCommitter(f"s3://{bucket}/out", storage_options=options, **kwargs)

    return make


def write_task(committer, index: int, files: dict[str, bytes]):
    task = committer.task_attempt(index)
    committer.setup_task(task)
    for name, data in files.items():
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(data)
    return committer.commit_task(task)


def commits_of(committer, message) -> list[dict]:
    return json.loads(committer.store_fs.cat_file(message.record))["commits"]


def completion_parts(body: bytes) -> list[dict[str, str]]:
    parts = ET.fromstring(body).findall(f"{NS}Part")
    return [{child.tag.removeprefix(NS): child.text or "" for child in part} for part in parts]


def test_parts_carry_checksums_the_record_keeps_and_the_completion_sends(
    make_committer, s3_client, bucket
):
    committer = make_committer()
    sent = Requests(committer.store_fs)
    committer.setup_job()
    data = bytes(range(256)) * (48 * 1024) + b"tail"  # 12 MiB and 4 bytes: two 8 MiB parts
    message = write_task(committer, 0, {"big.bin": data})
    (commit,) = commits_of(committer, message)
    extra = commit["extraData"]
    parts = extra["magicfs.checksum.parts"].split(",")

    assert extra["magicfs.checksum.algorithm"] == "CRC32"
    assert parts == [
        checksums.compute("CRC32", data[: 8 * MiB]),
        checksums.compute("CRC32", data[8 * MiB :]),
    ]
    assert len(commit["etags"]) == 2
    (create,) = sent.of("CreateMultipartUpload")
    assert create[0]["x-amz-checksum-algorithm"] == "CRC32"
    assert [headers["x-amz-checksum-crc32"] for headers, _ in sent.of("UploadPart")] == parts

    committer.commit_job([message])
    (completion,) = sent.of("CompleteMultipartUpload")
    assert [p["ChecksumCRC32"] for p in completion_parts(completion[1])] == parts
    assert s3_client.get_object(Bucket=bucket, Key="out/big.bin")["Body"].read() == data
    # The store's own checksum of the object it assembled is the one the record predicted.
    head = s3_client.head_object(Bucket=bucket, Key="out/big.bin", ChecksumMode="ENABLED")
    assert extra["magicfs.checksum.object"] == head["ChecksumCRC32"].split("-")[0] + "-2"


def test_a_file_of_three_5_mib_parts_round_trips(make_committer, s3_client, bucket):
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    data = b"".join(bytes([n]) * (5 * MiB) for n in range(3))
    writer = MagicFileSystem(fs=committer.store_fs, part_size=5 * MiB)
    with writer.open(task.path("three.bin"), "wb") as f:
        f.write(data)
    message = committer.commit_task(task)
    (commit,) = commits_of(committer, message)
    assert commit["extraData"]["magicfs.checksum.parts"].split(",") == [
        checksums.compute("CRC32", bytes([n]) * (5 * MiB)) for n in range(3)
    ]
    committer.commit_job([message])
    assert s3_client.get_object(Bucket=bucket, Key="out/three.bin")["Body"].read() == data
    head = s3_client.head_object(Bucket=bucket, Key="out/three.bin", ChecksumMode="ENABLED")
    recorded = commit["extraData"]["magicfs.checksum.object"]
    assert recorded == head["ChecksumCRC32"].split("-")[0] + "-3"
    assert pending_uploads(s3_client, bucket) == []


@pytest.mark.parametrize(
    "how, problem",
    [
        ("change", "do not add up to the object's"),
        ("drop", "lists 0 checksums for 1 parts"),
        ("garble", "the checksum of part 1 is not a base64 CRC32"),
    ],
)
def test_a_tampered_part_checksum_fails_the_job_naming_the_file(
    make_committer, s3_client, bucket, how, problem
):
    committer = make_committer()
    committer.setup_job()
    tampered = write_task(committer, 0, {"a.csv": b"a" * 100})
    intact = write_task(committer, 1, {"b.csv": b"b"})
    document = json.loads(committer.store_fs.cat_file(tampered.record))
    extra = document["commits"][0]["extraData"]
    extra["magicfs.checksum.parts"] = {
        "change": checksums.compute("CRC32", b"something else"),
        "drop": "",
        "garble": "not base64!",
    }[how]
    committer.store_fs.pipe_file(tampered.record, json.dumps(document).encode())

    with pytest.raises(JobCommitError) as failed:
        committer.commit_job([tampered, intact])
    error = failed.value
    assert isinstance(error.__cause__, InvalidCommitData) and error.stage == "validate"
    message = str(error)
    assert tampered.record.rsplit("/", 1)[1] in message
    assert "commits[0].extraData.magicfs.checksum.parts" in message and problem in message
    assert "nothing of it is visible" in message
    assert visible_keys(s3_client, bucket) == []
    assert pending_uploads(s3_client, bucket) == []


def test_without_checksums_nothing_is_declared_or_recorded(make_committer, s3_client, bucket):
    committer = make_committer(checksum=None)
    sent = Requests(committer.store_fs)
    committer.setup_job()
    message = write_task(committer, 0, {"a.csv": b"a"})
    (commit,) = commits_of(committer, message)
    assert not any(key.startswith("magicfs.checksum") for key in commit["extraData"])
    (create,) = sent.of("CreateMultipartUpload")
    assert "x-amz-checksum-algorithm" not in create[0]
    committer.commit_job([message])
    (completion,) = sent.of("CompleteMultipartUpload")
    assert completion_parts(completion[1]) == [{"PartNumber": "1", "ETag": commit["etags"][0]}]
    assert s3_client.get_object(Bucket=bucket, Key="out/a.csv")["Body"].read() == b"a"
    assert committer.storage_options["magic"]["checksum"] is None  # remote writers too


def test_an_unknown_checksum_is_refused_at_once(bucket, s3_options):
    says = "checksum='MD5' is not an S3 checksum algorithm: use one of CRC32, CRC32C"
    with pytest.raises(ValueError, match=re.escape(says)):
        MagicCommitter(f"s3://{bucket}/out", storage_options=s3_options, checksum="MD5")


def test_crc32c_needs_botocores_crt_extension(bucket, s3_options):
    if botocore.compat.HAS_CRT:  # installed: accepted
        committer = MagicCommitter(
            f"s3://{bucket}/out", storage_options=s3_options, checksum="crc32c"
        )
        assert committer.checksum == "CRC32C"
        return
    says = "checksum='crc32c' needs botocore's CRT extension: pip install 'botocore[crt]'"
    with pytest.raises(ValueError, match=re.escape(says)):
        MagicCommitter(f"s3://{bucket}/out", storage_options=s3_options, checksum="crc32c")


def test_the_record_keeps_hadoops_form(make_committer, bucket):
    """Hadoop's SinglePendingCommit (hadoop-aws, not in pyspark's jars) reads ``extraData``
    as a map of strings: the record keeps exactly the reference document's fields."""
    committer = make_committer()
    committer.setup_job()
    message = write_task(committer, 0, {"a.csv": b"a"})
    (commit,) = commits_of(committer, message)
    assert sorted(commit) == sorted(json.loads(PENDING))
    assert all(isinstance(v, str) for v in commit["extraData"].values())
    assert commit["version"] == 2
    # And our reader, which applies Hadoop's field rules, loads it with its checksums.
    loaded = SinglePendingCommit.from_json(json.dumps(commit))
    assert checksums.recorded(loaded) == (
        "CRC32",
        commit["extraData"]["magicfs.checksum.parts"].split(","),
    )
    committer.abort_job()


def test_a_reply_reporting_another_object_checksum_is_refused():
    commit = SinglePendingCommit(
        uri="s3://b/out/__magic_job-1/x",
        upload_id="u",
        bucket="b",
        destination_key="out/x",
        etags=["e"],
        length=1,
        extra_data=checksums.record_fields("CRC32", [checksums.compute("CRC32", b"x")]),
    )
    checksums.check_reply(commit, {"ChecksumCRC32": commit.extra_data["magicfs.checksum.object"]})
    checksums.check_reply(commit, {})  # a store that reports none (moto, RGW 16.2)
    with pytest.raises(OSError, match="s3://b/out/x: the store assembled an object whose CRC32"):
        checksums.check_reply(commit, {"ChecksumCRC32": "AAAAAA==-1"})
