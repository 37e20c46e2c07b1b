"""The contract suite and the task-path table on the in-process deferred store
(``mem-deferred://``, ``magicfs/stores/memory_deferred/``): staged bytes invisible until
published, as on S3 and Azure, in this process's memory; committed by the
``magic-layout`` committer. Both run in a few seconds.

What is pending is the store's staged, unpublished writes: listed by its adapter (the
deferred-store contract's ``alist_pending``) for the contract suite, by its filesystem
for the task-path table.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from helpers.adapter_contract import mem_deferred_root
from helpers.contract import CommitterContract, Pair, Target
from helpers.task_paths import Destination, TaskPathContract, TaskStore

import magicfs
from magicfs.stores.deferred import collect
from magicfs.stores.registry import deferred_store_for


class TestMemDeferredContract(CommitterContract):
    store = "mem-deferred"
    committers = ("magic-layout",)

    def make_target(self, request: pytest.FixtureRequest, pair: Pair, tmp_path: Any) -> Target:
        root = f"contract-{os.getpid()}-{tmp_path.name}"
        fs = mem_deferred_root(request, root)
        return Target(self, pair, fs, f"mem-deferred://{root}/out", {"fs": fs}, bucket=root)

    def lists_pending(self, target: Target) -> bool:
        return True

    def pending(self, target: Target) -> list[str]:
        """The names under the destination (relative) with staged, unpublished writes, as
        the store's adapter lists them (the contract's ``alist_pending``)."""
        spec = deferred_store_for(target.fs)
        assert spec is not None, f"{target.fs!r} is no registered deferred store"
        adapter = spec.adapter(target.fs, "observer", lambda: target.root)
        listing = adapter.run(collect(adapter.alist_pending(target.root + "/")))
        return sorted({w.path.removeprefix(target.root + "/") for w in listing})


class TestMemDeferredTaskPaths(TaskPathContract):
    store = "mem-deferred"
    deferred = True
    staged_bytes = "parts staged in this process's memory aimed at mem-deferred://"

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        bucket = f"t-{uuid.uuid4().hex}"
        committer = magicfs.committer_for(f"mem-deferred://{bucket}/out")
        return Destination(committer, f"{bucket}/plain", bucket=bucket)

    def parked(self, ts: TaskStore) -> list[dict]:
        """The uploads staged in this process, by final path."""
        prefix = f"{ts.bucket}/"
        return [{"Key": path.removeprefix(prefix)} for path, _ in ts.raw.pending(prefix)]
