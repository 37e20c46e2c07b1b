"""The operator command line, run as operators run it: ``python -m magicfs ...`` in a child
process against the moto server on 127.0.0.1 (the basics also against Ceph RGW), checked
by exit code, output and the store.

Pending uploads are real: written through ``MagicFileSystem`` magic paths or by real
magic-committer jobs whose tasks committed but whose job did not.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json

import pytest
import s3fs
from helpers import object_keys, pending_uploads, visible_keys
from helpers.cli import run_cli
from helpers.paging import PagedUploadListing
from helpers.reference_documents import MANIFEST_SUCCESS, SUCCESS
from helpers.s3_targets import store_fixture

import magicfs
from conftest import _checked_bucket
from magicfs import MagicFileSystem
from magicfs.integrations.cli.common import duration, redact, remember_secrets, scrub
from magicfs.integrations.cli.uploads import Selection, measure, select
from magicfs.records import (
    DirEntry,
    EntryStatus,
    FileEntry,
    SuccessData,
    TaskManifest,
)
from magicfs.stores.registry import operator_view_for
from magicfs.stores.s3.store import S3Store, iterate
from magicfs.task_files import TASK_FILES

SECRET = "SUPERSECRET123"

# Hadoop's SuccessData example (reference §1.4): written by an S3A committer.
HADOOP_S3A_SUCCESS = SUCCESS
HADOOP_MANIFEST_SUCCESS = MANIFEST_SUCCESS


#: The S3 stores of the tests parametrized over ``store``: moto and Ceph RGW.
S3_STORES = ["s3", "rgw"]


# This module's S3 fixtures (``s3``, ``s3_client``, ``bucket``, ``options``, ``cli``)
# follow ``store``: moto, unless a test parametrizes ``store`` with ``S3_STORES``.
@pytest.fixture
def store() -> str:
    return "s3"


@pytest.fixture
def server(request, store):
    """The running S3 server of ``store`` (conftest's ``s3_server``, ``rgw_server``...)."""
    return store_fixture(request, store, "server")


@pytest.fixture
def s3(server):
    return s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)


@pytest.fixture
def s3_client(server):
    return server.boto3_client()


@pytest.fixture
def bucket(request, s3_client):
    """A new bucket on ``store``, checked for parked uploads as conftest's ``bucket``."""
    yield from _checked_bucket(request, s3_client)


@pytest.fixture
def options(server):
    return {**server.storage_options, "skip_instance_cache": True}


@pytest.fixture
def magic(s3):
    return MagicFileSystem(fs=s3)


@pytest.fixture
def cli(server):
    """``magicfs ARGS --endpoint-url <server>``; credentials come from the environment."""
    keys = {
        "AWS_ACCESS_KEY_ID": server.storage_options["key"],
        "AWS_SECRET_ACCESS_KEY": server.storage_options["secret"],
    }

    def run(*args: str, env: dict[str, str] | None = None):
        return run_cli(*args, "--endpoint-url", server.endpoint_url, env={**keys, **(env or {})})

    return run


def park(magic, bucket: str, key: str, data: bytes) -> None:
    """Leave a real pending upload for ``key``: a magic write, closed, never committed."""
    directory, name = key.rsplit("/", 1)
    with magic.open(f"{bucket}/{directory}/__magic/cli-test/{name}", "wb") as f:
        f.write(data)


def uploads_by_key(client, bucket: str, prefix: str = "") -> dict[str, str]:
    return {u["Key"]: u["UploadId"] for u in pending_uploads(client, bucket, prefix)}


def initiated_by_key(client, bucket: str) -> dict[str, str]:
    """Each pending upload's initiation time as the store reports it, in UTC to the second."""
    listing = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return {
        u["Key"]: u["Initiated"].astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for u in listing
    }


def start_job(options, bucket: str, dest: str, job_id: str, files: dict[str, bytes]):
    """A magic-committer job whose tasks (one per file) committed; the job has not."""
    committer = magicfs.committer_for(
        f"s3://{bucket}/{dest}", storage_options=options, job_id=job_id
    )
    committer.setup_job()
    messages = []
    for index, (name, data) in enumerate(files.items()):
        task = committer.task_attempt(index)
        committer.setup_task(task)
        committer.fs.pipe_file(task.path(name), data)
        # Closed before its task commits, so it keeps its .pending (one still closing when
        # its commit begins hands its record to the pendingset: TaskFiles.awaited).
        TASK_FILES.settle()
        messages.append(committer.commit_task(task))
    return committer, messages


# --- uploads list -----------------------------------------------------------------------------


