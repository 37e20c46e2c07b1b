"""The fault front (``tests/helpers/fault_front.py``): each action does what it says.

boto3 and s3fs talk HTTP to the front, the front to the session's moto server; what a
fault did is checked on moto directly (``s3_client``, which bypasses the front).
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from helpers.fault_front import FaultFront, classify

from magicfs.integrations.local_server import CREDENTIALS, REGION


def no_retries() -> dict:
    """botocore Config options for exactly one attempt. (``{"max_attempts": 1}`` would
    still allow one *retry*: botocore's ``max_attempts`` counts retries.)"""
    return {"retries": {"total_max_attempts": 1}}


def keys(s3_client, bucket: str) -> list[str]:
    listing = s3_client.list_objects_v2(Bucket=bucket)
    return [item["Key"] for item in listing.get("Contents", [])]


def uploads(s3_client, bucket: str, key: str) -> list[str]:
    listing = s3_client.list_multipart_uploads(Bucket=bucket, Prefix=key)
    return [u["UploadId"] for u in listing.get("Uploads", []) if u["Key"] == key]


def one_part_upload(s3_client, bucket: str, key: str) -> tuple[str, list[dict]]:
    """An upload started and given one part on moto directly: ``(upload id, parts)``."""
    upload_id = s3_client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    part = s3_client.upload_part(
        Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=b"part one"
    )
    return upload_id, [{"PartNumber": 1, "ETag": part["ETag"]}]


def error_code(error: ClientError) -> str:
    return error.response["Error"]["Code"]


# --- classification and plain forwarding ----------------------------------------------------


@pytest.mark.parametrize(
    ("method", "target", "copy", "operation"),
    [
        ("POST", "/b/k?uploads", False, "CreateMultipartUpload"),
        ("PUT", "/b/k?partNumber=1&uploadId=u", False, "UploadPart"),
        ("PUT", "/b/k?partNumber=2&uploadId=u", True, "UploadPartCopy"),
        ("POST", "/b/k?uploadId=u", False, "CompleteMultipartUpload"),
        ("DELETE", "/b/k?uploadId=u", False, "AbortMultipartUpload"),
        ("GET", "/b?uploads", False, "ListMultipartUploads"),
        ("GET", "/b?uploads&prefix=a%2F", False, "ListMultipartUploads"),
        ("GET", "/b/k?uploadId=u&max-parts=10", False, "ListParts"),
        ("PUT", "/b/k", False, "PutObject"),
        ("PUT", "/b/k?x-id=PutObject", False, "PutObject"),
        ("PUT", "/b/k", True, "CopyObject"),
        ("GET", "/b/k", False, "GetObject"),
        ("GET", "/b/k?partNumber=1&response-content-type=x", False, "GetObject"),
        ("HEAD", "/b/k", False, "HeadObject"),
        ("DELETE", "/b/k", False, "DeleteObject"),
        ("POST", "/b?delete", False, "DeleteObjects"),
        ("POST", "/b?delete=", False, "DeleteObjects"),
        ("GET", "/b?list-type=2&prefix=a&delimiter=%2F", False, "ListObjectsV2"),
        ("GET", "/b?prefix=a&marker=m", False, "ListObjects"),
        ("GET", "/b", False, "ListObjects"),
        ("HEAD", "/b", False, "HeadBucket"),
        ("PUT", "/b", False, "CreateBucket"),
        ("DELETE", "/b", False, "DeleteBucket"),
        ("GET", "/", False, "ListBuckets"),
        ("GET", "/b/k?tagging", False, "Other"),
        ("PUT", "/b?versioning", False, "Other"),
        ("GET", "/b?location", False, "GetBucketLocation"),
        ("GET", "/b?acl", False, "Other"),
    ],
)
def test_requests_are_named_by_their_s3_operation(method, target, copy, operation):
    headers = {"x-amz-copy-source": "/b/src"} if copy else {}
    assert classify(method, target, headers)[0] == operation


def test_bucket_and_key_are_percent_decoded():
    assert classify("PUT", "/bkt/year%3D2024/a%20b%2Bc.csv", {}) == (
        "PutObject",
        "bkt",
        "year=2024/a b+c.csv",
    )


def test_front_forwards_every_operation_and_counts_it(faults_front, s3_client, bucket):
    assert urllib.parse.urlsplit(faults_front.endpoint_url).hostname == "127.0.0.1"
    client = faults_front.boto3_client()
    client.put_object(Bucket=bucket, Key="dir/a b+c", Body=b"0123456789")
    assert client.get_object(Bucket=bucket, Key="dir/a b+c")["Body"].read() == b"0123456789"
    assert client.head_object(Bucket=bucket, Key="dir/a b+c")["ContentLength"] == 10
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == ["dir/a b+c"]
    assert [o["Key"] for o in client.list_objects(Bucket=bucket)["Contents"]] == ["dir/a b+c"]
    upload_id = client.create_multipart_upload(Bucket=bucket, Key="mpu")["UploadId"]
    part = client.upload_part(
        Bucket=bucket, Key="mpu", UploadId=upload_id, PartNumber=1, Body=b"p" * (5 << 20)
    )
    copied = client.upload_part_copy(
        Bucket=bucket,
        Key="mpu",
        UploadId=upload_id,
        PartNumber=2,
        CopySource={"Bucket": bucket, "Key": "dir/a b+c"},
    )
    assert len(client.list_parts(Bucket=bucket, Key="mpu", UploadId=upload_id)["Parts"]) == 2
    assert len(client.list_multipart_uploads(Bucket=bucket)["Uploads"]) == 1
    client.complete_multipart_upload(
        Bucket=bucket,
        Key="mpu",
        UploadId=upload_id,
        MultipartUpload={
            "Parts": [
                {"PartNumber": 1, "ETag": part["ETag"]},
                {"PartNumber": 2, "ETag": copied["CopyPartResult"]["ETag"]},
            ]
        },
    )
    client.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "mpu"})
    client.head_bucket(Bucket=bucket)
    client.delete_object(Bucket=bucket, Key="copy")
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "dir/a b+c"}]})
    aborted = client.create_multipart_upload(Bucket=bucket, Key="gone")["UploadId"]
    client.abort_multipart_upload(Bucket=bucket, Key="gone", UploadId=aborted)

    assert keys(s3_client, bucket) == ["mpu"]
    assert s3_client.head_object(Bucket=bucket, Key="mpu")["ContentLength"] == (5 << 20) + 10
    assert uploads(s3_client, bucket, "gone") == []
    requests = {op: entry["requests"] for op, entry in faults_front.stats().items()}
    assert requests == {
        "PutObject": 1,
        "GetObject": 1,
        "HeadObject": 1,
        "ListObjectsV2": 1,
        "ListObjects": 1,
        "CreateMultipartUpload": 2,
        "UploadPart": 1,
        "UploadPartCopy": 1,
        "ListParts": 1,
        "ListMultipartUploads": 1,
        "CompleteMultipartUpload": 1,
        "CopyObject": 1,
        "HeadBucket": 1,
        "DeleteObject": 1,
        "DeleteObjects": 1,
        "AbortMultipartUpload": 1,
    }
    assert all(entry["faults"] == {} for entry in faults_front.stats().values())


