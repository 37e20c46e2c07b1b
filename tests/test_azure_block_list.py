"""The block-list committer on Azure Blob (Azurite), store-specific cases.

The generic protocol scenarios run in ``test_contract_azure.py``; these pin down what only the
block-list committer promises on Azure, each judged by what a reader sees — listings,
bytes, Azure's own block lists and Azurite's request log — never by magicfs's internals:

* a task's files are invisible (to adlfs, the Azure SDK, pandas) until job commit;
* job commit sends one Put Block List per file and copies no data (the manifest
  committer, for contrast, copies every file);
* of two attempts of one task, only the committed one's blocks are ever published;
* a destination blob written by another writer (other block-id lengths) is replaced;
* tampered task records are refused before anything is published;
* a file whose record save failed (its close raised) never has its record written;
* a job commit killed with SIGKILL is finished (or rolled back) exactly by a new
  process; a writer killed mid-write leaves nothing visible.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import adlfs
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from azure.core.exceptions import ResourceNotFoundError, ServiceRequestError
from azure.core.pipeline.policies import AsyncHTTPPolicy
from azure.storage.blob import BlobServiceClient
from helpers import as_another_process, data_files, tamper_record
from helpers.azure_crash_job import content
from helpers.polling import wait_until

import magicfs
from magicfs.errors import (
    CommitFailedError,
    InvalidCommitData,
    JobCommitError,
    JobNotActiveError,
)
from magicfs.stores.azure.blocks import BlockStore
from magicfs.stores.azure.records import writer_records
from magicfs.task_files import TASK_FILES, TaskFiles

#: Small blocks, so that modest files span several (Put Block per block).
BLOCK = 64 << 10
TESTS = pathlib.Path(__file__).resolve().parent
MAGIC = "__magic_job-"
INDEX = "__magicfs_jobs"


# --- helpers ----------------------------------------------------------------------------


def make_committer(fs, container: str, **options) -> magicfs.OutputCommitter:
    if options.get("committer") in (None, "block-list"):
        options["block_size"] = BLOCK
    return magicfs.committer_for(f"abfs://{container}/out", fs=fs, **options)


def reader_for(server) -> adlfs.AzureBlobFileSystem:
    """Another client: what it sees is on the server, not in a cache of the writer's."""
    return adlfs.AzureBlobFileSystem(skip_instance_cache=True, **server.storage_options)


def sdk(server) -> BlobServiceClient:
    return BlobServiceClient.from_connection_string(server.connection_string)


def visible_data(reader, container: str) -> dict[str, bytes]:
    """Every published blob of the container outside the job's state, except _SUCCESS."""
    reader.invalidate_cache()
    listed = data_files(reader.find(container))
    names = [p for p in listed if not _job_state(p) and not p.endswith("/_SUCCESS")]
    return {name: reader.cat_file(name) for name in names}


def job_tree(reader, container: str) -> list[str]:
    """The job's state: its tree, and its entry in the container's job index."""
    reader.invalidate_cache()
    return [p for p in reader.find(container) if _job_state(p)]


def _job_state(path: str) -> bool:
    return MAGIC in path or f"/{INDEX}/" in path


def success_of(reader, container: str) -> dict:
    return json.loads(reader.cat_file(f"{container}/out/_SUCCESS"))


def write(fs, path: str, data: bytes) -> None:
    with fs.open(path, "wb") as f:
        f.write(data)


def committed_ids(service: BlobServiceClient, container: str, blob: str) -> list[str]:
    committed, _ = service.get_blob_client(container, blob).get_block_list("committed")
    return [block.id for block in committed]


def record_commits(fs, record: str) -> dict[str, dict]:
    """The commits of a ``.pendingset``, by destination key."""
    return {c["destinationKey"]: c for c in json.loads(fs.cat_file(record))["commits"]}


# --- 1. nothing visible before job commit -------------------------------------------------


