"""Hadoop-compatible records: round trips against the reference documents, and validation."""

from __future__ import annotations

import json

import fsspec
import pytest
from helpers.reference_documents import IOSTATS, MANIFEST, MANIFEST_SUCCESS, PENDING, SUCCESS

from magicfs.errors import InvalidCommitData
from magicfs.records import (
    SUCCESS_NAME,
    DirEntry,
    EntryStatus,
    FileEntry,
    IOStatisticsSnapshot,
    ManifestSuccessData,
    MeanStatistic,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
    TaskManifest,
    path_to_uri,
    uri_to_path,
)


def pendingset_document(**changes) -> dict:
    commit = json.loads(PENDING)
    commit.update(
        jobId="0d1f",
        taskId="attempt_202410091320_0001_m_000000_0",
        filename="s3a://bkt/out/__magic_job-0d1f/x/part-0000.csv.pending",
    )
    document = {
        "version": 3,
        "jobId": "0d1f",
        "commits": [commit],
        "iostatistics": {
            "counters": {"committer_magic_marker_put": 2},
            "gauges": {},
            "minimums": {},
            "maximums": {},
            "meanstatistics": {},
        },
    }
    document.update(changes)
    return document


def mutate(document: str, **changes) -> str:
    data = json.loads(document)
    for key, value in changes.items():
        if value is DELETE:
            del data[key]
        else:
            data[key] = value
    return json.dumps(data)


DELETE = object()


# --- round trips ----------------------------------------------------------------------


def test_pending_round_trips_byte_for_byte():
    commit = SinglePendingCommit.from_json(PENDING)
    assert commit.to_json() == PENDING
    assert (commit.bucket, commit.destination_key, commit.length) == (
        "bkt",
        "out/year=2024/part-0000.csv",
        5,
    )
    assert commit.etags == ['"9b2cf535f27731c974343645a3985328"']


def test_pending_filename_is_where_it_was_loaded_from():
    commit = SinglePendingCommit.from_json(PENDING, source="s3://bkt/x.pending")
    assert commit.filename == "s3://bkt/x.pending"


def test_pendingset_round_trips():
    text = json.dumps(pendingset_document(), separators=(",", ":"))
    pendingset = PendingSet.from_json(text)
    assert pendingset.job_id == "0d1f"
    assert pendingset.commits[0].task_id == "attempt_202410091320_0001_m_000000_0"
    assert pendingset.iostatistics.counters == {"committer_magic_marker_put": 2}
    again = json.loads(pendingset.to_json())
    expected = pendingset_document()
    expected["extraData"] = {}  # we add the map Hadoop drops; Hadoop's readers ignore it
    assert again == expected


def test_pendingset_records_the_task_attempt():
    pendingset = PendingSet(job_id="j", extra_data={"task.attempt.id": "attempt_1"})
    assert PendingSet.from_json(pendingset.to_json()).task_attempt_id == "attempt_1"


def test_success_round_trips_byte_for_byte():
    success = SuccessData.from_json(SUCCESS)
    assert success.to_json() == SUCCESS
    assert success.filenames == ["/out/year=2024/part-0000.csv"]
    assert success.diagnostics["fs.s3a.committer.threads"] == "8"


def test_manifest_round_trips_byte_for_byte():
    manifest = TaskManifest.from_json(MANIFEST)
    assert manifest.to_json() == _jackson(MANIFEST)
    assert manifest.files == [
        FileEntry(
            source="abfs://c@acct.dfs.core.windows.net/out/_temporary/job_202410091320_0001/00/"
            "tasks/attempt_202410091320_0001_m_000000_0/year=2024/part-0000",
            dest="abfs://c@acct.dfs.core.windows.net/out/year=2024/part-0000",
            size=21,
            etag="0x8DCE84A2B4F31C2",
        )
    ]
    assert manifest.directories == [
        DirEntry("abfs://c@acct.dfs.core.windows.net/out/year=2024", EntryStatus.NOT_FOUND, 1)
    ]


