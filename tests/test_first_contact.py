"""First contact: the README's paths as a new user takes them, none silently wrong (issue 26).

Each test does what the user did, with the README's own calls, and checks what the user
would see: the objects in the bucket, the bytes read back, the error's words.

* ``magicfs.install()`` before or after a job is set up: S3 stays on the magic committer
  (no ``_temporary/``, no server-side copy), plain ``s3://`` task writes commit.
* ``df.to_csv(task.url("part-0.csv.gz"), storage_options=job.storage_options)``: a gzip
  file, as from the store's own URL (and ``.bz2``, ``.xz``, ``.zst``, ``to_json``; Dask's
  CSV writer with a ``.gz`` name).
* ``job.fs`` writes under the job's destination but outside any task path: refused,
  naming ``task.path``/``task.url``; nothing written.
* polars: the file-object route writes Parquet and CSV into a job; the URL route says
  which route to use.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma

import fsspec
import pandas as pd
import pytest
from helpers import data_files, object_keys, visible_keys

import magicfs

FRAME = pd.DataFrame({"id": [1, 2, 3], "name": ["a", "b", "c"]})


@pytest.fixture(params=["moto", "rgw"])
def store(request):
    """``(storage options, boto3 client, fresh bucket)`` on moto and on Ceph RGW."""
    if request.param == "moto":
        names = ("s3_options", "s3_client", "bucket")
        return tuple(request.getfixturevalue(name) for name in names)
    server = request.getfixturevalue("rgw_server")
    client = request.getfixturevalue("rgw_client")
    return server.storage_options, client, request.getfixturevalue("rgw_bucket")


@pytest.fixture
def installed():
    """``magicfs.install()`` for one test; always undone."""
    yield magicfs.install
    magicfs.uninstall()


# --- install(): every store keeps its own committer --------------------------------------------


@pytest.mark.parametrize("order", ["install-first", "install-after-setup"])
def test_install_keeps_s3_on_the_magic_committer(order, installed, store, request_log):
    s3_options, s3_client, bucket = store
    dest = f"s3://{bucket}/sales"
    if order == "install-first":
        installed()
    with magicfs.write_job(dest, storage_options=s3_options) as job:
        if order == "install-after-setup":
            installed()
        request_log.attach(job.committer.store_fs)
        with job.task(0) as task:
            # the README's forms: a plain s3:// URL of the task path (install's promise) ...
            FRAME.to_csv("s3://" + task.path("plain.csv"), storage_options=s3_options, index=False)
            # ... and the task URL with the job's options
            FRAME.to_csv(task.url("chained.csv"), storage_options=job.storage_options, index=False)
            keys_during = object_keys(s3_client, bucket)

    assert job.committer.name == "magic"
    assert job.summary is not None and job.summary.committer == "magic"
    assert not [key for key in keys_during if "_temporary" in key]
    assert [key for key in keys_during if key.startswith("sales/__magic_job-")]
    assert visible_keys(s3_client, bucket) == [
        "sales/_SUCCESS",
        "sales/chained.csv",
        "sales/plain.csv",
    ]
    assert request_log.counts()["CopyObject"] == 0
    assert request_log.counts()["CompleteMultipartUpload"] == 2
    body = s3_client.get_object(Bucket=bucket, Key="sales/plain.csv")["Body"].read()
    assert body == FRAME.to_csv(index=False).encode()


def test_install_keeps_committer_for_on_each_stores_committer(installed, s3_options, tmp_path):
    installed()
    assert magicfs.committer_for("s3://bkt/out", storage_options=s3_options).name == "magic"
    assert magicfs.committer_for(f"file://{tmp_path}/out").name == "manifest"
    # a filesystem built after install() (s3fs's class with task paths) is judged as
    # the store its task paths are written through
    import s3fs

    wrapped = fsspec.filesystem("s3", **s3_options)
    assert isinstance(wrapped, s3fs.S3FileSystem) and type(wrapped) is not s3fs.S3FileSystem
    committer = magicfs.committer_for("s3://bkt/out", fs=wrapped)
    assert committer.name == "magic"
    assert type(committer.store_fs) is s3fs.S3FileSystem


# --- compression is inferred from a task URL's file name ----------------------------------------

READERS = {
    ".gz": gzip.decompress,
    ".bz2": bz2.decompress,
    ".xz": lzma.decompress,
}


def _zstd_decompress(data: bytes) -> bytes:
    import zstandard  # in the test extra: pandas needs it for .zst

    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


READERS[".zst"] = _zstd_decompress


def _suffixes() -> list[str]:
    return [".gz", ".bz2", ".xz", ".zst"]


@pytest.mark.parametrize("suffix", _suffixes())
def test_pandas_infers_compression_from_a_task_url_on_s3(suffix, store):
    s3_options, s3_client, bucket = store
    dest = f"s3://{bucket}/out"
    with magicfs.write_job(dest, storage_options=s3_options) as job, job.task(0) as task:
        FRAME.to_csv(task.url(f"part-0.csv{suffix}"), storage_options=job.storage_options)
        FRAME.to_json(
            task.url(f"part-0.json{suffix}"),
            storage_options=job.storage_options,
            orient="records",
            lines=True,
        )
    # the same calls on the store's own URL, for comparison: the bytes must agree
    FRAME.to_csv(f"s3://{bucket}/plain/part-0.csv{suffix}", storage_options=s3_options)
    for name in (f"out/part-0.csv{suffix}", f"plain/part-0.csv{suffix}"):
        raw = s3_client.get_object(Bucket=bucket, Key=name)["Body"].read()
        assert READERS[suffix](raw) == FRAME.to_csv().encode(), name
    raw = s3_client.get_object(Bucket=bucket, Key=f"out/part-0.json{suffix}")["Body"].read()
    assert READERS[suffix](raw) == FRAME.to_json(orient="records", lines=True).encode()
    # and pandas reads them back by name, as the user would
    back = pd.read_csv(f"s3://{bucket}/out/part-0.csv{suffix}", storage_options=s3_options)
    assert back.drop(columns="Unnamed: 0").equals(FRAME)


@pytest.mark.parametrize("store", ["local", "memory"])
def test_pandas_infers_gzip_from_a_task_url_on_rename_stores(store, tmp_path):
    dest = f"file://{tmp_path}/out" if store == "local" else f"memory://{tmp_path.name}/out"
    with magicfs.write_job(dest) as job, job.task(0) as task:
        FRAME.to_csv(task.url("part-0.csv.gz"), storage_options=job.storage_options)
    fs, root = fsspec.core.url_to_fs(dest)
    assert gzip.decompress(fs.cat_file(f"{root}/part-0.csv.gz")) == FRAME.to_csv().encode()


def test_older_chained_task_urls_still_open(s3_options, s3_client, bucket):
    """``magic::<store URL>`` (the form task.url used to return) keeps working."""
    dest = f"s3://{bucket}/out"
    with magicfs.write_job(dest, storage_options=s3_options) as job, job.task(0) as task:
        url = "magic::s3://" + task.path("old-form.csv")
        with fsspec.open(url, "wb", **job.storage_options) as f:
            f.write(b"x\n")
        with job.fs.open(task.url("via-fs.csv"), "wb") as f:  # the new form on job.fs
            f.write(b"y\n")
    assert visible_keys(s3_client, bucket, "out/") == [
        "out/_SUCCESS",
        "out/old-form.csv",
        "out/via-fs.csv",
    ]


def test_dask_to_csv_compresses_by_the_name_function(s3_options, s3_client, bucket):
    import dask.dataframe as dd

    import magicfs.dask

    ddf = dd.from_pandas(FRAME, npartitions=2)
    magicfs.dask.to_csv(
        ddf,
        f"s3://{bucket}/csv",
        storage_options=s3_options,
        name_function=lambda i: f"part-{i}.csv.gz",
        index=False,
        compute_kwargs={"scheduler": "sync"},
    )
    assert visible_keys(s3_client, bucket, "csv/") == [
        "csv/_SUCCESS",
        "csv/part-0.csv.gz",
        "csv/part-1.csv.gz",
    ]
    frames = [
        pd.read_csv(
            io.BytesIO(gzip.decompress(s3_client.get_object(Bucket=bucket, Key=k)["Body"].read()))
        )
        for k in ("csv/part-0.csv.gz", "csv/part-1.csv.gz")
    ]
    assert pd.concat(frames, ignore_index=True).equals(FRAME)


# --- job.fs under the destination, outside any task path: refused --------------------------------


def test_job_fs_write_outside_task_paths_is_refused_on_s3(store):
    s3_options, s3_client, bucket = store
    dest = f"s3://{bucket}/sales"
    job = magicfs.write_job(dest, storage_options=s3_options)
    with pytest.raises(ValueError, match="stop"), job, job.task(0) as task:
        with job.fs.open(task.path("kept.csv"), "wb") as f:
            f.write(b"task output\n")
        # the user forgot task.path: the README's job.fs, the destination's own name
        with pytest.raises(magicfs.errors.OutsideTaskPathError) as refused:
            job.fs.open(f"{bucket}/sales/x.csv", "wb")
        message = str(refused.value)
        assert f"s3://{bucket}/sales/x.csv" in message
        assert "task.path('x.csv')" in message and "task.url('x.csv')" in message
        for write in (
            lambda: job.fs.open(f"{dest}/u.csv", "wb"),  # dest + "/x.csv", as a URL
            lambda: job.fs.pipe_file(f"{bucket}/sales/_metadata", b"summary"),
            lambda: job.fs.touch(f"{bucket}/sales/year=2024/y.csv"),
            lambda: job.fs.pipe({f"{bucket}/sales/z.csv": b"z"}),
            lambda: FRAME.to_csv(
                f"magic::s3://{bucket}/sales/w.csv", storage_options=job.storage_options
            ),
        ):
            with pytest.raises(magicfs.errors.OutsideTaskPathError):
                write()
        # nothing but the job's own hidden tree in the destination
        keys = object_keys(s3_client, bucket, "sales/")
        assert [key for key in keys if not key.startswith("sales/__magic_job-")] == []
        # outside the destination, job.fs passes through as before; reads too
        job.fs.pipe_file(f"{bucket}/elsewhere/note.txt", b"plain")
        assert job.fs.cat_file(f"{bucket}/elsewhere/note.txt") == b"plain"
        raise ValueError("stop")  # the job aborts
    assert object_keys(s3_client, bucket, "sales/") == []
    assert visible_keys(s3_client, bucket) == ["elsewhere/note.txt"]


def test_job_fs_write_outside_task_paths_is_refused_on_a_local_disk(tmp_path):
    dest = tmp_path / "out"
    with magicfs.write_job(f"file://{dest}") as job, job.task(0) as task:
        with pytest.raises(magicfs.errors.OutsideTaskPathError, match=r"task\.path\('x\.csv'\)"):
            FRAME.to_csv(job.fs.open(f"{dest}/x.csv", "w"))
        with job.fs.open(task.path("x.csv"), "w") as f:
            FRAME.to_csv(f, index=False)
    assert sorted(data_files(p.name for p in dest.iterdir())) == ["_SUCCESS", "x.csv"]
    assert pd.read_csv(dest / "x.csv").equals(FRAME)


# --- polars: a file object from job.fs; the URL route names it -----------------------------------


def test_polars_writes_parquet_and_csv_into_a_job(store):
    s3_options, s3_client, bucket = store
    import polars as pl

    frame = pl.DataFrame({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    dest = f"s3://{bucket}/pl"
    with magicfs.write_job(dest, storage_options=s3_options) as job, job.task(0) as task:
        with job.fs.open(task.path("year=2024/part-0.parquet"), "wb") as f:
            frame.write_parquet(f)
        with job.fs.open(task.path("year=2024/part-0.csv"), "wb") as f:
            frame.write_csv(f)
        assert visible_keys(s3_client, bucket, "pl/") == []  # nothing before job commit
    assert visible_keys(s3_client, bucket, "pl/") == [
        "pl/_SUCCESS",
        "pl/year=2024/part-0.csv",
        "pl/year=2024/part-0.parquet",
    ]
    csv = s3_client.get_object(Bucket=bucket, Key="pl/year=2024/part-0.csv")["Body"].read()
    assert csv == b"id,name\n1,a\n2,b\n3,c\n"
    body = s3_client.get_object(Bucket=bucket, Key="pl/year=2024/part-0.parquet")["Body"].read()
    assert pl.read_parquet(io.BytesIO(body)).equals(frame)


def test_polars_url_route_says_which_route_to_use(s3_options, s3_client, bucket):
    import polars as pl

    frame = pl.DataFrame({"id": [1]})
    dest = f"s3://{bucket}/pl"
    with magicfs.write_job(dest, storage_options=s3_options) as job, job.task(0) as task:
        for write in (frame.write_parquet, frame.write_csv):
            with pytest.raises(ValueError) as refused:
                write(task.url("part-0.parquet"), storage_options=job.storage_options)
            assert "job.fs.open(task.path(name), 'wb')" in str(refused.value)
    assert visible_keys(s3_client, bucket, "pl/") == ["pl/_SUCCESS"]
    # the options are still a plain dict for everything else
    assert dict(job.storage_options["magic"]) == job.storage_options["magic"]
    assert repr(job.storage_options["magic"]) == repr(dict(job.storage_options["magic"]))
