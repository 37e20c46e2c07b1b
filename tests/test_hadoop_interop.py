"""Hadoop's own classes read what magicfs writes, and magicfs reads what Hadoop writes.

The ``hadoop_records`` fixture runs Hadoop 3.5's ``TaskManifest``,
``ManifestSuccessData`` and ``ManifestPrinter`` (jars of the pyspark wheel) on Java:
each record is loaded with Hadoop's serializer and ``validate()``-d, and the test
compares what Hadoop understood, field by field, with what magicfs meant. File names
carry a space, unicode and characters a URI must escape, because paths in these
formats are URIs (``%20``) and a wrong quoting would rename files to wrong names.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers.hadoop import HadoopRejected
from helpers.reference_documents import MANIFEST, MANIFEST_SUCCESS, SUCCESS

from magicfs.errors import InvalidCommitData
from magicfs.records import (
    MANIFEST_COMMITTER_CLASS,
    MANIFEST_TYPE,
    SUCCESS_NAME,
    DirEntry,
    EntryStatus,
    FileEntry,
    IOStatisticsSnapshot,
    ManifestSuccessData,
    MeanStatistic,
    SuccessData,
    TaskManifest,
    path_to_uri,
    uri_to_path,
)

# A space, Latin-1 and other unicode, and URI-reserved characters (%, #, [ ], +).
ODD_NAMES = ["year=2024/a b ü€.csv", "odd/50% #1 [x]+y.csv", "part-0000"]

# What tests/java/HadoopRecords.java saves with ``--save`` (its SAMPLE_* constants).
SAMPLE_DEST = "abfs://c@acct.dfs.core.windows.net/out"
SAMPLE_JOB = "job_202611220000_0007"
SAMPLE_TASK = "task_202611220000_0007_m_000003"
SAMPLE_ATTEMPT = "attempt_202611220000_0007_m_000003_1"
SAMPLE_ATTEMPT_DIR = f"{SAMPLE_DEST}/_temporary/{SAMPLE_JOB}/01/tasks/{SAMPLE_ATTEMPT}"
SAMPLE_STATISTICS = IOStatisticsSnapshot(
    counters={"committer_files_committed": 3, "op_rename": 3},
    minimums={"op_rename.min": 4},
    maximums={"op_rename.max": 9},
    meanstatistics={"op_rename.mean": MeanStatistic(samples=3, sum=18)},
)


def hadoop_view_of(manifest: TaskManifest) -> dict[str, Any]:
    """What HadoopRecords prints for ``manifest`` if Hadoop reads it as magicfs means it.

    ``destPath`` is Hadoop's decoding of the destination URI (``URI.getPath()``), here
    computed with magicfs's :func:`uri_to_path`: equal views mean equal file names.
    """
    files = []
    for entry in manifest.files:
        dest_path = uri_to_path(urlsplit(entry.dest).path)
        files.append(
            {
                "source": entry.source,
                "dest": entry.dest,
                "size": entry.size,
                "etag": entry.etag,
                "destPath": dest_path,
                "destName": posixpath.basename(dest_path),
            }
        )
    return {
        "type": MANIFEST_TYPE,
        "version": 1,
        "jobId": manifest.job_id,
        "jobAttemptNumber": manifest.job_attempt_number,
        "taskID": manifest.task_id,
        "taskAttemptID": manifest.task_attempt_id,
        "taskAttemptDir": manifest.task_attempt_dir,
        "files": files,
        "directories": [
            {"dir": d.dir, "status": EntryStatus(d.status).name.lower(), "level": d.level}
            for d in manifest.directories
        ],
        "totalFileSize": manifest.total_bytes,
        "extraData": manifest.extra_data,
        "iostatistics": manifest.iostatistics.to_dict(),
    }


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- (a) Hadoop's reference documents -----------------------------------------------------


def test_hadoop_loads_the_reference_task_manifest(hadoop_records, tmp_path):
    view = hadoop_records("manifest", write(tmp_path, "task-manifest.json", MANIFEST))

    assert view["taskAttemptID"] == "attempt_202410091320_0001_m_000000_0"
    assert view["files"][0]["destPath"] == "/out/year=2024/part-0000"
    assert (view["files"][0]["size"], view["files"][0]["etag"]) == (21, "0x8DCE84A2B4F31C2")
    assert view["directories"] == [
        {
            "dir": "abfs://c@acct.dfs.core.windows.net/out/year=2024",
            "status": "not_found",
            "level": 1,
        }
    ]
    assert view == hadoop_view_of(TaskManifest.from_json(MANIFEST))


def test_hadoop_loads_the_reference_manifest_success(hadoop_records, tmp_path):
    view = hadoop_records("success", write(tmp_path, "_SUCCESS", MANIFEST_SUCCESS))
    ours = ManifestSuccessData.from_json(MANIFEST_SUCCESS)

    assert view["committer"] == ours.committer == MANIFEST_COMMITTER_CLASS
    assert view["date"] == ours.date == "2024-10-09T13:21:40.003+01:00[Europe/London]"
    assert (
        view["diagnostics"]
        == ours.diagnostics
        == {"principal": "alice", "stage": "committer_commit_job"}
    )
    assert view["filenames"] == ours.filenames
    assert view["filenamePaths"] == ["/out/year=2024/part-0000"]
    assert view["iostatistics"] == ours.iostatistics.to_dict()
    assert (view["description"], view["state"], view["stage"]) == (None, None, None)


def test_hadoop_loads_the_reference_s3a_success(hadoop_records, tmp_path):
    view = hadoop_records("success", write(tmp_path, "_SUCCESS", SUCCESS))

    assert view["name"] == SUCCESS_NAME
    assert view["committer"] == "magic"
    assert view["filenames"] == ["/out/year=2024/part-0000.csv"]
    assert view["metrics"] == {"committer_commits_completed": 1}


# --- (b) records magicfs writes -----------------------------------------------------------


def magicfs_manifest(dest: str = "gs://bucket/sales") -> TaskManifest:
    attempt_dir = f"{dest}/_temporary/job-7/00/tasks/attempt_7_m_000001_0"
    return TaskManifest(
        job_id="job-7",
        job_attempt_number=0,
        task_id="task_7_m_000001",
        task_attempt_id="attempt_7_m_000001_0",
        task_attempt_dir=path_to_uri(attempt_dir),
        files=[
            FileEntry(
                source=path_to_uri(f"{attempt_dir}/{name}"),
                dest=path_to_uri(f"{dest}/{name}"),
                size=10 * index,
                etag=f'"0x8DCE84A2B4F31C{index}"' if index else None,
            )
            for index, name in enumerate(ODD_NAMES)
        ],
        directories=[
            DirEntry(path_to_uri(f"{dest}/year=2024"), EntryStatus.NOT_FOUND, 1),
            DirEntry(path_to_uri(f"{dest}/odd"), EntryStatus.CREATED_DIR, 1),
        ],
        extra_data={"magicfs.attempt": "attempt_7_m_000001_0", "ünïcode": "välue"},
        iostatistics=SAMPLE_STATISTICS.copy(),
    )


def test_hadoop_loads_a_task_manifest_written_by_magicfs(hadoop_records, tmp_path):
    manifest = magicfs_manifest()
    view = hadoop_records("manifest", write(tmp_path, "manifest.json", manifest.to_json()))

    assert view == hadoop_view_of(manifest)
    assert [entry["destPath"] for entry in view["files"]] == [f"/sales/{n}" for n in ODD_NAMES]
    assert view["files"][0]["dest"] == "gs://bucket/sales/year=2024/a%20b%20ü€.csv"
    assert view["files"][1]["dest"] == "gs://bucket/sales/odd/50%25%20%231%20%5Bx%5D+y.csv"


def test_hadoop_loads_and_prints_a_manifest_success_written_by_magicfs(hadoop_records, tmp_path):
    success = ManifestSuccessData(
        job_id="job-7",
        job_id_source="JobID",
        hostname="host-ü",
        timestamp=1795305600123,
        diagnostics={"stage": "committer_commit_job", "principal": "alice"},
        filenames=[path_to_uri(f"gs://bucket/sales/{name}") for name in ODD_NAMES],
        iostatistics=SAMPLE_STATISTICS.copy(),
    )
    path = write(tmp_path, "_SUCCESS", success.to_json())

    view = hadoop_records("success", path)
    assert view["success"] is True
    assert (view["timestamp"], view["date"]) == (1795305600123, "2026-11-22T00:00:00.123Z[UTC]")
    assert (view["hostname"], view["jobId"], view["jobIdSource"]) == ("host-ü", "job-7", "JobID")
    assert view["committer"] == MANIFEST_COMMITTER_CLASS
    assert view["filenames"] == success.filenames
    assert view["filenamePaths"] == [f"/sales/{name}" for name in ODD_NAMES]
    assert view["diagnostics"] == success.diagnostics
    assert view["iostatistics"] == success.iostatistics.to_dict()

    printed = hadoop_records.print_success(path)
    assert printed.splitlines()[:8] == [
        f"Manifest file: {path}",
        "succeeded: true",
        "created: 2026-11-22T00:00:00.123Z[UTC]",
        f"committer: {MANIFEST_COMMITTER_CLASS}",
        "hostname: host-ü",
        "jobId: job-7",
        "jobIdSource: JobID",
        "Diagnostics",
    ]
    assert "  principal = alice\n  stage = committer_commit_job\n" in printed
    assert "counters=((committer_files_committed=3)\n(op_rename=3));" in printed
    assert "means=((op_rename.mean=(samples=3, sum=18, mean=6.0000)));" in printed


def test_magicfs_renders_statistics_as_hadoops_manifest_printer(hadoop_records, tmp_path):
    """``IOStatisticsSnapshot.pretty()`` claims to be Hadoop's ``ioStatisticsToPrettyString``."""
    statistics = IOStatisticsSnapshot(
        counters={"b": 2, "a": 1, "zero": 0},
        gauges={},  # an empty section
        minimums={"op.min": 4, "unset.min": -1},
        maximums={"op.max": 9},
        meanstatistics={"op.mean": MeanStatistic(2, 13), "empty.mean": MeanStatistic(0, 0)},
    )
    path = write(tmp_path, "_SUCCESS", ManifestSuccessData(iostatistics=statistics).to_json())

    printed = hadoop_records.print_success(path)

    assert printed.split("Statistics:\n", 1)[1].strip() == statistics.pretty()