def test_manifest_success_round_trips():
    success = ManifestSuccessData.from_json(MANIFEST_SUCCESS)
    assert json.loads(success.to_json()) == json.loads(MANIFEST_SUCCESS)
    assert success.iostatistics.counters["committer_bytes_committed"] == 21
    # and the S3A reader accepts it: same name constant
    assert SuccessData.from_json(MANIFEST_SUCCESS).job_id == "job_202410091320_0001"


def test_manifest_success_leaves_out_nulls_and_is_indented():
    text = ManifestSuccessData(job_id="j", timestamp=1728480100000).to_json()
    data = json.loads(text)
    assert "state" not in data and "stage" not in data and "description" not in data
    assert data["committer"].endswith("manifest.ManifestCommitter")
    assert data["date"] == "2024-10-09T13:21:40.000Z[UTC]"
    assert '\n  "name" : ' in text


def test_manifest_json_round_trip_keeps_leading_spaces_and_dir_entries():
    # TestTaskManifestFileIO.testJsonRoundTrip
    manifest = TaskManifest(
        job_id="job",
        task_attempt_dir="file:///tmp/  leading spaces",
        files=[FileEntry("file:///a", "file:///b", 256, "etag")],
        directories=[DirEntry("file:///d", EntryStatus.UNKNOWN, 0)],
    )
    again = TaskManifest.from_json(manifest.to_json())
    assert again == manifest


def test_iostatistics_round_trip_and_aggregate():
    snapshot = IOStatisticsSnapshot(
        counters={"committer_commits_completed": 1, "committer_materialize_file": 1},
        minimums={"committer_materialize_file.min": 112},
        maximums={"committer_materialize_file.max": 112},
        meanstatistics={"committer_materialize_file.mean": MeanStatistic(1, 112)},
    )
    assert json.dumps(snapshot.to_dict(), separators=(",", ":")) == IOSTATS
    total = snapshot.copy().aggregate(
        IOStatisticsSnapshot(
            counters={"committer_commits_completed": 2},
            minimums={"committer_materialize_file.min": 50},
            maximums={"committer_materialize_file.max": 300},
            meanstatistics={"committer_materialize_file.mean": MeanStatistic(2, 100)},
        )
    )
    assert total.counters["committer_commits_completed"] == 3
    assert total.minimums["committer_materialize_file.min"] == 50
    assert total.maximums["committer_materialize_file.max"] == 300
    assert total.meanstatistics["committer_materialize_file.mean"] == MeanStatistic(3, 212)


def test_uri_conversion_quotes_spaces_only_as_java_does():
    uri = path_to_uri("s3://bkt/out/subdir/file3 with space/ü%.csv")
    assert uri == "s3://bkt/out/subdir/file3%20with%20space/ü%25.csv"
    assert uri_to_path(uri) == "s3://bkt/out/subdir/file3 with space/ü%.csv"


def test_load_through_a_filesystem_names_the_file():
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/records/good.pending", PENDING.encode())
    assert SinglePendingCommit.load(fs, "/records/good.pending").length == 5
    fs.pipe_file("/records/bad.pending", b"{not json")
    with pytest.raises(InvalidCommitData, match=r"memory:///records/bad.pending: malformed JSON"):
        SinglePendingCommit.load(fs, "/records/bad.pending")
    with pytest.raises(FileNotFoundError):
        SinglePendingCommit.load(fs, "/records/missing.pending")


def _jackson(text: str) -> str:
    """Re-indent a reference document the way Jackson's pretty printer would."""
    return json.dumps(json.loads(text), indent=2, separators=(",", " : "), ensure_ascii=False)


# --- validation: every failure names the file and the field -------------------------

SOURCE = "s3://bkt/out/__magic_job-1/t/f.csv.pending"


