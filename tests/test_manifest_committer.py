"""The manifest committer on rename stores: Hadoop's manifest suite (reference §7.4).

Every scenario runs on local files, memory, Azure Blob (Azurite + adlfs) and GCS (the
GCS emulator + gcsfs).

Faults are injected by the store itself (``helpers.faulty_fs``); every test asserts on
the files the destination shows and on the JSON the committer writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from helpers import job_record
from helpers.faulty_fs import faulty

import magicfs
from magicfs import ManifestCommitter
from magicfs.committers.manifest_stages import (
    StageContext,
    cleanup,
    create_directories,
    load_manifests,
    rename_files,
    unrename,
    validate_output,
)
from magicfs.committers.manifest_stages.cleanup import Outcome
from magicfs.committers.manifest_stages.validate import OutputValidationError
from magicfs.errors import (
    CommitFailedError,
    InvalidCommitData,
    JobNotActiveError,
)
from magicfs.layouts.manifest import staged_names
from magicfs.records import (
    MANIFEST_COMMITTER_CLASS,
    EntryStatus,
    ManifestSuccessData,
    SuccessData,
    TaskManifest,
)


@dataclass
class Store:
    fs: fsspec.AbstractFileSystem
    dest: str  # URL

    @property
    def root(self) -> str:
        return self.fs._strip_protocol(self.dest)

    def committer(self, **options) -> ManifestCommitter:
        return ManifestCommitter(self.dest, fs=self.fs, **options)

    def files(self) -> list[str]:
        """Every file under the destination, relative, hidden ones included."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.root)
        except FileNotFoundError:
            return []
        return sorted(r for p in found if not job_record(r := p[len(self.root) + 1 :]))

    def visible(self) -> list[str]:
        return [f for f in self.files() if not any(e.startswith(("_", ".")) for e in f.split("/"))]

    def read(self, relative: str) -> bytes:
        return self.fs.cat_file(f"{self.root}/{relative}")


@pytest.fixture(params=["file", "memory", "abfs", "gcs"])
def store(request, tmp_path) -> Store:
    if request.param == "file":
        return Store(faulty(fsspec.filesystem("file")), f"file://{tmp_path}/out")
    if request.param == "memory":
        return Store(faulty(fsspec.filesystem("memory")), f"memory://t-{uuid.uuid4().hex}/out")
    if request.param == "abfs":
        container = request.getfixturevalue("azure_container")
        return Store(faulty(request.getfixturevalue("abfs")), f"abfs://{container}/out")
    bucket = request.getfixturevalue("gcs_bucket")
    return Store(faulty(request.getfixturevalue("gcs")), f"gs://{bucket}/out")


def run_tasks(committer, files_per_task: dict[int, list[str]]):
    committer.setup_job()
    messages = []
    for index, names in files_per_task.items():
        task = committer.task_attempt(index)
        committer.setup_task(task)
        for name in names:
            committer.fs.pipe_file(task.path(name), f"{name} from task {index}".encode())
        messages.append(committer.commit_task(task))
    return messages


# --- the same user code as on S3 ------------------------------------------------------------


def test_pandas_and_pyarrow_jobs_commit_like_on_s3(store):
    frame = pd.DataFrame({"year": [2023, 2024, 2024], "amount": [1.0, 2.0, 3.0]})
    with magicfs.write_job(store.dest, fs=store.fs, committer="manifest") as job:
        assert isinstance(job.committer, ManifestCommitter)
        with job.task(0) as task:
            frame.to_parquet(task.path("pandas/part-00000.parquet"), filesystem=job.fs, index=False)
        with job.task(1) as task:
            ds.write_dataset(
                pa.Table.from_pandas(frame, preserve_index=False),
                f"{task.work_path}/arrow",
                format="parquet",
                partitioning=["year"],
                partitioning_flavor="hive",
                filesystem=job.fs,
                basename_template="part-1-{i}.parquet",
                existing_data_behavior="overwrite_or_ignore",
            )
            assert store.visible() == []  # nothing visible before job commit
    assert store.visible() == [
        "arrow/year=2023/part-1-0.parquet",
        "arrow/year=2024/part-1-0.parquet",
        "pandas/part-00000.parquet",
    ]
    assert store.files() == ["_SUCCESS", *store.visible()]  # _temporary is gone
    back = pd.read_parquet(f"{store.root}/pandas/part-00000.parquet", filesystem=store.fs)
    pd.testing.assert_frame_equal(back, frame)
    success = ManifestSuccessData.from_json(store.read("_SUCCESS"))
    assert success.committer == MANIFEST_COMMITTER_CLASS
    assert success.job_id == job.job_id and success.success
    assert success.diagnostics["stage"] == "committer_commit_job"
    assert len(success.filenames) == 3 and all("://" in f for f in success.filenames)  # URIs
    assert job.summary.files == 3 and job.summary.tasks == 2
    assert success.iostatistics.counters["committer_files_committed"] == 3