@pytest.mark.parametrize("store", S3_STORES)
@pytest.mark.parks_uploads("magicfs uploads lists parked uploads: the test parks some")
def test_list_shows_each_upload_with_its_parked_bytes(cli, magic, s3_client, bucket):
    park(magic, bucket, "data/a.csv", b"x" * 100)
    park(magic, bucket, "data/year=2024/b.csv", b"y" * 2000)
    ids = uploads_by_key(s3_client, bucket)
    initiated = initiated_by_key(s3_client, bucket)  # moto: always 2010-11-10T20:48:33Z

    result = cli("uploads", "list", f"s3://{bucket}/data")
    assert result.code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"Uploads under s3://{bucket}/data/:"
    # Fixed columns (the output streams: no widths computed over every line first).
    assert lines[1] == (
        f"  {initiated['data/a.csv']}  {'100':>17} bytes  s3://{bucket}/data/a.csv  "
        f"upload {ids['data/a.csv']}"
    )
    assert (
        f"  {initiated['data/year=2024/b.csv']}  {'2,000':>17} bytes  "
        f"s3://{bucket}/data/year=2024/b.csv" in (lines[2])
    )
    assert lines[-1] == "Total: 2 uploads found, 2,100 bytes (2.1 KiB) parked."

    document = cli("uploads", "list", f"s3://{bucket}/data", "--json").json()
    assert (document["count"], document["bytes"], document["prefix"]) == (2, 2100, "data/")
    assert {u["key"]: (u["upload_id"], u["bytes"], u["parts"]) for u in document["uploads"]} == {
        "data/a.csv": (ids["data/a.csv"], 100, 1),
        "data/year=2024/b.csv": (ids["data/year=2024/b.csv"], 2000, 1),
    }
    assert {u["key"]: u["initiated"] for u in document["uploads"]} == initiated
    assert uploads_by_key(s3_client, bucket) == ids  # listing changes nothing


@pytest.mark.parametrize("store", S3_STORES)
@pytest.mark.parks_uploads("magicfs uploads lists parked uploads: the test parks some")
def test_prefix_is_a_directory_so_data_never_matches_data10(cli, magic, s3_client, bucket):
    park(magic, bucket, "data/a.csv", b"a")
    park(magic, bucket, "data10/b.csv", b"b")

    def keys(path: str) -> list[str]:
        return [u["key"] for u in cli("uploads", "list", path, "--json").json()["uploads"]]

    assert keys(f"s3://{bucket}/data") == ["data/a.csv"]
    assert keys(f"s3://{bucket}/data/") == ["data/a.csv"]
    assert keys(f"s3://{bucket}/data10") == ["data10/b.csv"]
    assert keys(f"s3://{bucket}") == ["data/a.csv", "data10/b.csv"]  # bucket root: all

    result = cli("uploads", "abort", "--force", f"s3://{bucket}/data")
    assert result.code == 0, result.output
    assert list(uploads_by_key(s3_client, bucket)) == ["data10/b.csv"]


@pytest.mark.parametrize("store", S3_STORES)
@pytest.mark.parks_uploads("magicfs uploads lists parked uploads: the test parks some")
def test_fail_if_any_guards_a_pipeline(cli, magic, bucket):
    park(magic, bucket, "out/a.csv", b"a")
    found = cli("uploads", "list", "--fail-if-any", f"s3://{bucket}/out", "--json")
    assert found.code == 1
    assert found.json()["count"] == 1
    assert f"magicfs: 1 pending upload under s3://{bucket}/out/" in found.stderr

    clean = cli("uploads", "list", "--fail-if-any", f"s3://{bucket}/elsewhere")
    assert clean.code == 0, clean.output
    assert clean.stdout.splitlines()[-1] == "Total: 0 uploads found, 0 bytes parked."


def test_older_than_selects_by_initiation_time(cli, magic, s3_client, bucket):
    park(magic, bucket, "data/a.csv", b"a")
    park(magic, bucket, "data/b.csv", b"b")
    path = f"s3://{bucket}/data"

    old = cli("uploads", "list", path, "--older-than", "1d", "--json").json()
    assert old["count"] == 2  # moto dates every upload 2010-11-10
    assert old["older_than_seconds"] == 86400
    assert cli("uploads", "list", path, "--older-than", "100000d", "--json").json()["count"] == 0
    summed = cli("uploads", "list", path, "--older-than", "1d", "--older-than", "12h30m", "--json")
    assert summed.json()["older_than_seconds"] == 86400 + 12 * 3600 + 30 * 60

    before = uploads_by_key(s3_client, bucket)
    young = cli("uploads", "abort", "--force", path, "--older-than", "100000d")
    assert young.code == 0, young.output
    assert young.stdout.splitlines()[-1] == "Total: 0 uploads aborted, 0 bytes released."
    assert uploads_by_key(s3_client, bucket) == before

    aged = cli("uploads", "abort", "--force", path, "--older-than", "24h")
    assert aged.code == 0, aged.output
    assert "Total: 2 uploads aborted, 2 bytes released." in aged.stdout
    assert uploads_by_key(s3_client, bucket) == {}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("24h", 86400), ("7d", 604800), ("1d12h", 129600), ("0", 0)],
)
def test_durations(text, seconds):
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5x", "h", "1.5h", "-1d", "1d 2h", "2h1"])
def test_bad_durations_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="invalid duration"):
        duration(text)


