"""Readers read exactly the committed jobs: ``magicfs.snapshot`` and the job commit records.

Every test writes real jobs through magicfs to a real store (moto over HTTP, a local
disk, Azurite, the GCS emulator), then resolves the destination's snapshot and checks
what it names against what was committed, and the bytes behind every name. Commits
caught half-way are caught by a filesystem that holds or fails the one write that
publishes a job's record (``tests/helpers/faulty_fs.py``), never by sleeping.
"""

from __future__ import annotations

import gzip
import threading
from typing import Any

import pytest
from helpers.faulty_fs import faulty

import magicfs
from magicfs.errors import InvalidCommitData, JobCommitError, NoSnapshotError

STORES = ["s3", "local", "azure", "gcs"]


class Store:
    """A destination URL on one store, its options, and a filesystem to look with."""

    def __init__(self, url: str, options: dict[str, Any], fs: Any):
        self.url, self.options, self.fs = url, options, fs

    def job(self, files: dict[str, bytes], **options: Any) -> magicfs.JobSummary:
        """Commit one job writing ``files`` (one task each), to this destination."""
        with magicfs.write_job(self.url, storage_options=self.options, **options) as job:
            for task_id, (name, data) in enumerate(sorted(files.items())):
                with job.task(task_id) as task, job.fs.open(task.path(name), "wb") as out:
                    out.write(data)
        return job.summary

    def snapshot(self) -> dict[str, bytes]:
        """The snapshot's files (relative names) and the bytes each holds now."""
        snap = magicfs.snapshot(self.url, storage_options=self.options)
        prefix = snap.path + "/"
        found = {}
        for path in snap.paths():
            assert path.startswith(prefix)
            found[path[len(prefix) :]] = snap.fs.cat_file(path)
        return found

    def listed(self) -> set[str]:
        """What a plain listing of the destination shows as data (no ``_`` names)."""
        self.fs.invalidate_cache()
        root = self.fs._strip_protocol(self.url).rstrip("/")
        try:
            found = self.fs.find(root)
        except FileNotFoundError:
            return set()
        names = {path[len(root) + 1 :] for path in found}
        return {name for name in names if not name.startswith(("_", "."))}


@pytest.fixture(params=STORES)
def store(request, tmp_path) -> Store:
    kind = request.param
    if kind in ("s3", "local"):
        return _store(request, kind, tmp_path)
    if kind == "azure":
        container = request.getfixturevalue("azure_container")
        server = request.getfixturevalue("azurite_server")
        return Store(
            f"abfs://{container}/out", server.storage_options, request.getfixturevalue("abfs")
        )
    bucket, server = request.getfixturevalue("gcs_bucket"), request.getfixturevalue("gcs_server")
    return Store(f"gs://{bucket}/out", server.storage_options, request.getfixturevalue("gcs"))


def test_snapshot_is_every_append_since_the_last_replace(store):
    store.job({"a/1.csv": b"a1\n", "a/2.csv": b"a2\n"})
    assert store.snapshot() == {"a/1.csv": b"a1\n", "a/2.csv": b"a2\n"}

    # a second append adds its files; one it writes again under an old name counts once
    store.job({"b/1.csv": b"b1\n", "a/2.csv": b"a2 again\n"})
    assert store.snapshot() == {"a/1.csv": b"a1\n", "a/2.csv": b"a2 again\n", "b/1.csv": b"b1\n"}

    store.job({"c/1.csv": b"c1\n"}, conflict_mode="replace")
    assert store.snapshot() == {"c/1.csv": b"c1\n"}
    assert store.listed() == {"c/1.csv"}

    store.job({"d/1.csv": b"d1\n"})
    snap = magicfs.snapshot(store.url, storage_options=store.options)
    assert [job.mode for job in snap.jobs] == ["replace", "append"]
    assert (snap.files, snap.bytes) == (2, 6)
    assert store.snapshot() == {"c/1.csv": b"c1\n", "d/1.csv": b"d1\n"}
    assert snap.urls() == [snap.fs.unstrip_protocol(p) for p in snap.paths()]


