"""The adapter contract: what every deferred store's adapter must do, written once.

In the shape of zarr's ``StoreTests``: a store's test module subclasses
:class:`AdapterContract` and says how to reach one empty root of its store
(:meth:`AdapterContract.make`); every scenario here then runs against its adapter
(:class:`magicfs.stores.deferred.DeferredStore`), with no branch on the store's name.
Each declared capability (:class:`~magicfs.stores.deferred.DeferredCapabilities`) is
checked against what the store does, where a test can see it: ``lists_pending`` (a
task file's pending write is listed, or nothing is), ``discards_pending`` (discarding
it leaves nothing pending, or discards nothing). ``counts_throttling`` and
``deletes_batch_at_once`` are about requests and crashes, and are checked by the
stores' own request-count and kill tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import magicfs
from magicfs.stores.binding import DeferredStoreSpec
from magicfs.stores.deferred import DeferredStore, collect
from magicfs.stores.registry import deferred_store_for


@dataclass
class Store:
    """One root of a store under test, with its spec and an adapter of no job."""

    spec: DeferredStoreSpec
    adapter: DeferredStore
    fs: Any
    root: str  # ``bucket`` or ``container``, empty
    url: str  # the root as a URL (``s3://bucket``)
    committer_options: dict[str, Any]

    def run(self, call: Any) -> Any:
        return self.adapter.run(call)


class AdapterContract:
    """Subclass it and implement :meth:`make`."""

    def make(self, request: pytest.FixtureRequest) -> tuple[Any, str, str, dict[str, Any]]:
        """``(fs, root, root URL, committer_for options)`` of an empty root of the store."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, request: pytest.FixtureRequest) -> Store:
        fs, root, url, options = self.make(request)
        spec = deferred_store_for(fs)
        assert spec is not None, f"{fs!r} is no registered deferred store"
        adapter = spec.adapter(fs, "contract", lambda: f"{root}/scratch")
        return Store(spec, adapter, fs, root, url, options)

    def test_the_spec_declares_what_its_adapter_has(self, store: Store) -> None:
        assert store.adapter.capabilities == store.spec.capabilities

    def test_a_record_reads_back_whole_or_not_at_all(self, store: Store) -> None:
        path = f"{store.root}/records/one.json"
        assert store.run(store.adapter.aread_record(path, 100)) is None
        assert store.run(store.adapter.arecord_info(path)) is None
        store.run(store.adapter.awrite_record(path, b"0123456789"))
        assert store.run(store.adapter.aread_record(path, 100)) == b"0123456789"
        # at most limit + 1 bytes: the reader learns the record is too long
        assert store.run(store.adapter.aread_record(path, 3)) == b"0123"
        assert store.run(store.adapter.arecord_info(path))["size"] == 10
        store.run(store.adapter.awrite_record(path, b"new"))
        assert store.run(store.adapter.aread_record(path, 100)) == b"new"

    def test_listings_below_and_by_prefix(self, store: Store) -> None:
        base = f"{store.root}/list"
        for name in ("a/1", "a/b/2", "ab/3", "c"):
            store.run(store.adapter.awrite_record(f"{base}/{name}", b"x"))
        below = store.run(collect(store.adapter.alist_records(f"{base}/a")))
        assert sorted(below) == [f"{base}/a/1", f"{base}/a/b/2"]
        direct = store.run(collect(store.adapter.alist_records(f"{base}/a", recursive=False)))
        assert sorted(direct) == [f"{base}/a/1"]
        prefixed = store.run(collect(store.adapter.alist_prefixed(f"{base}/a")))
        assert sorted(prefixed) == [f"{base}/a/1", f"{base}/a/b/2", f"{base}/ab/3"]

    def test_deleting_records_absent_ones_included(self, store: Store) -> None:
        paths = [f"{store.root}/del/{n}" for n in ("1", "2")]
        for path in paths:
            store.run(store.adapter.awrite_record(path, b"x"))
        store.run(store.adapter.adelete_records([*paths, f"{store.root}/del/absent"]))
        assert store.run(collect(store.adapter.alist_records(f"{store.root}/del"))) == []

    def test_pending_writes_are_listed_and_discarded_as_declared(self, store: Store) -> None:
        capabilities = store.spec.capabilities
        committer = magicfs.committer_for(f"{store.url}/out", **store.committer_options)
        committer.setup_job()
        task = committer.task_attempt(0)
        committer.setup_task(task)
        with committer.fs.open(task.path("x.bin"), "wb") as f:
            f.write(b"staged")
        try:
            pending = store.run(collect(store.adapter.alist_pending(f"{store.root}/out/")))
            if capabilities.lists_pending:
                assert [w.path for w in pending] == [f"{store.root}/out/x.bin"]
            else:
                assert pending == []
            discarded = store.run(store.adapter.adiscard(pending))
            left = store.run(collect(store.adapter.alist_pending(f"{store.root}/out/")))
            if capabilities.discards_pending and capabilities.lists_pending:
                assert (discarded, left) == (1, [])
            elif not capabilities.discards_pending:
                assert discarded == 0
        finally:
            committer.abort_task(task)
            committer.abort_job()


def mem_deferred_root(request: pytest.FixtureRequest, root: str) -> Any:
    """The ``mem-deferred`` filesystem, with ``root`` (its staged writes and files)
    forgotten when the test ends: the in-process store's fixture for every suite."""
    import fsspec

    fs = fsspec.filesystem("mem-deferred")

    def forget() -> None:
        for _, upload_id in fs.pending(root + "/"):
            fs.discard(upload_id)
        if fs.exists(root):
            fs.rm(root, recursive=True)

    request.addfinalizer(forget)
    return fs