def test_task_files_are_invisible_until_job_commit(azurite_server, abfs, azure_container):
    committer = make_committer(abfs, azure_container)
    committer.setup_job()
    frame = pd.DataFrame({"n": range(2000), "s": [f"row {i}" for i in range(2000)]})
    table = pa.table({"x": list(range(5000)), "y": [float(i) / 3 for i in range(5000)]})
    big = content("big.bin", 5 * BLOCK + 123)
    with committer.attempt(0) as first:
        write(committer.fs, first.path("year=2024/big.bin"), big)
        write(committer.fs, first.path("empty.bin"), b"")
        frame.to_parquet(first.url("pandas.parquet"), storage_options=committer.storage_options)
    with committer.attempt(1) as second:
        pq.write_table(table, second.path("year=2025/arrow.parquet"), filesystem=committer.fs)
    names = ["year=2024/big.bin", "empty.bin", "pandas.parquet", "year=2025/arrow.parquet"]
    root = f"{azure_container}/out"

    reader, service = reader_for(azurite_server), sdk(azurite_server)
    assert reader.find(root), "the job's own tree should be listed"
    assert all(MAGIC in path for path in reader.find(root))
    assert all(path.rsplit("/", 1)[-1].startswith(MAGIC) for path in reader.ls(root))
    with pytest.raises(FileNotFoundError):
        reader.ls(f"{root}/year=2024")
    for name in names:
        path = f"{root}/{name}"
        assert not reader.exists(path), path
        with pytest.raises(FileNotFoundError):
            reader.cat_file(path)
        with pytest.raises(FileNotFoundError):
            reader.info(path)
        with pytest.raises(ResourceNotFoundError):
            service.get_blob_client(azure_container, f"out/{name}").get_blob_properties()
    with pytest.raises((FileNotFoundError, OSError)):
        pd.read_parquet(
            f"abfs://{root}/pandas.parquet", storage_options=azurite_server.storage_options
        )
    # The bytes are there, as uncommitted blocks of the final blob: invisible, not absent.
    _, staged = service.get_blob_client(azure_container, "out/year=2024/big.bin").get_block_list(
        "uncommitted"
    )
    assert sum(block.size for block in staged) == len(big)

    committer.commit_job([first.message, second.message])

    published = visible_data(reader, azure_container)
    assert sorted(published) == sorted(f"{root}/{name}" for name in names)
    assert published[f"{root}/year=2024/big.bin"] == big
    assert published[f"{root}/empty.bin"] == b""
    read_back = pd.read_parquet(
        f"abfs://{root}/pandas.parquet", storage_options=azurite_server.storage_options
    )
    pd.testing.assert_frame_equal(read_back, frame)
    with reader.open(f"{root}/year=2025/arrow.parquet", "rb") as f:
        assert pq.read_table(f).equals(table)
    assert success_of(reader, azure_container)["jobId"] == committer.job_id
    assert job_tree(reader, azure_container) == []


# --- 2. zero copies, counted by Azurite ---------------------------------------------------

SIZES = {f"part={i % 4}/file-{i:02d}.bin": (i * 37_000) % (3 * BLOCK) for i in range(20)}


def test_a_second_writer_of_a_create_only_path_is_refused(azurite_server, abfs, azure_container):
    """'xb' on Azure: the marker is a Put Blob without overwrite (If-None-Match: *), so a
    writer in another process, which this process's registry knows nothing of, is
    refused at open(); the first writer's file is the one published."""
    committer = make_committer(abfs, azure_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("x.csv"), "xb") as f:
        f.write(b"first")
    as_another_process(committer, task)
    with pytest.raises(FileExistsError, match="another writer has already opened this path"):
        committer.fs.open(task.path("x.csv"), "xb")
    committer.commit_job([committer.commit_task(task)])
    published = visible_data(reader_for(azurite_server), azure_container)
    assert published == {f"{azure_container}/out/x.csv": b"first"}