@pytest.mark.parametrize(
    ("document", "field", "problem"),
    [
        ("", None, "zero bytes"),
        ("{", None, "malformed JSON"),
        ("[1, 2]", None, "expected a JSON object, found a list"),
        ('{"version": 2, "version": 2}', "version", "more than once"),
        ('{"version": NaN}', None, "NaN is not allowed"),
        (mutate(PENDING, version=1), "version", "expected 2, found 1"),
        (mutate(PENDING, version="2"), "version", "expected 2, found '2'"),
        (mutate(PENDING, uploadId=DELETE), "uploadId", "required field is missing"),
        (mutate(PENDING, uploadId=""), "uploadId", "must not be empty"),
        (mutate(PENDING, uploadId="abc\n"), "uploadId", "control characters"),
        (mutate(PENDING, bucket=DELETE), "bucket", "required field is missing"),
        (mutate(PENDING, bucket="a/b"), "bucket", "not a valid bucket name"),
        (mutate(PENDING, destinationKey=DELETE), "destinationKey", "required field is missing"),
        (mutate(PENDING, destinationKey="/out/x"), "destinationKey", "must not start or end"),
        (mutate(PENDING, destinationKey="out/../etc/x"), "destinationKey", "'..'"),
        (mutate(PENDING, destinationKey="out/__magic/x"), "destinationKey", "magic directory"),
        (mutate(PENDING, destinationKey="k" * 1025), "destinationKey", "1024 bytes"),
        (mutate(PENDING, uri=DELETE), "uri", "required field is missing"),
        (mutate(PENDING, uri="s3a://bkt/a b"), "uri", "raw space"),
        (mutate(PENDING, uri="no scheme"), "uri", "raw space"),
        (mutate(PENDING, uri="relative/path"), "uri", "not a valid URI"),
        (mutate(PENDING, length=DELETE), "length", "required field is missing"),
        (mutate(PENDING, length=-1), "length", "must be >= 0"),
        (mutate(PENDING, length="5"), "length", "must be an integer, found a string"),
        (mutate(PENDING, length=True), "length", "must be an integer, found a boolean"),
        (mutate(PENDING, length=5.0), "length", "must be an integer, found a number"),
        (mutate(PENDING, etags=DELETE), "etags", "required field is missing"),
        (mutate(PENDING, etags=None), "etags", "must be a list, found null"),
        (mutate(PENDING, etags=[]), "etags", "at least one part"),
        (mutate(PENDING, etags=['"a"', ""]), "etags[1]", "must not be empty"),
        (mutate(PENDING, etags=['"a"', 7]), "etags[1]", "must be a string, found an integer"),
        (mutate(PENDING, etags=['"a"'] * 10_001), "etags", "more than the limit of 10000"),
        (mutate(PENDING, etags=['"a"', '"b"']), "etags", "partCount says 1"),
        (mutate(PENDING, extraData={"k": 1}), "extraData.k", "must be a string"),
        (mutate(PENDING, extraData=[]), "extraData", "must be an object"),
        (mutate(PENDING, created=-5), "created", "must be >= 0"),
        (
            mutate(PENDING, iostatistics={"counters": {"x": "1"}}),
            "iostatistics.counters.x",
            "integer",
        ),
        (
            mutate(PENDING, iostatistics={"meanstatistics": {"m": {"samples": -1, "sum": 0}}}),
            "iostatistics.meanstatistics.m.samples",
            "must be >= 0",
        ),
    ],
)
def test_invalid_pending_names_file_and_field(document, field, problem):
    with pytest.raises(InvalidCommitData) as caught:
        SinglePendingCommit.from_json(document, source=SOURCE)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.source == SOURCE
    assert error.field == field
    assert problem in error.problem
    assert str(error).startswith(SOURCE + ": ")


def test_a_record_naming_its_store_is_that_stores_to_check_for_parts():
    """An empty ``etags`` list is refused in a record that names no store (an S3 upload,
    as Hadoop's); one that names its store (``extraData["magicfs.store"]``, opaque here)
    is read, and its store's adapter decides (Azure: an empty blob; others refuse)."""
    named = mutate(PENDING, etags=[], partCount=0, extraData={"magicfs.store": "any-store"})
    commit = SinglePendingCommit.from_json(named, source=SOURCE)
    assert commit.store == "any-store" and commit.etags == []
    assert SinglePendingCommit.from_json(PENDING).store is None
    assert SinglePendingCommit.from_json(commit.to_bytes()).to_bytes() == commit.to_bytes()


