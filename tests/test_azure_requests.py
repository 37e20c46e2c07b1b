"""What a block-list job sends to Azure, file by file, counted in Azurite's own request log.

Request counts are behaviour (issue 28): each request a file costs pays for a guarantee
(docs/stores/azure.md, "Requests per file"). These tests pin them down for a whole job —
setup, writes, task commits, job commit, clean-up — and check that what a request saves
keeps its guarantee:

* a file costs one marker, one Put Block per block, one Put Block List and the delete of
  its marker; nothing else touches its destination. Its record joins the process's
  writer records of the attempt (``_writer-*.pendingset``): at most one Put Blob per
  file, fewer when closes overlap, and one delete per writer record at task commit;
* a task committed by another process reads those (one Get Blob each), takes a record
  only for the writer its marker names (a file written again and left open is refused,
  not committed with its predecessor's record), and a task of many files spreads its
  records over several bounded writer records;
* writers share job checks: files whose checks overlap send fewer than their two each;
* ``in_memory=True`` saves the ``.pending`` and its delete; a task committed by another
  process than its writers' is then refused, naming the file, instead of losing it; a
  file closed after its job ended leaves nothing in the job's tree.
"""

from __future__ import annotations

import json
from collections import Counter

import adlfs
import pytest
from helpers import as_another_process
from helpers.azure_crash_job import content

import magicfs
from magicfs.errors import CommitFailedError, JobNotActiveError
from magicfs.names import MARKER_SUFFIX
from magicfs.paths import staged_name
from magicfs.task_files import TASK_FILES

BLOCK = 64 << 10
MAGIC = "__magic_job-"
INDEX = "__magicfs_jobs"


def make_committer(fs, container: str, **options) -> magicfs.OutputCommitter:
    return magicfs.committer_for(f"abfs://{container}/out", fs=fs, block_size=BLOCK, **options)


def reader_for(server) -> adlfs.AzureBlobFileSystem:
    return adlfs.AzureBlobFileSystem(skip_instance_cache=True, **server.storage_options)


def published(server, container: str) -> dict[str, bytes]:
    """Every published blob of the container outside the job's state, but ``_SUCCESS``
    and the job commit records (``_magicfs/``, readers' records, not output)."""
    reader = reader_for(server)
    names = [
        p
        for p in reader.find(container)
        if not _job_state(p) and not p.endswith("_SUCCESS") and "/_magicfs/" not in p
    ]
    return {name.split("/", 1)[1]: reader.cat_file(name) for name in names}


def job_tree(server, container: str) -> list[str]:
    """The job's state: its tree, and its entry in the container's job index."""
    return [p for p in reader_for(server).find(container) if _job_state(p)]


def _job_state(path: str) -> bool:
    return MAGIC in path or f"/{INDEX}/" in path


def requests_of(server, container: str, since: int) -> list[tuple[str, str]]:
    """(operation, blob) of the requests on ``container`` answered after the first ``since``."""
    return [(op, blob) for op, c, blob in server.settled_requests()[since:] if c == container]


def logged_so_far(server) -> int:
    """How many requests were answered so far (the log holds them all: a barrier)."""
    return len(server.settled_requests())


def files_of(tasks: int, per_task: int) -> list[dict[str, bytes]]:
    """Each task's files: names to bytes (one block each, or none for the empty one)."""
    return [
        {f"part={t}/f-{n}.bin": content(f"{t}-{n}", (t * 7 + n) * 1000) for n in range(per_task)}
        for t in range(tasks)
    ]


def run_job(committer, tasks: list[dict[str, bytes]]) -> None:
    committer.setup_job()
    messages = []
    for index, files in enumerate(tasks):
        with committer.attempt(index) as run:
            for name, data in files.items():
                with committer.fs.open(run.path(name), "wb") as f:
                    f.write(data)
        messages.append(run.message)
    committer.commit_job(messages)