def test_s3fs_writes_and_reads_a_multipart_file_through_the_front(faults_front, bucket):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **faults_front.storage_options)
    data = os.urandom(1 << 20) * 12  # 12 MB
    with fs.open(f"{bucket}/big.bin", "wb", block_size=5 << 20) as f:
        for start in range(0, len(data), 1 << 20):
            f.write(data[start : start + (1 << 20)])
    assert fs.cat_file(f"{bucket}/big.bin") == data
    with fs.open(f"{bucket}/big.bin", "rb", block_size=1 << 20) as f:
        f.seek(7 << 20)
        assert f.read(100) == data[7 << 20 : (7 << 20) + 100]
    stats = faults_front.stats()
    assert stats["CreateMultipartUpload"]["requests"] == 1
    assert stats["UploadPart"]["requests"] >= 2
    assert stats["CompleteMultipartUpload"]["requests"] == 1
    assert all(entry["faults"] == {} for entry in stats.values())


def signed(method: str, url: str, headers: dict | None = None) -> dict:
    """SigV4 headers for a request made by hand (payload unsigned, as for a streamed body)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(
        method=method,
        url=url,
        headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD", **(headers or {})},
    )
    SigV4Auth(Credentials(*CREDENTIALS), "s3", REGION).add_auth(request)
    return {"Host": urllib.parse.urlsplit(url).netloc, **dict(request.headers.items())}


def test_chunked_body_expect_100_head_and_keep_alive(faults_front, s3_client, bucket):
    url = f"{faults_front.endpoint_url}/{bucket}/chunked"
    with socket.create_connection(("127.0.0.1", faults_front.port), timeout=10) as sock:
        reader = sock.makefile("rb")
        headers = signed("PUT", url, {"Expect": "100-continue", "Transfer-Encoding": "chunked"})
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        sock.sendall(f"PUT /{bucket}/chunked HTTP/1.1\r\n{head}\r\n".encode())
        assert reader.readline() == b"HTTP/1.1 100 Continue\r\n"
        assert reader.readline() == b"\r\n"
        sock.sendall(b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n")
        assert reader.readline().startswith(b"HTTP/1.1 200")
        reader.close()
    assert s3_client.get_object(Bucket=bucket, Key="chunked")["Body"].read() == b"hello, world"

    connection = http.client.HTTPConnection("127.0.0.1", faults_front.port, timeout=10)
    try:
        connection.request("HEAD", f"/{bucket}/chunked", headers=signed("HEAD", url))
        head = connection.getresponse()
        assert head.status == 200 and head.getheader("Content-Length") == "12"
        assert head.read() == b""
        first_socket = connection.sock
        connection.request("GET", f"/{bucket}/chunked", headers=signed("GET", url))
        response = connection.getresponse()
        assert response.read() == b"hello, world"
        assert connection.sock is first_socket  # the same kept-alive connection
    finally:
        connection.close()


# --- the actions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "code"),
    [("503", "SlowDown"), ("500", "InternalError"), ("error-200", "InternalError")],
)
def test_error_replies_do_not_reach_the_server(faults_front, s3_client, bucket, action, code):
    faults_front.add_rule("PutObject", action)
    client = faults_front.boto3_client(**no_retries())
    with pytest.raises(ClientError) as raised:
        client.put_object(Bucket=bucket, Key="k", Body=b"data")
    assert error_code(raised.value) == code
    # botocore turns a 200 carrying an <Error> document into a 500 (so that it retries it).
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == (
        503 if action == "503" else 500
    )
    assert keys(s3_client, bucket) == []
    assert faults_front.stats()["PutObject"] == {"requests": 1, "faults": {action: 1}}


def test_two_503s_are_absorbed_by_botocore_retries(faults_front, s3_client, bucket):
    faults_front.add_rule("PutObject", "503", count=2)
    faults_front.boto3_client().put_object(Bucket=bucket, Key="k", Body=b"data")
    assert faults_front.stats()["PutObject"] == {"requests": 3, "faults": {"503": 2}}
    assert s3_client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"


def test_500_after_on_delete_objects_deletes_yet_reports_an_error(faults_front, s3_client, bucket):
    for key in ("a", "b"):
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"x")
    faults_front.add_rule("DeleteObjects", "500-after")
    client = faults_front.boto3_client(**no_retries())
    with pytest.raises(ClientError) as raised:
        client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "b"}]})
    assert error_code(raised.value) == "InternalError"
    assert keys(s3_client, bucket) == []


def test_reset_before_never_reaches_the_server(faults_front, s3_client, bucket):
    faults_front.add_rule("PutObject", "reset-before")
    client = faults_front.boto3_client(**no_retries())
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket=bucket, Key="k", Body=b"data")
    assert keys(s3_client, bucket) == []
    assert faults_front.stats()["PutObject"] == {"requests": 1, "faults": {"reset-before": 1}}


def test_reset_after_loses_the_reply_but_not_the_object(faults_front, s3_client, bucket):
    faults_front.add_rule("PutObject", "reset-after")
    client = faults_front.boto3_client(**no_retries())
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket=bucket, Key="k", Body=b"data")
    assert s3_client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"


@pytest.mark.parks_uploads("shows the orphan a lost Create reply leaves, with plain boto3")
def test_lost_reply_to_create_multipart_upload_leaves_a_second_upload(
    faults_front, s3_client, bucket
):
    faults_front.add_rule("CreateMultipartUpload", "reset-after", count=1)
    upload_id = faults_front.boto3_client().create_multipart_upload(Bucket=bucket, Key="k")[
        "UploadId"
    ]
    pending = uploads(s3_client, bucket, "k")
    assert len(pending) == 2 and upload_id in pending  # the other one nobody knows about
    assert faults_front.stats()["CreateMultipartUpload"] == {
        "requests": 2,
        "faults": {"reset-after": 1},
    }


def test_error_200_on_complete_multipart_upload_is_retried_by_botocore(
    faults_front, s3_client, bucket
):
    upload_id, parts = one_part_upload(s3_client, bucket, "k")
    faults_front.add_rule("CompleteMultipartUpload", "error-200")  # every time
    client = faults_front.boto3_client(retries={"total_max_attempts": 2})
    complete = {"Bucket": bucket, "Key": "k", "UploadId": upload_id}
    with pytest.raises(ClientError) as raised:
        client.complete_multipart_upload(**complete, MultipartUpload={"Parts": parts})
    assert error_code(raised.value) == "InternalError"
    assert faults_front.stats()["CompleteMultipartUpload"]["requests"] == 2  # retried
    assert uploads(s3_client, bucket, "k") == [upload_id] and keys(s3_client, bucket) == []

    faults_front.clear()
    faults_front.add_rule("CompleteMultipartUpload", "error-200", count=1)
    client.complete_multipart_upload(**complete, MultipartUpload={"Parts": parts})
    assert faults_front.stats()["CompleteMultipartUpload"] == {
        "requests": 2,
        "faults": {"error-200": 1},
    }
    assert s3_client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"part one"


def test_lost_reply_to_complete_is_retried_and_moto_accepts_the_repeat(
    faults_front, s3_client, bucket
):
    """moto answers a repeated CompleteMultipartUpload of a completed upload with success,
    so a lost completion reply is absorbed by botocore's retry."""
    upload_id, parts = one_part_upload(s3_client, bucket, "k")
    faults_front.add_rule("CompleteMultipartUpload", "reset-after", count=1)
    faults_front.boto3_client().complete_multipart_upload(
        Bucket=bucket, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
    )
    assert faults_front.stats()["CompleteMultipartUpload"]["requests"] == 2
    assert s3_client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"part one"


