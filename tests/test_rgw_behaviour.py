"""magicfs on Ceph RGW 16.2 over TLS, and the RGW behaviours that differ from AWS and moto.

One magic job runs over HTTPS with the settings the documentation gives for RGW with a
private certificate (``client_kwargs={"verify": <CA file>}`` and botocore's checksums
``when_required``). The other tests pin down, with plain boto3 and s3fs, each behaviour
of RGW that magicfs must not assume away (the table in docs/s3-compatible-stores.md, "Ceph
RGW", lists them): should a Ceph upgrade change one, its test fails and the table is
updated with it.
"""

from __future__ import annotations

import datetime
import json

import botocore.exceptions
import pytest
import s3fs
from helpers import pending_uploads, visible_keys

import magicfs

MiB = 1 << 20
#: Three tasks; one file is larger than a part (5 MiB), so its upload has two parts.
TASKS = {
    0: {"year=2024/a.csv": b"a,1\n" * 1000, "b.bin": bytes(range(256)) * 32},
    1: {"year=2025/c.csv": b"c,3\n" * 10},
    2: {"big.bin": b"\x07" * (6 * MiB + 123)},
}


def test_a_magic_job_over_tls_commits_exactly_and_shows_nothing_before(
    rgw_server, rgw_client, rgw_bucket
):
    options = {**rgw_server.tls_storage_options, "skip_instance_cache": True}
    committer = magicfs.committer_for(f"s3://{rgw_bucket}/out", storage_options=options)
    assert committer.store_fs.client_kwargs["endpoint_url"].startswith("https://")
    committer.setup_job()
    messages = []
    for index, files in TASKS.items():
        task = committer.task_attempt(index)
        committer.setup_task(task)
        for name, data in files.items():
            with committer.fs.open(task.path(name), "wb", block_size=5 * MiB) as f:
                f.write(data)
        messages.append(committer.commit_task(task))

    expected = {f"out/{name}": data for files in TASKS.values() for name, data in files.items()}
    assert visible_keys(rgw_client, rgw_bucket, "out/") == []  # nothing before job commit
    assert sorted(u["Key"] for u in pending_uploads(rgw_client, rgw_bucket)) == sorted(expected)

    summary = committer.commit_job(messages)
    assert summary.files == len(expected)
    published = {
        key: rgw_client.get_object(Bucket=rgw_bucket, Key=key)["Body"].read()
        for key in visible_keys(rgw_client, rgw_bucket, "out/")
        if key != "out/_SUCCESS"
    }
    assert published == expected
    success = json.loads(
        rgw_client.get_object(Bucket=rgw_bucket, Key="out/_SUCCESS")["Body"].read()
    )
    assert success["committer"] == "magic" and success["success"] is True
    assert pending_uploads(rgw_client, rgw_bucket) == []


def test_tls_refuses_botocores_default_checksums(rgw_server, rgw_bucket):
    """botocore >= 1.36 sends aws-chunked bodies with a trailing checksum over HTTPS;
    RGW 16.2 refuses them (s3fs reports ``OSError(22, None)``, the code lost)."""
    defaults = {k: v for k, v in rgw_server.tls_storage_options.items() if k != "config_kwargs"}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **defaults)
    with pytest.raises(OSError):
        fs.pipe_file(f"{rgw_bucket}/refused.txt", b"x" * 100)
    documented = s3fs.S3FileSystem(skip_instance_cache=True, **rgw_server.tls_storage_options)
    documented.pipe_file(f"{rgw_bucket}/accepted.txt", b"x" * 100)
    assert documented.ls(rgw_bucket, refresh=True) == [f"{rgw_bucket}/accepted.txt"]


# --- RGW's own answers (plain boto3) -----------------------------------------------------------


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


def test_completion_reply_has_an_empty_etag_and_a_repeat_answers_200(rgw_client, rgw_bucket):
    upload_id, parts = _upload(rgw_client, rgw_bucket, "k")
    first = _complete(rgw_client, rgw_bucket, "k", upload_id, parts)
    assert first["ETag"] == ""  # AWS and moto: the object's ETag
    again = _complete(rgw_client, rgw_bucket, "k", upload_id, parts)  # AWS: NoSuchUpload
    assert again["ResponseMetadata"]["HTTPStatusCode"] == 200
    etag = rgw_client.head_object(Bucket=rgw_bucket, Key="k")["ETag"]
    assert again["ETag"] == etag.strip('"')  # the object's ETag, without its quotes


def test_completion_naming_fewer_parts_than_uploaded_is_refused(rgw_client, rgw_bucket):
    upload_id, parts = _upload(rgw_client, rgw_bucket, "k")
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        _complete(rgw_client, rgw_bucket, "k", upload_id, parts[:1])  # moto publishes part 1
    assert refused.value.response["Error"]["Code"] == "InvalidPart"
    assert refused.value.response["Error"].get("Message") is None  # no <Message> in replies
    assert [u["Key"] for u in pending_uploads(rgw_client, rgw_bucket)] == ["k"]
    rgw_client.abort_multipart_upload(Bucket=rgw_bucket, Key="k", UploadId=upload_id)


def test_mpu_object_size_is_ignored(rgw_client, rgw_bucket):
    upload_id, parts = _upload(rgw_client, rgw_bucket, "k")
    _complete(rgw_client, rgw_bucket, "k", upload_id, parts, MpuObjectSize=1)  # AWS: 400
    assert rgw_client.head_object(Bucket=rgw_bucket, Key="k")["ContentLength"] == 5 * MiB + 4


def test_if_none_match_is_honoured_on_put_but_ignored_on_completion(rgw_client, rgw_bucket):
    rgw_client.put_object(Bucket=rgw_bucket, Key="k", Body=b"first")
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        rgw_client.put_object(Bucket=rgw_bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    upload_id, parts = _upload(rgw_client, rgw_bucket, "k", tail=b"replaced")
    _complete(rgw_client, rgw_bucket, "k", upload_id, parts, IfNoneMatch="*")  # AWS: 412
    body = rgw_client.get_object(Bucket=rgw_bucket, Key="k")["Body"].read()
    assert body.endswith(b"replaced")  # the existing object was replaced


def test_uploads_are_listed_with_real_initiation_times(rgw_client, rgw_bucket):
    upload_id, _ = _upload(rgw_client, rgw_bucket, "k")
    (listed,) = rgw_client.list_multipart_uploads(Bucket=rgw_bucket)["Uploads"]
    age = datetime.datetime.now(datetime.UTC) - listed["Initiated"]
    assert datetime.timedelta(seconds=-5) < age < datetime.timedelta(minutes=5)
    rgw_client.abort_multipart_upload(Bucket=rgw_bucket, Key="k", UploadId=upload_id)
