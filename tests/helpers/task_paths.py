"""Every filesystem operation on a task path, on every store: the documentation's table, row
by row, as a class each store's test module subclasses.

Each test of :class:`TaskPathContract` is one row of "Operations on task paths" in
docs/filesystem.md. A store's own test module (``tests/test_contract_<store>.py``)
subclasses it and says what only it knows: how to make a committer on it
(:meth:`~TaskPathContract.destination`), whether its task files are deferred (written on
their final names, invisible, with no bytes to read until job commit: S3 multipart
uploads, Azure staged blocks, an in-process store's staged parts) and what its refusals
call their bytes, what is left pending on it (:meth:`~TaskPathContract.parked`), and
whether it can discard that. They run on S3 (moto, Ceph RGW and SeaweedFS; the magic
committer), a local disk, memory, Azure Blob (Azurite) and GCS (the emulator) — those
four with the manifest committer — Azure Blob with the block-list committer (S3's
deferred semantics, blocks staged on the final blobs instead of multipart uploads) and
the in-process deferred store.

Each asserts what a user would observe: the bytes published at job commit, what is left
pending (S3: no multipart upload, ever; Azure block lists: the blobs holding staged blocks
and no committed one, which no request can delete: those of files deleted or never
published stay, invisible), and for refused operations an error naming the path, the
reason and what to do instead — raised before anything was changed.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, ClassVar

import fsspec
import pandas as pd
import pytest

from magicfs.errors import (
    CommitFailedError,
    DeferredFileError,
    TaskNotActiveError,
    UnsupportedTaskOperation,
)
from magicfs.task_files import TASK_FILES


@dataclass
class Destination:
    """What a store's :meth:`TaskPathContract.destination` makes."""

    committer: Any  # for ``<store>/out``, its job not yet set up
    root: str  # a plain directory of the store, outside the destination
    client: Any = None  # the store's own client, where observing needs more than its fs
    bucket: str | None = None  # S3: the bucket; Azure: the container