def per_file(log: list[tuple[str, str]], files: list[str]) -> dict[str, Counter]:
    """For each file: its requests by (operation, which blob: marker, a ``.pending``,
    destination)."""
    found: dict[str, Counter] = {name: Counter() for name in files}
    staged = {name: "/".join(map(staged_name, name.split("/"))) for name in files}
    for operation, blob in log:
        for name in files:
            if blob == f"out/{name}":
                found[name][(operation, "destination")] += 1
            elif MAGIC in blob and blob.endswith(f"/__base/{staged[name]}{MARKER_SUFFIX}"):
                found[name][(operation, "marker")] += 1
            elif MAGIC in blob and blob.endswith(f"/__base/{staged[name]}.pending"):
                found[name][(operation, "record")] += 1
    return found


def writer_records(log: list[tuple[str, str]], operation: str) -> list[str]:
    return [
        b for op, b in log if op == operation and "/_writer-" in b and b.endswith(".pendingset")
    ]


def job_checks(log: list[tuple[str, str]]) -> int:
    return sum(
        op == "Blob_GetProperties" and blob.endswith("_magicfs_job.json") for op, blob in log
    )


# --- the default: a record per file -----------------------------------------------------


def test_each_file_costs_its_marker_block_publish_and_one_delete(
    azurite_logged, abfs_logged, logged_container
):
    tasks = files_of(3, 4)
    names = [name for files in tasks for name in files]
    since = logged_so_far(azurite_logged)
    run_job(make_committer(abfs_logged, logged_container), tasks)
    log = requests_of(azurite_logged, logged_container, since)

    blocks = {name: min(1, len(data)) for files in tasks for name, data in files.items()}
    for name, requests in per_file(log, names).items():
        expected = Counter(
            {
                ("BlockBlob_Upload", "marker"): 1,
                ("Blob_Delete", "marker"): 1,
                ("BlockBlob_CommitBlockList", "destination"): 1,
            }
        )
        if blocks[name]:
            expected[("BlockBlob_StageBlock", "destination")] = 1
        assert requests == expected, name
    # The records: at most a Put Blob per file, in at most one writer record per task
    # here (this process, a few small records; none for files still closing when their
    # task commit began: TaskFiles.awaited), deleted once at task commit, never read back.
    saved = writer_records(log, "BlockBlob_Upload")
    assert len(saved) <= len(names)
    assert len(set(saved)) <= len(tasks)
    assert sorted(writer_records(log, "Blob_Delete")) == sorted(set(saved))
    assert writer_records(log, "Blob_Download") == []
    # Two checks per file at most (after the marker, before the record), plus the
    # committer's own: at setup, per task commit, at job commit.
    assert job_checks(log) <= 2 * len(names) + len(tasks) + 3
    assert published(azurite_logged, logged_container) == {
        f"out/{name}": data for files in tasks for name, data in files.items()
    }
    assert job_tree(azurite_logged, logged_container) == []