def test_magic_paths_read_and_list_inside_the_attempt(store):
    committer = store.committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("a/b.csv"), b"hello")
    assert committer.fs.cat_file(task.path("a/b.csv")) == b"hello"
    assert committer.fs.exists(task.path("a/b.csv"))
    assert committer.fs.info(task.path("a/b.csv"))["name"] == task.path("a/b.csv")
    assert committer.fs.find(task.work_path) == [task.path("a/b.csv")]
    with committer.fs.open(task.path("a/b.csv"), "rb") as f:
        assert f.read() == b"hello"
    assert store.visible() == []
    committer.abort_job()


def test_task_manifest_contents(store):
    committer = store.committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("year=2024/file with space.csv"), b"12345")
    committer.fs.pipe_file(task.path("top.csv"), b"1")
    message = committer.commit_task(task)
    manifest = TaskManifest.from_json(store.fs.cat_file(message.record))
    assert (manifest.job_id, manifest.task_id, manifest.task_attempt_id) == (
        committer.job_id,
        task.task_id,
        task.attempt_id,
    )
    by_dest = {entry.dest.rsplit("/out/", 1)[1]: entry for entry in manifest.files}
    assert sorted(by_dest) == ["top.csv", "year=2024/file%20with%20space.csv"]  # URIs, HADOOP-17112
    assert by_dest["top.csv"].size == 1
    assert [(d.dir.rsplit("/", 1)[1], d.status, d.level) for d in manifest.directories] == [
        ("year=2024", EntryStatus.NOT_FOUND, 1)
    ]
    assert (message.files, message.bytes) == (2, 6)
    committer.commit_job([message])
    assert store.read("year=2024/file with space.csv") == b"12345"


# --- attempts ---------------------------------------------------------------------------------


def test_duplicate_task_commit_succeeds(store):
    committer = store.committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("a"), b"1")
    assert committer.commit_task(task) == committer.commit_task(task)
    committer.commit_job()
    assert store.visible() == ["a"]
    with pytest.raises(JobNotActiveError):
        committer.commit_task(task)


def test_task_commit_after_the_job_ended_is_withdrawn(store):
    committer = store.committer()
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("late"), b"1")
    store.fs.rm_file(committer.flow.layout.job_marker)  # the job ends while the task commits
    with pytest.raises(JobNotActiveError, match="ended before task attempt"):
        committer.commit_task(task)
    assert not store.fs.exists(committer.flow.layout.manifest(task.task_id))
    assert not store.fs.exists(committer.flow.layout.attempt_manifest(task.attempt_id))


# --- failures ----------------------------------------------------------------------------------


def rename_operation(store: Store) -> str:
    return (
        "mv"
        if ManifestCommitter(store.dest, fs=store.fs).flow.store.supports_atomic_rename
        else "cp_file"
    )


def test_rename_failure_mid_job_fails_cleanly_and_a_rerun_succeeds(store):
    committer = store.committer(threads=1)
    messages = run_tasks(committer, {t: [f"t{t}/f{n}" for n in range(5)] for t in range(4)})
    renames_of_task_files = [0]

    def sixth_task_file(source, dest):
        renames_of_task_files[0] += "/tasks/" in source
        return "/tasks/" in source and renames_of_task_files[0] == 6

    store.fs.fail(rename_operation(store), when=sixth_task_file)
    with pytest.raises(CommitFailedError, match=r"failed in stage publish: .*injected"):
        committer.commit_job(messages)
    assert store.visible() == []  # the five files renamed before the failure were deleted
    assert store.files() == []  # and the job was aborted
    store.fs.rules.clear()
    rerun = store.committer()
    rerun.commit_job(run_tasks(rerun, {t: [f"t{t}/f{n}" for n in range(5)] for t in range(4)}))
    assert len(store.visible()) == 20


