"""The S3 magic write path: deferred multipart uploads, observed on a real S3 server over HTTP."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
import weakref

import pytest
from helpers import Calls, complete_from_pending, object_keys, pending_uploads, visible_keys
from helpers.polling import wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magicfs import MagicFileSystem
from magicfs.errors import JobNotActiveError
from magicfs.paths import marker_path, pending_path
from magicfs.stores.s3 import checksums
from magicfs.stores.s3.body import PartBody
from magicfs.stores.s3.tracking import META_JOB_ID, META_TASK_ATTEMPT, META_WRITER
from magicfs.task_files import TASK_FILES

MiB = 1 << 20
HELPERS = os.path.join(os.path.dirname(__file__), "helpers")


@pytest.fixture
def magic(s3):
    return MagicFileSystem(fs=s3, part_size=5 * MiB)


def magic_file(bucket: str, name: str = "part-0000.csv") -> str:
    return f"{bucket}/out/__magic/job-1/task_01/__base/{name}"


def payload(size: int, seed: int = 0) -> bytes:
    pattern = bytes((seed + i) % 251 for i in range(4096))
    return (pattern * (size // len(pattern) + 1))[:size]


# --- invisible until committed -----------------------------------------------------------


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_magic_write_is_invisible_and_leaves_one_pending_upload(magic, s3_client, bucket):
    path = magic_file(bucket, "year=2024/part-0000.csv")
    with magic.open(path, "wb") as f:
        f.write(b"a,b\n1,2\n")

    assert visible_keys(s3_client, bucket) == []
    uploads = pending_uploads(s3_client, bucket)
    assert [u["Key"] for u in uploads] == ["out/year=2024/part-0000.csv"]
    pending = json.loads(
        s3_client.get_object(Bucket=bucket, Key=pending_path(path).split("/", 1)[1])["Body"].read()
    )
    assert pending["uploadId"] == uploads[0]["UploadId"]
    assert (pending["bucket"], pending["destinationKey"], pending["length"]) == (
        bucket,
        "out/year=2024/part-0000.csv",
        8,
    )
    assert pending["partCount"] == len(pending["etags"]) == 1


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_marker_is_empty_but_info_reports_bytes_written(magic, s3, bucket):
    path = magic_file(bucket)
    with magic.open(path, "wb") as f:
        f.write(b"x" * 1234)
    assert s3.info(marker_path(path))["size"] == 0  # the marker, beside the file's name
    assert magic.info(path)["size"] == 1234  # HADOOP-17414
    assert magic.size(path) == 1234
    # The task's view: its files, records hidden; sizes known to the writing process.
    listing = {
        entry["name"]: entry["size"] for entry in magic.ls(os.path.dirname(path), detail=True)
    }
    assert listing == {path: 1234}
    assert magic.find(os.path.dirname(path)) == [path]
    # Another process knows the size from the .pending in info(); listings show the marker's 0.
    TASK_FILES.discarded(path)
    assert magic.info(path)["size"] == 1234
    assert {e["name"]: e["size"] for e in magic.ls(os.path.dirname(path), detail=True)} == {path: 0}


@pytest.mark.parametrize("size", [0, 1, 5 * MiB - 1, 5 * MiB + 1, 64 * MiB])
def test_pending_alone_completes_exact_bytes_from_another_process(
    magic, s3_server, s3_client, bucket, size
):
    data = payload(size, seed=size % 7)
    path = magic_file(bucket, f"size-{size}.bin")
    with magic.open(path, "wb") as f:
        # uneven writes, including one that spans several parts
        for start in range(0, size, 3 * MiB + 17):
            f.write(data[start : start + 3 * MiB + 17])

    key = path.split("/", 1)[1]
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(HELPERS, "complete_elsewhere.py"),
            s3_server.endpoint_url,
            bucket,
            pending_path(key),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    body = s3_client.get_object(Bucket=bucket, Key=f"out/size-{size}.bin")["Body"].read()
    assert len(body) == size
    assert body == data
    assert pending_uploads(s3_client, bucket) == []


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunks=st.lists(st.integers(min_value=0, max_value=3 * MiB), min_size=0, max_size=6))
def test_any_sequence_of_writes_commits_to_the_same_bytes(magic, s3_client, bucket, chunks):
    data = payload(sum(chunks), seed=len(chunks))
    path = magic_file(bucket, f"random-{len(chunks)}-{sum(chunks)}.bin")
    with magic.open(path, "wb") as f:
        offset = 0
        for size in chunks:
            assert f.write(data[offset : offset + size]) == size
            offset += size
        assert f.tell() == len(data)
    pending = s3_client.get_object(Bucket=bucket, Key=pending_path(path).split("/", 1)[1])[
        "Body"
    ].read()
    complete_from_pending(s3_client, pending)
    key = json.loads(pending)["destinationKey"]
    assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == data


def test_one_huge_write_is_split_into_parts(magic, s3_client, bucket):
    data = payload(17 * MiB)
    path = magic_file(bucket, "huge.bin")
    with magic.open(path, "wb") as f:
        f.write(data)  # a single call
    pending = json.loads(
        s3_client.get_object(Bucket=bucket, Key=pending_path(path).split("/", 1)[1])["Body"].read()
    )
    assert pending["partCount"] == 4  # 5 + 5 + 5 + 2 MiB
    complete_from_pending(s3_client, json.dumps(pending))
    assert s3_client.get_object(Bucket=bucket, Key="out/huge.bin")["Body"].read() == data


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_parts_go_out_as_the_callers_bytes_not_copies(magic, s3, s3_client, bucket):
    # A part is sent from the bytes objects the caller wrote (memoryviews of them): no
    # join, no BytesIO (magicfs.stores.s3.body). Mutable data is copied once, on write.
    sent = []
    s3.s3.meta.events.register(
        "before-call.s3.UploadPart", lambda params, **_: sent.append(params["body"].pieces)
    )
    written = [payload(MiB, seed=n) for n in range(5)]
    reused = bytearray(b"r" * MiB)
    path = magic_file(bucket, "pieces.bin")
    with magic.open(path, "wb") as f:
        for piece in written:
            f.write(piece)
        f.write(reused)
        reused[:] = b"X" * MiB  # the caller refills its buffer: the file keeps "r"s
    second, first = sorted(sent, key=len)  # the parts go out in either order
    assert [view.obj for view in first] == written  # the very objects, in order
    assert all(view.obj is piece for view, piece in zip(first, written, strict=True))
    assert bytes(second[0]) == b"r" * MiB and second[0].obj is not reused
    pending = s3_client.get_object(Bucket=bucket, Key=pending_path(path).split("/", 1)[1])
    complete_from_pending(s3_client, pending["Body"].read())
    data = s3_client.get_object(Bucket=bucket, Key="out/pieces.bin")["Body"].read()
    assert data == b"".join(written) + b"r" * MiB


def test_a_part_body_reads_its_pieces_without_joining_them():
    body = PartBody([b"ab", bytearray(b"cde"), b"", memoryview(b"f")])
    assert (len(body), body.tell()) == (6, 0)
    first = body.read(4)  # stops at the end of a piece: a view of it
    assert isinstance(first, memoryview) and bytes(first) == b"ab"
    assert body.read() == b"cdef" and body.read(1) == b""
    assert body.seek(1) == 1 and bytes(body.read(10)) == b"b"
    assert body.seek(-2, 2) == 4 and body.read(-1) == b"ef"

    async def sent() -> bytes:
        body.seek(0)
        return b"".join([bytes(chunk) async for chunk in body])

    assert asyncio.run(sent()) == b"abcdef"
    assert checksums.compute("CRC32", body) == checksums.compute("CRC32", b"abcdef")
    assert not PartBody([]) and PartBody([]).read() == b""


# --- request budget and bounded memory ------------------------------------------------


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_small_file_costs_four_requests_marker_first(magic, s3, bucket, request_log):
    request_log.attach(s3)
    with magic.open(magic_file(bucket, "small.csv"), "wb") as f:
        f.write(b"1")
    assert request_log.counts() == {
        "CreateMultipartUpload": 1,
        "PutObject": 2,  # the intent marker and the .pending
        "UploadPart": 1,
    }
    # The marker is written before the upload exists: no upload is ever unrecorded.
    assert request_log.operations[:2] == ["PutObject", "CreateMultipartUpload"]


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_job_path_adds_one_head_to_check_the_job_is_active(magic, s3, bucket, request_log):
    s3.pipe_file(f"{bucket}/out/__magic_job-9/_magicfs_job.json", b"{}")
    request_log.attach(s3)
    with magic.open(f"{bucket}/out/__magic_job-9/job-9/00/tasks/a_0/__base/f.csv", "wb") as f:
        f.write(b"1")
    TASK_FILES.settle()  # a task attempt's close finishes in the background
    assert request_log.counts() == {
        "CreateMultipartUpload": 1,
        "PutObject": 2,
        "HeadObject": 1,
        "UploadPart": 1,
    }


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_parts_in_flight_are_bounded(s3, bucket):
    magic = MagicFileSystem(fs=s3, part_size=5 * MiB, parts_in_flight=2)
    lock = threading.Lock()
    in_flight = {"now": 0, "max": 0}

    def before(**kwargs):
        with lock:
            in_flight["now"] += 1
            in_flight["max"] = max(in_flight["max"], in_flight["now"])
        time.sleep(0.05)  # slow store: the writer must wait, not buffer ahead

    def after(**kwargs):
        with lock:
            in_flight["now"] -= 1

    s3.s3.meta.events.register("before-call.s3.UploadPart", before)
    s3.s3.meta.events.register("after-call.s3.UploadPart", after)
    with magic.open(magic_file(bucket, "bounded.bin"), "wb") as f:
        f.write(payload(31 * MiB))
    assert in_flight["max"] == 2


# --- failures never leave committable or parked data ---------------------------------


def assert_nothing_left(s3_client, bucket):
    assert pending_uploads(s3_client, bucket) == []
    assert [k for k in object_keys(s3_client, bucket) if k.endswith(".pending")] == []


def test_exception_in_with_block_aborts(magic, s3_client, bucket):
    path = magic_file(bucket)
    with pytest.raises(RuntimeError), magic.open(path, "wb") as f:
        f.write(payload(6 * MiB))  # one part already uploaded
        raise RuntimeError("writer failed")
    assert_nothing_left(s3_client, bucket)
    assert object_keys(s3_client, bucket) == []  # the marker is gone too


def test_exception_through_text_wrapper_aborts(magic, s3_client, bucket):
    with pytest.raises(ValueError), magic.open(magic_file(bucket), "w") as f:
        f.write("half a row,")
        raise ValueError("bad row")
    assert_nothing_left(s3_client, bucket)


def test_failed_part_upload_aborts_and_raises(magic, s3, s3_client, bucket):
    def fail(**kwargs):
        raise OSError("injected: the part upload failed for good")

    s3.s3.meta.events.register("before-call.s3.UploadPart", fail)
    f = magic.open(magic_file(bucket), "wb")
    f.write(payload(6 * MiB))
    with pytest.raises(OSError, match="injected"):
        f.write(payload(6 * MiB))
        f.close()
    assert_nothing_left(s3_client, bucket)
    assert object_keys(s3_client, bucket) == []


def test_discard_aborts(magic, s3_client, bucket):
    f = magic.open(magic_file(bucket), "wb")
    f.write(b"abc")
    f.discard()
    assert f.closed
    assert_nothing_left(s3_client, bucket)
    assert object_keys(s3_client, bucket) == []


def test_file_never_closed_is_aborted_when_collected(magic, s3_client, bucket):
    """A file its caller dropped without closing is kept by the process's registry while
    its attempt runs (so task commit can refuse the attempt, naming it); once the attempt
    has finished the registry lets go of it, and what collection runs (``__del__``)
    aborts its upload.

    ``__del__`` is called here rather than awaited from the collector: when the
    interpreter collects the writer is its own affair (in the full suite something else
    held it for more than 10 s), and what this test checks is what happens then.
    """
    f = magic.open(magic_file(bucket), "wb")
    f.write(b"abc")
    path = f.path
    writer = weakref.ref(f)
    entry = TASK_FILES.get(path)
    assert entry is not None and entry.is_open
    del f, entry
    gc.collect()
    held = writer()
    assert held is not None  # still registered: a task commit would see it open
    TASK_FILES.finish_attempt(held._job_id or "", held._attempt_id or "", "aborted")
    assert TASK_FILES.get(path) is None  # magicfs no longer holds it
    held.__del__()  # aborts from a thread of its own, once the background create is done
    held._start.result(timeout=10)  # the upload exists now: the abort can find it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pending_uploads(s3_client, bucket):
        time.sleep(0.05)
    assert_nothing_left(s3_client, bucket)


def test_failed_pending_save_aborts(magic, s3, s3_client, bucket):
    def fail(params, **kwargs):
        if params["Key"].endswith(".pending"):
            raise OSError("injected: .pending PUT failed")

    s3.s3.meta.events.register("before-parameter-build.s3.PutObject", fail)
    with pytest.raises(OSError, match="injected"), magic.open(magic_file(bucket), "wb") as f:
        f.write(b"abc")
    assert_nothing_left(s3_client, bucket)


def test_empty_file_has_one_empty_part(magic, s3_client, bucket):
    path = magic_file(bucket, "empty.csv")
    magic.touch(path)
    pending = json.loads(
        s3_client.get_object(Bucket=bucket, Key=pending_path(path).split("/", 1)[1])["Body"].read()
    )
    assert (pending["length"], pending["partCount"]) == (0, 1)
    complete_from_pending(s3_client, json.dumps(pending))
    assert s3_client.get_object(Bucket=bucket, Key="out/empty.csv")["ContentLength"] == 0


def test_append_is_refused(magic, s3_client, bucket):
    with pytest.raises(ValueError, match=r"append \('ab'\) is not supported under a magic path"):
        magic.open(magic_file(bucket), "ab")
    assert pending_uploads(s3_client, bucket) == []


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_exclusive_create_refuses_a_second_writer_of_the_same_path(magic, s3_client, bucket):
    path = magic_file(bucket)
    with magic.open(path, "xb") as f:
        f.write(b"first")
    with pytest.raises(FileExistsError), magic.open(path, "xb") as f:
        f.write(b"second")
    pending = json.loads(
        s3_client.get_object(Bucket=bucket, Key=pending_path(path).split("/", 1)[1])["Body"].read()
    )
    assert pending["extraData"]["magicfs.if-none-match"] == "*"
    assert len(pending_uploads(s3_client, bucket)) == 1  # the loser's upload was aborted


def test_write_for_a_job_that_is_not_active_is_refused_and_aborted(s3, s3_client, bucket):
    # close() waits here, so the refusal surfaces at the latest when the file closes
    # (with background closes it surfaces at task commit: test_magic_committer_failures).
    magic = MagicFileSystem(fs=s3, part_size=5 * MiB, background_close=False)
    path = f"{bucket}/out/__magic_job-gone/job-gone/00/tasks/a_0/__base/f.csv"
    with (
        pytest.raises(JobNotActiveError, match="job gone is not active"),
        magic.open(path, "wb") as f,
    ):
        f.write(b"zombie data")
        wait_until(lambda: f._checking.done(), "the zombie check has answered")
        f.write(b"more")
    assert_nothing_left(s3_client, bucket)
    assert object_keys(s3_client, bucket) == []


def test_zombie_that_never_writes_again_is_still_aborted(s3, s3_client, bucket):
    """The upload is created (seen by the client), then aborted by the writer's own job
    check, with no further write or close to trigger it: nothing is left pending."""
    calls = Calls(s3)
    magic = MagicFileSystem(fs=s3, part_size=5 * MiB)
    path = f"{bucket}/out/__magic_job-gone/job-gone/00/tasks/a_0/__base/f.csv"
    f = magic.open(path, "wb")
    f.write(b"zombie data")
    wait_until(
        lambda: ("AbortMultipartUpload", "out/f.csv") in calls.made, "the zombie's upload aborted"
    )
    made = [op for op, key in calls.made if key == "out/f.csv"]
    assert made[:1] == ["CreateMultipartUpload"]  # the upload existed before its abort
    wait_until(lambda: not pending_uploads(s3_client, bucket), "the abort has landed")
    assert_nothing_left(s3_client, bucket)
    f.discard()


@pytest.mark.parks_uploads(
    "the write path alone: no job commits or sweeps the deferred uploads it checks"
)
def test_killed_writer_leaves_a_marker_naming_its_key(s3_server, s3_client, bucket):
    script = f"""