@pytest.mark.parametrize("store", ["s3", "mem-deferred"])
def test_a_store_refuses_a_record_it_cannot_publish(store):
    """The stores' checks: S3 refuses any record naming a store; the in-process store a
    record of another store, or one of its own without parts."""
    from magicfs.stores.memory_deferred.adapter import MemoryDeferred
    from magicfs.stores.s3.deferred import S3Deferred

    adapter_class = S3Deferred if store == "s3" else MemoryDeferred
    adapter = adapter_class.__new__(adapter_class)  # check() reads the record alone
    other = SinglePendingCommit.from_json(mutate(PENDING, extraData={"magicfs.store": "x"}))
    with pytest.raises(InvalidCommitData, match="not an") as caught:
        adapter.check(other, SOURCE)
    assert caught.value.field == "extraData"
    if store == "mem-deferred":
        empty = mutate(PENDING, etags=[], partCount=0, extraData={"magicfs.store": store})
        with pytest.raises(InvalidCommitData, match="at least one part"):
            adapter.check(SinglePendingCommit.from_json(empty), SOURCE)


def test_oversized_and_non_utf8_files_are_rejected_before_parsing():
    with pytest.raises(InvalidCommitData, match="larger than the 4194304-byte limit"):
        SinglePendingCommit.from_json(b" " * (4 << 20) + b"{}", source=SOURCE)
    with pytest.raises(InvalidCommitData, match="not UTF-8"):
        SinglePendingCommit.from_json(b'{"uri": "\xff"}', source=SOURCE)
    with pytest.raises(InvalidCommitData, match="nested too deeply"):
        SinglePendingCommit.from_json("[" * 100_000 + "]" * 100_000, source=SOURCE)


def test_unknown_keys_are_ignored_as_by_hadoop():
    commit = SinglePendingCommit.from_json(mutate(PENDING, futureField={"x": 1}))
    assert commit.length == 5


@pytest.mark.parametrize(
    ("document", "field", "problem"),
    [
        (pendingset_document(version=2), "version", "expected 3, found 2"),
        (pendingset_document(commits="x"), "commits", "must be a list"),
        (pendingset_document(commits=[1]), "commits[0]", "must be an object"),
        (
            pendingset_document(commits=[{**json.loads(PENDING), "uploadId": ""}]),
            "commits[0].uploadId",
            "must not be empty",
        ),
        (
            pendingset_document(
                commits=[json.loads(PENDING), {**json.loads(PENDING), "uploadId": "other"}]
            ),
            "commits[1].destinationKey",
            "more than one pending commit (also commits[0])",
        ),
    ],
)
def test_invalid_pendingset_names_file_and_field(document, field, problem):
    source = "s3://bkt/out/__magic_job-1/job-1/00/task_1.pendingset"
    with pytest.raises(InvalidCommitData) as caught:
        PendingSet.from_json(json.dumps(document), source=source)
    assert (caught.value.source, caught.value.field) == (source, field)
    assert problem in caught.value.problem


@pytest.mark.parametrize(
    ("bucket", "prefix", "field", "problem"),
    [
        ("other", "out", "commits[0].bucket", "job writes to bucket 'other'"),
        ("bkt", "elsewhere", "commits[0].destinationKey", "outside the job destination"),
        ("bkt", "ou", "commits[0].destinationKey", "outside the job destination"),
    ],
)
def test_pendingset_destination_checks(bucket, prefix, field, problem):
    pendingset = PendingSet.from_json(json.dumps(pendingset_document()), source="f.pendingset")
    with pytest.raises(InvalidCommitData) as caught:
        pendingset.check_destination(bucket, prefix, "f.pendingset")
    assert (caught.value.source, caught.value.field) == ("f.pendingset", field)
    assert problem in caught.value.problem
    pendingset.check_destination("bkt", "out", "f.pendingset")
    pendingset.check_destination("bkt", "", "f.pendingset")