def test_hadoop_reads_an_s3a_success_written_by_magicfs(hadoop_records, tmp_path):
    success = SuccessData(
        committer="magic",
        description="Task committer attempt_7_m_000001_0",
        job_id="0d1f",
        job_id_source="spark.sql.sources.writeJobUUID",
        metrics={"committer_commits_completed": 2},
        diagnostics={"fs.s3a.committer.threads": "8"},
        filenames=["/sales/year=2024/part-0000.csv", "/sales/a b ü.csv"],
    )
    path = write(tmp_path, "_SUCCESS", success.to_json())

    view = hadoop_records("success", path)
    assert view["name"] == SUCCESS_NAME
    assert (view["committer"], view["description"]) == ("magic", success.description)
    assert (view["jobId"], view["jobIdSource"]) == ("0d1f", "spark.sql.sources.writeJobUUID")
    assert view["metrics"] == success.metrics
    assert view["diagnostics"] == success.diagnostics
    assert view["filenames"] == success.filenames  # S3A lists raw "/key" names, not URIs ...
    # ... so Hadoop cannot turn a key with a space into a Path (nor can it for S3A's own).
    assert view["filenamePaths"] is None
    assert "Illegal character in path" in view["filenamePathsError"]

    printed = hadoop_records.print_success(path)
    assert "committer: magic\n" in printed
    assert f"description: {success.description}\n" in printed
    assert "  fs.s3a.committer.threads = 8\n" in printed


