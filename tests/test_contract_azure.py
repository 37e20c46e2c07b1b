"""The contract suite and the task-path table on Azure Blob (Azurite): the ``manifest``
committer (renames out of a hidden tree) and ``block-list`` (S3's deferred semantics:
blocks staged on the final blobs instead of multipart uploads, published by one Put Block
List per file).

What is pending with ``block-list`` is the blobs holding staged blocks and no committed
one, listed with the Azure SDK: invisible to readers and to adlfs's listings alike, and
no request deletes them, so those of files deleted or never published stay.
"""

from __future__ import annotations

from typing import Any

import fsspec.asyn
import pytest
from helpers.contract import CommitterContract, Pair, Target
from helpers.task_paths import Destination, TaskPathContract, TaskStore

import magicfs


def staged_blobs(fs: Any, container: str, prefix: str = "") -> list[str]:
    """Blobs of ``container`` under ``prefix`` holding staged blocks and no committed one
    (adlfs ``fs``)."""

    async def names(include: list[str] | None) -> set[str]:
        client = fs.service_client.get_container_client(container)
        listing = client.list_blobs(name_starts_with=prefix or None, include=include)
        return {item.name async for item in listing}

    staged = fsspec.asyn.sync(fs.loop, names, ["uncommittedblobs"])
    return sorted(staged - fsspec.asyn.sync(fs.loop, names, None))


class TestAzureContract(CommitterContract):
    store = "abfs"
    committers = ("manifest", "block-list")

    def make_target(self, request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
        container = request.getfixturevalue("azure_container")
        fs = request.getfixturevalue("abfs")
        # Both committers are named: the default is block-list's.
        return Target(self, pair, fs, f"abfs://{container}/out", {"fs": fs}, bucket=container)

    def lists_pending(self, target: Target) -> bool:
        return target.kind.deferred_writes  # block-list; manifest: the hidden tree

    def pending(self, target: Target) -> list[str]:
        """block-list: the blobs under the destination (relative) that hold staged blocks
        and are not published; manifest: the hidden entries left under the destination."""
        if not target.kind.deferred_writes:
            return target.hidden()
        container, _, blob = target.root.partition("/")
        prefix = blob + "/"
        return [name.removeprefix(prefix) for name in staged_blobs(target.fs, container, prefix)]


class TestAzureInMemoryContract(TestAzureContract):
    """The block-list committer with ``in_memory=True``: its attempts' commits stay in
    the process that set them up (a commit anywhere else is refused)."""

    committers = ("block-list",)
    committer_options = {"in_memory": True}


class TestAzureTaskPaths(TaskPathContract):
    """The manifest committer on Azure: a rename store."""

    store = "abfs"

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        container = request.getfixturevalue("azure_container")
        fs = request.getfixturevalue("abfs")
        committer = magicfs.committer_for(f"abfs://{container}/out", committer="manifest", fs=fs)
        return Destination(committer, f"{container}/plain", bucket=container)


class TestAzureBlockListTaskPaths(TestAzureTaskPaths):
    """The block-list committer: blocks staged on the final blobs."""

    store = "abfs-block-list"
    deferred = True
    staged_bytes = "uncommitted blocks staged on abfs://"
    discards_pending = False

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        container = request.getfixturevalue("azure_container")
        fs = request.getfixturevalue("abfs")
        committer = magicfs.committer_for(f"abfs://{container}/out", committer="block-list", fs=fs)
        return Destination(committer, f"{container}/plain", bucket=container)

    def parked(self, ts: TaskStore) -> list[dict]:
        """The container's blobs holding staged blocks and no committed one (``Key``: the
        blob name, listed with the Azure SDK)."""
        return [{"Key": name} for name in staged_blobs(ts.raw, ts.bucket)]