@dataclass
class TaskStore:
    """One set-up job with one task attempt on one store, and ways to look at the result."""

    contract: TaskPathContract  # the store's: what only it knows
    committer: Any
    task: Any
    raw: fsspec.AbstractFileSystem  # the store's own filesystem
    root: str  # a plain directory of the store, outside the destination
    client: Any = None
    bucket: str | None = None  # S3: the bucket; Azure: the container
    #: Task files the test leaves unpublished (deleted, abandoned, of an aborted attempt):
    #: what :meth:`left_staged` expects pending once the job has ended.
    unpublished: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.contract.store

    @property
    def fs(self) -> Any:
        return self.committer.fs

    @property
    def deferred(self) -> bool:
        return self.contract.deferred

    @property
    def discards_pending(self) -> bool:
        """Deleting or aborting a task file drops what it left pending (S3 aborts the
        upload); Azure has no request that deletes staged blocks on their own."""
        return self.contract.discards_pending

    def path(self, relative: str) -> str:
        return self.task.path(relative)

    def plain(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def commit(self) -> dict[str, bytes]:
        """Commit the task and the job; the destination's visible files and their bytes."""
        message = self.committer.commit_task(self.task)
        self.committer.commit_job([message])
        return self.published()

    def published(self) -> dict[str, bytes]:
        """The destination's visible files and their bytes (the store's
        :meth:`TaskPathContract.published`)."""
        return self.contract.published(self)

    def parked(self) -> list[dict]:
        """What is left pending on the store (the store's :meth:`TaskPathContract.parked`):
        ``Key``, relative to the store's ``bucket``."""
        return self.contract.parked(self)

    def parked_names(self) -> list[str]:
        """The destination-relative names of :meth:`parked`."""
        return sorted(p["Key"].removeprefix("out/") for p in self.parked())

    def left_staged(self, *unpublished: str) -> list[str]:
        """What :meth:`parked_names` must be once the files ``unpublished`` (deleted,
        abandoned or never published) are gone: their names where the store cannot
        discard what they left pending, nothing where it can."""
        return [] if self.discards_pending else sorted(set(unpublished))


def forget_this_process(ts: TaskStore, relative: str) -> None:
    """Drop what this process knows of a task file: as if another process had written it."""
    path = ts.committer.fs._inner(ts.path(relative))
    TASK_FILES.discarded(path if ts.deferred else ts.committer.fs.view.into(path))


class TaskPathContract:
    """The task-path table on one store. Subclass it in the store's test module, set
    :attr:`store` and write :meth:`destination`; a deferred store sets :attr:`deferred`,
    :attr:`staged_bytes` and writes :meth:`parked`."""

    #: The store's id: the tests' parameter id (``[s3]``), so ``-k <store>`` selects them.
    store: ClassVar[str]
    #: Its task files are deferred: no bytes to read, copy or move until job commit.
    deferred: ClassVar[bool] = False
    #: What a refusal of a deferred task file says its bytes are.
    staged_bytes: ClassVar[str] = ""
    #: Deleting or aborting a task file drops what it left pending (not Azure's blocks).
    discards_pending: ClassVar[bool] = True
    #: The store appends to a file it wrote (``"ab"``); elsewhere ``"ab"`` is refused.
    appends: ClassVar[bool] = False
    #: Refusals of deferred task files name the staging committers (S3, where they run).
    suggests_staging: ClassVar[bool] = False

    # -- what a store fills in --------------------------------------------------------------

    def destination(self, request: pytest.FixtureRequest, tmp_path: Any) -> Destination:
        """A committer for a fresh destination on the store, and a plain directory."""
        raise NotImplementedError(f"{type(self).__name__} makes no destination")

    def published(self, ts: TaskStore) -> dict[str, bytes]:
        """The destination's visible files and their bytes, read with the store's own
        filesystem."""
        dest = ts.committer.dest
        ts.raw.invalidate_cache()
        try:
            found = ts.raw.find(dest)
        except FileNotFoundError:
            return {}
        visible = {}
        for path in found:
            relative = path[len(dest) + 1 :]
            if not any(e.startswith(("_", ".")) for e in relative.split("/")):
                visible[relative] = ts.raw.cat_file(path)
        return visible

    def parked(self, ts: TaskStore) -> list[dict]:
        """What is pending on the store, ``Key`` relative to ``ts.bucket``: none by default
        (the rename stores' task files are plain files)."""
        return []

    # -- the machinery ----------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "ts" in metafunc.fixturenames:
            metafunc.parametrize("ts", [self.store], ids=[self.store], indirect=True)

    @pytest.fixture
    def ts(self, request: pytest.FixtureRequest, tmp_path: Any) -> Any:
        made = self.destination(request, tmp_path)
        committer = made.committer
        committer.setup_job()
        task = committer.task_attempt(0)
        committer.setup_task(task)
        store = TaskStore(
            self, committer, task, committer.store_fs, made.root, made.client, made.bucket
        )
        yield store
        try:
            committer.abort_job()
        except Exception:  # the test may have left the job committed or refused
            committer.cleanup_job()
        assert store.parked_names() == store.left_staged(*store.unpublished), (
            "a test left a multipart upload (or staged blocks) behind"
        )

    # --- writes -------------------------------------------------------------------------------

    def test_every_write_method_publishes_exact_bytes(self, ts, tmp_path):
        local = tmp_path / "local.bin"
        local.write_bytes(b"from disk")
        with ts.fs.open(ts.path("opened.bin"), "wb") as f:
            f.write(b"opened")
        ts.fs.pipe_file(ts.path("piped.bin"), b"piped")
        ts.fs.pipe({ts.path("p1.bin"): b"1", ts.path("p2.bin"): b"2"})
        ts.fs.write_text(ts.path("text.txt"), "text é")
        ts.fs.write_bytes(ts.path("d/bytes.bin"), b"bytes")
        ts.fs.put_file(str(local), ts.path("put.bin"))
        ts.fs.touch(ts.path("empty.bin"))
        with ts.fs.open(ts.path("lines.txt"), "w") as f:
            f.write("a\nb\n")
        assert ts.published() == {}  # nothing visible before job commit
        assert ts.commit() == {
            "opened.bin": b"opened",
            "piped.bin": b"piped",
            "p1.bin": b"1",
            "p2.bin": b"2",
            "text.txt": "text é".encode(),
            "d/bytes.bin": b"bytes",
            "put.bin": b"from disk",
            "empty.bin": b"",
            "lines.txt": b"a\nb\n",
        }

    def test_rewriting_a_path_replaces_it_and_parks_nothing(self, ts):
        ts.fs.pipe_file(ts.path("x.csv"), b"first version, longer")
        ts.fs.pipe_file(ts.path("x.csv"), b"second")
        TASK_FILES.settle()
        if ts.deferred:
            # the first upload was aborted at once (Azure: the blocks of both writers are
            # staged on the one blob x.csv; publishing the second discards the first's)
            assert ts.parked_names() == ["x.csv"]
        # Rewritten by a process that knows nothing of the first write: the job's sweep
        # aborts the upload no record names (the fixture's teardown checks none is left).
        ts.fs.pipe_file(ts.path("z.csv"), b"z1")
        forget_this_process(ts, "z.csv")
        ts.fs.pipe_file(ts.path("z.csv"), b"z2")
        with ts.fs.open(ts.path("y.csv"), "wb") as first:
            first.write(b"y1")
        with ts.fs.open(ts.path("y.csv"), "wb") as second:
            second.write(b"y2")
        assert ts.commit() == {"x.csv": b"second", "y.csv": b"y2", "z.csv": b"z2"}

    def test_a_second_open_discards_a_writer_still_open(self, ts):
        earlier = ts.fs.open(ts.path("x.csv"), "wb")
        earlier.write(b"earlier")
        with ts.fs.open(ts.path("x.csv"), "wb") as later:
            later.write(b"later")
        with pytest.raises((OSError, ValueError), match="opened again"):
            earlier.write(b"more")  # it says so, rather than losing the bytes silently
        assert ts.commit() == {"x.csv": b"later"}

    def test_exclusive_create_refuses_an_existing_task_file(self, ts):
        with ts.fs.open(ts.path("x.csv"), "xb") as f:
            f.write(b"first")
        with pytest.raises(FileExistsError):
            ts.fs.open(ts.path("x.csv"), "xb")
        with pytest.raises(FileExistsError):
            ts.fs.pipe_file(ts.path("x.csv"), b"second", mode="create")
        assert ts.commit() == {"x.csv": b"first"}

    def test_append(self, ts):
        ts.fs.pipe_file(ts.path("log.txt"), b"a")
        if ts.contract.appends:  # the store appends to a file it wrote (local, memory)
            with ts.fs.open(ts.path("log.txt"), "ab") as f:
                f.write(b"b")
            assert ts.commit() == {"log.txt": b"ab"}
            return
        # S3 uploads and Azure/GCS objects cannot be appended to (gcsfs would silently replace
        # the file, adlfs fail on it): refused before anything happens, the file unchanged.
        with pytest.raises(
            UnsupportedTaskOperation, match=r"log.txt: append \('ab'\) is not supported"
        ):
            ts.fs.open(ts.path("log.txt"), "ab")
        assert ts.commit() == {"log.txt": b"a"}

    @pytest.mark.parametrize("wrapper", ["binary", "text"])
    def test_a_write_that_fails_leaves_no_file(self, ts, wrapper):
        ts.fs.pipe_file(ts.path("good.csv"), b"good")
        with (
            pytest.raises(RuntimeError, match="boom"),
            ts.fs.open(ts.path("bad.csv"), "wb" if wrapper == "binary" else "w") as f,
        ):
            f.write(b"half" if wrapper == "binary" else "half")
            raise RuntimeError("boom")
        assert not ts.fs.exists(ts.path("bad.csv"))
        assert ts.commit() == {"good.csv": b"good"}

    # --- reads: none on S3 before job commit (never the marker's empty bytes) -------------------

    def test_reading_a_task_file(self, ts):
        ts.fs.pipe_file(ts.path("x.csv"), b"1,2\n")
        readers = {
            "open": lambda: ts.fs.open(ts.path("x.csv"), "rb").read(),
            "cat_file": lambda: ts.fs.cat_file(ts.path("x.csv")),
            "cat": lambda: ts.fs.cat(ts.path("x.csv")),
            "head": lambda: ts.fs.head(ts.path("x.csv"), 2),
            "read_text": lambda: ts.fs.read_text(ts.path("x.csv")).encode(),
        }
        for name, read in readers.items():
            if ts.deferred:
                with pytest.raises(DeferredFileError, match=r"x.csv: cannot read a task file") as e:
                    read()
                assert ts.contract.staged_bytes in str(e.value), name
                if ts.contract.suggests_staging:  # (the staging committers need S3)
                    assert "committer='directory'" in str(e.value), name
            else:
                assert read() in (b"1,2\n", b"1,"), name
        assert ts.commit() == {"x.csv": b"1,2\n"}

    def test_copying_from_a_task_file(self, ts):
        ts.fs.pipe_file(ts.path("a.csv"), b"data of a")
        if ts.deferred:
            with pytest.raises(DeferredFileError, match=r"a.csv: cannot copy a task file"):
                ts.fs.copy(ts.path("a.csv"), ts.path("b.csv"))
            assert not ts.fs.exists(ts.path("b.csv"))  # refused before anything was written
            TASK_FILES.settle()  # a.csv's upload is created in the background: let it be
            assert ts.parked_names() == ["a.csv"]
            assert ts.commit() == {"a.csv": b"data of a"}
            return
        ts.fs.copy(ts.path("a.csv"), ts.path("b.csv"))
        assert ts.commit() == {"a.csv": b"data of a", "b.csv": b"data of a"}

    def test_copying_and_moving_into_the_task_from_outside(self, ts):
        ts.raw.makedirs(ts.plain("src"), exist_ok=True)
        ts.raw.pipe_file(ts.plain("src/c.csv"), b"copied")
        ts.raw.pipe_file(ts.plain("src/m.csv"), b"moved")
        ts.fs.copy(ts.plain("src/c.csv"), ts.path("c.csv"))
        ts.fs.mv(ts.plain("src/m.csv"), ts.path("m.csv"))
        assert not ts.raw.exists(ts.plain("src/m.csv"))
        assert ts.raw.cat_file(ts.plain("src/c.csv")) == b"copied"
        assert ts.commit() == {"c.csv": b"copied", "m.csv": b"moved"}

    def test_copying_a_directory_into_the_task_from_outside(self, ts):
        # fsspec's copy() hands the tree's directories to cp_file too: none may become a
        # file (on S3 each became an empty task file, published at job commit).
        ts.raw.makedirs(ts.plain("tree/sub"), exist_ok=True)
        ts.raw.pipe_file(ts.plain("tree/a.csv"), b"a")
        ts.raw.pipe_file(ts.plain("tree/sub/b.csv"), b"b")
        ts.fs.copy(ts.plain("tree"), ts.path("d"), recursive=True)
        assert sorted(ts.fs.find(ts.path("d"))) == [ts.path("d/a.csv"), ts.path("d/sub/b.csv")]
        assert ts.commit() == {"d/a.csv": b"a", "d/sub/b.csv": b"b"}

    def test_write_then_rename_inside_the_task(self, ts):
        ts.fs.pipe_file(ts.path("part.tmp"), b"payload")
        if ts.deferred:
            with pytest.raises(DeferredFileError, match=r"part.tmp: cannot move a task file") as e:
                ts.fs.mv(ts.path("part.tmp"), ts.path("part.csv"))
            assert ts.contract.staged_bytes in str(e.value)
            if ts.contract.suggests_staging:
                assert "staging committer" in str(e.value)
            # nothing lost: the file is still there, under the name it was written with
            assert ts.commit() == {"part.tmp": b"payload"}
            return
        ts.fs.mv(ts.path("part.tmp"), ts.path("part.csv"))
        assert ts.commit() == {"part.csv": b"payload"}

    def test_downloading_a_task_directory(self, ts, tmp_path):
        ts.fs.pipe_file(ts.path("d/a.csv"), b"a")
        ts.fs.pipe_file(ts.path("d/sub/b.csv"), b"b")
        target = tmp_path / "download"
        if ts.deferred:
            with pytest.raises(DeferredFileError, match="cannot download a task file"):
                ts.fs.get(ts.path("d") + "/", str(target) + "/", recursive=True)
        else:  # fsspec's trailing-slash rule: the contents of d, not d itself
            ts.fs.get(ts.path("d") + "/", str(target) + "/", recursive=True)
            assert (target / "a.csv").read_bytes() == b"a"
            assert (target / "sub" / "b.csv").read_bytes() == b"b"
        assert ts.commit() == {"d/a.csv": b"a", "d/sub/b.csv": b"b"}

    def test_recursive_put_of_a_local_directory(self, ts, tmp_path):
        source = tmp_path / "tree"
        (source / "sub").mkdir(parents=True)
        (source / "a.csv").write_bytes(b"a")
        (source / "sub" / "b.csv").write_bytes(b"b")
        ts.fs.put(str(source), ts.path("d"), recursive=True)
        assert ts.commit() == {"d/a.csv": b"a", "d/sub/b.csv": b"b"}

    # --- deletes ------------------------------------------------------------------------------

    def test_deleting_task_files(self, ts):
        ts.fs.pipe_file(ts.path("keep.csv"), b"keep")
        ts.fs.pipe_file(ts.path("gone.csv"), b"gone")
        ts.fs.pipe_file(ts.path("dir/x.csv"), b"x")
        ts.fs.pipe_file(ts.path("dir/sub/y.csv"), b"y")
        ts.fs.rm(ts.path("gone.csv"))
        ts.fs.rm(ts.path("dir"), recursive=True)
        ts.unpublished = ["dir/sub/y.csv", "dir/x.csv", "gone.csv"]
        if ts.deferred:  # every deleted file's upload was aborted at once (Azure: cannot be)
            assert ts.parked_names() == sorted(["keep.csv", *ts.left_staged(*ts.unpublished)])
        assert not ts.fs.exists(ts.path("gone.csv"))
        assert ts.commit() == {"keep.csv": b"keep"}

    def test_deleting_a_file_still_being_written(self, ts):
        writer = ts.fs.open(ts.path("x.csv"), "wb")
        writer.write(b"partial")
        ts.fs.rm(ts.path("x.csv"))
        with pytest.raises((OSError, ValueError), match="deleted"):
            writer.close()
        assert ts.commit() == {}

    # --- info and listings: the task's files, as the task wrote them -----------------------------

    def test_info_and_listings_show_the_task_files(self, ts):
        ts.fs.pipe_file(ts.path("a.csv"), b"12345")
        ts.fs.pipe_file(ts.path("d/b.csv"), b"123")
        assert ts.fs.exists(ts.path("a.csv")) and ts.fs.isfile(ts.path("a.csv"))
        assert not ts.fs.exists(ts.path("nope.csv"))
        assert ts.fs.info(ts.path("a.csv"))["size"] == 5
        assert ts.fs.size(ts.path("d/b.csv")) == 3
        work = ts.task.work_path
        assert sorted(ts.fs.find(work)) == [ts.path("a.csv"), ts.path("d/b.csv")]
        assert sorted(ts.fs.glob(f"{work}/**/*.csv")) == [ts.path("a.csv"), ts.path("d/b.csv")]
        listed = {e["name"].rstrip("/"): e for e in ts.fs.ls(work, detail=True)}
        assert set(listed) == {ts.path("a.csv"), ts.path("d")}
        assert listed[ts.path("a.csv")]["size"] == 5
        walked = {root.rstrip("/"): sorted(files) for root, _, files in ts.fs.walk(work)}
        assert walked[work] == ["a.csv"] and walked[ts.path("d")] == ["b.csv"]
        assert ts.commit() == {"a.csv": b"12345", "d/b.csv": b"123"}

    def test_directories_can_be_made(self, ts):
        ts.fs.makedirs(ts.path("made"), exist_ok=True)
        ts.fs.mkdir(ts.path("made/deeper"))
        ts.fs.pipe_file(ts.path("made/deeper/f.csv"), b"f")
        assert ts.commit() == {"made/deeper/f.csv": b"f"}

    # --- the task's own lifecycle --------------------------------------------------------------

    def test_a_file_still_open_at_task_commit(self, ts):
        ts.fs.pipe_file(ts.path("closed.csv"), b"closed")
        still_open = ts.fs.open(ts.path("open.csv"), "wb")
        still_open.write(b"not yet")
        with pytest.raises(CommitFailedError, match=r"1 files are still open, e.g. .*open.csv"):
            ts.committer.commit_task(ts.task)
        ts.unpublished = ["closed.csv"]  # of the aborted attempt
        with pytest.raises((OSError, ValueError), match="aborted"):
            still_open.write(b"more")  # the writer learns its attempt is gone
        assert ts.parked_names() == ts.left_staged(*ts.unpublished)
        ts.committer.commit_job([])
        assert ts.published() == {}

    def test_writing_after_task_commit_is_refused(self, ts):
        ts.fs.pipe_file(ts.path("early.csv"), b"early")
        message = ts.committer.commit_task(ts.task)
        with pytest.raises(TaskNotActiveError, match="has already committed"):
            ts.fs.pipe_file(ts.path("late.csv"), b"late")
        ts.committer.commit_job([message])
        assert ts.published() == {"early.csv": b"early"}

    def test_a_file_written_after_task_commit_by_another_process(self, ts):
        ts.fs.pipe_file(ts.path("early.csv"), b"early")
        message = ts.committer.commit_task(ts.task)
        # Another process (a zombie of the attempt) does not know the attempt committed.
        TASK_FILES.reopen_attempt(ts.committer.job_id, ts.task.attempt_id)
        ts.fs.pipe_file(ts.path("late.csv"), b"late")
        ts.committer.commit_job([message])
        assert ts.published() == {"early.csv": b"early"}  # never published; nothing parked
        ts.unpublished = ["late.csv"]  # (Azure: its blocks stay staged, invisible)
        assert ts.parked_names() == ts.left_staged(*ts.unpublished)

    def test_files_written_around_magicfs_are_refused_at_task_commit(self, ts):
        ts.fs.pipe_file(ts.path("good.csv"), b"good")
        ts.raw.makedirs(ts.raw._parent(ts.path("around.csv")), exist_ok=True)
        ts.raw.pipe_file(ts.path("around.csv"), b"plain write at a task path")
        with pytest.raises(CommitFailedError, match=r"around magicfs, e.g. .*around.csv"):
            ts.committer.commit_task(ts.task)
        ts.committer.commit_job([])
        assert ts.published() == {}
        ts.unpublished = ["good.csv"]  # of the aborted attempt

    # --- URL writers and names --------------------------------------------------------------

    def test_url_writers_with_the_committers_storage_options(self, ts):
        frame = pd.DataFrame({"a": [1, 2], "b": ["x", "é"]})
        frame.to_csv(
            ts.task.url("frame.csv"), index=False, storage_options=ts.committer.storage_options
        )
        with fsspec.open(ts.task.url("raw.bin"), "wb", **ts.committer.storage_options) as f:
            f.write(b"raw")
        published = ts.commit()
        assert pd.read_csv(io.BytesIO(published["frame.csv"])).equals(frame)
        assert published["raw.bin"] == b"raw"

    @pytest.mark.parametrize(
        "name", ["q?versionId=1.bin", "hash#frag.bin", "pct%20.bin", "a b/é ü.bin"]
    )
    def test_names_round_trip_exactly(self, ts, name):
        ts.fs.pipe_file(ts.path(name), name.encode())
        assert ts.fs.info(ts.path(name))["size"] == len(name.encode())
        assert ts.commit() == {name: name.encode()}

    @pytest.mark.parametrize("route", ["filesystem", "url"])
    def test_dask_to_parquet_inside_a_task(self, ts, route):
        """Dask's own writer (threaded scheduler) inside one task, through job.fs or a URL."""
        import dask
        import dask.dataframe as dd

        frame = pd.DataFrame({"k": list(range(12)), "v": [f"value {n}" for n in range(12)]})
        ddf = dd.from_pandas(frame, npartitions=3)
        with dask.config.set(scheduler="threads"):
            if route == "filesystem":
                ddf.to_parquet(ts.path("dataset"), filesystem=ts.fs, write_index=False)
            else:
                ddf.to_parquet(
                    ts.task.url("dataset"),
                    storage_options=ts.committer.storage_options,
                    write_index=False,
                )
        published = ts.commit()
        parts = sorted(name for name in published if name.startswith("dataset/"))
        assert parts == [f"dataset/part.{n}.parquet" for n in range(3)]
        read = pd.concat(pd.read_parquet(io.BytesIO(published[name])) for name in parts)
        # (pandas and dask differ only in the NA flavour of their string dtype)
        pd.testing.assert_frame_equal(read.reset_index(drop=True), frame, check_dtype=False)