def test_delay_slows_a_request_and_a_timed_out_request_still_acts(faults_front, s3_client, bucket):
    faults_front.add_rule("PutObject", "delay", ms=300, key="^slow$")
    client = faults_front.boto3_client(**no_retries())
    start = time.monotonic()
    client.put_object(Bucket=bucket, Key="slow", Body=b"1")
    assert time.monotonic() - start >= 0.3

    impatient = faults_front.boto3_client(read_timeout=0.1, **no_retries())
    with pytest.raises(ReadTimeoutError):
        impatient.put_object(Bucket=bucket, Key="slow", Body=b"2")
    deadline = time.monotonic() + 5
    while s3_client.get_object(Bucket=bucket, Key="slow")["Body"].read() != b"2":
        assert time.monotonic() < deadline, "the delayed request never reached the server"
        time.sleep(0.05)
    assert faults_front.stats()["PutObject"]["faults"] == {"delay": 2}


def test_latency_is_added_to_every_request(faults_front, bucket):
    client = faults_front.boto3_client()
    faults_front.set_latency(200)
    try:
        start = time.monotonic()
        client.head_bucket(Bucket=bucket)
        assert time.monotonic() - start >= 0.2
    finally:
        faults_front.set_latency(0)


def one_attempt_s3fs(front: FaultFront):
    """An s3fs filesystem through ``front`` that tries each call once (botocore and s3fs)."""
    import s3fs

    fs = s3fs.S3FileSystem(
        skip_instance_cache=True,
        config_kwargs={"retries": {"total_max_attempts": 1}},
        **front.storage_options,
    )
    fs.retries = 1  # s3fs's own retries: an attribute, not a constructor argument
    return fs