def test_rename_whose_reply_was_lost_is_recovered(store):
    committer = store.committer()
    messages = run_tasks(committer, {0: ["a", "b"]})
    operation = rename_operation(store)
    if operation == "cp_file":  # the copy was made, the delete of the source was lost
        store.fs.fail(
            "rm_file",
            when=lambda path: "/tasks/" in path and path.endswith("/" + staged_names(["a"])[0]),
            after=True,
            times=1,
        )
    else:  # the rename happened, its reply was lost
        staged = "/" + staged_names(["a"])[0]
        store.fs.fail("mv", when=lambda source, dest: source.endswith(staged), after=True, times=1)
    summary = committer.commit_job(messages)
    assert store.visible() == ["a", "b"]
    assert summary.counters["commit_file_rename_recovered"] == 1


def test_failed_success_save_reverts_the_job(store):
    committer = store.committer()
    messages = run_tasks(committer, {0: ["a", "b"]})
    store.fs.fail("pipe_file", when=lambda path: path.endswith("_SUCCESS.tmp"))
    with pytest.raises(CommitFailedError, match="failed in stage success"):
        committer.commit_job(messages)
    assert store.files() == []


def test_manifest_save_is_retried(store):
    committer = store.committer(save_attempts=3)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    committer.fs.pipe_file(task.path("a"), b"1")
    store.fs.fail("pipe_file", when=lambda path: path.endswith(".tmp"), times=2)
    message = committer.commit_task(task)  # two failures, three attempts: saved
    assert message.files == 1
    store.fs.fail("pipe_file", when=lambda path: path.endswith(".tmp"), times=3)
    with pytest.raises(OSError, match="injected"):
        committer.commit_task(task)


def test_manifest_source_outside_its_attempt_is_refused(store):
    # A manifest edited to name another file as a source must not move it into the
    # destination: sources must lie in the attempt's own working directory.
    outside = f"{store.root}-elsewhere/precious.csv"
    store.fs.makedirs(store.fs._parent(outside), exist_ok=True)
    store.fs.pipe_file(outside, b"not the job's")
    committer = store.committer()
    messages = run_tasks(committer, {0: ["a"], 1: ["b"]})
    record = messages[0].record
    document = json.loads(store.fs.cat_file(record))
    document["files"][0]["s"] = ManifestCommitter(store.dest, fs=store.fs).flow.store.uri(outside)
    store.fs.pipe_file(record, json.dumps(document).encode())
    with pytest.raises(
        CommitFailedError, match=r"files\[0\].s: .*precious.csv is not in the working directory"
    ) as caught:
        committer.commit_job(messages)
    assert isinstance(caught.value.__cause__, InvalidCommitData)
    assert store.fs.cat_file(outside) == b"not the job's"  # still where it was
    assert store.visible() == []


def test_summary_report_is_written_for_success_and_failure(store, tmp_path):
    report_dir = f"{store.root}-reports"
    committer = store.committer(report_dir=report_dir)
    committer.commit_job(run_tasks(committer, {0: ["a"]}))
    report = SuccessData.from_json(
        store.fs.cat_file(f"{report_dir}/summary-{committer.job_id}.json")
    )
    assert report.success and report.job_id == committer.job_id

    failing = store.committer(report_dir=report_dir)
    messages = run_tasks(failing, {0: ["b"]})
    store.fs.fail(rename_operation(store), when=lambda source, dest: "/tasks/" in source)
    with pytest.raises(CommitFailedError):
        failing.commit_job(messages)
    report = SuccessData.from_json(store.fs.cat_file(f"{report_dir}/summary-{failing.job_id}.json"))
    assert not report.success
    assert report.diagnostics["stage"] == "publish"
    assert "injected" in report.diagnostics["exception"]
    assert "Traceback" in report.diagnostics["stacktrace"]