# --- uploads abort ----------------------------------------------------------------------------


@pytest.mark.parametrize("store", S3_STORES)
def test_abort_without_force_is_a_dry_run(cli, magic, s3_client, bucket):
    park(magic, bucket, "out/a.csv", b"a" * 10)
    park(magic, bucket, "out/b.csv", b"b" * 20)
    before = uploads_by_key(s3_client, bucket)

    dry = cli("uploads", "abort", f"s3://{bucket}/out")
    assert dry.code == 0, dry.output
    assert dry.stdout.count("would abort") == 2
    assert dry.stdout.splitlines()[-1] == (
        "Total: 2 uploads would be aborted, 30 bytes parked. "
        "Dry run: nothing was aborted; add --force to abort them."
    )
    assert uploads_by_key(s3_client, bucket) == before

    document = cli("uploads", "abort", f"s3://{bucket}/out", "--json").json()
    assert document["dry_run"] is True and document["aborted"] == 0
    assert {u["status"] for u in document["uploads"]} == {"would abort"}
    assert uploads_by_key(s3_client, bucket) == before

    forced = cli("uploads", "abort", "--force", f"s3://{bucket}/out", "--json")
    assert forced.code == 0, forced.output
    document = forced.json()
    assert (document["dry_run"], document["aborted"], document["bytes"]) == (False, 2, 30)
    assert {u["upload_id"] for u in document["uploads"]} == set(before.values())
    assert uploads_by_key(s3_client, bucket) == {}
    # Written piece by piece, the document is byte for byte what print_json writes.
    assert forced.stdout == json.dumps(document, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("store", S3_STORES)
def test_abort_job_a_leaves_job_b_alone(cli, options, s3_client, bucket):
    job_a, _ = start_job(options, bucket, "data", "A", {"a1.csv": b"a1", "a2.csv": b"a2"})
    job_b, messages_b = start_job(options, bucket, "data", "B", {"b1.csv": b"b1"})
    both = uploads_by_key(s3_client, bucket)
    assert sorted(both) == ["data/a1.csv", "data/a2.csv", "data/b1.csv"]

    listed_b = cli("uploads", "list", "--job", "B", f"s3://{bucket}/data", "--json")
    assert [u["upload_id"] for u in listed_b.json()["uploads"]] == [both["data/b1.csv"]]
    assert "job B is still active" in listed_b.stderr  # its marker is there: a warning

    aborted = cli("uploads", "abort", "--job", "A", "--force", f"s3://{bucket}/data")
    assert aborted.code == 0, aborted.output
    assert "Total: 2 uploads aborted, 4 bytes released." in aborted.stdout
    assert "b1.csv" not in aborted.stdout
    assert uploads_by_key(s3_client, bucket) == {"data/b1.csv": both["data/b1.csv"]}

    job_b.commit_job(messages_b)  # B is unharmed: it commits
    assert visible_keys(s3_client, bucket) == ["data/_SUCCESS", "data/b1.csv"]
    assert pending_uploads(s3_client, bucket) == []
    job_a.abort_job()


@pytest.mark.parks_uploads("uploads of no job: --job must not select them")
def test_job_without_a_magic_tree_records_nothing(cli, options, magic, bucket):
    park(magic, bucket, "data/a.csv", b"a")
    result = cli("uploads", "abort", "--force", "--job", "gone-job", f"s3://{bucket}/data")
    assert result.code == 0, result.output
    assert "Total: 0 uploads aborted" in result.stdout
    assert f"job gone-job has no magic tree at s3://{bucket}/data/__magic_job-gone-job" in (
        result.stderr
    )


@pytest.mark.parametrize("store", S3_STORES)
def test_missing_bucket_is_one_line(cli):
    result = cli("uploads", "list", "s3://no-such-bucket-here/data")
    assert result.code == 1
    assert result.stderr == "magicfs: s3://no-such-bucket-here/data/: no such bucket\n"
    assert result.stdout == ""


# --- paging -----------------------------------------------------------------------------------


@pytest.mark.parks_uploads("paging through parked uploads")
def test_list_uploads_follows_every_page(s3, s3_client, magic, bucket):
    for index in range(5):
        park(magic, bucket, f"data/part-{index}.csv", b"z" * (index + 1))
    park(magic, bucket, "data10/not-this.csv", b"no")
    real = uploads_by_key(s3_client, bucket, "data/")
    paging = PagedUploadListing(s3, s3_client, page_size=2)
    store = S3Store(s3)

    listed = list(iterate(store, store.alist_uploads(bucket, "data/")))
    assert {u.key: u.upload_id for u in listed} == real
    assert len(listed) == 5  # no page read twice, none skipped
    first_page = sorted(real.items())[:2]
    second_page = sorted(real.items())[2:4]
    assert paging.requests == [("", ""), first_page[-1], second_page[-1]]

    requested = len(paging.requests)
    view = operator_view_for(s3)
    lazy = select(view, Selection(bucket, "data/", None, None, None))
    next(lazy)
    assert len(paging.requests) == requested + 1  # listed as it is consumed, page by page
    lazy.close()

    # The command's selection and byte counts cover every page too.
    uploads = list(measure(view, select(view, Selection(bucket, "data/", None, None, None))))
    assert sorted(u.key for u in uploads) == sorted(real)
    assert sum(u.bytes for u in uploads) == 1 + 2 + 3 + 4 + 5


#: Does the store list uploads in key order and page by key (RGW, as AWS), or in an
#: order of its own, paging by upload id alone, with no ``NextKeyMarker`` (SeaweedFS)?
PAGES_BY_KEY = {"rgw": True, "seaweed": False}


@pytest.mark.parametrize("store", ["rgw", "seaweed"])
@pytest.mark.parks_uploads("paging through parked uploads")
def test_list_uploads_follows_real_pages(store, s3, bucket, magic):
    """RGW and SeaweedFS honour MaxUploads (moto answers in one page): with pages of 2,
    asked for by a botocore hook on the client, every upload is listed once, over 3 real
    pages, each asking for what follows the last upload of the page before."""
    for index in range(5):
        park(magic, bucket, f"data/part-{index}.csv", b"z" * (index + 1))
    markers = []

    def small_pages(params, **kwargs):
        params["MaxUploads"] = 2
        markers.append((params.get("KeyMarker", ""), params.get("UploadIdMarker", "")))

    s3.s3.meta.events.register("before-parameter-build.s3.ListMultipartUploads", small_pages)
    s3_store = S3Store(s3)
    listed = list(iterate(s3_store, s3_store.alist_uploads(bucket, "data/")))
    keys = [u.key for u in listed]
    assert sorted(keys) == [f"data/part-{index}.csv" for index in range(5)]
    assert len({u.upload_id for u in listed}) == 5
    if PAGES_BY_KEY[store]:
        assert keys == sorted(keys)
        assert [key for key, _ in markers] == ["", "data/part-1.csv", "data/part-3.csv"]
    else:
        last_of_pages = [listed[1].upload_id, listed[3].upload_id]
        assert markers == [("", ""), *(("", upload_id) for upload_id in last_of_pages)]


def test_many_uploads_stream_page_by_page(cli, s3, s3_client, bucket):
    """More uploads than one page of ListMultipartUploads: each is settled while the
    listing is still being read; every one is counted, shown and aborted.

    moto answers a listing in one page whatever its length, so the command (a child
    process) gets them in one; paging is checked in process, in pages of 50 (the store's
    own pages hold 1,000: the paging is the same, with ten times fewer uploads to make).
    """
    count = 120
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ids = set(
            pool.map(lambda n: _start_upload(s3_client, bucket, f"many/{n:05d}"), range(count))
        )
    other = _start_upload(s3_client, bucket, "other/x.csv")  # not under many/

    paging = PagedUploadListing(s3, s3_client, page_size=50)
    view = operator_view_for(s3)
    selection = Selection(bucket, "many/", None, None, None)
    settled = measure(view, select(view, selection))
    next(settled)
    assert len(paging.requests) == 1  # the first is settled before page 2 is asked for
    settled.close()
    assert {u.upload_id for u in select(view, selection)} == ids
    assert len(paging.requests) == 1 + 3

    listed = cli("uploads", "list", f"s3://{bucket}/many")
    assert listed.code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert len(lines) == 1 + count + 1
    assert lines[-1] == "Total: 120 uploads found, 0 bytes parked."
    assert len({line.index(" s3://") for line in lines[1:-1]}) == 1  # fixed columns

    forced = cli("uploads", "abort", "--force", f"s3://{bucket}/many", "--json")
    assert forced.code == 0, forced.output
    document = forced.json()
    assert (document["count"], document["aborted"], document["bytes"]) == (count, count, 0)
    assert (document["already_gone"], document["failed"]) == (0, 0)
    assert {u["upload_id"] for u in document["uploads"]} == ids
    assert len(document["uploads"]) == count
    assert {u["status"] for u in document["uploads"]} == {"aborted"}
    # Written piece by piece, the document is byte for byte what print_json writes.
    assert forced.stdout == json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    assert pending_uploads(s3_client, bucket) == [{"Key": "other/x.csv", "UploadId": other}]
    s3_client.abort_multipart_upload(Bucket=bucket, Key="other/x.csv", UploadId=other)
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def _start_upload(client, bucket: str, key: str) -> str:
    return client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]