import s3fs, sys
from magicfs import MagicFileSystem
fs = MagicFileSystem(fs=s3fs.S3FileSystem(**{s3_server.storage_options!r}), part_size=5 << 20)
f = fs.open("{magic_file(bucket, "killed.bin")}", "wb")
f.write(b"x" * (6 << 20))
print("written", flush=True)
sys.stdin.read()
"""
    writer = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "written"
        deadline = time.monotonic() + 10
        while not pending_uploads(s3_client, bucket) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        writer.kill()
        writer.wait()
    uploads = pending_uploads(s3_client, bucket)
    assert [u["Key"] for u in uploads] == ["out/killed.bin"]
    marker_key = marker_path(magic_file(bucket, "killed.bin")).split("/", 1)[1]
    marker = s3_client.head_object(Bucket=bucket, Key=marker_key)
    assert marker["ContentLength"] == 0
    assert marker["Metadata"][META_JOB_ID] == "1" and META_WRITER in marker["Metadata"]
    assert pending_path("out/__magic/job-1/task_01/__base/killed.bin") not in object_keys(
        s3_client, bucket
    )


def test_rm_of_magic_files_aborts_their_uploads(magic, s3_client, bucket):
    for name in ("a.csv", "b.csv"):
        with magic.open(magic_file(bucket, name), "wb") as f:
            f.write(b"data")
    open_file = magic.open(magic_file(bucket, "still-open.csv"), "wb")
    open_file.write(b"partial")
    wait_until(lambda: len(pending_uploads(s3_client, bucket)) == 3, "the open file's upload")
    magic.rm(f"{bucket}/out/__magic", recursive=True)
    assert pending_uploads(s3_client, bucket) == []
    assert object_keys(s3_client, bucket) == []
    open_file.discard()


def test_concurrent_writers_on_one_instance(magic, s3_client, bucket):
    errors = []

    def write(n: int) -> None:
        try:
            with magic.open(magic_file(bucket, f"thread-{n}.bin"), "wb") as f:
                for _ in range(3):
                    f.write(payload(2 * MiB + n, seed=n))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    keys = sorted(u["Key"] for u in pending_uploads(s3_client, bucket))
    assert keys == sorted(f"out/thread-{n}.bin" for n in range(8))
    for n in range(8):
        pending = s3_client.get_object(
            Bucket=bucket, Key=pending_path(f"out/__magic/job-1/task_01/__base/thread-{n}.bin")
        )["Body"].read()
        complete_from_pending(s3_client, pending)
        body = s3_client.get_object(Bucket=bucket, Key=f"out/thread-{n}.bin")["Body"].read()
        assert body == payload(2 * MiB + n, seed=n) * 3


def test_in_memory_mode_writes_the_marker_but_no_pending(s3, s3_client, bucket, request_log):
    magic = MagicFileSystem(fs=s3, in_memory=True, check_job_active=False)
    path = f"{bucket}/out/__magic_job-m/job-m/00/tasks/attempt_m_0/__base/f.csv"
    request_log.attach(s3)
    with magic.open(path, "wb") as f:
        f.write(b"12345")
    TASK_FILES.settle()  # a task attempt's close finishes in the background
    assert request_log.counts() == {"PutObject": 1, "CreateMultipartUpload": 1, "UploadPart": 1}
    marker = marker_path(path).split("/", 1)[1]
    assert object_keys(s3_client, bucket) == [marker]  # the intent marker: no .pending
    assert s3_client.head_object(Bucket=bucket, Key=marker)["Metadata"][META_TASK_ATTEMPT] == (
        "attempt_m_0"
    )
    assert magic.info(path)["size"] == 5  # from this process's memory, as in Hadoop
    entries = TASK_FILES.finish_attempt("m", "attempt_m_0", "committed")
    commits = [entry.commit for entry in entries]
    assert [c.destination_key for c in commits] == ["out/f.csv"]
    assert commits[0].length == 5
    for commit in commits:
        complete_from_pending(s3_client, commit.to_json())
    assert s3_client.get_object(Bucket=bucket, Key="out/f.csv")["Body"].read() == b"12345"