def test_a_file_closed_after_its_job_ended_leaves_no_record(azurite_server, abfs, azure_container):
    """A zombie writer: opened while the job was active, closed after it was aborted.

    Azure has no upload sweep to catch it (S3 does), so the writer checks the job again
    before it saves the record: nothing is left in the dead job's tree, nothing visible.
    """
    committer = make_committer(abfs, azure_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    zombie = committer.fs.open(task.path("late.csv"), "wb")
    zombie.write(b"written by a task that outlived its job")
    zombie._checking.result(timeout=30)  # the check at open() passed: the job was active
    committer.abort_job()
    zombie.close()  # finishes in the background, where the job is checked again
    [(path, error)] = TASK_FILES.settle(committer.job_id, task.attempt_id)
    assert path == task.path("late.csv") and isinstance(error, JobNotActiveError)
    reader = reader_for(azurite_server)
    assert job_tree(reader, azure_container) == []
    assert visible_data(reader, azure_container) == {}


def run_job(fs, container: str, committer: str | None = None):
    """Write ``SIZES`` in 4 tasks; return the committer and the task messages."""
    job = make_committer(fs, container, committer=committer)
    job.setup_job()
    messages = []
    items = sorted(SIZES.items())
    for task in range(4):
        with job.attempt(task) as run:
            for relative, size in items[task::4]:
                write(job.fs, run.path(relative), content(relative, size))
        messages.append(run.message)
    return job, messages


def commit_requests(server, job, messages) -> list[tuple[str, str, str]]:
    """The requests Azurite handled during ``job.commit_job(messages)``."""
    before = len(server.settled_requests())
    job.commit_job(messages)
    return server.settled_requests()[before:]


def expected_blobs() -> dict[str, bytes]:
    return {f"out/{relative}": content(relative, size) for relative, size in SIZES.items()}


def test_job_commit_is_one_put_block_list_per_file_and_copies_no_data(
    azurite_logged, abfs_logged, logged_container
):
    job, messages = run_job(abfs_logged, logged_container)
    assert job.name == "block-list"

    during = commit_requests(azurite_logged, job, messages)

    data = expected_blobs()
    published = Counter(b for op, c, b in during if op == "BlockBlob_CommitBlockList")
    assert published == Counter(list(data)), "exactly one Put Block List per file"
    copies = [(c, b) for op, c, b in during if op == "Blob_StartCopyFromURL"]
    assert [b for _, b in copies if MAGIC not in b] == [], "a data file was copied"
    # Not a byte of data is sent or read again: a data blob sees only its Put Block List.
    on_data = [(op, b) for op, c, b in during if b in data and op != "BlockBlob_CommitBlockList"]
    assert on_data == []
    reader = reader_for(azurite_logged)
    assert visible_data(reader, logged_container) == {
        f"{logged_container}/{name}": body for name, body in data.items()
    }


def test_job_commit_sends_no_copy_request_at_all(azurite_logged, abfs_logged, logged_container):
    job, messages = run_job(abfs_logged, logged_container)
    during = commit_requests(azurite_logged, job, messages)
    copies = [b for op, _, b in during if op == "Blob_StartCopyFromURL"]
    assert copies == []
    # The window held the commit (a positive control: an empty log would pass above).
    published = Counter(b for op, _, b in during if op == "BlockBlob_CommitBlockList")
    assert published == Counter(list(expected_blobs()))


def test_manifest_committer_copies_every_file_for_contrast(
    azurite_logged, abfs_logged, logged_container
):
    job, messages = run_job(abfs_logged, logged_container, committer="manifest")
    assert job.name == "manifest"

    during = commit_requests(azurite_logged, job, messages)

    data = expected_blobs()
    copied = Counter(b for op, _, b in during if op == "Blob_StartCopyFromURL" and b in data)
    assert copied == Counter(list(data)), "one server-side copy per file"
    assert not any(op == "BlockBlob_CommitBlockList" for op, _, _ in during)


# --- 3. speculation -----------------------------------------------------------------------


@pytest.mark.parametrize("winner", [0, 1])
def test_only_the_committed_attempt_of_a_task_is_published(
    azurite_server, abfs, azure_container, winner
):
    job = make_committer(abfs, azure_container)
    job.setup_job()
    attempts = [job.task_attempt(0, 0), job.task_attempt(0, 1)]
    files = {"a.bin": 3 * BLOCK + 5, "deep/b.bin": BLOCK, "c.bin": 100}
    for attempt in attempts:
        job.setup_task(attempt)
    # Both attempts write the same files at once: their blocks land on the same blobs.
    streams = {
        (n, relative): job.fs.open(attempt.path(relative), "wb")
        for n, attempt in enumerate(attempts)
        for relative in files
    }
    for offset in range(0, max(files.values()), 10_000):
        for (n, relative), stream in streams.items():
            body = content(relative, files[relative], salt=str(n))
            stream.write(body[offset : offset + 10_000])
    for stream in streams.values():
        stream.close()
    messages = [job.commit_task(attempt) for attempt in attempts]
    records = [record_commits(abfs, m.record) for m in messages]

    job.commit_job([messages[winner]])

    reader, service = reader_for(azurite_server), sdk(azurite_server)
    assert visible_data(reader, azure_container) == {
        f"{azure_container}/out/{relative}": content(relative, size, salt=str(winner))
        for relative, size in files.items()
    }
    loser = 1 - winner
    for relative in files:
        key = f"out/{relative}"
        ids = committed_ids(service, azure_container, key)
        won = records[winner][key]
        assert ids == won["etags"]
        assert all(i.startswith(won["uploadId"]) for i in ids)
        assert not any(i.startswith(records[loser][key]["uploadId"]) for i in ids)
    assert job_tree(reader, azure_container) == []


# --- 4. a destination another writer made -------------------------------------------------


def _old_blob(kind: str, service, abfs, container: str, blob: str) -> bytes:
    """Write ``blob`` as another writer would; the bytes it then holds (b"" if unpublished)."""
    client = service.get_blob_client(container, blob)
    if kind.startswith("sdk-"):
        length = int(kind.split("-")[1])
        ids = [f"{n:0{length}d}" for n in range(3)]
        for n, block in enumerate(ids):
            client.stage_block(block, f"old block {n};".encode())
        if kind.endswith("staged"):  # staged and never published: nothing visible
            return b""
        client.commit_block_list(ids)
        return b"old block 0;old block 1;old block 2;"
    old = os.urandom(3 * (5 << 20) // 2)
    if kind == "adlfs":  # adlfs's own block writer (uuid ids)
        with abfs.open(f"{container}/{blob}", "wb", block_size=5 << 20) as f:
            f.write(old)
        return old
    assert kind == "put-blob"
    client.upload_blob(old[:1000], overwrite=True)
    return old[:1000]


@pytest.mark.parametrize("kind", ["sdk-48", "sdk-64", "sdk-48-staged", "adlfs", "put-blob"])
def test_a_destination_written_by_another_writer_is_replaced(
    azurite_server, abfs, azure_container, kind
):
    """Azure refuses block ids of another length than the blob's. Azurite (3.35) enforces
    that only against the blob's *staged* blocks: there (``sdk-48-staged``) the writer's
    first Put Block is refused and it must learn the blob's length from its block list;
    elsewhere this pins down the outcome (the new bytes, exactly the record's list)."""
    service = sdk(azurite_server)
    old = _old_blob(kind, service, abfs, azure_container, "out/same.bin")
    if old:
        assert abfs.cat_file(f"{azure_container}/out/same.bin") == old
    job = make_committer(abfs, azure_container, conflict_mode="append")
    job.setup_job()
    new = content("same.bin", 2 * BLOCK + 17, salt=kind)
    with job.attempt(0) as run:
        write(job.fs, run.path("same.bin"), new)
    # Until job commit the old bytes (or nothing) stay visible.
    reader = reader_for(azurite_server)
    assert visible_data(reader, azure_container) == (
        {f"{azure_container}/out/same.bin": old} if old else {}
    )
    record = record_commits(abfs, run.message.record)["out/same.bin"]

    job.commit_job([run.message])

    assert visible_data(reader, azure_container) == {f"{azure_container}/out/same.bin": new}
    ids = committed_ids(service, azure_container, "out/same.bin")
    assert ids == record["etags"]
    assert len({len(i) for i in ids}) == 1
    assert all(i.startswith(record["uploadId"]) for i in ids)
    if kind == "sdk-48-staged":  # the length learned from the refused first block
        assert {len(i) for i in ids} == {48}


def test_a_name_published_over_by_another_writer_fails_the_job_and_rolls_back(
    azurite_server, abfs, azure_container
):
    """Another writer publishes a name the job staged blocks on, between task and job
    commit: Azure discards the job's staged blocks, so its Put Block List fails
    (``InvalidBlockList``). The job fails naming the file, rolls back what it had
    published, and the other writer's blob is left as it wrote it."""
    job = make_committer(abfs, azure_container, threads=1)
    job.setup_job()
    with job.attempt(0) as run:
        write(job.fs, run.path("a.bin"), b"ours a")
        write(job.fs, run.path("b.bin"), b"ours b")
    service = sdk(azurite_server)
    other = service.get_blob_client(azure_container, "out/b.bin")
    other.stage_block("x" * 32, b"theirs")  # same id length as ours: Azure's rule
    other.commit_block_list(["x" * 32])  # discards every block staged on the name

    with pytest.raises(JobCommitError) as failed:
        job.commit_job([run.message])

    assert failed.value.stage == "publish" and not failed.value.recoverable
    assert "InvalidBlockList" in str(failed.value) and "out/b.bin" in str(failed.value)
    reader = reader_for(azurite_server)
    assert visible_data(reader, azure_container) == {f"{azure_container}/out/b.bin": b"theirs"}
    assert not reader.exists(f"{azure_container}/out/_SUCCESS")


# --- 5. tampered records --------------------------------------------------------------------


def _tamper(case: str, commit: dict, container: str) -> str:
    """Spoil one commit of a record; the field the refusal must name."""
    if case == "outside":
        commit["destinationKey"] = "elsewhere/" + commit["destinationKey"].split("/", 1)[1]
        return "destinationKey"
    if case == "misplaced":  # inside the destination, but not where its magic path says
        commit["destinationKey"] = "out/somewhere-else.bin"
        return "destinationKey"
    if case == "bucket":
        commit["bucket"] = container + "-other"
        return "bucket"
    if case == "foreign-id":
        commit["etags"][1] = "f" * len(commit["etags"][1])
        return "etags"
    if case == "mixed-lengths":
        commit["etags"][-1] = commit["uploadId"] + "0000001"
        return "etags"
    assert case == "store"
    del commit["extraData"]["magicfs.store"]
    return "extraData"


@pytest.mark.parametrize("carried", [True, False], ids=["carried", "read"])
@pytest.mark.parametrize(
    "case", ["outside", "misplaced", "bucket", "foreign-id", "mixed-lengths", "store"]
)
def test_a_tampered_record_is_refused_before_anything_is_published(
    azurite_server, abfs, azure_container, case, carried
):
    """The record as the job reads it: carried by its message (tampered the same way), or
    read from the store (a message that carries none, as a large task's)."""
    job = make_committer(abfs, azure_container)
    job.setup_job()
    messages = []
    for task in range(2):
        with job.attempt(task) as run:
            for name in ("x", "y"):
                write(job.fs, run.path(f"t{task}/{name}.bin"), content(name, 2 * BLOCK + task))
        messages.append(run.message)
    record = messages[1].record
    assert messages[1].record_json is not None
    spoiled: dict = {}

    def change(document: dict) -> None:
        index = len(document["commits"]) - 1  # the last: a lazy check would publish others
        spoiled.update(
            index=index, field=_tamper(case, document["commits"][index], azure_container)
        )

    messages[1] = tamper_record(abfs, messages[1], change, carried)
    index, field = spoiled["index"], spoiled["field"]

    with pytest.raises(JobCommitError) as failure:
        job.commit_job(messages)

    assert failure.value.stage in ("load", "validate")
    assert isinstance(failure.value.__cause__, InvalidCommitData)
    assert failure.value.__cause__.field == f"commits[{index}].{field}"
    message = str(failure.value)
    assert record.rsplit("/", 1)[-1] in message
    assert f"commits[{index}].{field}" in message
    reader, service = reader_for(azurite_server), sdk(azurite_server)
    assert visible_data(reader, azure_container) == {}
    for task in range(2):
        for name in ("x", "y"):
            with pytest.raises(ResourceNotFoundError):
                service.get_blob_client(
                    azure_container, f"out/t{task}/{name}.bin"
                ).get_blob_properties()
    assert not reader.exists(f"{azure_container}/out/_SUCCESS")


# --- 6. killed processes -------------------------------------------------------------------


class LogWatch:
    """Counts an operation in Azurite's debug log from now on (read incrementally)."""

    def __init__(self, server, operation: str):
        self.path = server.debug_log
        self.needle = f"Operation={operation}".encode()
        self.offset = self.path.stat().st_size
        self.count = 0
        self._tail = b""

    def poll(self) -> int:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        self.offset += len(chunk)
        text = self._tail + chunk
        cut = text.rfind(b"\n") + 1
        self.count += text[:cut].count(self.needle)
        self._tail = text[cut:]
        return self.count


def _child(spec: dict) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    return subprocess.Popen(
        [sys.executable, "-m", "helpers.azure_crash_job", json.dumps(spec)],
        cwd=TESTS,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(process: subprocess.Popen, prefix: str) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(prefix):
            return line
    process.wait()
    stderr = process.stderr.read() if process.stderr else ""
    raise AssertionError(f"the job process ended ({process.returncode}) early:\n{stderr[-3000:]}")


def _kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the job finished before it could be killed"


KILL_TASKS = [
    {f"t{t}/f{n:02d}.bin": (n * 23_000 + t) % (2 * BLOCK + 99) for n in range(20)} for t in range(3)
]


@pytest.mark.parametrize(
    ("nth", "recover"),
    [(1, "messages"), (25, "resume"), ("random", "messages"), (30, "abort")],
)
def test_a_job_commit_killed_midway_is_finished_or_rolled_back(
    azurite_logged, abfs_logged, logged_container, tmp_path, nth, recover
):
    total = sum(len(files) for files in KILL_TASKS)
    nth = random.randrange(1, total - 10) if nth == "random" else nth
    job_id = f"killed-{nth}-{recover}"
    spec = {
        "connection_string": azurite_logged.connection_string,
        "dest": f"abfs://{logged_container}/out",
        "job_id": job_id,
        "phase": "commit",
        "tasks": KILL_TASKS,
        "messages": str(tmp_path / "messages.json"),
        "block_size": BLOCK,
    }
    process = _child(spec)
    _wait_for_line(process, "COMMITTING")
    watch = LogWatch(azurite_logged, "BlockBlob_CommitBlockList")
    deadline = time.monotonic() + 60
    while watch.poll() < nth and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    _kill(process)

    reader = reader_for(azurite_logged)
    root = f"{logged_container}/out"
    half = visible_data(reader, logged_container)
    assert nth <= len(half) < total, f"killed after {len(half)} of {total} files"
    assert not reader.exists(f"{root}/_SUCCESS")
    expected = {
        f"{root}/{relative}": content(relative, size)
        for files in KILL_TASKS
        for relative, size in files.items()
    }
    for name, body in half.items():
        assert body == expected[name]  # whole files only, never a partial one

    fs = reader_for(azurite_logged)
    rescuer = make_committer(fs, logged_container, job_id=job_id)
    if recover == "abort":
        rescuer.abort_job()
        assert visible_data(reader, logged_container) == {}
        assert not reader.exists(f"{root}/_SUCCESS")
    else:
        messages = [
            magicfs.TaskCommitMessage(**m)
            for m in json.loads(pathlib.Path(spec["messages"]).read_text())
        ]
        summary = rescuer.commit_job(messages if recover == "messages" else None)
        assert (summary.files, summary.tasks) == (total, len(KILL_TASKS))
        assert summary.cleanup_incomplete is None
        assert visible_data(reader, logged_container) == expected
        assert success_of(reader, logged_container)["jobId"] == job_id
    assert job_tree(reader, logged_container) == []


@pytest.mark.parametrize("finish", ["abort_job", "cleanup_job"])
def test_a_writer_killed_mid_write_leaves_nothing_visible(
    azurite_logged, abfs_logged, logged_container, finish
):
    job = make_committer(abfs_logged, logged_container, job_id=f"writer-{finish.replace('_', '-')}")
    job.setup_job()
    relative = "big/huge.bin"
    process = _child(
        {
            "connection_string": azurite_logged.connection_string,
            "dest": f"abfs://{logged_container}/out",
            "job_id": job.job_id,
            "phase": "write",
            "relative": relative,
            "block_size": BLOCK,
        }
    )
    while int(_wait_for_line(process, "WROTE").split()[1]) < 12 * BLOCK:
        pass
    _kill(process)

    reader, service = reader_for(azurite_logged), sdk(azurite_logged)
    blob = service.get_blob_client(logged_container, f"out/{relative}")
    with pytest.raises(ResourceNotFoundError):
        blob.get_blob_properties()
    _, staged = blob.get_block_list("uncommitted")
    assert staged, "the writer was killed before it staged a block: the test proves nothing"
    assert visible_data(reader, logged_container) == {}

    # The attempt cannot be committed: its file was opened and never closed.
    with pytest.raises(CommitFailedError, match=r"huge\.bin"):
        job.commit_task(job.task_attempt(0))
    getattr(job, finish)()

    assert visible_data(reader, logged_container) == {}
    assert not reader.exists(f"{logged_container}/out/_SUCCESS")
    assert job_tree(reader, logged_container) == []

    # The stale blocks do not spoil the name: a later job publishes it whole.
    later = make_committer(abfs_logged, logged_container)
    later.setup_job()
    with later.attempt(0) as run:
        write(later.fs, run.path(relative), content(relative, BLOCK + 1))
    later.commit_job([run.message])
    assert visible_data(reader, logged_container) == {
        f"{logged_container}/out/{relative}": content(relative, BLOCK + 1)
    }


class FailFirstWriterRecordSave(AsyncHTTPPolicy):
    """An Azure SDK pipeline policy: the first Put Blob of a writer record is held for a
    while (so other files' closes join the next save), then fails without reaching the
    server, as a dropped connection does."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: list[str] = []

    async def send(self, request):
        http = request.http_request
        if http.method == "PUT" and "/_writer-" in http.url and not self.failed:
            self.failed.append(http.url)
            await asyncio.sleep(0.5)
            raise ServiceRequestError("injected: connection dropped before the request was sent")
        return await self.next.send(request)


def test_a_failed_record_save_never_writes_the_record_of_its_file(
    azurite_server, abfs, azure_container
):
    """File A's record save fails (its close raises); file B closes while it runs, so B's
    save follows. B's save must not carry A's record: the writer record never holds A."""
    fault = FailFirstWriterRecordSave()
    policies = abfs.service_client._pipeline._impl_policies  # the SDK's per-client chain
    fault.next = policies[0]
    policies.insert(0, fault)
    committer = make_committer(abfs, azure_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    for name in ("a.csv", "b.csv"):
        with committer.fs.open(task.path(name), "wb") as f:
            f.write(name.encode() * 100)
        if name == "a.csv":  # A's save is running (held) when B closes
            wait_until(lambda: fault.failed, "A's record save reaches the held request")
    [(path, error)] = TASK_FILES.settle(committer.job_id, task.attempt_id)
    assert path == task.path("a.csv") and isinstance(error, ServiceRequestError)
    assert len(fault.failed) == 1
    reader = reader_for(azurite_server)
    records = [p for p in job_tree(reader, azure_container) if "/_writer-" in p]
    assert records, "B's record was saved"
    held = [
        commit["destinationKey"]
        for blob in records
        for commit in json.loads(reader.cat_file(blob))["commits"]
    ]
    assert held == ["out/b.csv"]
    committer.abort_job()


def test_a_forked_child_saves_its_records_under_its_own_name(azurite_server, abfs, azure_container):
    """A process forked after writing in an attempt (a multiprocessing "fork" pool) writes
    files of the same attempt: its records go to its own writer record, never over the
    parent's, and its close finishes."""
    committer = make_committer(abfs, azure_container)
    committer.setup_job()
    task = committer.task_attempt(0)
    committer.setup_task(task)
    with committer.fs.open(task.path("parent.csv"), "wb") as f:
        f.write(b"written by the parent")
    TASK_FILES.settle(committer.job_id, task.attempt_id)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through its exit status)
        status = 1
        try:
            in_child = make_committer(
                adlfs.AzureBlobFileSystem(
                    skip_instance_cache=True, **azurite_server.storage_options
                ),
                azure_container,
                job_id=committer.job_id,
            )
            with in_child.fs.open(task.path("child.csv"), "wb") as f:
                f.write(b"written by the child")
            status = 0 if TASK_FILES.settle(committer.job_id, task.attempt_id) == [] else 2
        finally:
            os._exit(status)
    deadline = time.monotonic() + 60
    while (waited := os.waitpid(child, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    if waited == (0, 0):
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail("the child's close did not finish within 60 s")
    assert os.waitstatus_to_exitcode(waited[1]) == 0
    reader = reader_for(azurite_server)
    held = sorted(
        [commit["destinationKey"] for commit in json.loads(reader.cat_file(blob))["commits"]]
        for blob in job_tree(reader, azure_container)
        if "/_writer-" in blob
    )
    assert held == [["out/child.csv"], ["out/parent.csv"]]
    committer.abort_job()


def test_threads_opening_new_attempts_at_once_all_get_their_writer_records(abfs, azure_container):
    """Writer records of finished attempts are dropped when a new attempt's start; threads
    starting new attempts at the same moment (a thread pool of tasks) must not trip over
    each other dropping the same ones."""
    blocks = BlockStore(abfs)
    registry = TaskFiles()
    for n in range(3000):  # attempts of an earlier job, then finished in this process
        writer_records(blocks, f"{azure_container}/old/{n}", "old", f"attempt-{n}", registry)
    for n in range(3000):
        registry.finish_attempt("old", f"attempt-{n}", "committed")
    start = threading.Barrier(8)
    errors: list[BaseException] = []
    found: dict[int, object] = {}

    def open_first_file(n: int) -> None:
        start.wait()
        try:
            found[n] = writer_records(
                blocks, f"{azure_container}/new/{n}", "new", f"a{n}", registry
            )
        except BaseException as error:  # reported below
            errors.append(error)

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=open_first_file, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(switching)
    assert errors == []
    assert len(found) == 8
    # Each attempt's records are made once: asking again gives the same.
    assert all(
        writer_records(blocks, f"{azure_container}/new/{n}", "new", f"a{n}", registry) is found[n]
        for n in range(8)
    )