# --- inspect ----------------------------------------------------------------------------------


@pytest.fixture
def job_records(options, s3_client, bucket):
    """A real job's .pending and .pendingset (tasks committed, job not), as (key, bytes)."""
    committer, _ = start_job(options, bucket, "out", "J1", {"part-0.csv": b"0123456789"})
    keys = object_keys(s3_client, bucket, "out/__magic_job-J1/")
    pending = next(k for k in keys if k.endswith(".pending"))
    pendingset = next(k for k in keys if k.endswith(".pendingset"))

    def body(key: str) -> bytes:
        return s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()

    yield {"pending": (pending, body(pending)), "pendingset": (pendingset, body(pendingset))}
    committer.abort_job()


def test_inspect_a_real_pending_and_pendingset(cli, job_records, s3_client, bucket):
    upload_id = uploads_by_key(s3_client, bucket)["out/part-0.csv"]
    pending_key, _ = job_records["pending"]
    result = cli("inspect", f"s3://{bucket}/{pending_key}")
    assert result.code == 0, result.output
    assert result.stdout.startswith(
        f"s3://{bucket}/{pending_key}: valid .pending (one pending upload), "
        "Hadoop SinglePendingCommit\n"
    )
    assert f"destination: s3://{bucket}/out/part-0.csv" in result.stdout
    assert f"upload id:   {upload_id}" in result.stdout
    assert "length:      10 bytes in 1 part" in result.stdout
    # the job is alone on its destination: unmarked, its writer put no intent marker
    # (a zero counter is not printed)
    assert "counters=((stream_write_block_uploads=1)" in result.stdout
    assert "committer_magic_marker_put" not in result.stdout

    document = cli("inspect", f"s3://{bucket}/{pending_key}", "--json").json()
    assert (document["kind"], document["valid"]) == ("pending", True)
    assert (document["record"]["uploadId"], document["record"]["length"]) == (upload_id, 10)

    set_key, _ = job_records["pendingset"]
    result = cli("inspect", f"s3://{bucket}/{set_key}")
    assert result.code == 0, result.output
    assert "valid .pendingset (a task's pending uploads), Hadoop PendingSet" in result.stdout
    assert "job id:       J1" in result.stdout
    assert f"s3://{bucket}/out/part-0.csv  10 bytes  1 part  upload {upload_id}" in result.stdout