# --- the reverse: magicfs reads what Hadoop's classes saved --------------------------------


def test_magicfs_reads_a_task_manifest_saved_by_hadoop(hadoop_records, tmp_path):
    path = tmp_path / "task-manifest.json"
    hadoop_view = hadoop_records.save("manifest", path)

    manifest = TaskManifest.from_json(path.read_bytes(), source=str(path))
    assert hadoop_view_of(manifest) == hadoop_view
    assert (manifest.job_id, manifest.job_attempt_number) == (SAMPLE_JOB, 1)
    assert (manifest.task_id, manifest.task_attempt_id) == (SAMPLE_TASK, SAMPLE_ATTEMPT)
    # magicfs quotes paths exactly as Java's URI does, and decodes them back.
    assert manifest.task_attempt_dir == path_to_uri(SAMPLE_ATTEMPT_DIR)
    assert [entry.source for entry in manifest.files] == [
        path_to_uri(f"{SAMPLE_ATTEMPT_DIR}/{name}") for name in ODD_NAMES
    ]
    assert [uri_to_path(entry.dest) for entry in manifest.files] == [
        f"{SAMPLE_DEST}/{name}" for name in ODD_NAMES
    ]
    assert [(entry.size, entry.etag) for entry in manifest.files] == [
        (21, '"0x8DCE84A2B4F31C21"'),
        (22, '"0x8DCE84A2B4F31C22"'),
        (23, None),
    ]
    assert manifest.directories == [
        DirEntry(path_to_uri(f"{SAMPLE_DEST}/year=2024"), EntryStatus.NOT_FOUND, 1),
        DirEntry(path_to_uri(f"{SAMPLE_DEST}/odd"), EntryStatus.DIR, 1),
    ]
    assert manifest.extra_data == {"written.by": "HadoopRecords"}
    assert manifest.iostatistics == SAMPLE_STATISTICS


