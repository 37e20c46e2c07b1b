"""The test fixtures themselves: a real S3 server over HTTP on loopback, and request counting."""

from __future__ import annotations

import urllib.parse

from magicfs.embedded_s3 import EmbeddedS3Server


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
    import time

    client = s3_server.boto3_client()
    s3_server.set_latency(200)
    try:
        start = time.monotonic()
        client.list_buckets()
        assert time.monotonic() - start >= 0.2
    finally:
        s3_server.set_latency(0)
    start = time.monotonic()
    client.list_buckets()
    assert time.monotonic() - start < 0.2


def test_server_process_stops():
    server = EmbeddedS3Server().start()
    process = server._process
    server.stop()
    assert process.poll() is not None


def test_server_side_copies_take_their_size_over_the_bandwidth(s3_server, s3_client, bucket):
    import time

    s3_client.put_object(Bucket=bucket, Key="src", Body=b"x" * 2_000_000)
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
    assert 0.2 <= copied < 2.0
    assert 0.1 <= ranged < 1.0
    assert s3_client.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"x" * 2_000_000
    start = time.monotonic()
    s3_client.copy_object(Bucket=bucket, Key="dst2", CopySource={"Bucket": bucket, "Key": "src"})
    assert time.monotonic() - start < 0.2  # back to moto's own speed


def test_started_by_hand_it_serves_until_interrupted_and_says_how_to_connect():
    """Run in the background (stdin not a terminal): it must keep serving (issue: it exited)."""
    import signal
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-m", "magicfs.embedded_s3", "--port", "0"],
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