# --- conflict modes and dirty trees --------------------------------------------------------------


def visible_directories(fs, root: str) -> list[str]:
    """Directories under ``root`` that readers see (a local disk keeps empty ones)."""
    found = fs.find(root, withdirs=True, detail=True)
    return sorted(
        path[len(root) + 1 :]
        for path, info in found.items()
        if info["type"] == "directory"
        and path != root
        and not any(e.startswith(("_", ".")) for e in path[len(root) + 1 :].split("/"))
    )


def test_replace_on_a_local_disk_leaves_no_empty_directory_of_the_old_data(tmp_path):
    store = Store(fsspec.filesystem("file"), f"file://{tmp_path}/out")
    store.fs.makedirs(f"{store.root}/year=2023/month=1", exist_ok=True)
    store.fs.pipe_file(f"{store.root}/year=2023/month=1/old.csv", b"old")
    store.fs.makedirs(f"{store.root}/shared", exist_ok=True)
    store.fs.pipe_file(f"{store.root}/shared/old.csv", b"old")
    replacing = store.committer(conflict_mode="replace")
    replacing.commit_job(run_tasks(replacing, {0: ["year=2024/new.csv", "shared/new.csv"]}))
    assert store.visible() == ["shared/new.csv", "year=2024/new.csv"]
    # year=2023 held only old data: gone with it (else readers see an empty partition).
    assert visible_directories(store.fs, store.root) == ["shared", "year=2024"]


def test_a_failed_commit_on_a_local_disk_leaves_none_of_the_directories_it_made(tmp_path):
    store = Store(faulty(fsspec.filesystem("file")), f"file://{tmp_path}/out")
    store.fs.makedirs(f"{store.root}/existing", exist_ok=True)
    committer = store.committer(threads=1)
    tasks = {t: [f"t{t}/deep/f{n}" for n in range(3)] for t in range(3)}
    messages = run_tasks(committer, {**tasks, 3: ["existing/f"]})
    renames = [0]

    def fifth(source, dest):
        renames[0] += "/tasks/" in source
        return "/tasks/" in source and renames[0] == 5

    store.fs.fail("mv", when=fifth)
    with pytest.raises(CommitFailedError, match="failed in stage publish"):
        committer.commit_job(messages)
    assert store.visible() == []
    # t0/deep, t1/... were made by the commit: removed again; "existing" was there before.
    assert visible_directories(store.fs, store.root) == ["existing"]


def test_a_file_where_a_directory_must_go_is_replaced(store):
    # Hadoop's dirty tree: the destination holds a file named like a directory the job needs.
    store.fs.makedirs(store.root, exist_ok=True)
    store.fs.pipe_file(f"{store.root}/year=2024", b"a file in the way")
    committer = store.committer()
    committer.commit_job(run_tasks(committer, {0: ["year=2024/a.csv", "year=2024/deeper/b.csv"]}))
    assert store.visible() == ["year=2024/a.csv", "year=2024/deeper/b.csv"]


def test_a_file_that_appears_in_the_way_after_task_commit(tmp_path):
    # On a local disk the directory cannot be made: the file is found and deleted then.
    store = Store(faulty(fsspec.filesystem("file")), f"file://{tmp_path}/out")
    committer = store.committer()
    messages = run_tasks(committer, {0: ["year=2024/a.csv", "year=2024/deeper/b.csv"]})
    store.fs.pipe_file(f"{store.root}/year=2024", b"a file in the way")
    committer.commit_job(messages)
    assert store.visible() == ["year=2024/a.csv", "year=2024/deeper/b.csv"]


# --- stages, one at a time --------------------------------------------------------------


def stage_context(committer) -> StageContext:
    return committer.flow._context()