def test_a_fail_mode_job_starts_the_snapshot_of_an_empty_destination(store):
    store.job({"x.csv": b"x\n"}, conflict_mode="fail")
    assert store.snapshot() == {"x.csv": b"x\n"}


def test_a_job_aborted_by_its_writer_is_not_in_the_snapshot(store):
    store.job({"kept.csv": b"k\n"})
    with (
        pytest.raises(RuntimeError, match="writer failed"),
        magicfs.write_job(store.url, storage_options=store.options) as job,
    ):
        with job.task(0) as task, job.fs.open(task.path("lost.csv"), "wb") as out:
            out.write(b"lost\n")
        raise RuntimeError("writer failed")
    assert store.snapshot() == {"kept.csv": b"k\n"}


#: Stores where the faulty filesystem sees the write of a head (on S3 magicfs writes it
#: with its own PUT, past the filesystem: the record's S3 writes are checked by the
#: engine tests and tests/test_checksums.py's TLS job).
HELD_KINDS = ["local"]


def is_head(path: str) -> bool:
    """A write of a record's head: on a local disk, of the temporary file renamed to it
    (the head exists only once that is renamed)."""
    return "/_magicfs/jobs/" in path and path.endswith((".json", ".json.tmp"))


@pytest.mark.parametrize("kind", HELD_KINDS)
def test_a_commit_is_not_in_the_snapshot_until_its_record_is_written(request, kind, tmp_path):
    """A reader during the commit: the plain listing shows the new files already; the
    snapshot shows the jobs committed before it, whole, and nothing of the new one."""
    store = _store(request, kind, tmp_path)
    store.job({"old.csv": b"old\n"})
    reached, release = threading.Event(), threading.Event()

    def hold(path: str, *_: Any) -> bool:
        if is_head(path):
            reached.set()
            assert release.wait(60), "the test never released the commit"
        return False  # never fail: only hold

    fs = faulty(store.fs)
    fs.fail("pipe_file", when=hold)
    result: list[Any] = []
    writer = threading.Thread(
        target=lambda: result.append(store.job({"new1.csv": b"n1\n", "new2.csv": b"n2\n"}, fs=fs))
    )
    writer.start()
    try:
        assert reached.wait(60), "the commit never reached its record"
        assert store.listed() == {"old.csv", "new1.csv", "new2.csv"}  # a plain reader
        assert store.snapshot() == {"old.csv": b"old\n"}  # a snapshot reader
    finally:
        release.set()
        writer.join(60)
    assert result and result[0].files == 2
    assert store.snapshot() == {"old.csv": b"old\n", "new1.csv": b"n1\n", "new2.csv": b"n2\n"}


def _store(request, kind: str, tmp_path) -> Store:
    if kind == "s3":
        bucket, server = request.getfixturevalue("bucket"), request.getfixturevalue("s3_server")
        return Store(f"s3://{bucket}/out", server.storage_options, request.getfixturevalue("s3"))
    import fsspec

    return Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))


@pytest.mark.parametrize("kind", HELD_KINDS)
def test_a_commit_that_fails_at_its_record_is_rolled_back_and_not_in_the_snapshot(
    request, kind, tmp_path
):
    store = _store(request, kind, tmp_path)
    store.job({"old.csv": b"old\n"})
    fs = faulty(store.fs)
    fs.fail("pipe_file", when=lambda path, *_: is_head(path))
    with pytest.raises(JobCommitError, match="stage success"):
        store.job({"new.csv": b"new\n"}, fs=fs)
    assert store.listed() == {"old.csv"}
    assert store.snapshot() == {"old.csv": b"old\n"}
    snap = magicfs.snapshot(store.url, storage_options=store.options)
    records = store.fs.ls(f"{snap.path}/_magicfs/jobs", detail=False, refresh=True)
    assert len(records) == 2  # the old job's head and list; nothing of the failed one