@pytest.mark.parks_uploads("plain s3fs through the front, no committer to sweep")
def test_s3fs_sees_faults_through_aiohttp(faults_front, s3_client, bucket):
    """What s3fs raises for each kind of fault, and the retry aiohttp adds on its own."""
    fs = one_attempt_s3fs(faults_front)
    faults_front.add_rule("PutObject", "503", key="^slow$")
    with pytest.raises(OSError) as raised:
        fs.pipe_file(f"{bucket}/slow", b"x")
    assert raised.value.errno == errno.EBUSY  # s3fs's translation of SlowDown

    # aiohttp resends an idempotent request (PUT, GET, HEAD, DELETE) once on a reset: one
    # reset is absorbed even with botocore's and s3fs's retries off ...
    faults_front.add_rule("PutObject", "reset-before", key="^once$", count=1)
    fs.pipe_file(f"{bucket}/once", b"x")
    # ... and a persistent one surfaces as botocore's EndpointConnectionError, no OSError.
    faults_front.add_rule("PutObject", "reset-before", key="^never$")
    with pytest.raises(EndpointConnectionError):
        fs.pipe_file(f"{bucket}/never", b"x")
    assert faults_front.stats()["PutObject"] == {
        "requests": 5,
        "faults": {"503": 1, "reset-before": 3},
    }
    assert sorted(keys(s3_client, bucket)) == ["once"]

    # A POST is not resent: a lost CreateMultipartUpload reply fails the write and leaves
    # an upload on the server that nobody knows the id of.
    faults_front.add_rule("CreateMultipartUpload", "reset-after")
    with (
        pytest.raises(EndpointConnectionError),
        fs.open(f"{bucket}/big", "wb", block_size=5 << 20) as f,
    ):
        f.write(b"x" * (11 << 20))
    assert faults_front.stats()["CreateMultipartUpload"]["requests"] == 1
    assert len(uploads(s3_client, bucket, "big")) == 1