@pytest.mark.parametrize(
    ("field", "tamper"),
    [
        ("length", lambda d: d.update(length=-1)),
        ("etags", lambda d: d.update(etags=[])),
        ("etags", lambda d: d.update(partCount=3)),
        ("bucket", lambda d: d.update(bucket="other/bucket")),
        ("destinationKey", lambda d: d.update(destinationKey="out/../../etc/passwd")),
        ("uploadId", lambda d: d.pop("uploadId")),
        ("version", lambda d: d.update(version=1)),
    ],
)
def test_inspect_refuses_a_tampered_pending(cli, job_records, tmp_path, field, tamper):
    document = json.loads(job_records["pending"][1])
    tamper(document)
    path = tmp_path / "part-0.csv.pending"
    path.write_text(json.dumps(document))

    result = cli("inspect", str(path))
    assert result.code == 1
    assert result.stderr.startswith(f"magicfs: invalid pending record: {path}: {field}: ")
    assert len(result.stderr.splitlines()) == 1
    assert result.stdout == ""

    report = cli("inspect", str(path), "--json")
    assert report.code == 1
    assert report.json()["valid"] is False and report.json()["field"] == field


def test_inspect_refuses_a_pendingset_writing_one_file_twice(cli, job_records, tmp_path):
    document = json.loads(job_records["pendingset"][1])
    document["commits"].append(document["commits"][0])
    path = tmp_path / "task_1.pendingset"
    path.write_text(json.dumps(document))
    result = cli("inspect", str(path))
    assert result.code == 1
    assert f"{path}: commits[1].destinationKey: " in result.stderr
    assert "written to by more than one pending commit" in result.stderr


