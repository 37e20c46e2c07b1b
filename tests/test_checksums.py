"""Checksums of deferred files, end to end (issue 25, item 3): :mod:`magicfs.stores.s3.checksums`.

What the writer sends and what job commit sends are observed on the requests themselves
(botocore hooks); what the store made of them on the store (moto and SeaweedFS compute a
multipart object's composite checksum themselves, and HEAD with ``ChecksumMode=ENABLED``
reports it; Ceph RGW 16.2 keeps none).
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET
from urllib.parse import parse_qs, urlsplit

import botocore.compat
import fsspec
import pytest
from helpers import as_another_process, pending_uploads, tamper_record, visible_keys
from helpers.reference_documents import PENDING

import magicfs
from magicfs import MagicCommitter, MagicFileSystem
from magicfs.errors import InvalidCommitData, JobCommitError
from magicfs.paths import pending_path
from magicfs.records import SinglePendingCommit
from magicfs.stores.s3 import checksums
from magicfs.stores.s3.store import error_code

MiB = 1 << 20
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class Requests:
    """The headers (and completion bodies) of every request an s3fs client signs."""

    def __init__(self, fs) -> None:
        self.sent: list[tuple[str, dict[str, str], bytes]] = []
        self.numbers: list[str] = []  # of the UploadParts, in the order they were sent
        self._lock = threading.Lock()
        fs.s3.meta.events.register("before-sign.s3", self._record)

    def _record(self, request, operation_name, **_) -> None:
        body = request.body if isinstance(request.body, bytes) else b""
        keep = body if operation_name == "CompleteMultipartUpload" else b""
        with self._lock:
            self.sent.append((operation_name, dict(request.headers.items()), keep))
            if operation_name == "UploadPart":
                self.numbers.append(parse_qs(urlsplit(request.url).query)["partNumber"][0])

    def of(self, operation: str) -> list[tuple[dict[str, str], bytes]]:
        return [(headers, body) for op, headers, body in self.sent if op == operation]

    def part_checksums(self, algorithm: str = "CRC32") -> list[str]:
        """The checksum header of each UploadPart, in part order (they go out in any order)."""
        header = f"x-amz-checksum-{algorithm.lower()}"
        parts = []
        for op, headers, _ in self.sent:
            if op == "UploadPart":
                parts.append((int(self.numbers[len(parts)]), headers[header]))
        return [checksum for _, checksum in sorted(parts)]


#: Does the store compute and keep a multipart object's composite CRC32?
KEEPS_COMPOSITE = {"moto": True, "rgw": False, "seaweed": True}

#: Every algorithm the docs name (docs/s3-compatible-stores.md, ``checksums``' docstring).
ALGORITHMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")


def stored_checksum(target, key: str, algorithm: str = "CRC32") -> str | None:
    """The object's checksum as the store reports it (moto and SeaweedFS compute one; RGW
    16.2 keeps none)."""
    head = target.client.head_object(Bucket=target.bucket, Key=key, ChecksumMode="ENABLED")
    return head.get(checksums.parameter(algorithm))


def expected_stored(store: str, algorithm: str, data: bytes, record: str) -> str | None:
    """What ``store`` reports for an object of ``data`` whose record predicted ``record``
    (``<b64>-<parts>``), as observed and documented (docs/s3-compatible-stores.md):

    * RGW 16.2 accepts every algorithm's headers and keeps no checksum;
    * CRC64NVME is a full-object checksum on S3: moto and SeaweedFS report the
      algorithm over the whole object, not over the parts' digests;
    * the others are composite: the record's value (SeaweedFS with its ``-<parts>``);
    * moto 5.2 reports CRC32's composite under ``ChecksumCRC32C`` (it computes CRC32 for
      CRC32C): asserted, so that a moto that mends it shows up here.
    """
    if store == "rgw":
        return None
    if algorithm == "CRC64NVME":
        return checksums.compute(algorithm, data)
    if store == "moto" and algorithm == "CRC32C":
        size = 5 * MiB
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        return checksums.composite("CRC32", [checksums.compute("CRC32", p) for p in pieces])[:-2]
    return record if store == "seaweed" else record.split("-")[0]


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


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_parts_carry_checksums_the_record_keeps_and_the_completion_sends(
    make_committer, target, algorithm
):
    """Every documented algorithm, written and checked on each store: the CRT ones
    (CRC32C, CRC64NVME) need ``botocore[crt]``, which the ``test`` extra installs."""
    if algorithm in ("CRC32C", "CRC64NVME"):
        assert botocore.compat.HAS_CRT, "pip install -e '.[test]' (it brings botocore[crt])"
    committer = make_committer(checksum=algorithm)
    sent = Requests(committer.store_fs)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    data = bytes(range(256)) * (20 * 1024) + b"tail"  # 5 MiB and 4 bytes: two 5 MiB parts
    with committer.fs.open(task.path("big.bin"), "wb", block_size=5 * MiB) as f:
        f.write(data)
    message = committer.commit_task(task)
    (commit,) = commits_of(committer, message)
    extra = commit["extraData"]
    parts = extra["magicfs.checksum.parts"].split(",")

    assert extra["magicfs.checksum.algorithm"] == algorithm
    assert parts == [
        checksums.compute(algorithm, data[: 5 * MiB]),
        checksums.compute(algorithm, data[5 * MiB :]),
    ]
    assert extra["magicfs.checksum.object"] == checksums.composite(algorithm, parts)
    assert len(commit["etags"]) == 2
    (create,) = sent.of("CreateMultipartUpload")
    assert create[0]["x-amz-checksum-algorithm"] == algorithm
    assert sent.part_checksums(algorithm) == parts

    committer.commit_job([message])
    (completion,) = sent.of("CompleteMultipartUpload")
    assert [p[checksums.parameter(algorithm)] for p in completion_parts(completion[1])] == parts
    assert target.body("out/big.bin") == data
    # What the store made of it: see expected_stored.
    assert stored_checksum(target, "out/big.bin", algorithm) == expected_stored(
        target.name, algorithm, data, extra["magicfs.checksum.object"]
    )


def test_a_file_of_three_5_mib_parts_round_trips(make_committer, target):
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
    assert target.body("out/three.bin") == data
    recorded = commit["extraData"]["magicfs.checksum.object"]
    assert recorded.endswith("-3")
    if KEEPS_COMPOSITE[target.name]:
        assert recorded == stored_checksum(target, "out/three.bin").split("-")[0] + "-3"
    assert pending_uploads(target.client, target.bucket) == []


@pytest.mark.parametrize(
    "how, problem",
    [
        ("change", "do not add up to the object's"),
        ("drop", "lists 0 checksums for 1 parts"),
        ("garble", "the checksum of part 1 is not a base64 CRC32"),
    ],
)
def test_a_tampered_part_checksum_fails_the_job_naming_the_file(
    make_committer, target, how, problem
):
    committer = make_committer()
    committer.setup_job()
    tampered = write_task(committer, 0, {"a.csv": b"a" * 100})
    intact = write_task(committer, 1, {"b.csv": b"b"})
    value = {
        "change": checksums.compute("CRC32", b"something else"),
        "drop": "",
        "garble": "not base64!",
    }[how]

    def change(document: dict) -> None:
        document["commits"][0]["extraData"]["magicfs.checksum.parts"] = value

    tampered = tamper_record(committer.store_fs, tampered, change)

    with pytest.raises(JobCommitError) as failed:
        committer.commit_job([tampered, intact])
    error = failed.value
    assert isinstance(error.__cause__, InvalidCommitData) and error.stage == "validate"
    message = str(error)
    assert tampered.record.rsplit("/", 1)[1] in message
    assert "commits[0].extraData.magicfs.checksum.parts" in message and problem in message
    assert f"(the record of s3://{target.bucket}/out/a.csv)" in message  # the file too
    assert "nothing of it is visible" in message
    assert visible_keys(target.client, target.bucket) == []
    assert pending_uploads(target.client, target.bucket) == []


CHECKSUM_KEYS = ("magicfs.checksum.algorithm", "magicfs.checksum.parts", "magicfs.checksum.object")


def test_a_record_stripped_of_its_checksums_fails_the_job(make_committer, target):
    """Without the pendingset's declaration a stripped record would pass for one written
    without checksums (as Hadoop's are), and its parts would complete unchecked."""
    committer = make_committer()
    committer.setup_job()
    tampered = write_task(committer, 0, {"a.csv": b"a" * 100, "b.csv": b"b"})
    document = json.loads(committer.store_fs.cat_file(tampered.record))
    assert document["extraData"]["magicfs.checksum.algorithm"] == "CRC32"  # declared

    def strip(document: dict) -> None:
        for key in CHECKSUM_KEYS:
            del document["commits"][1]["extraData"][key]

    tampered = tamper_record(committer.store_fs, tampered, strip)

    with pytest.raises(JobCommitError) as failed:
        committer.commit_job([tampered])
    assert isinstance(failed.value.__cause__, InvalidCommitData)
    message = str(failed.value)
    assert "commits[1].extraData.magicfs.checksum.algorithm" in message
    assert f"the record of {target.bucket}/out/b.csv has no checksums" in message
    assert "written with CRC32 checksums" in message and "nothing of it is visible" in message
    assert visible_keys(target.client, target.bucket) == []
    assert pending_uploads(target.client, target.bucket) == []


def test_a_pending_stripped_before_task_commit_fails_the_task(make_committer, target):
    """A task committed by another process reads the files' ``.pending`` records: one
    stripped of its checksums while its siblings keep theirs is refused, naming it."""
    committer = make_committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for name in ("a.csv", "b.csv"):
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(name.encode() * 10)
    as_another_process(committer, task)
    pending = committer.store_fs._strip_protocol(pending_path(task.path("b.csv")))
    document = json.loads(committer.store_fs.cat_file(pending))
    for key in CHECKSUM_KEYS:
        del document["extraData"][key]
    committer.store_fs.pipe_file(pending, json.dumps(document).encode())

    with pytest.raises(InvalidCommitData) as refused:
        committer.commit_task(task)
    message = str(refused.value)
    assert pending.rsplit("/", 1)[1] in message and "extraData.magicfs.checksum" in message
    assert f"the record of {target.bucket}/out/b.csv has no checksums" in message
    committer.abort_job()
    assert visible_keys(target.client, target.bucket) == []
    assert pending_uploads(target.client, target.bucket) == []


def test_records_without_checksums_still_commit(make_committer, target):
    """A job whose writers declared none (``checksum=None``, as Hadoop's records) declares
    nothing in its pendingsets and commits."""
    committer = make_committer(checksum=None)
    committer.setup_job()
    message = write_task(committer, 0, {"a.csv": b"a"})
    document = json.loads(committer.store_fs.cat_file(message.record))
    assert "magicfs.checksum.algorithm" not in document["extraData"]
    committer.commit_job([message])
    assert visible_keys(target.client, target.bucket) == ["out/_SUCCESS", "out/a.csv"]


def test_without_checksums_nothing_is_declared_or_recorded(make_committer, target):
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
    assert target.body("out/a.csv") == b"a"
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
        assert committer.storage_options["magic"]["checksum"] == "CRC32C"
        return
    says = "checksum='crc32c' needs botocore's CRT extension: pip install 'botocore[crt]'"
    with pytest.raises(ValueError, match=re.escape(says)):
        MagicCommitter(f"s3://{bucket}/out", storage_options=s3_options, checksum="crc32c")


def test_the_record_keeps_hadoops_form(make_committer):
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


def one_part_commit(extra_data: dict[str, str]) -> SinglePendingCommit:
    """A one-part record of ``s3://b/out/x`` carrying ``extra_data``."""
    return SinglePendingCommit(
        uri="s3://b/out/__magic_job-1/x",
        upload_id="u",
        bucket="b",
        destination_key="out/x",
        etags=["e"],
        length=1,
        extra_data=extra_data,
    )


def test_a_reply_reporting_another_object_checksum_is_refused():
    commit = one_part_commit(checksums.record_fields("CRC32", [checksums.compute("CRC32", b"x")]))
    checksums.check_reply(commit, {"ChecksumCRC32": commit.extra_data["magicfs.checksum.object"]})
    checksums.check_reply(commit, {})  # a store that reports none (moto, RGW 16.2)
    with pytest.raises(OSError, match="s3://b/out/x: the store assembled an object whose CRC32"):
        checksums.check_reply(commit, {"ChecksumCRC32": "AAAAAA==-1"})


def test_a_full_object_checksum_in_the_reply_is_not_compared_with_the_parts():
    # AWS reports CRC64NVME as a full-object checksum (no "-<parts>"): it cannot be
    # compared with the record's composite, and a good object must not be refused for it.
    commit = one_part_commit(checksums.record_fields("CRC32", [checksums.compute("CRC32", b"x")]))
    checksums.check_reply(commit, {"ChecksumCRC32": "AAAAAA==", "ChecksumType": "FULL_OBJECT"})
    with pytest.raises(OSError, match="the store assembled an object whose CRC32"):
        checksums.check_reply(commit, {"ChecksumCRC32": "AAAAAA==", "ChecksumType": "COMPOSITE"})


def test_a_record_this_process_cannot_check_names_the_field(monkeypatch):
    # Written where botocore's CRT extension was installed (CRC32C), committed where it
    # is not: a named refusal, not botocore's AttributeError.
    monkeypatch.setattr(botocore.compat, "HAS_CRT", False)
    commit = one_part_commit(
        {
            "magicfs.checksum.algorithm": "CRC32C",
            "magicfs.checksum.parts": "AAAAAA==",
            "magicfs.checksum.object": "AAAAAA==-1",
        }
    )
    with pytest.raises(InvalidCommitData, match="needs botocore's CRT extension") as refused:
        checksums.check_record(commit, "s3://b/out/x.pending")
    assert "extraData.magicfs.checksum.algorithm" in str(refused.value)
    assert "s3://b/out/x.pending" in str(refused.value)


# --- TLS: botocore's default checksums and Ceph RGW 16.2 ----------------------------------


@pytest.mark.rgw
def test_a_job_over_tls_needs_no_checksum_setting(rgw_server, rgw_client, rgw_bucket):
    # botocore's defaults (request_checksum_calculation="when_supported"): the store's
    # TLS options without the setting RGW needs for s3fs's own uploads.
    options = {**rgw_server.tls_storage_options, "skip_instance_cache": True}
    del options["config_kwargs"]
    committer = MagicCommitter(f"s3://{rgw_bucket}/out", storage_options=options)
    # s3fs's own upload is refused: botocore sends an aws-chunked body with a trailer.
    with pytest.raises(OSError) as refused:
        committer.store_fs.pipe_file(f"{rgw_bucket}/plain.txt", b"x")
    assert error_code(refused.value) == "MissingContentLength"
    # magicfs's requests carry their checksums as headers: the whole job works.
    committer.setup_job()
    data = b"0123456789" * (1 << 20)  # 10 MiB: two parts
    message = write_task(committer, 0, {"a.bin": data, "b.csv": b"b"})
    committer.commit_job([message])
    assert visible_keys(rgw_client, rgw_bucket) == ["out/_SUCCESS", "out/a.bin", "out/b.csv"]
    body = rgw_client.get_object(Bucket=rgw_bucket, Key="out/a.bin")["Body"].read()
    assert body == data
    assert pending_uploads(rgw_client, rgw_bucket) == []


# --- the staging committers: their task commit uploads local files, with checksums too ---


def test_staging_uploads_carry_checksums_to_the_completion(target):
    committer = magicfs.committer_for(
        f"s3://{target.bucket}/out",
        committer="directory",
        storage_options={**target.options, "skip_instance_cache": True},
    )
    sent = Requests(committer.store_fs)
    committer.setup_job()
    data = b"staged" * (2 << 20)  # 12 MiB: two 8 MiB parts
    message = write_task(committer, 0, {"s.bin": data})
    records = fsspec.core.url_to_fs(committer.flow.staging_dir)[0]  # on local disk
    (commit,) = json.loads(records.cat_file(message.record))["commits"]
    parts = commit["extraData"]["magicfs.checksum.parts"].split(",")
    assert parts == [
        checksums.compute("CRC32", data[: 8 * MiB]),
        checksums.compute("CRC32", data[8 * MiB :]),
    ]
    (create,) = sent.of("CreateMultipartUpload")
    assert create[0]["x-amz-checksum-algorithm"] == "CRC32"
    assert sent.part_checksums() == parts
    committer.commit_job([message])
    (completion,) = sent.of("CompleteMultipartUpload")
    assert [p["ChecksumCRC32"] for p in completion_parts(completion[1])] == parts
    assert target.body("out/s.bin") == data
    assert pending_uploads(target.client, target.bucket) == []