# --- rule selection -------------------------------------------------------------------------


def outcomes(client, bucket: str, names: list[str]) -> list[str]:
    """For each key, ``"ok"`` or the S3 error code of a PutObject."""
    results = []
    for key in names:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=b"x")
            results.append("ok")
        except ClientError as error:
            results.append(error_code(error))
    return results


def test_nth_fires_on_the_nth_matching_request_only(faults_front, bucket):
    rule = faults_front.add_rule("PutObject", "500", nth=3)
    client = faults_front.boto3_client(**no_retries())
    assert outcomes(client, bucket, list("abcde")) == ["ok", "ok", "InternalError", "ok", "ok"]
    assert faults_front.rules() == [{**rule, "matched": 5, "fired": 1}]


def test_count_limits_the_faults_and_the_first_rule_with_budget_wins(faults_front, bucket):
    faults_front.add_rule("PutObject", "500", count=2)
    faults_front.add_rule(["PutObject", "GetObject"], "503", count=1)
    client = faults_front.boto3_client(**no_retries())
    assert outcomes(client, bucket, list("abcd")) == [
        "InternalError",
        "InternalError",
        "SlowDown",
        "ok",
    ]
    assert faults_front.stats() == {"PutObject": {"requests": 4, "faults": {"500": 2, "503": 1}}}
    faults_front.reset_stats()
    assert faults_front.stats() == {}
    assert [rule["fired"] for rule in faults_front.rules()] == [2, 1]


def test_key_regex_selects_the_requests(faults_front, s3_client, bucket):
    faults_front.add_rule("*", "500", key=r"\.parquet$")
    client = faults_front.boto3_client(**no_retries())
    names = ["a.csv", "year=2024/b.parquet", "c.parquet.json"]
    assert outcomes(client, bucket, names) == ["ok", "InternalError", "ok"]
    assert sorted(keys(s3_client, bucket)) == ["a.csv", "c.parquet.json"]


def test_rate_is_reproducible_for_a_seed(faults_front, s3_server, bucket):
    names = [f"k{i}" for i in range(24)]

    def pattern(front: FaultFront) -> list[str]:
        front.clear()
        front.add_rule("PutObject", "503", rate=0.5)
        return outcomes(front.boto3_client(**no_retries()), bucket, names)

    first = pattern(faults_front)
    assert 3 < first.count("SlowDown") < 21
    assert faults_front.stats()["PutObject"]["faults"]["503"] == first.count("SlowDown")
    assert pattern(faults_front) == first  # same seed, same rule number: same draws
    with FaultFront(s3_server.endpoint_url, seed=1) as other:
        assert pattern(other) != first


