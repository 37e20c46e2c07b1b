"""One S3 test store, moto or Ceph RGW, for tests that run on both (``s3_target``).

A pytest plugin (``pytest_plugins`` in the root ``conftest.py``): a test that asks for
the ``target`` fixture runs once on each store of :data:`S3_TARGETS`, and
``make_committer(**kwargs)`` builds a :class:`~magicfs.MagicCommitter` writing under
``s3://<target bucket>/out``. A module that needs another store list defines its own::

    @pytest.fixture(params=S3_TARGETS)
    def target(request):
        return s3_target(request)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

#: moto (the embedded server), and Ceph RGW 16.2 marked ``rgw`` (``pytest -m rgw``).
S3_TARGETS = ["moto", pytest.param("rgw", marks=pytest.mark.rgw)]


@dataclass
class S3Target:
    """A store (``name``), s3fs options bound to it, a boto3 client, a fresh bucket."""

    name: str
    options: dict[str, Any]
    client: Any
    bucket: str
    server: Any

    def body(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


def s3_target(request: Any) -> S3Target:
    """The fixture's value for ``request.param``: the conftest fixtures of that store."""
    if request.param == "moto":
        server = request.getfixturevalue("s3_server")
        client = request.getfixturevalue("s3_client")
        bucket = request.getfixturevalue("bucket")
    else:
        server = request.getfixturevalue("rgw_server")
        client = request.getfixturevalue("rgw_client")
        bucket = request.getfixturevalue("rgw_bucket")
    return S3Target(request.param, dict(server.storage_options), client, bucket, server)


@pytest.fixture(params=S3_TARGETS)
def target(request: Any) -> S3Target:
    """The store the test runs on: moto, then Ceph RGW (marked ``rgw``)."""
    return s3_target(request)


@pytest.fixture
def make_committer(target: S3Target) -> Callable[..., Any]:
    """``make(**kwargs)``: a fresh ``MagicCommitter`` for ``s3://<target.bucket>/out``."""
    from magicfs import MagicCommitter

    def make(**kwargs: Any) -> MagicCommitter:
        options = {**target.options, "skip_instance_cache": True}
        return MagicCommitter(f"s3://{target.bucket}/out", storage_options=options, **kwargs)

    return make