def test_a_commit_failing_after_its_record_withdraws_it_before_rolling_back(tmp_path):
    """``_SUCCESS`` fails after the record was written: the rollback deletes the record
    (head first) with the files, so no snapshot names a file that went again."""
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    store.job({"old.csv": b"old\n"})
    fs = faulty(store.fs)
    heads: list[str] = []
    fs.fail("pipe_file", when=lambda path, *_: is_head(path) and heads.append(path) and False)
    # the manifest committer saves _SUCCESS by a rename onto it
    fs.fail("mv", when=lambda source, target, *_: target.endswith("/_SUCCESS"))
    with pytest.raises(JobCommitError, match="stage success"):
        store.job({"new.csv": b"new\n"}, fs=fs)
    assert len(heads) == 1  # the record was written, then the commit failed
    assert store.listed() == {"old.csv"}
    assert store.snapshot() == {"old.csv": b"old\n"}
    assert len(store.fs.ls(f"{tmp_path}/out/_magicfs/jobs")) == 2


def test_a_destination_without_records_is_refused_naming_it(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "data.csv").write_bytes(b"x\n")
    with pytest.raises(NoSnapshotError) as refused:
        magicfs.snapshot(f"file://{tmp_path}/out")
    message = str(refused.value)
    assert f"{tmp_path}/out" in message and "_magicfs/jobs" in message
    assert "Commit a job there" in message
    assert isinstance(refused.value, FileNotFoundError)


def test_a_bad_head_is_refused_naming_the_file_and_field(tmp_path):
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    summary = store.job({"a.csv": b"a\n"})
    (head,) = (tmp_path / "out" / "_magicfs" / "jobs").glob(f"*-{summary.job_id}.json")
    head.write_text(head.read_text().replace('"mode":"append"', '"mode":"merge"'))
    with pytest.raises(InvalidCommitData) as refused:
        magicfs.snapshot(store.url)
    assert refused.value.field == "mode" and str(head) in str(refused.value)


def test_a_bad_file_list_line_is_refused_naming_its_line(tmp_path):
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    summary = store.job({"a.csv": b"a\n", "b.csv": b"b\n"})
    (listed,) = (tmp_path / "out" / "_magicfs" / "jobs").glob(f"*-{summary.job_id}.files.jsonl.gz")
    lines = gzip.decompress(listed.read_bytes()).splitlines(keepends=True)
    listed.write_bytes(gzip.compress(lines[0] + b'{"p":"../escape.csv","s":1}\n'))
    snap = magicfs.snapshot(store.url)
    with pytest.raises(InvalidCommitData) as refused:
        snap.paths()
    assert refused.value.field == "p" and "(line 2)" in str(refused.value)
    assert "inside the destination" in str(refused.value)


def test_resolving_costs_requests_per_job_not_per_file(faults_front, bucket):
    """Through the fault front, which counts every request by operation: a snapshot of
    one replace and two appends of 150 files each reads one listing, three heads and
    three file lists; the jobs before the replace are never read."""
    options = {**faults_front.storage_options, "skip_instance_cache": True}
    url = f"s3://{bucket}/out"

    def job(mode: str, tag: str) -> None:
        with magicfs.write_job(url, storage_options=options, conflict_mode=mode) as job:
            for task_id in range(3):
                with job.task(task_id) as task:
                    for i in range(50):
                        with job.fs.open(task.path(f"{tag}/{task_id}-{i}.csv"), "wb") as out:
                            out.write(b"x\n")

    for mode, tag in [("append", "a"), ("append", "b"), ("replace", "c"), ("append", "d")]:
        job(mode, tag)
    job("append", "e")
    faults_front.reset_stats()
    snap = magicfs.snapshot(url, storage_options=options)
    assert len(snap.paths()) == 450
    requests = {op: entry["requests"] for op, entry in faults_front.stats().items()}
    assert requests == {"ListObjectsV2": 1, "GetObject": 6}


