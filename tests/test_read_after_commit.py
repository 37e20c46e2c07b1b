"""Read-after-commit in the same process: pandas, pyarrow and Dask see exactly what a job left.

fsspec keeps one filesystem instance per set of options (its instance cache) and each
instance caches its listings, so a reader in the driver's process lists what it saw
*before* a job — unless the job's end drops those listings
(:mod:`magicfs.filesystems.listings`). Each test reads a destination in the ways users
do — ``storage_options=opts`` (instance cache on, as pandas users have it) and
``job.fs`` — then runs one job operation, reads again, and asserts the exact data
files and rows every reader sees, and whether ``_SUCCESS`` is there. Per store: S3 on
moto and on Ceph RGW, Azure (Azurite), GCS (emulator), a local disk, fsspec memory.

An *interrupted* commit (for ``recover`` and ``rollback``) is made in this process: the
store given to the job fails the publish of ``part-1.parquet`` and, from then on, every
request that changes something (a botocore hook on S3, an Azure SDK pipeline policy,
a wrapper filesystem on the rename stores), so the commit's own roll-back fails too and
the journal is left with ``part-0.parquet`` published. A fresh committer with the user's
options then finishes it (``commit_job()``) or rolls it back (``abort_job()``).

Before listings were dropped, these tests failed on S3 (moto and RGW: commits, the
abort, recoveries and roll-backs) and on Azure (the replace and fail-mode commits).
Elsewhere they guard against regressions: local disks and fsspec memory cache no
listing, and on GCS the manifest committer renames through the very instance the
user's options build, whose own calls keep its listings.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import dask
import dask.dataframe as dd
import fsspec
import pandas as pd
import pyarrow.dataset as ds
import pytest
from helpers.faulty_fs import faulty

import magicfs
from magicfs.errors import JobCommitError

STORES = ["moto", pytest.param("rgw", marks=pytest.mark.rgw), "azure", "gcs", "local", "memory"]

#: The file whose publish fails in an interrupted commit (its task is the job's second).
FAILING = "part-1.parquet"


@dataclass
class Store:
    """One store: the destination URL and the options a user passes (instance cache on)."""

    name: str
    url: str
    options: dict[str, Any]
    #: ``failing_fs()``: a store filesystem, not cached, whose publish of FAILING fails and,
    #: from then on, every change.
    failing_fs: Callable[[], Any]

    def user_fs(self) -> Any:
        """The instance pandas and Dask build from ``storage_options`` (fsspec's cache)."""
        return fsspec.core.url_to_fs(self.url, **self.options)[0]

    @property
    def path(self) -> str:
        return fsspec.core.url_to_fs(self.url, **self.options)[1]


# --- stores -----------------------------------------------------------------------------------


@pytest.fixture(params=STORES)
def store(request, tmp_path) -> Iterator[Store]:
    name = request.param
    if name in ("moto", "rgw"):
        server = request.getfixturevalue("s3_server" if name == "moto" else "rgw_server")
        bucket = request.getfixturevalue("bucket" if name == "moto" else "rgw_bucket")
        options = dict(server.storage_options)
        yield Store(name, f"s3://{bucket}/ds", options, lambda: failing_s3(options))
    elif name == "azure":
        options = dict(request.getfixturevalue("azurite_server").storage_options)
        container = request.getfixturevalue("azure_container")
        yield Store(name, f"abfs://{container}/ds", options, lambda: failing_azure(options))
    elif name == "gcs":
        options = dict(request.getfixturevalue("gcs_server").storage_options)
        bucket = request.getfixturevalue("gcs_bucket")
        url = f"gs://{bucket}/ds"
        yield Store(name, url, options, lambda: failing_rename_store(url, options))
    elif name == "local":
        (tmp_path / "ds").mkdir()  # pandas writes no directory of its own
        url = f"file://{tmp_path}/ds"
        yield Store(name, url, {}, lambda: failing_rename_store(url, {}))
    else:
        root = f"/read-after-commit-{uuid.uuid4().hex[:8]}"
        memory = fsspec.filesystem("memory")
        memory.mkdir(root)
        url = f"memory://{root}/ds"
        yield Store(name, url, {}, lambda: failing_rename_store(url, {}))
        memory.rm(root, recursive=True)


class Trip:
    """Set by the publish of FAILING; from then on every change fails (the store is
    gone for this driver), so the commit's roll-back fails too."""

    def __init__(self) -> None:
        self.tripped = False

    def check(self, publishing: bool, target: str) -> bool:
        if publishing and target.endswith("/" + FAILING):
            self.tripped = True
        return self.tripped


def failing_s3(options: dict[str, Any]) -> Any:
    import s3fs
    from helpers.faults import InjectedFault

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    trip = Trip()
    reads = ("GetObject", "HeadObject", "ListObjectsV2", "ListMultipartUploads", "ListParts")

    def fail(params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        publishing = model.name == "CompleteMultipartUpload"
        if model.name not in reads and trip.check(publishing, params.get("Key", "")):
            raise InjectedFault(f"injected: {model.name} {params.get('Key')}")

    fs.s3.meta.events.register("before-parameter-build.s3", fail)
    return fs


def failing_azure(options: dict[str, Any]) -> Any:
    import adlfs
    from azure.core.exceptions import ServiceRequestError
    from azure.core.pipeline.policies import AsyncHTTPPolicy

    trip = Trip()

    class FailChanges(AsyncHTTPPolicy):
        async def send(self, request: Any) -> Any:
            http = request.http_request
            path = http.url.split("?")[0]
            publishing = http.method == "PUT" and "comp=blocklist" in http.url
            if http.method in ("PUT", "DELETE") and trip.check(publishing, path):
                raise ServiceRequestError(f"injected: {http.method} {path}")
            return await self.next.send(request)

    fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **options)
    policies = fs.service_client._pipeline._impl_policies  # the SDK's per-client chain
    policy = FailChanges()
    policy.next = policies[0]
    policies.insert(0, policy)
    return fs


def failing_rename_store(url: str, options: dict[str, Any]) -> Any:
    fs = faulty(fsspec.core.url_to_fs(url, **options)[0])
    trip = Trip()
    for operation in ("mv", "cp_file", "rm_file", "rm", "pipe_file"):
        publishing = operation in ("mv", "cp_file")
        fs.fail(operation, when=lambda *paths, p=publishing: trip.check(p, str(paths[-1])))
    return fs


# --- jobs and readers -------------------------------------------------------------------------


def write_files(job: magicfs.JobWriter, names: list[str]) -> None:
    """One task per file, each file one row naming itself."""
    for index, name in enumerate(names):
        with job.task(index) as task:
            frame = pd.DataFrame({"name": [name]})
            frame.to_parquet(task.path(name), filesystem=job.fs, index=False)


def read_back(store: Store, job_fs: Any) -> dict[str, Any]:
    """What every reader sees, through the user's options and through ``job.fs``:
    ``"<what> <way>"`` -> data files (pyarrow) or rows (each reader), sorted, and whether
    ``_SUCCESS`` is listed."""
    seen: dict[str, Any] = {}
    for way, fs in (("opts", store.user_fs()), ("job.fs", job_fs)):
        for what, value in read_one_way(store, fs, way == "opts").items():
            seen[f"{what} {way}"] = value
    return seen


def read_one_way(store: Store, fs: Any, as_users_do: bool) -> dict[str, Any]:
    """pyarrow given ``fs``; pandas and Dask given the URL and ``storage_options`` (as
    users do: fsspec's cached instance, which is ``fs``) or else ``fs`` itself."""
    dataset = ds.dataset(store.path, filesystem=fs, format="parquet")
    if as_users_do:
        frame = pd.read_parquet(store.url, storage_options=store.options)
        lazy = dd.read_parquet(store.url, storage_options=store.options)
    else:
        frame = pd.read_parquet(store.path, filesystem=fs)
        lazy = dd.read_parquet(store.path, filesystem=fs)
    with dask.config.set(scheduler="sync"):
        computed = lazy.compute()
    return {
        "pyarrow files": sorted(f.rsplit("/", 1)[-1] for f in dataset.files),
        "pyarrow rows": sorted(dataset.to_table()["name"].to_pylist()),
        "pandas rows": sorted(frame["name"]),
        "dask rows": sorted(computed["name"]),
        "_SUCCESS": fs.exists(f"{store.path}/_SUCCESS"),
    }


def exactly(names: list[str], success: bool) -> dict[str, Any]:
    """What :func:`read_back` must return when the destination holds exactly ``names``."""
    expected: dict[str, Any] = {}
    for way in ("opts", "job.fs"):
        for what in ("pyarrow files", "pyarrow rows", "pandas rows", "dask rows"):
            expected[f"{what} {way}"] = sorted(names)
        expected[f"_SUCCESS {way}"] = success
    return expected


def existing_data(store: Store) -> None:
    """The destination's data before the job under test: ``old-0``, written by pandas
    (no job), and read once with pandas: the user's cached instance has listed it."""
    frame = pd.DataFrame({"name": ["old-0.parquet"]})
    frame.to_parquet(f"{store.url}/old-0.parquet", storage_options=store.options, index=False)
    read = pd.read_parquet(store.url, storage_options=store.options)
    assert list(read["name"]) == ["old-0.parquet"]


def first_job(store: Store) -> None:
    """As :func:`existing_data`, written by a job: with its ``_SUCCESS``."""
    with magicfs.write_job(store.url, storage_options=store.options) as job:
        write_files(job, ["old-0.parquet"])
    read = pd.read_parquet(store.url, storage_options=store.options)
    assert list(read["name"]) == ["old-0.parquet"]
    assert store.user_fs().exists(f"{store.path}/_SUCCESS")


# --- commit and abort ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["append", "replace"])
def test_a_commit_is_read_back_exactly(store, mode):
    existing_data(store)
    with magicfs.write_job(store.url, storage_options=store.options, conflict_mode=mode) as job:
        assert read_back(store, job.fs) == exactly(["old-0.parquet"], False)  # the job reads first
        write_files(job, ["new-0.parquet", "new-1.parquet"])
    kept = ["old-0.parquet"] if mode == "append" else []
    assert read_back(store, job.fs) == exactly([*kept, "new-0.parquet", "new-1.parquet"], True)


def test_a_commit_into_a_new_destination_in_fail_mode_is_read_back_exactly(store):
    user_fs = store.user_fs()
    parent = store.path.rsplit("/", 1)[0]
    user_fs.ls(parent)  # the reader lists the parent: its listing is cached
    assert user_fs.find(store.path) == []
    with magicfs.write_job(store.url, storage_options=store.options, conflict_mode="fail") as job:
        write_files(job, ["new-0.parquet"])
    assert read_back(store, job.fs) == exactly(["new-0.parquet"], True)


def test_an_aborted_job_is_read_back_exactly(store):
    """The aborted job's set-up deleted the old ``_SUCCESS``; its files never appear."""
    first_job(store)
    job = magicfs.write_job(store.url, storage_options=store.options, conflict_mode="replace")
    with pytest.raises(RuntimeError, match="the driver gives up"), job:
        assert read_back(store, job.fs) == exactly(["old-0.parquet"], False)
        write_files(job, ["new-0.parquet"])
        raise RuntimeError("the driver gives up")
    assert read_back(store, job.fs) == exactly(["old-0.parquet"], False)


# --- an interrupted commit, finished or rolled back ---------------------------------------------


def interrupted_commit(store: Store, mode: str) -> str:
    """A commit of part-0 and part-1 over ``old-0`` that stops with part-0 published and
    its journal left: its roll-back failed too (``replace`` deletes old-0 only after the
    new files and their record, so old-0 is still there); the job's id."""
    existing_data(store)
    job = magicfs.write_job(store.url, fs=store.failing_fs(), threads=1, conflict_mode=mode)
    left = "Rolling the job back failed too"
    with pytest.raises(JobCommitError, match=left), job:
        write_files(job, ["part-0.parquet", FAILING])
    return job.job_id


@pytest.mark.parametrize(
    ("finish", "mode"), [("recover", "append"), ("rollback", "append"), ("recover", "replace")]
)
def test_an_interrupted_commit_finished_or_rolled_back_is_read_back_exactly(store, finish, mode):
    job_id = interrupted_commit(store, mode)
    committer = magicfs.committer_for(store.url, job_id=job_id, storage_options=store.options)
    old = ["old-0.parquet"]  # replace mode too: it deletes old-0 after publishing
    # Someone looks at the half-published destination before finishing it: every reader,
    # Dask too (it reads every *.parquet below the path, hidden names included; part-1,
    # still in the unfinished commit's _temporary/ on the rename stores, is staged under a
    # name that does not end in .parquet).
    seen = read_back(store, committer.fs)
    assert seen == exactly([*old, "part-0.parquet"], False)
    if finish == "recover":
        committer.commit_job()
        kept = old if mode == "append" else []
        expected = exactly([*kept, "part-0.parquet", FAILING], True)
    else:
        committer.abort_job()
        expected = exactly(old, False)
    assert read_back(store, committer.fs) == expected


# --- the clean-up after a commit ----------------------------------------------------------------


def journal_deletes_held(options: dict[str, Any], release: threading.Event) -> Any:
    """An S3 store (not cached) whose delete of a job's journal (the clean-up's last
    delete) waits until ``release`` is set: the clean-up is still running meanwhile."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)

    async def hold(params: dict[str, Any], **kwargs: Any) -> None:
        keys = [params.get("Key", "")]
        keys += [o["Key"] for o in params.get("Delete", {}).get("Objects", [])]
        if any(key.endswith("/_magicfs_commit.json") for key in keys):
            deadline = time.monotonic() + 60
            while not release.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # on the IO loop: other requests go on meanwhile

    for operation in ("DeleteObject", "DeleteObjects"):
        fs.s3.meta.events.register(f"before-parameter-build.s3.{operation}", hold)
    return fs


@pytest.mark.parametrize("cleanup", ["background", "off"])
def test_the_job_tree_leaves_the_listings_when_the_clean_up_ends(s3_server, bucket, cleanup):
    """A clean-up after the commit (in the background, or ``cleanup_job()`` for
    ``cleanup="off"``) deletes the job's tree, which a reader listed meanwhile."""
    options, path = dict(s3_server.storage_options), f"{bucket}/ds"
    release = threading.Event()
    fs = journal_deletes_held(options, release)
    job = magicfs.write_job(f"s3://{path}", fs=fs, cleanup=cleanup)
    with job:
        write_files(job, ["new-0.parquet"])
    user_fs = fsspec.filesystem("s3", **options)
    for lister in (user_fs, job.fs):
        listed = {name.rsplit("/", 1)[-1] for name in lister.ls(path, detail=False)}
        assert listed == {"_SUCCESS", "_magicfs", "new-0.parquet", f"__magic_job-{job.job_id}"}
    release.set()
    if cleanup == "background":
        assert job.committer.wait_cleanup(timeout=60) is None
    else:
        job.committer.cleanup_job()
    for lister in (user_fs, job.fs):
        listed = {name.rsplit("/", 1)[-1] for name in lister.ls(path, detail=False)}
        assert listed == {"_SUCCESS", "_magicfs", "new-0.parquet"}
