"""One S3 test store, moto, Ceph RGW or SeaweedFS, for tests that run on each (``s3_target``).

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

#: moto (the embedded server), Ceph RGW 16.2 marked ``rgw`` (``pytest -m rgw``) and
#: SeaweedFS marked ``seaweed``.
S3_TARGETS = [
    "moto",
    pytest.param("rgw", marks=pytest.mark.rgw),
    pytest.param("seaweed", marks=pytest.mark.seaweed),
]

#: The conftest fixtures of each S3 store, by role. moto is named ``s3`` in the files
#: that parametrize a ``store`` (the fixture's name) and ``moto`` in those that use
#: :data:`S3_TARGETS`.
_MOTO = {"server": "s3_server", "client": "s3_client", "bucket": "bucket", "front": "fault_front"}
STORE_FIXTURES: dict[str, dict[str, str]] = {
    "s3": _MOTO,
    "moto": _MOTO,
    **{
        store: {
            "server": f"{store}_server",
            "client": f"{store}_client",
            "bucket": f"{store}_bucket",
            "front": f"{store}_fault_front",
        }
        for store in ("rgw", "seaweed")
    },
}


def store_fixture(request: Any, store: str, role: str) -> Any:
    """The value of ``store``'s conftest fixture for ``role`` (``server``, ``client``,
    ``bucket``: a new checked bucket, ``front``: the fault front before it)."""
    return request.getfixturevalue(STORE_FIXTURES[store][role])


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
    server = store_fixture(request, request.param, "server")
    client = store_fixture(request, request.param, "client")
    bucket = store_fixture(request, request.param, "bucket")
    return S3Target(request.param, dict(server.storage_options), client, bucket, server)


#: moto and Ceph RGW (marked ``rgw``): where a test needs a store's enforcement, not SeaweedFS's.
MOTO_AND_RGW = ["moto", pytest.param("rgw", marks=pytest.mark.rgw)]


def magic_committer(target: S3Target, dest: str = "out", **options: Any) -> Any:
    """A magic committer for ``s3://<bucket>/<dest>`` on ``target``, with its own client."""
    from magicfs import MagicCommitter

    storage = {**target.options, "skip_instance_cache": True}
    return MagicCommitter(f"s3://{target.bucket}/{dest}", storage_options=storage, **options)


@pytest.fixture(params=S3_TARGETS)
def target(request: Any) -> S3Target:
    """The store the test runs on: moto, Ceph RGW (marked ``rgw``), SeaweedFS (``seaweed``)."""
    return s3_target(request)


@pytest.fixture
def make_committer(target: S3Target) -> Callable[..., Any]:
    """``make(**kwargs)``: a fresh ``MagicCommitter`` for ``s3://<target.bucket>/out``."""
    from magicfs import MagicCommitter
    from magicfs.committers import MagicLayoutCommitter

    def make(**kwargs: Any) -> MagicLayoutCommitter:
        options = {**target.options, "skip_instance_cache": True}
        return MagicCommitter(f"s3://{target.bucket}/out", storage_options=options, **kwargs)

    return make