def test_magicfs_reads_a_manifest_success_saved_by_hadoop(hadoop_records, tmp_path):
    path = tmp_path / "_SUCCESS"
    hadoop_view = hadoop_records.save("success", path)

    success = ManifestSuccessData.from_json(path.read_bytes(), source=str(path))
    assert success.success is True
    assert (success.timestamp, success.date) == (1795305600000, "2026-11-22T00:00:00Z[UTC]")
    assert (success.hostname, success.committer) == ("host1", MANIFEST_COMMITTER_CLASS)
    assert (success.job_id, success.job_id_source) == (SAMPLE_JOB, "JobID")
    assert success.diagnostics == {"stage": "committer_commit_job"}
    assert success.filenames == hadoop_view["filenames"]
    assert [uri_to_path(name) for name in success.filenames] == [
        f"{SAMPLE_DEST}/{name}" for name in ODD_NAMES
    ]
    assert success.iostatistics == SAMPLE_STATISTICS

    # Written again by magicfs, Hadoop reads back what it first saved.
    again = tmp_path / "_SUCCESS.magicfs"
    again.write_text(success.to_json(), encoding="utf-8")
    assert hadoop_records("success", again) == hadoop_view


# --- both refuse the same broken records ---------------------------------------------------


def _manifest_with(change) -> str:
    document = json.loads(MANIFEST)
    change(document)
    return json.dumps(document)


def _duplicate_destination(document: dict) -> None:
    document["files"].append(dict(document["files"][0], s=document["files"][0]["s"] + "-2"))


@pytest.mark.parametrize(
    ("kind", "text", "hadoop_says"),
    [
        (
            "manifest",
            _manifest_with(lambda d: d.update(type="TaskManifest/2")),
            "java.io.IOException: Wrong type: TaskManifest/2",
        ),
        (
            "manifest",
            _manifest_with(_duplicate_destination),
            "java.io.IOException: Destination abfs://c@acct.dfs.core.windows.net/out/"
            "year=2024/part-0000 is written to by more than one pending commit",
        ),
        (
            "manifest",
            _manifest_with(lambda d: d["files"][0].update(z=-1)),
            "java.io.IOException: Invalid size in FileOrDirEntry",
        ),
        ("success", "", "No content to map due to end-of-input"),
        (
            "success",
            SUCCESS.replace(SUCCESS_NAME, "org.apache.hadoop.fs.s3a.commit.files.SuccessData/2"),
            "java.io.IOException: Incompatible file format: "
            "org.apache.hadoop.fs.s3a.commit.files.SuccessData/2",
        ),
    ],
    ids=["wrong-type", "duplicate-destination", "negative-size", "zero-byte", "wrong-name"],
)
def test_hadoop_and_magicfs_refuse_the_same_broken_records(
    hadoop_records, tmp_path, kind, text, hadoop_says
):
    path = write(tmp_path, f"broken-{kind}.json", text)

    with pytest.raises(HadoopRejected) as rejected:
        hadoop_records(kind, path)
    assert hadoop_says in str(rejected.value)

    magicfs_class = TaskManifest if kind == "manifest" else ManifestSuccessData
    with pytest.raises(InvalidCommitData):
        magicfs_class.from_json(text, source=str(path))
