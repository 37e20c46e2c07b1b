"""The deferred writer's lifecycle, on the in-process store (``mem-deferred://``).

The lifecycle is written once (``magicfs/stores/deferred_writer.py``) for every store with
deferred writes; these tests pin the parts of it no server is needed to observe, on the
in-process store, with its staging held at a gate where a test needs a part in flight:

* a task file is staged invisibly on its final name; its record lists the parts in order;
* a part handed over whole as ``bytes`` reaches the store without a copy; anything the
  caller may reuse (a ``bytearray``) is copied before ``write()`` returns;
* a part written in small pieces holds about its size in memory, not an object per write;
* the process-wide buffer budget bounds the bytes of parts in flight, across files;
* opening a path again while its first file is still closing waits for that close, then
  throws the first file away (its upload and its record);
* a close while an exception propagates, and an exception leaving ``with``, leave nothing;
* a background close that ended without reporting its failure still fails its task.
"""

from __future__ import annotations

import concurrent.futures
import io
import signal
import threading
import tracemalloc
from typing import ClassVar

import fsspec
import pytest
from helpers.polling import wait_until

from magicfs import MagicFileSystem
from magicfs.layouts.magic import MagicJobLayout
from magicfs.paths import pending_path
from magicfs.records import SinglePendingCommit
from magicfs.stores import deferred_writer
from magicfs.stores.memory_deferred.fs import MemoryDeferredFileSystem
from magicfs.task_files import TASK_FILES, TaskFile, TaskFiles

PART = 64  # bytes: the in-process store takes any part size


class GatedStore(MemoryDeferredFileSystem):
    """The in-process store whose part staging waits while :attr:`gate` is closed."""

    protocol = "mem-deferred-gated"
    gate: ClassVar[threading.Event] = threading.Event()
    staged_at: ClassVar[list[int]] = []  # budget bytes in use at each staging
    bodies: ClassVar[list[bytes]] = []  # the objects the writer staged, in order

    def stage(self, upload_id: str, number: int, body: bytes) -> str:
        self.staged_at.append(deferred_writer.BUFFER_BUDGET.used)
        self.bodies.append(body)
        assert self.gate.wait(10), "the test never opened the gate"
        return super().stage(upload_id, number, body)


@pytest.fixture
def store(request):
    fs = GatedStore(skip_instance_cache=True)
    GatedStore.gate.set()
    GatedStore.staged_at.clear()
    GatedStore.bodies.clear()
    root = f"writer-{request.node.name}"[:60]
    yield fs, root
    GatedStore.gate.set()
    TASK_FILES.settle()
    for _, upload_id in fs.pending(root + "/"):
        fs.discard(upload_id)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def task_path(root: str, name: str) -> str:
    """A file of a task attempt, as the magic layout names it."""
    work = MagicJobLayout(root + "/out", "j1", 0).work_path("attempt_j1_0000_m_000000_0")
    return f"{work}/{name}"


def record(fs, path: str) -> SinglePendingCommit:
    return SinglePendingCommit.from_json(fs.cat_file(pending_path(path)), source=path)


def test_a_file_is_staged_invisibly_and_its_record_lists_the_parts(store):
    fs, root = store
    magic = MagicFileSystem(fs=fs, part_size=PART, check_job_active=False)
    path = task_path(root, "a.bin")
    data = bytes(range(256)) * 2  # 8 parts
    with magic.open(path, "wb") as f:
        f.write(data[:100])
        f.write(data[100:])
    TASK_FILES.settle()
    assert not fs.exists(f"{root}/out/a.bin")  # nothing at the final name
    [(staged_on, upload_id)] = fs.pending(root + "/")
    assert staged_on == f"{root}/out/a.bin"
    saved = record(fs, path)
    assert (saved.upload_id, saved.length, len(saved.etags)) == (upload_id, len(data), 8)
    fs.publish(upload_id, saved.etags)
    assert fs.cat_file(f"{root}/out/a.bin") == data


def test_a_whole_bytes_part_is_staged_as_it_is_and_reused_buffers_are_copied(store):
    fs, root = store
    magic = MagicFileSystem(fs=fs, part_size=PART, check_job_active=False)
    path = task_path(root, "whole.bin")
    whole = bytes(range(PART))  # exactly one part, immutable: no copy needed
    reused = bytearray(b"r" * PART)  # the caller refills it after write() returns
    with magic.open(path, "wb") as f:
        f.write(whole)
        f.write(reused)
        reused[:] = b"X" * PART
        f.write(memoryview(b"ab" * PART)[: PART + 3])  # a part and 3 bytes of the next
        f.write(b"tail")
    TASK_FILES.settle()
    first, second, third, last = GatedStore.bodies
    assert first is whole
    pattern = b"ab" * PART
    assert second == b"r" * PART
    assert (third, last) == (pattern[:PART], pattern[PART : PART + 3] + b"tail")
    saved = record(fs, path)
    fs.publish(saved.upload_id, saved.etags)
    assert fs.cat_file(f"{root}/out/whole.bin") == b"".join(GatedStore.bodies)