def test_inspect_tells_the_kind_from_content_or_kind_option(cli, job_records, tmp_path):
    as_json = tmp_path / "record.json"
    as_json.write_bytes(job_records["pendingset"][1])
    result = cli("inspect", str(as_json), "--json")
    assert result.code == 0, result.output
    assert result.json()["kind"] == "pendingset"

    as_json.write_bytes(job_records["pending"][1])
    assert cli("inspect", str(as_json), "--json").json()["kind"] == "pending"
    forced = cli("inspect", str(as_json), "--kind", "pendingset")  # a .pending is no pendingset
    assert forced.code == 1 and "version" in forced.stderr

    as_json.write_text('{"hello": "world"}')
    unknown = cli("inspect", str(as_json))
    assert unknown.code == 1
    assert "cannot tell which record this is" in unknown.stderr


def test_inspect_a_task_manifest(cli, tmp_path):
    manifest = TaskManifest(
        job_id="job_1",
        task_id="task_1",
        task_attempt_id="attempt_1",
        files=[FileEntry("file:///tmp/t/part-0", "file:///out/part-0", 21, "etag1")],
        directories=[DirEntry("file:///out", EntryStatus.DIR, 0)],
    )
    path = tmp_path / "task_1-manifest.json"
    path.write_text(manifest.to_json())
    result = cli("inspect", str(path))
    assert result.code == 0, result.output
    assert "valid task manifest, Hadoop TaskManifest" in result.stdout
    assert "file:///tmp/t/part-0 -> file:///out/part-0  21 bytes" in result.stdout
    assert "file:///out  (dir, level 0)" in result.stdout
    assert TaskManifest.from_dict(cli("inspect", str(path), "--json").json()["record"]) == manifest

    document = json.loads(manifest.to_json())
    document["type"] = "something else"
    path.write_text(json.dumps(document))
    bad = cli("inspect", str(path))
    assert bad.code == 1 and f"{path}: type: " in bad.stderr


def test_inspect_broken_and_missing_files(cli, tmp_path, bucket):
    broken = tmp_path / "x.pending"
    broken.write_text("{not json")
    result = cli("inspect", str(broken))
    assert result.code == 1
    assert f"{broken}: malformed JSON" in result.stderr

    empty = tmp_path / "_SUCCESS"
    empty.write_bytes(b"")
    result = cli("inspect", str(empty))
    assert result.code == 1 and "zero-byte _SUCCESS" in result.stderr

    missing = cli("inspect", str(tmp_path / "nope.pending"))
    assert missing.code == 1
    assert missing.stderr == f"magicfs: {tmp_path / 'nope.pending'}: no such file or directory\n"

    on_s3 = cli("inspect", f"s3://{bucket}/nope.pendingset")
    assert on_s3.stderr == f"magicfs: s3://{bucket}/nope.pendingset: no such file or directory\n"
    assert on_s3.code == 1


# --- success ----------------------------------------------------------------------------------


def test_success_summarises_a_magic_committer_job(cli, options, s3_client, bucket):
    committer, messages = start_job(
        options, bucket, "sales", "job-7", {"year=2024/a.csv": b"a" * 30, "year=2025/b.csv": b"b"}
    )
    committer.commit_job(messages)

    result = cli("success", f"s3://{bucket}/sales")
    assert result.code == 0, result.output
    out = result.stdout
    assert out.startswith(f"s3://{bucket}/sales/_SUCCESS: job job-7\n")
    for line in [
        "  succeeded:     true",
        "  committer:     magic",
        "  job id:        job-7",
        "  files:         2",
        "  bytes:         31 bytes",
        "  tasks:         2",
        "Files (2):",
        "  /sales/year=2024/a.csv",
        "  /sales/year=2025/b.csv",
        "Statistics:",
        "(committer_files_committed=2)",
    ]:
        assert line in out.splitlines(), line
    assert "  duration:      " in out and " s\n" in out
    assert "Metrics:" not in out  # magicfs's metrics are the totals shown above
    assert "counters=((committer_bytes_committed=31)" in out

    same = cli("success", f"s3://{bucket}/sales/_SUCCESS", "--json")  # the file itself
    assert same.code == 0, same.output
    summary = same.json()["summary"]
    assert same.json()["ok"] is True
    assert (summary["job_id"], summary["committer"], summary["files"], summary["bytes"]) == (
        "job-7",
        "magic",
        2,
        31,
    )
    assert summary["filenames"] == ["/sales/year=2024/a.csv", "/sales/year=2025/b.csv"]
    assert summary["duration_ms"] >= 0


