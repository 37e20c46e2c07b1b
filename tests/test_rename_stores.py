"""The rename stores the manifest committer targets, as adlfs and gcsfs see them on emulators.

Azure Blob runs on Azurite, GCS on gcp-storage-emulator, both real processes on
127.0.0.1. These tests pin down the store behaviour the committer relies on: listing,
``info()`` and its etags, "rename" as ``cp_file`` + ``rm_file`` (``mv`` is broken or
takes ~34 s a file on these emulators), recursive delete, and that directories are
only implied by the objects below them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from fsspec import AbstractFileSystem
from helpers.servers import accepts_connections

ODD_NAME = "a b ü€.csv"  # a space and non-ASCII: the committer must not mangle either

# Which info() keys change when an object is written again (etags), and which carry a
# hash of the content, per store. Measured on the emulators; see the tests below.
ETAG_KEYS = {"abfs": ["etag"], "gcs": ["etag", "generation"]}
CONTENT_HASH_KEYS = {"abfs": ["content_settings.content_md5"], "gcs": ["md5Hash", "crc32c"]}
# Does cp_file keep the source's etag? Azure gives the copy a new etag (as real Azure
# Blob does). The GCS emulator derives its etag from the MD5 of the content, so a copy
# keeps it; real GCS derives it from the generation and changes it. A committer must
# therefore not expect etags to survive a copy on either store.
ETAG_SURVIVES_COPY = {"abfs": False, "gcs": True}


@dataclass
class Store:
    """One emulated store: a filesystem, the container or bucket of this test, a factory."""

    name: str
    fs: AbstractFileSystem
    root: str
    new_client: Callable[[], AbstractFileSystem]

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])


@pytest.fixture(params=["abfs", "gcs"])
def store(request) -> Store:
    """Each test runs against both stores; only the emulator a test uses is started."""
    if request.param == "abfs":
        import adlfs

        options = request.getfixturevalue("azurite_server").storage_options
        fs, root = request.getfixturevalue("abfs"), request.getfixturevalue("azure_container")
        factory = adlfs.AzureBlobFileSystem
    else:
        import gcsfs

        options = request.getfixturevalue("gcs_server").storage_options
        fs, root = request.getfixturevalue("gcs"), request.getfixturevalue("gcs_bucket")
        factory = gcsfs.GCSFileSystem
    return Store(request.param, fs, root, lambda: factory(skip_instance_cache=True, **options))


def lookup(info: dict, dotted: str):
    """``info["content_settings"]["content_md5"]`` for ``"content_settings.content_md5"``."""
    value = info
    for key in dotted.split("."):
        value = value[key]
    return value


def test_pipe_and_cat_round_trip_bytes(store: Store):
    files = {
        store.path("out", ODD_NAME): "ünïcode\n".encode(),
        store.path("out", "empty"): b"",
        store.path("out", "year=2024", "part-0000.bin"): bytes(range(256)) * 64,
    }
    store.fs.pipe(files)

    reader = store.new_client()  # another client: the data is on the server, not in a cache
    assert reader.cat(list(files)) == files
    assert reader.cat_file(store.path("out", "year=2024", "part-0000.bin"), start=250, end=260) == (
        bytes(range(250, 256)) + bytes(range(4))
    )
    assert reader.info(store.path("out", "empty"))["size"] == 0


def test_ls_and_find_show_files_and_implied_directories(store: Store):
    store.fs.pipe(
        {
            store.path("out", ODD_NAME): b"1",
            store.path("out", "year=2024", "p0"): b"22",
            store.path("out", "year=2024", "deep", "p1"): b"333",
            store.path("outside"): b"4",
        }
    )
    reader = store.new_client()

    assert reader.find(store.path("out")) == sorted(
        [
            store.path("out", ODD_NAME),
            store.path("out", "year=2024", "deep", "p1"),
            store.path("out", "year=2024", "p0"),
        ]
    )
    assert sorted(reader.ls(store.path("out"), detail=False)) == [
        store.path("out", ODD_NAME),
        store.path("out", "year=2024"),
    ]
    # detail=True spelled out: adlfs's ls() defaults to names only, unlike fsspec's.
    entries = reader.ls(store.path("out", "year=2024"), detail=True)
    listing = {entry["name"]: entry for entry in entries}
    assert {name: entry["type"] for name, entry in listing.items()} == {
        store.path("out", "year=2024", "deep"): "directory",
        store.path("out", "year=2024", "p0"): "file",
    }
    assert listing[store.path("out", "year=2024", "p0")]["size"] == 2
    with_dirs = reader.find(store.path("out"), withdirs=True)
    assert store.path("out", "year=2024", "deep") in with_dirs


def test_info_carries_an_etag_that_changes_with_the_content(store: Store):
    path = store.path("out", ODD_NAME)
    store.fs.pipe_file(path, b"first")
    first = store.fs.info(path)

    assert first["type"] == "file"
    assert first["size"] == 5
    assert first["name"] == path
    for key in ETAG_KEYS[store.name]:
        assert first[key], f"{store.name}: info()[{key!r}] is empty"
    # The listing carries the same etag, so a task can record etags without a HEAD per file.
    (listed,) = store.fs.ls(store.path("out"), detail=True)
    assert listed["etag"] == first["etag"]

    store.fs.pipe_file(path, b"second")
    store.fs.invalidate_cache()
    second = store.fs.info(path)
    for key in ETAG_KEYS[store.name] + CONTENT_HASH_KEYS[store.name]:
        assert lookup(second, key) != lookup(first, key), f"{store.name}: {key} did not change"


def test_info_of_a_directory_and_of_nothing(store: Store):
    store.fs.pipe_file(store.path("out", "sub", "f"), b"x")

    assert store.fs.info(store.path("out", "sub"))["type"] == "directory"
    assert "etag" not in store.fs.info(store.path("out", "sub"))
    with pytest.raises(FileNotFoundError):
        store.fs.info(store.path("out", "missing"))


def test_rename_as_copy_then_delete(store: Store):
    source, dest = store.path("job", "task", ODD_NAME), store.path("out", ODD_NAME)
    data = os.urandom(300_000)
    store.fs.pipe_file(source, data)
    before = store.fs.info(source)

    store.fs.cp_file(source, dest)
    copied = store.fs.info(dest)
    store.fs.rm_file(source)

    reader = store.new_client()
    assert reader.cat_file(dest) == data
    assert not reader.exists(source)
    assert reader.find(store.root) == [dest]
    assert copied["size"] == before["size"] == len(data)
    assert (copied["etag"] == before["etag"]) is ETAG_SURVIVES_COPY[store.name]
    for key in CONTENT_HASH_KEYS[store.name]:
        assert lookup(copied, key) == lookup(before, key), f"{store.name}: {key} not kept"


def test_copy_replaces_an_existing_destination(store: Store):
    source, dest = store.path("task", "f"), store.path("out", "f")
    store.fs.pipe({source: b"new", dest: b"old data"})

    store.fs.cp_file(source, dest)

    assert store.new_client().cat_file(dest) == b"new"


def test_copy_and_delete_of_a_missing_file_raise_file_not_found(store: Store):
    with pytest.raises(FileNotFoundError):
        store.fs.cp_file(store.path("missing"), store.path("dest"))
    with pytest.raises(FileNotFoundError):
        store.fs.rm_file(store.path("missing"))
    assert not store.fs.exists(store.path("dest"))


def test_recursive_rm_deletes_the_subtree_and_nothing_beside_it(store: Store):
    store.fs.pipe(
        {
            store.path("out", "_temporary", "0", "a"): b"1",
            store.path("out", "_temporary", "0", "tasks", ODD_NAME): b"2",
            store.path("out", "_temporary2", "keep"): b"3",  # shares the prefix, not the dir
            store.path("out", "_temporary-keep"): b"4",
            store.path("out", "part-0000"): b"5",
        }
    )

    store.fs.rm(store.path("out", "_temporary"), recursive=True)

    assert store.new_client().find(store.root) == sorted(
        [
            store.path("out", "_temporary-keep"),
            store.path("out", "_temporary2", "keep"),
            store.path("out", "part-0000"),
        ]
    )


def test_directories_exist_only_while_objects_are_below_them(store: Store):
    directory = store.path("out", "year=2024", "month=01")
    store.fs.makedirs(directory, exist_ok=True)  # succeeds, and creates nothing

    assert not store.fs.exists(directory)
    with pytest.raises(FileNotFoundError):
        store.fs.ls(directory)

    store.fs.pipe_file(f"{directory}/part-0000", b"x")
    assert store.new_client().isdir(directory)

    store.fs.rm_file(f"{directory}/part-0000")
    reader = store.new_client()
    assert not reader.exists(directory)
    assert not reader.exists(store.path("out"))


def test_makedirs_does_not_create_a_container_or_bucket(store: Store):
    missing_root = f"{store.root}-never-created"
    store.fs.makedirs(f"{missing_root}/out/dir", exist_ok=True)

    assert not store.new_client().exists(missing_root)


# --- emulator lifecycle -------------------------------------------------------------------

_CRASHING_SESSION = """
import os, pathlib, sys
sys.path.insert(0, {tests!r})
from helpers.servers import GcsEmulatorServer
from magicfs.integrations.azurite import LocalAzurite
workdir = pathlib.Path({workdir!r})
if {kind!r} == "abfs":
    server = LocalAzurite(workdir, log_requests=False).start()
else:
    server = GcsEmulatorServer(workdir).start()
print(server.port, server.watchdog_pid, flush=True)
os.kill(os.getpid(), 9)  # die as a crashing test session would: no clean-up code runs
"""


@pytest.mark.parametrize("kind", ["abfs", "gcs"])
def test_emulator_stops_when_the_test_session_is_killed(kind: str, tmp_path):
    tests = os.path.dirname(os.path.abspath(__file__))
    script = _CRASHING_SESSION.format(tests=tests, kind=kind, workdir=str(tmp_path))
    session = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert session.returncode == -signal.SIGKILL, session.stderr
    port, watchdog = map(int, session.stdout.split())
    try:
        deadline = time.monotonic() + 20
        while accepts_connections(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not accepts_connections(port), f"{kind} emulator still listening on {port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(watchdog, signal.SIGKILL)  # only if the test failed: the server follows it