def test_a_part_written_in_small_pieces_holds_about_its_size():
    part = 4 << 20
    buffer = deferred_writer.PartBuffer()
    tracemalloc.start()
    try:
        for i in range(part // 16):
            piece = bytes([i & 255]) * 16  # a fresh object per write, as a CSV writer makes
            buffer.add(piece, memoryview(piece), 0, 16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(buffer) == part
    assert peak < 1.2 * part, f"{peak / part:.2f}x the part's size"
    body = buffer.take()
    assert body == b"".join(bytes([i]) * 16 for i in range(256)) * (part // (16 * 256))
    assert len(buffer) == 0 and buffer.take() == b""


def test_parts_in_flight_stay_within_the_process_buffer_budget(store, monkeypatch):
    fs, root = store
    monkeypatch.setattr(deferred_writer, "BUFFER_BUDGET", deferred_writer.ByteBudget(2 * PART))
    magic = MagicFileSystem(fs=fs, part_size=PART, parts_in_flight=8, check_job_active=False)
    GatedStore.gate.clear()
    writing = threading.Thread(
        target=lambda: magic.pipe_file(task_path(root, "b.bin"), b"x" * (6 * PART))
    )
    writing.start()
    # Eight parts may be in flight for this file, but the process's budget holds two.
    wait_until(
        lambda: deferred_writer.BUFFER_BUDGET.used >= 2 * PART, "the writer fills the budget"
    )
    assert deferred_writer.BUFFER_BUDGET.used == 2 * PART
    assert writing.is_alive()
    GatedStore.gate.set()
    writing.join(10)
    TASK_FILES.settle()
    assert max(GatedStore.staged_at) <= 2 * PART
    assert deferred_writer.BUFFER_BUDGET.used == 0
    assert record(fs, task_path(root, "b.bin")).length == 6 * PART


def test_opening_a_path_again_waits_for_its_close_then_throws_the_first_away(store):
    fs, root = store
    magic = MagicFileSystem(fs=fs, part_size=PART, check_job_active=False)
    path = task_path(root, "c.bin")
    GatedStore.gate.clear()
    with magic.open(path, "wb") as f:
        f.write(b"1" * PART)
    assert TASK_FILES.closing_paths() == {path}  # its close is waiting at the gate
    threading.Timer(0.3, GatedStore.gate.set).start()
    with magic.open(path, "wb") as f:  # waits for the first close, then discards it
        f.write(b"2")
    TASK_FILES.settle()
    [(_, upload_id)] = fs.pending(root + "/")
    saved = record(fs, path)
    assert (saved.upload_id, saved.length) == (upload_id, 1)  # only the second file is left


def test_a_failed_write_leaves_nothing(store):
    fs, root = store
    magic = MagicFileSystem(fs=fs, part_size=PART, check_job_active=False)
    with pytest.raises(RuntimeError), magic.open(task_path(root, "d.bin"), "wb") as f:
        f.write(b"d" * (3 * PART))
        raise RuntimeError("the task failed mid-file")
    opened = magic.open(task_path(root, "e.txt"), "wb")
    with pytest.raises(RuntimeError), io.TextIOWrapper(opened) as text:
        text.write("partial")
        raise RuntimeError("closed while this propagates")
    TASK_FILES.settle()
    assert fs.pending(root + "/") == []
    assert not fs.exists(root)  # no marker, no record


def test_the_gated_store_is_a_registered_deferred_store():
    # A subclass of the in-process store is that store (the registry judges by class).
    assert MagicFileSystem(fs=GatedStore(skip_instance_cache=True)).deferred_writes
    assert fsspec.filesystem("mem-deferred").protocol == "mem-deferred"


class Interrupted(BaseException):
    """What a signal handler raises in the writing thread (as Ctrl-C's KeyboardInterrupt)."""


def test_an_interrupted_close_saves_nothing(store):
    # close() waits for the last part and the record; a signal interrupting that wait
    # reaches the caller as a failure, so the file must not be saved behind its back.
    fs, root = store
    magic = MagicFileSystem(fs=fs, part_size=PART, check_job_active=False, background_close=False)
    path = task_path(root, "f.bin")
    GatedStore.gate.clear()
    f = magic.open(path, "wb")
    f.write(b"f" * (2 * PART))

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        threading.Timer(0.6, GatedStore.gate.set).start()  # the parts land after the signal
        with pytest.raises(Interrupted):
            f.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    TASK_FILES.settle()
    assert fs.pending(root + "/") == []  # the upload is thrown away
    assert not fs.exists(pending_path(path))
    assert TASK_FILES.get(path) is None or TASK_FILES.get(path).commit is None


def test_a_part_that_cannot_start_gives_its_budget_back(store, monkeypatch):
    fs, root = store
    magic = MagicFileSystem(fs=fs, part_size=PART, check_job_active=False)
    f = magic.open(task_path(root, "g.bin"), "wb")
    used = deferred_writer.BUFFER_BUDGET.used

    def no_loop(call):
        call.close()
        raise RuntimeError("the IO loop is closed")

    monkeypatch.setattr(f.hooks, "run_background", no_loop)
    with pytest.raises(RuntimeError, match="loop is closed"):
        f.write(b"g" * PART)
    assert deferred_writer.BUFFER_BUDGET.used == used  # nothing held by the part that never ran
    monkeypatch.undo()
    f.discard()


@pytest.mark.parametrize("ending", ["raised", "cancelled"])
def test_a_close_that_ended_without_reporting_its_failure_fails_its_task(ending):
    """Its task commit settles the attempt's closes: such a file must count as failed
    (it used to count as nothing, and the commit left it out without a word)."""
    files = TaskFiles()
    writer = object()
    files.opened(TaskFile("bkt/out/f.csv", "job", "attempt", writer=writer))
    close: concurrent.futures.Future[None] = concurrent.futures.Future()
    files.closing("bkt/out/f.csv", writer, close)  # type: ignore[arg-type]
    if ending == "raised":
        close.set_exception(IndexError("a bug in the close"))
    else:
        close.cancel()
        close.set_running_or_notify_cancel()  # as an executor does: its waiters wake
    failed = files.settle("job", "attempt")
    assert [path for path, _ in failed] == ["bkt/out/f.csv"]
    expected = IndexError if ending == "raised" else concurrent.futures.CancelledError
    assert isinstance(failed[0][1], expected)
