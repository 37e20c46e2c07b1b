"""The contract suite and the task-path table on the rename stores: a local disk
(``file``: the manifest committer and the classic ``file-v1`` and ``file-v2``), memory
and GCS (the GCS emulator), both with the manifest committer.

Nothing is pending apart from the destination's entries: what a job leaves is hidden
entries under it (its ``_temporary`` tree).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import fsspec
import pytest
from helpers.contract import CommitterContract, Pair, Target
from helpers.task_paths import Destination, TaskPathContract

import magicfs


class TestLocalContract(CommitterContract):
    store = "file"
    committers = ("file-v1", "file-v2", "manifest")

    def make_target(self, request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
        fs = fsspec.filesystem("file")
        return Target(self, pair, fs, f"file://{tmp_path}/out", {"fs": fs})


class TestMemoryContract(CommitterContract):
    store = "memory"
    committers = ("manifest",)

    def make_target(self, request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
        fs = fsspec.filesystem("memory")
        root = f"/contract-{os.getpid()}-{tmp_path.name}"
        request.addfinalizer(lambda: fs.rm(root, recursive=True) if fs.exists(root) else None)
        return Target(self, pair, fs, f"memory://{root}/out", {"fs": fs})


class TestGcsContract(CommitterContract):
    store = "gcs"
    committers = ("manifest",)

    def make_target(self, request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
        bucket = request.getfixturevalue("gcs_bucket")
        fs = request.getfixturevalue("gcs")
        return Target(self, pair, fs, f"gs://{bucket}/out", {"fs": fs})


class TestLocalTaskPaths(TaskPathContract):
    store = "file"
    appends = True

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        root = f"{tmp_path}/plain"
        os.makedirs(root)
        return Destination(magicfs.committer_for(f"file://{tmp_path}/out"), root)


class TestMemoryTaskPaths(TaskPathContract):
    store = "memory"
    appends = True

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        name = f"t-{uuid.uuid4().hex}"
        return Destination(magicfs.committer_for(f"memory://{name}/out"), f"/{name}/plain")


class TestGcsTaskPaths(TaskPathContract):
    store = "gcs"

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        bucket = request.getfixturevalue("gcs_bucket")
        committer = magicfs.committer_for(f"gs://{bucket}/out", fs=request.getfixturevalue("gcs"))
        return Destination(committer, f"{bucket}/plain")
