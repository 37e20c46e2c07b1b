"""The test fixtures themselves: a real S3 server over HTTP on loopback, and request counting."""

from __future__ import annotations

import os
import urllib.parse

import pytest

from magicfs.integrations.embedded_s3 import EmbeddedS3Server


def test_server_is_on_loopback_and_speaks_s3(s3_server, s3, bucket):
    assert urllib.parse.urlsplit(s3_server.endpoint_url).hostname == "127.0.0.1"
    s3.pipe_file(f"{bucket}/hello.txt", b"hello")
    assert s3.cat_file(f"{bucket}/hello.txt") == b"hello"


def test_each_test_gets_an_empty_bucket(s3, bucket):
    assert s3.ls(bucket) == []


def test_request_log_counts_operations(s3, bucket, request_log):
    request_log.attach(s3)
    s3.pipe_file(f"{bucket}/a", b"1")
    s3.cat_file(f"{bucket}/a", start=0, end=10)  # a ranged read: one GET, no HEAD
    assert request_log.counts() == {"PutObject": 1, "GetObject": 1}


def test_latency_is_injected_per_request():
    import time

    with EmbeddedS3Server(latency_ms=150) as server:
        client = server.boto3_client()
        start = time.monotonic()
        client.list_buckets()
        assert time.monotonic() - start >= 0.15


def test_latency_can_change_at_run_time(s3_server):
    """The server's own account of the latency it added (no wall-clock upper bound,
    which a loaded machine breaks): 200 ms for the request made while set, none after."""
    import time

    client = s3_server.boto3_client()
    client.list_buckets()  # the client's first request (its set-up) before counting
    before = s3_server.latency_added()
    s3_server.set_latency(200)
    try:
        start = time.monotonic()
        client.list_buckets()
        assert time.monotonic() - start >= 0.2
    finally:
        s3_server.set_latency(0)
    during = s3_server.latency_added()
    assert (during[0] - before[0], during[1] - before[1]) == (1, pytest.approx(0.2))
    client.list_buckets()
    assert s3_server.latency_added() == during  # back to no delay: nothing added


def test_server_process_stops():
    server = EmbeddedS3Server().start()
    pid = server.pid
    assert pid is not None
    server.stop()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):  # stopped and reaped: no such process
        os.kill(pid, 0)


def test_server_side_copies_take_their_size_over_the_bandwidth(s3_server, s3_client, bucket):
    import time

    s3_client.put_object(Bucket=bucket, Key="src", Body=b"x" * 2_000_000)
    before = s3_server.copies()
    s3_server.set_copy_bandwidth(10)  # MB/s: 2 MB take 0.2 s
    try:
        start = time.monotonic()
        s3_client.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
        copied = time.monotonic() - start
        upload = s3_client.create_multipart_upload(Bucket=bucket, Key="mpu")["UploadId"]
        start = time.monotonic()
        s3_client.upload_part_copy(
            Bucket=bucket,
            Key="mpu",
            UploadId=upload,
            PartNumber=1,
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceRange="bytes=0-999999",
        )
        ranged = time.monotonic() - start
        s3_client.abort_multipart_upload(Bucket=bucket, Key="mpu", UploadId=upload)
    finally:
        s3_server.set_copy_bandwidth(0)
    # The server's own count: each copy delayed by its size (the range's, for a ranged
    # copy) over the bandwidth; the wall time is at least that, however loaded the machine.
    throttled = s3_server.copies() - before
    assert (throttled.copies, throttled.bytes) == (2, 3_000_000)
    assert throttled.delayed == pytest.approx(0.2 + 0.1)
    assert copied >= 0.2 and ranged >= 0.1
    assert s3_client.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"x" * 2_000_000
    s3_client.copy_object(Bucket=bucket, Key="dst2", CopySource={"Bucket": bucket, "Key": "src"})
    unthrottled = s3_server.copies() - before - throttled
    assert unthrottled == (1, 2_000_000, 0.0)  # back to moto's own speed: no delay added


def test_started_by_hand_it_serves_until_interrupted_and_says_how_to_connect():
    """Run in the background (stdin not a terminal): it must keep serving (issue: it exited)."""
    import signal
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "magicfs.integrations.embedded_s3", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = process.stdout.readline()
        port = int(ready.split()[1])
        banner = [process.stdout.readline() for _ in range(3)]
        assert f"http://127.0.0.1:{port}" in banner[0]
        assert "AWS_ACCESS_KEY_ID=testing" in banner[1]
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        assert client.list_buckets()["Buckets"] == []  # still serving, stdin at EOF
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
    assert process.returncode is not None


def _request(connection, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, str]:
    connection.request(method, path, body=body, headers={"Content-Length": str(len(body))})
    response = connection.getresponse()
    return response.status, response.read(), response.getheader("Connection", "")


def test_connections_are_kept_alive_as_on_s3(s3_server, s3_client, bucket):
    # Several requests on one connection, as S3 and every SDK use it; the server keeps
    # each request's body to its Content-Length, so the next request is read intact.
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", s3_server.port, timeout=30)
    try:
        status, _, header = _request(connection, "PUT", f"/{bucket}/a.txt", b"first")
        assert status == 200 and header.lower() != "close"
        sock = connection.sock
        status, _, _ = _request(connection, "PUT", f"/{bucket}/b.txt", b"second object")
        assert status == 200
        status, body, _ = _request(connection, "GET", f"/{bucket}?list-type=2")
        assert status == 200 and b"<Key>a.txt</Key>" in body and b"<Key>b.txt</Key>" in body
        assert connection.sock is sock  # the same TCP connection all along
    finally:
        connection.close()
    for key, data in (("a.txt", b"first"), ("b.txt", b"second object")):
        assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == data


def test_a_request_body_the_server_does_not_read_does_not_spill_into_the_next(s3_server, bucket):
    # The control endpoint ignores its body: the rest must be skipped, not parsed as a request.
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", s3_server.port, timeout=30)
    try:
        status, _, _ = _request(
            connection, "POST", "/_magicfs/latency?ms=0", b"GET /x HTTP/1.1\r\n\r\n" * 100
        )
        assert status == 204
        status, body, _ = _request(connection, "GET", f"/{bucket}?list-type=2")
        assert status == 200 and b"ListBucketResult" in body
    finally:
        connection.close()


def test_failing_requests_answer_whole_and_the_connection_still_serves(s3_server, bucket):
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", s3_server.port, timeout=30)
    try:
        status, body, _ = _request(connection, "GET", f"/{bucket}/no-such-key")
        assert status == 404 and b"NoSuchKey" in body
        status, body, _ = _request(connection, "GET", f"/{bucket}?list-type=2")
        assert status == 200 and b"ListBucketResult" in body
    finally:
        connection.close()


def test_server_cpu_seconds_grow_with_its_work(s3_server, s3_client, bucket):
    before = s3_server.cpu_seconds()
    assert before is not None and before > 0
    for n in range(50):
        s3_client.put_object(Bucket=bucket, Key=f"k{n}", Body=b"x" * 1000)
    after = s3_server.cpu_seconds()
    assert after is not None and after > before
    assert EmbeddedS3Server().cpu_seconds() is None  # not started