@pytest.mark.parametrize(
    ("document", "field", "problem"),
    [
        (b"", None, "zero-byte _SUCCESS"),
        (mutate(SUCCESS, name="something else"), "name", "not a committer _SUCCESS file"),
        (mutate(SUCCESS, name=DELETE), "name", "not a committer _SUCCESS file"),
        (mutate(SUCCESS, success="yes"), "success", "must be true or false"),
        (mutate(SUCCESS, filenames=[1]), "filenames[0]", "must be a string"),
        (mutate(SUCCESS, metrics={"m": "x"}), "metrics.m", "must be an integer"),
    ],
)
def test_invalid_success_names_file_and_field(document, field, problem):
    with pytest.raises(InvalidCommitData) as caught:
        SuccessData.from_json(document, source="s3://bkt/out/_SUCCESS")
    assert (caught.value.source, caught.value.field) == ("s3://bkt/out/_SUCCESS", field)
    assert problem in caught.value.problem


def test_success_name_constant_is_always_written():
    assert json.loads(SuccessData().to_json())["name"] == SUCCESS_NAME


@pytest.mark.parametrize(
    ("changes", "field", "problem"),
    [
        ({"type": "x"}, "type", "expected 'org.apache.hadoop"),
        ({"version": 5}, "version", "expected 1, found 5"),
        ({"files": [{"s": "file:///a", "z": 1}]}, "files[0].d", "required field is missing"),
        ({"files": [{"s": "file:///a", "d": None, "z": 1}]}, "files[0].d", "found null"),
        ({"files": [{"s": "file:///a", "d": "file:///b", "z": -1}]}, "files[0].z", ">= 0"),
        (
            {"files": [{"s": "a:/1", "d": "a:/x", "z": 1}, {"s": "a:/2", "d": "a:/x", "z": 1}]},
            "files[1].d",
            "more than one pending commit",
        ),
        ({"directories": [{"d": "a:/x", "t": 9, "l": 1}]}, "directories[0].t", "<= 4"),
        ({"extraData": {"k": []}}, "extraData.k", "must be a string"),
    ],
)
def test_invalid_manifest_names_file_and_field(changes, field, problem):
    data = json.loads(MANIFEST)
    data.update(changes)
    source = "file:///out/_temporary/j/00/manifests/task_1-manifest.json"
    with pytest.raises(InvalidCommitData) as caught:
        TaskManifest.from_json(json.dumps(data), source=source)
    assert (caught.value.source, caught.value.field) == (source, field)
    assert problem in caught.value.problem


def test_manifest_destination_checks():
    manifest = TaskManifest.from_json(MANIFEST)
    manifest.check_destination("abfs://c@acct.dfs.core.windows.net/out", "m.json")
    with pytest.raises(InvalidCommitData, match=r"m.json: files\[0\].d: .* outside the job"):
        manifest.check_destination("abfs://c@acct.dfs.core.windows.net/other", "m.json")
    manifest.files[0].dest = "abfs://c@acct.dfs.core.windows.net/out/../escape"
    with pytest.raises(InvalidCommitData, match="outside the job destination"):
        manifest.check_destination("abfs://c@acct.dfs.core.windows.net/out", "m.json")


def test_zero_byte_success_on_s3_is_reported_as_the_classic_marker(s3, bucket):
    # S3 answers a ranged GET of an empty object with InvalidRange, not with no bytes.
    s3.pipe_file(f"{bucket}/out/_SUCCESS", b"")
    with pytest.raises(
        InvalidCommitData, match=r"/out/_SUCCESS: zero-byte _SUCCESS: written by the classic"
    ):
        SuccessData.load(s3, f"{bucket}/out/_SUCCESS")
