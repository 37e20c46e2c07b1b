"""``magicfs.install()`` is a drop-in: s3fs's, adlfs's and gcsfs's classes stay theirs (issue 54).

After ``install()`` the class fsspec builds for ``s3://`` (``abfs://``, ``gs://``) is a
subclass of the store's own class: its public and async API, root paths, ``dircache``,
instance cache (``current()``, ``skip_instance_cache``, ``clear_instance_cache()``)
are the store's, on moto, Azurite and fake-gcs-server, compared with the store's own
class side by side; only task paths differ. s3fs's whole test suite is run through it by
``tests/test_s3fs_suite.py``.
"""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys

import fsspec
import pytest
from helpers import data_files, object_keys, pending_uploads, visible_keys

import magicfs
from magicfs.errors import UnsupportedTaskOperation
from magicfs.names import MARKER_SUFFIX
from magicfs.paths import staged_name


@pytest.fixture
def installed():
    """``magicfs.install()`` for one test; always undone."""
    magicfs.install()
    yield
    magicfs.uninstall()


def _store(request, name):
    """``(protocol, the store's own class, storage options)`` of one store's server."""
    if name == "s3":
        import s3fs

        return "s3", s3fs.S3FileSystem, request.getfixturevalue("s3_options")
    if name == "azure":
        import adlfs

        options = request.getfixturevalue("azurite_server").storage_options
        return "abfs", adlfs.AzureBlobFileSystem, options
    import gcsfs

    # fake-gcs-server: it lists buckets (gcp-storage-emulator answers 501)
    options = request.getfixturevalue("fake_gcs_server").storage_options
    return "gs", gcsfs.GCSFileSystem, options


@pytest.fixture(params=["s3", "azure", "gcs"])
def store(request):
    return _store(request, request.param)


@pytest.fixture(params=["azure", "gcs"])
def rename_store(request):
    return _store(request, request.param)


_roots = iter(range(1_000_000))


def _fresh_root(store):
    """A new empty bucket or container, made and removed with the store's own class."""
    _, cls, options = store
    plain = cls(skip_instance_cache=True, **options)
    name = f"install-{next(_roots)}-{id(store) % 10_000}"
    plain.mkdir(name)
    yield name
    plain.invalidate_cache()
    plain.rm(name, recursive=True)


@pytest.fixture
def root(store):
    yield from _fresh_root(store)


@pytest.fixture
def rename_root(rename_store):
    yield from _fresh_root(rename_store)


# --- the class: the store's own ------------------------------------------------------------------


def test_the_installed_class_is_the_stores_own(installed, store):
    protocol, cls, options = store
    fs = fsspec.filesystem(protocol, **options)
    assert isinstance(fs, cls) and type(fs) is not cls
    assert fsspec.get_filesystem_class(protocol) is type(fs)
    # every public name of the store's class, and every coroutine of its async API
    names = [name for name in dir(cls) if not name.startswith("__")]
    assert sorted(set(names) - set(dir(fs))) == []
    coroutines = [name for name in names if asyncio.iscoroutinefunction(getattr(cls, name))]
    assert "_ls" in coroutines and "_cat_file" in coroutines
    assert [name for name in coroutines if not asyncio.iscoroutinefunction(getattr(fs, name))] == []
    magicfs.uninstall()
    assert fsspec.get_filesystem_class(protocol) is cls
    assert type(fsspec.filesystem(protocol, **options)) is cls


def test_s3fs_api_named_by_the_issue_is_s3fs_own(installed, s3_options, bucket):
    import s3fs

    fs = fsspec.filesystem("s3", **s3_options)
    plain = s3fs.S3FileSystem(skip_instance_cache=True, **s3_options)
    fs.pipe_file(f"{bucket}/a.txt", b"alpha")
    assert type(fs.s3).__name__ == type(plain.s3).__name__ == "S3"  # aiobotocore's client
    assert fs.connect() is fs.s3
    assert fs.loop is plain.loop  # fsspec's IO loop
    assert fs.split_path(f"s3://{bucket}/a.txt") == (bucket, "a.txt", None)
    assert (fs.version_aware, fs.req_kw, fs.default_block_size) == (
        plain.version_aware,
        plain.req_kw,
        plain.default_block_size,
    )
    assert fs.list_multipart_uploads(bucket) == []
    assert fs.url(f"{bucket}/a.txt").startswith(
        f"{s3_options['client_kwargs']['endpoint_url']}/{bucket}/a.txt?"
    )
    fs.put_tags(f"{bucket}/a.txt", {"k": "v"})
    assert plain.get_tags(f"{bucket}/a.txt") == {"k": "v"}
    with pytest.raises(ValueError, match="non-version aware"):  # s3fs's own refusal
        fs.object_version_info(f"{bucket}/a.txt")
    assert asyncio.run(_async_cat(s3_options, f"{bucket}/a.txt")) == b"alpha"