def test_task_commit_reads_one_listing_and_deletes_what_it_listed(
    azurite_logged, abfs_logged, logged_container
):
    """One listing of every attempt of the task (its started marker, a pendingset saved by
    an earlier commit, its directory) is all a task commit in the writing process reads;
    then one pendingset save (no other attempt committed), the job check, and the deletes of the
    markers and writer records it listed. A second commit of the attempt reads the same
    listing and the saved pendingset, and saves nothing."""
    committer = make_committer(abfs_logged, logged_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    files = files_of(1, 3)[0]
    for name, data in files.items():
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(data)
    TASK_FILES.settle()
    since = logged_so_far(azurite_logged)
    message = committer.commit_task(task)
    log = requests_of(azurite_logged, logged_container, since)
    deleted = [blob for op, blob in log if op == "Blob_Delete"]

    operations = Counter(op for op, _ in log)
    assert operations == Counter(
        {"Container_ListBlobFlatSegment": 1, "BlockBlob_Upload": 1, "Blob_GetProperties": 1}
    ) + Counter({"Blob_Delete": len(deleted)}), log
    assert next(b for op, b in log if op == "Blob_GetProperties").endswith("_magicfs_job.json")
    assert sorted(b.rsplit("/", 1)[-1] for b in deleted if "/_writer-" not in b) == sorted(
        staged_name(name.rsplit("/", 1)[-1]) + MARKER_SUFFIX for name in files
    )
    assert writer_records(log, "Blob_Delete") != []

    since = logged_so_far(azurite_logged)
    assert committer.commit_task(task).files == 3  # kept: its records are gone
    again = Counter(op for op, _ in requests_of(azurite_logged, logged_container, since))
    assert again == Counter({"Container_ListBlobFlatSegment": 1, "Blob_Download": 1})
    committer.commit_job([message])
    assert published(azurite_logged, logged_container) == {
        f"out/{name}": data for name, data in files.items()
    }
    assert job_tree(azurite_logged, logged_container) == []


def test_a_task_committed_elsewhere_reads_its_writer_records(
    azurite_logged, abfs_logged, logged_container
):
    """Two hundred files: their records spread over bounded writer records, which a task
    commit knowing nothing of the files reads, one Get Blob each, and commits in full."""
    committer = make_committer(abfs_logged, logged_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    files = {f"many/f-{n:03d}.bin": content(str(n), n * 10) for n in range(200)}
    for name, data in files.items():
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(data)
    as_another_process(committer, task)
    sizes = {
        path.split("/", 1)[1]: info["size"]
        for path, info in reader_for(azurite_logged).find(logged_container, detail=True).items()
        if "/_writer-" in path
    }
    since = logged_so_far(azurite_logged)
    message = committer.commit_task(task)
    log = requests_of(azurite_logged, logged_container, since)

    assert message.files == 200
    read = writer_records(log, "Blob_Download")
    assert len(read) >= 2, "200 records fit in one writer record: not bounded"
    assert sorted(read) == sorted(sizes), "each writer record read once"
    assert max(sizes.values()) <= 40_000, sizes  # 32 KiB of records and one more
    committer.commit_job([message])
    assert published(azurite_logged, logged_container) == {
        f"out/{name}": data for name, data in files.items()
    }
    assert job_tree(azurite_logged, logged_container) == []


def test_a_file_written_again_and_left_open_is_refused_not_committed_with_the_old_record(
    azurite_server, abfs, azure_container
):
    """The writer records still hold the first file's record; the marker now names the
    second writer, which never closed: the task commit must not take the old record."""
    committer = make_committer(abfs, azure_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("twice.csv"), "wb") as f:
        f.write(b"first, closed")
    as_another_process(committer, task)  # another process writes the file again...
    second = committer.fs.open(task.path("twice.csv"), "wb")
    second.write(b"second, never closed")
    second._start.result(timeout=30)  # ...and its marker is on the store
    as_another_process(committer, task)  # the task commits elsewhere still
    with pytest.raises(CommitFailedError, match=r"twice\.csv"):
        committer.commit_task(task)
    committer.abort_job()
    assert published(azurite_server, azure_container) == {}
    assert job_tree(azurite_server, azure_container) == []


def test_writers_whose_checks_overlap_share_them(azurite_logged, abfs_logged, logged_container):
    """Twenty files opened together: their job checks (after each marker, before each
    record) overlap, and one Get Blob Properties answers every writer that asked before
    it started — far fewer than the forty a check per writer would send."""
    committer = make_committer(abfs_logged, logged_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    since = logged_so_far(azurite_logged)
    writers = [committer.fs.open(task.path(f"f-{n:02d}.bin"), "wb") for n in range(20)]
    for n, writer in enumerate(writers):
        writer.write(content(str(n), 5000))
    for writer in writers:
        writer.close()
    TASK_FILES.settle(committer.job_id, task.attempt_id)
    log = requests_of(azurite_logged, logged_container, since)

    # Shared, both: fewer record saves than files (a save per file is what no sharing
    # makes; runs here made 14) and at most half the checks of a check per writer's
    # marker and record (40; runs here made 16).
    assert 1 <= len(writer_records(log, "BlockBlob_Upload")) < 20
    assert 2 <= job_checks(log) <= 20
    committer.commit_job([committer.commit_task(task)])
    assert len(published(azurite_logged, logged_container)) == 20


# --- in_memory: the records stay in the process ---------------------------------------------


def test_in_memory_saves_no_record_and_publishes_every_file(
    azurite_logged, abfs_logged, logged_container
):
    tasks = files_of(3, 4)
    names = [name for files in tasks for name in files]
    committer = make_committer(abfs_logged, logged_container, in_memory=True)
    since = logged_so_far(azurite_logged)
    run_job(committer, tasks)
    log = requests_of(azurite_logged, logged_container, since)

    assert [b for _, b in log if b.endswith(".pending")] == []
    for name, requests in per_file(log, names).items():
        data = tasks[int(name.split("=")[1][0])][name]
        expected = Counter(
            {
                ("BlockBlob_Upload", "marker"): 1,
                ("Blob_Delete", "marker"): 1,
                ("BlockBlob_CommitBlockList", "destination"): 1,
            }
        )
        if data:
            expected[("BlockBlob_StageBlock", "destination")] = 1
        assert requests == expected, name
    assert published(azurite_logged, logged_container) == {
        f"out/{name}": data for files in tasks for name, data in files.items()
    }
    success = json.loads(reader_for(azurite_logged).cat_file(f"{logged_container}/out/_SUCCESS"))
    assert success["diagnostics"]["magicfs.in_memory"] == "true"
    assert job_tree(azurite_logged, logged_container) == []


def test_in_memory_a_task_committed_elsewhere_is_refused_not_emptied(
    azurite_server, abfs, azure_container
):
    """The marker stays in in_memory mode for this: a task commit that does not hold the
    files' records (another process) sees their markers and refuses, naming a file."""
    committer = make_committer(abfs, azure_container, in_memory=True)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("kept.csv"), "wb") as f:
        f.write(b"written here")
    as_another_process(committer, task)
    with pytest.raises(CommitFailedError, match=r"kept\.csv") as refused:
        committer.commit_task(task)
    assert "in_memory" in str(refused.value) and "process that wrote" in str(refused.value)
    committer.abort_job()
    assert published(azurite_server, azure_container) == {}
    assert job_tree(azurite_server, azure_container) == []


def test_in_memory_a_file_closed_after_its_job_ended_leaves_nothing(
    azurite_server, abfs, azure_container
):
    """No record to guard, but the check before the (skipped) record stays: the zombie's
    marker, written while the job was active, is deleted when it finds the job gone."""
    committer = make_committer(abfs, azure_container, in_memory=True)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    zombie = committer.fs.open(task.path("late.csv"), "wb")
    zombie.write(b"written by a task that outlived its job")
    zombie._checking.result(timeout=30)  # the check at open() passed: the job was active
    committer.abort_job()
    zombie.close()
    [(path, error)] = TASK_FILES.settle(committer.job_id, task.attempt_id)
    assert path == task.path("late.csv") and isinstance(error, JobNotActiveError)
    assert job_tree(azurite_server, azure_container) == []
    assert published(azurite_server, azure_container) == {}


def test_a_file_written_again_after_its_job_ended_elsewhere_leaves_nothing(
    azurite_server, abfs, azure_container
):
    """A zombie writes a file again after another process ended the job (its tree is
    deleted): dropping the earlier file's record must not save the writer records back
    into the dead job's tree."""
    committer = make_committer(abfs, azure_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("again.csv"), "wb") as f:
        f.write(b"first")
    TASK_FILES.settle(committer.job_id, task.attempt_id)
    other = reader_for(azurite_server)  # the job ends in another process: its tree goes
    other.rm(job_tree(azurite_server, azure_container))
    assert job_tree(azurite_server, azure_container) == []

    zombie = committer.fs.open(task.path("again.csv"), "wb")
    with pytest.raises(JobNotActiveError):
        zombie._checking.result(timeout=30)
    zombie.discard()
    assert job_tree(azurite_server, azure_container) == []
    assert published(azurite_server, azure_container) == {}
