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