async def _async_cat(options, path):
    fs = fsspec.filesystem("s3", asynchronous=True, skip_instance_cache=True, **options)
    session = await fs.set_session()
    try:
        return await fs._cat_file(path)
    finally:
        await session.close()


# --- root paths -------------------------------------------------------------------------------


def _outcome(call, *args):
    """What a call gives: its value, or the type of what it raised."""
    try:
        return call(*args)
    except Exception as e:
        return type(e)


@pytest.mark.parametrize("path", ["", "/", "ROOT"])
def test_root_paths_behave_as_the_stores_own(installed, store, root, path):
    protocol, cls, options = store
    path = f"{protocol}://" if path == "ROOT" else path
    fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
    plain = cls(skip_instance_cache=True, **options)
    for method in ("ls", "isdir", "isfile", "exists", "info"):
        assert _outcome(getattr(fs, method), path) == _outcome(getattr(plain, method), path)
    assert root in [name.rstrip("/") for name in fs.ls(path, detail=False)]


# --- the dircache -------------------------------------------------------------------------------


def test_the_dircache_is_the_stores_own(installed, store, root):
    protocol, cls, options = store
    fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
    plain = cls(skip_instance_cache=True, **options)
    fs.pipe_file(f"{root}/d/a.txt", b"alpha")
    listed = fs.ls(f"{root}/d", detail=False)
    assert listed == plain.ls(f"{root}/d", detail=False) == [f"{root}/d/a.txt"]
    assert sorted(fs.dircache) == sorted(plain.dircache)
    assert f"{root}/d" in fs.dircache
    fs.invalidate_cache(f"{root}/d")
    assert f"{root}/d" not in fs.dircache


# --- the instance cache -------------------------------------------------------------------------


def test_instance_caching_follows_the_stores_rules(installed, store):
    protocol, cls, options = store
    kind = fsspec.get_filesystem_class(protocol)
    kind.clear_instance_cache()
    one = fsspec.filesystem(protocol, **options)
    assert fsspec.filesystem(protocol, **options) is one
    assert kind.current() is one
    fresh = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
    assert fresh is not one and fsspec.filesystem(protocol, **options) is one
    kind.clear_instance_cache()
    assert fsspec.filesystem(protocol, **options) is not one
    # the store's own class keeps its own cache
    assert cls(**options) is cls(**options) and not isinstance(cls(**options), kind)


def test_fresh_s3_filesystems_never_share_a_session(installed, s3_options, bucket):
    fs = fsspec.filesystem("s3", **s3_options)
    fs.pipe_file(f"{bucket}/a.txt", b"alpha")
    fresh = fsspec.filesystem("s3", skip_instance_cache=True, **s3_options)
    assert fresh.cat_file(f"{bucket}/a.txt") == b"alpha"
    assert fresh.s3 is not fs.s3
    # an async use in a loop that then closes ...
    assert asyncio.run(_async_cat(s3_options, f"{bucket}/a.txt")) == b"alpha"
    # ... leaves later filesystems, cached or fresh, with working sessions
    assert fsspec.filesystem("s3", **s3_options).cat_file(f"{bucket}/a.txt") == b"alpha"
    later = fsspec.filesystem("s3", skip_instance_cache=True, **s3_options)
    assert later.cat_file(f"{bucket}/a.txt") == b"alpha"
    # the task paths' store is private to its filesystem, with a session of its own
    task = f"{bucket}/out/__magic/j/t/__base/x.csv"
    fs.pipe_file(task, b"x")
    fs.rm(task)
    assert fs.magicfs_store is not fs and fs.magicfs_store.s3 is not fs.s3
    assert fs.magicfs_store is not fresh.magicfs_store
    assert pending_uploads_of(fs, bucket) == []


def pending_uploads_of(fs, bucket):
    return fs.list_multipart_uploads(bucket)


# --- task paths keep their guarantees -------------------------------------------------------------