def test_success_missing_is_a_failure(cli, bucket):
    result = cli("success", f"s3://{bucket}/never-written")
    assert result.code == 1
    assert result.stderr == (
        f"magicfs: s3://{bucket}/never-written/_SUCCESS: no _SUCCESS file: the job has not "
        "committed (or its committer writes none)\n"
    )
    document = cli("success", f"s3://{bucket}/never-written", "--json")
    assert document.code == 1 and document.json()["ok"] is False


def test_success_zero_byte_marker_is_a_failure(cli, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key="classic/_SUCCESS", Body=b"")
    result = cli("success", f"s3://{bucket}/classic")
    assert result.code == 1
    assert f"s3://{bucket}/classic/_SUCCESS: zero-byte _SUCCESS" in result.stderr
    assert "classic FileOutputCommitter" in result.stderr


def test_success_false_is_a_failure_but_still_shown(cli, s3_client, bucket):
    failed = SuccessData(
        success=False,
        committer="magic",
        job_id="job-9",
        diagnostics={"exception": "java.io.IOException: lost"},
    )
    s3_client.put_object(Bucket=bucket, Key="out/_SUCCESS", Body=failed.to_bytes())
    result = cli("success", f"s3://{bucket}/out")
    assert result.code == 1
    assert "  succeeded:     false" in result.stdout
    assert "  exception = java.io.IOException: lost" in result.stdout
    assert result.stderr == (
        f"magicfs: s3://{bucket}/out/_SUCCESS: the job did not succeed (success: false)\n"
    )
    document = cli("success", f"s3://{bucket}/out", "--json")
    assert document.code == 1
    assert (document.json()["ok"], document.json()["summary"]["job_id"]) == (False, "job-9")


def test_success_reads_hadoop_s3a_committer_output_locally(tmp_path):
    (tmp_path / "_SUCCESS").write_text(HADOOP_S3A_SUCCESS)
    result = run_cli("success", str(tmp_path))
    assert result.code == 0, result.output
    lines = result.stdout.splitlines()
    assert "  files:         1" in lines  # from committer_commits_completed
    assert "  bytes:         unknown" in lines
    metrics = lines.index("Metrics:")
    assert lines[metrics + 1] == "  committer_commits_completed = 1"
    assert "  /out/year=2024/part-0000.csv" in lines


def test_success_reads_hadoop_manifest_committer_output_locally(tmp_path):
    (tmp_path / "_SUCCESS").write_text(HADOOP_MANIFEST_SUCCESS)
    result = run_cli("success", str(tmp_path))
    assert result.code == 0, result.output
    assert "  files:         1" in result.stdout.splitlines()  # from its IOStatistics
    assert "  bytes:         21 bytes" in result.stdout.splitlines()
    assert "  duration:      unknown" in result.stdout.splitlines()
    summary = run_cli("success", str(tmp_path / "_SUCCESS"), "--json").json()["summary"]
    assert (summary["job_id"], summary["files"], summary["bytes"]) == (
        "job_202410091320_0001",
        1,
        21,
    )


# --- usage, logging, credentials ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: command"),
        (["uploads", "list"], "the following arguments are required: PATH"),
        (["uploads", "list", "s3://b/x", "--older-than", "5x"], "invalid duration '5x'"),
        (["uploads", "list", "s3://b/x", "--job", "../x"], "invalid job id"),
        (["uploads", "abort", "s3://b/x", "--fail-if-any"], "unrecognized arguments"),
        (["uploads", "list", "/tmp"], "/tmp: uploads lists the pending writes of S3 (s3://)"),
        (["uploads", "list", "nope://b/x"], "nope://b/x: cannot open"),
        (["inspect", "x.pending", "--limit", "-1"], "expected a whole number >= 0"),
        (["inspect", "x.pending", "-o", SECRET], "expected KEY=VALUE"),
    ],
)
def test_usage_errors_exit_2(args, message):
    result = run_cli(*args)
    assert result.code == 2, result.output
    assert message in result.stderr
    assert SECRET not in result.output  # a mistyped option value is never echoed


def test_demo_subcommand_is_still_there():
    result = run_cli("demo", "--help")
    assert result.code == 0
    assert "--keep" in result.stdout


@pytest.mark.parks_uploads("magicfs uploads lists parked uploads: the test parks some")
def test_verbosity_levels(cli, magic, bucket):
    park(magic, bucket, "out/a.csv", b"a")
    path = f"s3://{bucket}/out"
    assert cli("uploads", "list", path).stderr == ""
    info = cli("uploads", "list", path, "-v").stderr
    assert f"INFO magicfs.cli.uploads: 1 upload under s3://{bucket}/out/" in info
    assert "DEBUG" not in info
    debug = cli("uploads", "list", path, "-vv").stderr
    assert "DEBUG magicfs.cli: opening" in debug and "parts" in debug