@pytest.mark.parametrize("kind", HELD_KINDS)
def test_replace_keeps_the_old_files_until_the_new_snapshot_is_recorded(request, kind, tmp_path):
    """Held at the write of its record's head, a replace job has published its files and
    deleted nothing: a reader of the old snapshot reads it whole; once the record is
    written the old files go, before ``commit_job()`` returns."""
    store = _store(request, kind, tmp_path)
    store.job({"old/1.csv": b"o1\n", "old/2.csv": b"o2\n"})
    reached, release = threading.Event(), threading.Event()

    def hold(path: str, *_: Any) -> bool:
        if is_head(path):
            reached.set()
            assert release.wait(60), "the test never released the commit"
        return False

    fs = faulty(store.fs)
    fs.fail("pipe_file", when=hold)
    writer = threading.Thread(
        target=lambda: store.job({"new/1.csv": b"n1\n"}, fs=fs, conflict_mode="replace")
    )
    writer.start()
    try:
        assert reached.wait(60), "the commit never reached its record"
        assert store.listed() == {"old/1.csv", "old/2.csv", "new/1.csv"}
        assert store.snapshot() == {"old/1.csv": b"o1\n", "old/2.csv": b"o2\n"}
    finally:
        release.set()
        writer.join(60)
    assert store.listed() == {"new/1.csv"}
    assert store.snapshot() == {"new/1.csv": b"n1\n"}


def test_replace_reusing_an_old_name_deletes_the_old_files_first(tmp_path):
    """A new file under an old file's name replaces it in place when published, so no
    reader of the old snapshot could be kept whole: the old files go first, as before,
    and the snapshot is the new job's."""
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    store.job({"same.csv": b"old\n", "other.csv": b"old\n"})
    store.job({"same.csv": b"new\n"}, conflict_mode="replace")
    assert store.snapshot() == {"same.csv": b"new\n"}
    assert store.listed() == {"same.csv"}


def test_a_replace_that_fails_at_its_record_keeps_the_old_data_and_snapshot(tmp_path):
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    store.job({"old.csv": b"old\n"})
    fs = faulty(store.fs)
    fs.fail("pipe_file", when=lambda path, *_: is_head(path))
    with pytest.raises(JobCommitError, match="stage success") as failed:
        store.job({"new.csv": b"new\n"}, fs=fs, conflict_mode="replace")
    assert "nothing of it is visible" in str(failed.value)
    assert store.listed() == {"old.csv"}
    assert store.snapshot() == {"old.csv": b"old\n"}


def test_a_replace_stopped_while_deleting_the_old_files_is_finished_by_a_retry(tmp_path):
    """The old files fail to go after the new record is written: the job is committed
    for snapshot readers (the new one), not rolled back (old files are going), and has no
    ``_SUCCESS``; ``commit_job()`` again from another committer of the job finishes it."""
    import fsspec

    store = Store(f"file://{tmp_path}/out", {}, fsspec.filesystem("file"))
    store.job({"old/1.csv": b"o1\n", "old/2.csv": b"o2\n"})
    fs = faulty(store.fs)
    fs.fail("rm_file", when=lambda path, *_: path.endswith("/old/2.csv"))
    committer = magicfs.committer_for(store.url, fs=fs, conflict_mode="replace")
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("new.csv"), "wb") as out:
        out.write(b"new\n")
    message = committer.commit_task(task)
    with pytest.raises(JobCommitError, match="stage delete_old") as failed:
        committer.commit_job([message])
    assert "commit_job() again" in str(failed.value)
    assert store.snapshot() == {"new.csv": b"new\n"}
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert "old/2.csv" in store.listed() and "new.csv" in store.listed()

    again = magicfs.committer_for(store.url, job_id=committer.job_id, conflict_mode="replace")
    summary = again.commit_job([message])
    assert summary.files == 1
    assert store.listed() == {"new.csv"}
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert store.snapshot() == {"new.csv": b"new\n"}
    assert len(magicfs.snapshot(store.url).jobs) == 1