@pytest.mark.parks_uploads("the filesystem alone: no job commits or sweeps its deferred uploads")
def test_task_paths_defer_and_plain_paths_write_through(installed, s3_options, s3_client, bucket):
    fs = fsspec.filesystem("s3", **s3_options)
    task = f"{bucket}/out/__magic/j/t/__base/x.csv"
    fs.pipe_file(task, b"deferred")
    with fsspec.open(f"s3://{bucket}/plain.csv", "wb", **s3_options) as f:
        f.write(b"immediate")
    assert visible_keys(s3_client, bucket) == ["plain.csv"]
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/x.csv"]
    assert fs.info(task)["size"] == len(b"deferred")
    # methods with no task-path meaning are refused there, before any request
    keys = object_keys(s3_client, bucket)
    with pytest.raises(UnsupportedTaskOperation, match="the file the task is writing"):
        fs.url(task)
    with pytest.raises(UnsupportedTaskOperation, match=r"put_tags\(\) is not done on a task"):
        fs.put_tags(task, {"k": "v"})
    assert object_keys(s3_client, bucket) == keys
    marker = next(key for key in keys if key.endswith(staged_name("x.csv") + MARKER_SUFFIX))
    assert s3_client.get_object_tagging(Bucket=bucket, Key=marker)["TagSet"] == []


@pytest.mark.parks_uploads("the filesystem alone: no job commits or sweeps its deferred uploads")
def test_pickled_where_install_never_ran_it_still_defers(installed, s3_options, s3_client, bucket):
    import s3fs

    fs = fsspec.filesystem("s3", **s3_options)
    assert pickle.loads(pickle.dumps(fs)) is fs  # the same options: the cached instance
    script = (
        "import pickle, sys, fsspec, s3fs\n"
        "fs = pickle.loads(sys.stdin.buffer.read())\n"
        "assert isinstance(fs, s3fs.S3FileSystem), type(fs)\n"
        "assert fsspec.get_filesystem_class('s3') is s3fs.S3FileSystem\n"
        f"fs.pipe_file('{bucket}/out/__magic/j/t/__base/remote.csv', b'from a child')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(fs), capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr.decode()
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/remote.csv"]
    assert visible_keys(s3_client, bucket) == []
    assert isinstance(fs, s3fs.S3FileSystem)


def test_task_paths_on_azure_and_gcs_go_to_the_attempt_directory(
    installed, rename_store, rename_root
):
    protocol, cls, options = rename_store
    fs = fsspec.filesystem(protocol, **options)
    dest = f"{protocol}://{rename_root}/out"
    # Azure: the manifest committer, the one whose task paths a filesystem without
    # block_lists=True writes (docs/stores/azure.md)
    job = magicfs.write_job(dest, committer="manifest", storage_options=options)
    with job, job.task(0) as task:
        fs.pipe_file(task.path("x.csv"), b"task file")
        assert fs.cat_file(task.path("x.csv")) == b"task file"
        assert fs.info(task.path("x.csv"))["size"] == len(b"task file")
        assert not cls(skip_instance_cache=True, **options).exists(f"{rename_root}/out/x.csv")
        with pytest.raises(UnsupportedTaskOperation, match=r"url\(\) is not done on a task"):
            fs.url(task.path("x.csv"))
    plain = cls(skip_instance_cache=True, **options)
    assert plain.cat_file(f"{rename_root}/out/x.csv") == b"task file"
    assert data_files(sorted(plain.ls(f"{rename_root}/out", detail=False))) == [
        f"{rename_root}/out/_SUCCESS",
        f"{rename_root}/out/x.csv",
    ]


def test_pickles_where_s3fs_names_the_installed_class(installed, s3_options, monkeypatch):
    """s3fs's own suite run through install() rebinds ``s3fs.S3FileSystem`` (and
    ``s3fs.core``'s) to the installed class; pickling must not need the old binding."""
    import s3fs
    import s3fs.core

    kind = fsspec.get_filesystem_class("s3")
    monkeypatch.setattr(s3fs, "S3FileSystem", kind)
    monkeypatch.setattr(s3fs.core, "S3FileSystem", kind)
    fs = kind(**s3_options)
    assert pickle.loads(pickle.dumps(fs)) is fs
    fresh = kind(skip_instance_cache=True, **s3_options)
    back = pickle.loads(pickle.dumps(fresh))
    assert type(back) is kind and back.storage_options == fresh.storage_options
