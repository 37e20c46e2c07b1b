"""MagicFileSystem outside magic paths, and how users reach it (entry points, chaining, install)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import fsspec
import pytest
from helpers import object_keys, pending_uploads, visible_keys

import magicfs
from magicfs import MagicFileSystem


@pytest.fixture
def magic(s3):
    return MagicFileSystem(fs=s3)


# --- plain paths behave exactly as the wrapped filesystem ---------------------------


def test_plain_paths_pass_through(magic, s3, bucket):
    base = f"{bucket}/plain"
    magic.pipe_file(f"{base}/a.txt", b"alpha")
    magic.pipe({f"{base}/sub/b.txt": b"beta", f"{base}/sub/c.txt": b"gamma"})
    with magic.open(f"{base}/d.txt", "wb") as f:
        f.write(b"delta")
    magic.touch(f"{base}/empty")

    # written immediately, visible to plain s3fs
    assert s3.cat_file(f"{base}/a.txt") == b"alpha"
    assert s3.cat_file(f"{base}/d.txt") == b"delta"
    for method, args in [
        ("ls", (base,)),
        ("find", (base,)),
        ("glob", (f"{base}/**/*.txt",)),
        ("info", (f"{base}/a.txt",)),
        ("exists", (f"{base}/nope",)),
        ("isdir", (f"{base}/sub",)),
        ("isfile", (f"{base}/sub/b.txt",)),
        ("cat_file", (f"{base}/sub/c.txt",)),
        ("cat", (f"{base}/sub/*.txt",)),
        ("du", (base,)),
    ]:
        assert getattr(magic, method)(*args) == getattr(s3, method)(*args), method
    with magic.open(f"{base}/a.txt", "rb") as f:
        assert f.read() == b"alpha"
    assert magic.read_text(f"{base}/a.txt") == "alpha"

    magic.cp(f"{base}/a.txt", f"{base}/copy.txt")
    magic.mv(f"{base}/d.txt", f"{base}/moved.txt")
    magic.rm(f"{base}/sub", recursive=True)
    magic.rm_file(f"{base}/empty")
    assert sorted(s3.find(base)) == [f"{base}/a.txt", f"{base}/copy.txt", f"{base}/moved.txt"]
    assert s3.cat_file(f"{base}/moved.txt") == b"delta"


def test_records_under_magic_paths_are_written_normally(magic, s3_client, bucket):
    record = f"{bucket}/out/__magic/job-1/00/task_1.pendingset"
    magic.pipe_file(record, b'{"version": 3}')
    assert object_keys(s3_client, bucket) == ["out/__magic/job-1/00/task_1.pendingset"]
    assert pending_uploads(s3_client, bucket) == []


@pytest.mark.parks_uploads(
    "the filesystem alone: no job commits or sweeps the deferred uploads it checks"
)
def test_every_write_method_defers_on_magic_paths(magic, s3_client, bucket, tmp_path):
    local = tmp_path / "local.csv"
    local.write_bytes(b"from disk")
    work = f"{bucket}/out/__magic/job-1/task_1/__base"
    magic.pipe_file(f"{work}/piped.csv", b"piped")
    magic.pipe({f"{work}/p1.csv": b"1", f"{work}/p2.csv": b"2"})
    magic.put_file(str(local), f"{work}/put.csv")
    magic.touch(f"{work}/touched.csv")
    magic.write_text(f"{work}/text.csv", "text")
    magic.write_bytes(f"{work}/bytes.csv", b"bytes")
    s3_client.put_object(Bucket=bucket, Key="plain/src.csv", Body=b"source")
    magic.cp_file(f"{bucket}/plain/src.csv", f"{work}/copied.csv")

    names = ["piped", "p1", "p2", "put", "touched", "text", "bytes", "copied"]
    assert sorted(u["Key"] for u in pending_uploads(s3_client, bucket)) == sorted(
        f"out/{name}.csv" for name in names
    )
    assert visible_keys(s3_client, bucket) == ["plain/src.csv"]
    assert magic.info(f"{work}/put.csv")["size"] == len(b"from disk")


# --- entry points ------------------------------------------------------------------------


def test_fsspec_resolves_the_magic_protocol():
    assert fsspec.get_filesystem_class("magic") is MagicFileSystem


@pytest.mark.parks_uploads(
    "the filesystem alone: no job commits or sweeps the deferred uploads it checks"
)
def test_filesystem_from_target_protocol(s3_options, s3_client, bucket):
    fs = fsspec.filesystem("magic", target_protocol="s3", target_options=s3_options)
    with fs.open(f"{bucket}/out/__magic/j/t/__base/x.csv", "wb") as f:
        f.write(b"x")
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/x.csv"]


@pytest.mark.parks_uploads(
    "the filesystem alone: no job commits or sweeps the deferred uploads it checks"
)
def test_chained_urls_with_nested_options(s3_options, s3_client, bucket):
    url = f"magic::s3://{bucket}/out/__magic/j/t/__base/chained.csv"
    with fsspec.open(url, "w", s3=s3_options) as f:
        f.write("a,b\n")
    fs, path = fsspec.url_to_fs(url, s3=s3_options)
    assert isinstance(fs, MagicFileSystem)
    assert path == f"{bucket}/out/__magic/j/t/__base/chained.csv"
    assert fs.info(path)["size"] == 4
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/chained.csv"]


def test_instances_are_not_shared_through_the_cache(s3_options):
    one = fsspec.filesystem("magic", target_protocol="s3", target_options=s3_options)
    two = fsspec.filesystem(
        "magic", target_protocol="s3", target_options=s3_options, part_size=16 << 20
    )
    three = fsspec.filesystem("magic", target_protocol="s3", target_options=s3_options)
    assert one is not three
    assert (one.part_size, two.part_size) == (8 << 20, 16 << 20)


@pytest.mark.parks_uploads(
    "the filesystem alone: no job commits or sweeps the deferred uploads it checks"
)
def test_install_makes_plain_urls_magic_aware(s3_options, s3_client, bucket):
    original = fsspec.get_filesystem_class("s3")
    assert "s3" in magicfs.install(("s3",))
    try:
        fs = fsspec.filesystem("s3", **s3_options)
        assert isinstance(fs, original) and type(fs) is not original
        with fsspec.open(f"s3://{bucket}/out/__magic/j/t/__base/i.csv", "wb", **s3_options) as f:
            f.write(b"deferred")
        with fsspec.open(f"s3://{bucket}/plain.csv", "wb", **s3_options) as f:
            f.write(b"immediate")
        assert visible_keys(s3_client, bucket) == ["plain.csv"]
        assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/i.csv"]
        # pickled, it is the installed class again (tests/test_install.py: where
        # install() never ran too)
        assert type(pickle.loads(pickle.dumps(fs))) is type(fs)
    finally:
        magicfs.uninstall()
    assert fsspec.get_filesystem_class("s3") is original
    assert type(fsspec.filesystem("s3", **s3_options)) is original


@pytest.mark.parks_uploads(
    "the filesystem alone: no job commits or sweeps the deferred uploads it checks"
)
def test_pickled_filesystem_writes_from_another_process(magic, s3_client, bucket):
    script = (
        "import pickle, sys\n"
        "fs = pickle.loads(sys.stdin.buffer.read())\n"
        f"fs.pipe_file('{bucket}/out/__magic/j/t/__base/remote.csv', b'from a child')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(magic), capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr.decode()
    assert [u["Key"] for u in pending_uploads(s3_client, bucket)] == ["out/remote.csv"]
    assert magic.info(f"{bucket}/out/__magic/j/t/__base/remote.csv")["size"] == 12