def test_credentials_never_reach_the_output(cli, options, magic, s3_client, bucket, tmp_path):
    committer, messages = start_job(options, bucket, "out", "S1", {"a.csv": b"a"})
    record = next(k for k in object_keys(s3_client, bucket) if k.endswith(".pending"))
    with_option = ["-vv", "-o", f"secret={SECRET}", "-o", "key=testing"]
    runs = [
        cli("uploads", "list", f"s3://{bucket}/out", *with_option),
        cli("uploads", "list", f"s3://{bucket}/out", "--job", "S1", "--json", *with_option),
        cli("uploads", "abort", f"s3://{bucket}/out", *with_option),
        cli("inspect", f"s3://{bucket}/{record}", *with_option),
        cli("uploads", "list", "s3://no-such-bucket-here", *with_option),
        cli("success", f"s3://{bucket}/out", *with_option),
    ]
    committer.commit_job(messages)
    runs.append(cli("success", f"s3://{bucket}/out", *with_option))
    runs.append(cli("inspect", str(tmp_path / "missing.pending"), *with_option))
    from_env = {"AWS_SECRET_ACCESS_KEY": SECRET}
    runs.append(cli("uploads", "list", f"s3://{bucket}", "-vv", env=from_env))
    runs.append(cli("success", f"s3://{bucket}/out", "-vv", "--json", env=from_env))

    assert [r.code for r in runs] == [0, 0, 0, 0, 1, 1, 0, 1, 0, 0]
    for result in runs:
        assert SECRET not in result.output, result.args
        assert "DEBUG magicfs.cli: opening" in result.stderr  # -vv was on
    # The options were logged, redacted: the check above looked where a leak would be.
    assert "'secret': '***'" in runs[0].stderr and "'key': '***'" in runs[0].stderr


def test_redact_and_scrub_hide_credential_values():
    options = {
        "key": "AKIAEXAMPLE",
        "secret": SECRET,
        "client_kwargs": {"aws_session_token": "token-1234", "endpoint_url": "http://h"},
        "anon": False,
    }
    assert redact(options) == {
        "key": "***",
        "secret": "***",
        "client_kwargs": {"aws_session_token": "***", "endpoint_url": "http://h"},
        "anon": False,
    }
    remember_secrets(options)  # what error messages and log lines are scrubbed of
    assert scrub(f"failed: {SECRET}, token-1234 at http://h") == "failed: ***, *** at http://h"


# -- Azure: staged blocks of a block-list job ------------------------------------------------------


def test_uploads_on_azure_list_staged_blobs_and_refuse_to_abort(
    abfs, azure_container, azurite_server
):
    """An aborted attempt's blocks stay staged (Azure cannot delete them alone): ``uploads
    list`` shows the name with its staged bytes, ``abort --force`` changes nothing and says
    why; a published file is not listed."""
    dest = f"abfs://{azure_container}/out"
    committer = magicfs.committer_for(dest, fs=abfs)
    committer.setup_job()
    kept, dropped = committer.task_attempt(0), committer.task_attempt(1)
    for task, name, data in ((kept, "kept.bin", b"k" * 10), (dropped, "dropped.bin", b"d" * 700)):
        committer.setup_task(task)
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(data)
    message = committer.commit_task(kept)
    committer.abort_task(dropped)
    committer.commit_job([message])
    options = ["-o", f"connection_string={azurite_server.connection_string}"]

    listed = run_cli("uploads", "list", dest, "--json", *options)
    assert listed.code == 0, listed.output
    document = listed.json()  # the one uploads schema, S3's: one element a pending write
    assert (document["store"], document["can_abort"], document["count"]) == (
        "azure-block-list",
        False,
        1,
    )
    assert [
        (e["uri"], e["key"], e["upload_id"], e["parts"], e["bytes"], e["status"])
        for e in document["uploads"]
    ] == [(f"abfs://{azure_container}/out/dropped.bin", "out/dropped.bin", None, 1, 700, "pending")]
    text = run_cli("uploads", "list", dest, *options)
    assert "Total: 1 name with staged blocks" in text.stdout, text.output
    assert "out/dropped.bin  1 staged block" in text.stdout, text.output

    dry = run_cli("uploads", "abort", dest, "--json", *options)
    assert dry.code == 0, dry.output
    assert [e["status"] for e in dry.json()["uploads"]] == ["cannot abort"]
    assert dry.json()["aborted"] == 0

    forced = run_cli("uploads", "abort", dest, "--force", *options)
    assert forced.code == 2
    assert "Azure has no request that deletes staged blocks alone" in forced.stderr
    assert not abfs.exists(f"{azure_container}/out/dropped.bin")
    assert abfs.cat(f"{azure_container}/out/kept.bin") == b"k" * 10