# --- the rules' and the front's own checks --------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "action", "options"),
    [
        ("PutObjects", "500", {}),
        ("PutObject", "502", {}),
        ("PutObject", "delay", {}),
        ("PutObject", "500", {"rate": 1.5}),
        ("PutObject", "500", {"nth": 0}),
        ("PutObject", "500", {"key": "("}),
    ],
)
def test_bad_rules_are_refused(faults_front, operation, action, options):
    with pytest.raises(ValueError):
        faults_front.add_rule(operation, action, **options)
    assert faults_front.rules() == []


def test_the_front_refuses_a_bad_rule_itself(faults_front):
    connection = http.client.HTTPConnection("127.0.0.1", faults_front.port, timeout=10)
    try:
        rule = b'{"operation": "PutObject", "action": "explode"}'
        connection.request("POST", "/_fault/rules", body=rule)
        response = connection.getresponse()
        assert response.status == 400 and b"unknown action" in response.read()
    finally:
        connection.close()
    assert faults_front.rules() == []


def test_upstream_must_be_loopback():
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        FaultFront("http://192.0.2.1:9000")


_ORPHAN = textwrap.dedent(
    """
    import subprocess, sys, time
    front = subprocess.Popen(
        [sys.executable, {script!r}, "--upstream", {upstream!r}],
        stdin=subprocess.DEVNULL if {by_hand} else subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    print(front.stdout.readline().split()[1], front.pid, flush=True)
    time.sleep(60)
    """
)


def _status(port: int) -> dict:
    """The front's ``GET /_fault/status``: whether it has seen its parent go."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_fault/status", timeout=5) as reply:
        return json.load(reply)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("by_hand", [False, True], ids=["stdin-pipe", "stdin-devnull"])
def test_front_stops_when_its_parent_dies(s3_server, by_hand):
    """With its stdin a pipe from the parent (as ``FaultFront`` starts it) the front stops
    at the pipe's end; with stdin on /dev/null (started by hand) it stays up, and stops
    once its parent is gone."""
    import helpers.fault_front as module

    code = _ORPHAN.format(script=module.__file__, upstream=s3_server.endpoint_url, by_hand=by_hand)
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        port, pid = map(int, parent.stdout.readline().split())
        # The front decides at start whether its stdin is a pipe to watch; had it taken
        # /dev/null's end-of-file (there at once) for its parent's end, the event its
        # parent watch sets (``watch_parent``'s, which the front reports) would be set.
        assert _status(port) == {"parent_gone": False}
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    deadline = time.monotonic() + 5
    while _accepts(port):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)  # leave nothing behind, then fail
            pytest.fail("the front outlived its parent")
        time.sleep(0.05)


def test_stopping_the_front_waits_for_what_it_sent_upstream(s3_server, s3_client, bucket):
    """A client killed mid-request, then its front stopped: once ``stop()`` returns, the
    server has acted on every request the front had sent it (here a PUT the server holds
    for 1 s), so whoever reads the store next sees it settled (the kill harness relies on
    it instead of a pause)."""
    import concurrent.futures
    import contextlib

    from helpers.polling import wait_until

    front = FaultFront(s3_server.endpoint_url, seed=0).start()
    client = front.boto3_client()
    s3_server.set_latency(1000)
    try:
        before = s3_server.latency_added()[0]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            put = pool.submit(client.put_object, Bucket=bucket, Key="in-flight", Body=b"x")
            wait_until(lambda: s3_server.latency_added()[0] > before, "the PUT is at the server")
            s3_server.set_latency(0)  # the PUT keeps its second; the listing below waits none
            front.stop()
            objects = s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])
            assert [o["Key"] for o in objects] == ["in-flight"]
            with contextlib.suppress(Exception):  # answered, or its front gone: either way
                put.result(timeout=60)
    finally:
        s3_server.set_latency(0)
        front.stop()