def test_stages_alone_load_create_rename_validate(store):
    committer = store.committer()
    messages = run_tasks(committer, {0: ["a", "d/b"], 1: ["d/e/c"]})
    context = stage_context(committer)
    loaded = load_manifests(context, [m.record for m in messages])
    assert (loaded.files, loaded.bytes) == (3, sum(m.bytes for m in messages))
    assert sorted(loaded.attempt_ids) == sorted(m.attempt_id for m in messages)
    assert sorted(e.dest.rsplit("/out/", 1)[1] for e in loaded.entries()) == ["a", "d/b", "d/e/c"]
    assert create_directories(context, loaded.directories) >= 1
    outcome = rename_files(context, loaded)
    assert (outcome.files, outcome.recovered) == (3, 0)
    assert validate_output(context, loaded) == 3
    assert rename_files(context, loaded).recovered == 3  # again: every file already in place
    store.fs.rm_file(f"{store.root}/d/b")  # a committed file goes missing
    with pytest.raises(OutputValidationError, match=r"/d/b: committed file is missing"):
        validate_output(context, loaded)
    store.fs.pipe_file(f"{store.root}/d/b", b"changed!" * 10)  # or changes
    with pytest.raises(OutputValidationError, match=r"/d/b: size 80 but the task wrote"):
        validate_output(context, loaded)
    assert unrename(context, loaded, since=0) == 3  # rolled back: every renamed file deleted
    assert store.visible() == []
    loaded.discard()


def test_validation_during_job_commit(store):
    committer = store.committer(validate_output=True)
    committer.commit_job(run_tasks(committer, {0: ["a", "b/c"]}))
    assert store.visible() == ["a", "b/c"]
    assert committer.stats.counter("job_stage_optional_validate_output") == 1


def test_cleanup_outcomes(store):
    committer = store.committer()
    context = stage_context(committer)
    assert cleanup(context).outcome is Outcome.NOTHING_TO_CLEAN_UP
    run_tasks(committer, {t: ["a"] for t in range(3)})
    result = cleanup(context)
    assert (result.outcome, result.directories_deleted) == (Outcome.PARALLEL_DELETE, 4)
    assert store.files() == []
    run_tasks(committer, {0: ["a"]})
    store.fs.fail("rm", when=lambda path: True)
    failed = cleanup(context)
    assert failed.outcome is Outcome.FAILURE and "injected" in str(failed.error)


def test_a_killed_commit_s_entries_file_is_deleted_by_the_next_commit(store, tmp_path, monkeypatch):
    """The job commit's local entries file carries its process id: one left by a process
    that no longer runs (a commit killed mid-way) is deleted by the next commit on the
    machine; a running process's file stays."""
    spills = tmp_path / "spills"
    spills.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spills))
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = spills / f"magicfs-manifest-entries-{child.stdout.strip()}-x1.jsonl"
    live = spills / f"magicfs-manifest-entries-{os.getppid()}-x2.jsonl"
    for path in (dead, live):
        path.write_text('{"s": "a", "d": "b", "z": 1}\n')
    committer = store.committer()
    committer.commit_job(run_tasks(committer, {0: ["a"]}))
    assert store.visible() == ["a"]
    assert sorted(spills.iterdir()) == [live]


@pytest.mark.parametrize("option", ["off", False, "background", "inline", True])
def test_the_cleanup_option_means_what_it_means_for_every_committer(
    store, option, tmp_path, monkeypatch
):
    """The manifest committer takes every committer's cleanup values (its own booleans
    too): "off" leaves the job's tree and says how to finish; "background" finishes it
    once wait_cleanup() returns. Whatever the option, the job commit's local spill file
    is gone when commit_job() (or the background clean-up) returns."""
    spills = tmp_path / "spills"
    spills.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spills))
    committer = store.committer(cleanup=option)
    summary = committer.commit_job(run_tasks(committer, {0: ["a"], 1: ["b"]}))
    assert store.visible() == ["a", "b"]
    if option in ("off", False, "inline", True):
        assert list(spills.iterdir()) == []
    if option in ("off", False):
        assert f"magicfs jobs cleanup --job {committer.job_id}" in summary.cleanup_incomplete
        assert any(f.startswith("_temporary/") for f in store.files())
        committer.cleanup_job()
    else:
        assert summary.cleanup_incomplete is None
        assert committer.wait_cleanup() is None
    assert store.files() == ["_SUCCESS", "a", "b"]
    assert list(spills.iterdir()) == []


def test_an_unknown_cleanup_value_is_refused(store):
    with pytest.raises(ValueError, match="unknown cleanup 'later'"):
        store.committer(cleanup="later")
