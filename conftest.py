"""Shared pytest fixtures: real servers on loopback, never mocks.

* ``s3_server`` (session): a moto S3 server over HTTP on a free 127.0.0.1 port, in a
  child process, always stopped at the end of the session.
* ``s3``: a fresh ``s3fs.S3FileSystem`` bound to it (no instance cache sharing).
* ``s3_client``: a boto3 client bound to it.
* ``bucket``: a new, empty bucket for each test.
* ``request_log``: records every S3 operation an s3fs instance sends (botocore hooks).
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator

import pytest

# Never reach for real AWS: no metadata service, no shared credentials or config.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ["AWS_CONFIG_FILE"] = os.devnull
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

_bucket_numbers = itertools.count()


@pytest.fixture(scope="session")
def s3_server() -> Iterator:
    from magicfs.embedded_s3 import EmbeddedS3Server

    server = EmbeddedS3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_options(s3_server) -> dict:
    """Storage options that bind s3fs to the test server."""
    return s3_server.storage_options


@pytest.fixture
def s3(s3_server):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options)
    yield fs


@pytest.fixture
def s3_client(s3_server):
    return s3_server.boto3_client()


@pytest.fixture
def bucket(s3_client) -> Iterator[str]:
    """A new empty bucket; its uploads and objects are removed afterwards."""
    name = f"test-{os.getpid()}-{next(_bucket_numbers)}"
    s3_client.create_bucket(Bucket=name)
    yield name
    _empty_bucket(s3_client, name)


def _empty_bucket(client, name: str) -> None:
    for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
        client.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=name):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=name, Delete={"Objects": keys})
    client.delete_bucket(Bucket=name)


class RequestLog:
    """Every S3 operation sent by the s3fs instances it is attached to, in order."""

    def __init__(self) -> None:
        self.operations: list[str] = []

    def attach(self, fs) -> None:
        fs.s3.meta.events.register("before-call.s3", self._record)

    def _record(self, model, **kwargs) -> None:
        self.operations.append(model.name)

    def clear(self) -> None:
        self.operations.clear()

    def counts(self) -> Counter:
        return Counter(self.operations)

    def __len__(self) -> int:
        return len(self.operations)


@pytest.fixture
def request_log() -> RequestLog:
    return RequestLog()
