"""fsspec's own abstract test suites, run against ``MagicFileSystem``.

fsspec's ``AbstractCopyTests``, ``AbstractGetTests``, ``AbstractPutTests``,
``AbstractOpenTests`` and ``AbstractPipeTests`` (``fsspec.tests.abstract``), wired as
fsspec wires them for its local and memory filesystems and s3fs for S3: the fixture
classes below provide ``fs`` and ``fs_path`` (and ``fs_join``,
``supports_empty_directories`` where fsspec's wiring does). fsspec's ``mv.py`` has no
``AbstractMoveTests`` class (two module-level tests of the local filesystem only), so
there is no move suite to run.

**Plain paths** (no magic element): ``fs`` is ``MagicFileSystem(fs=<store>)`` and every
call passes through to the store, so every test must pass exactly as on the store:

* local: fsspec's ``LocalFixtures`` (``LocalFileSystem(auto_mkdir=True)``, ``tmpdir``);
* memory: fsspec's ``MemoryFixtures``, in a fresh root instead of clearing the
  process-wide store;
* S3: s3fs's ``S3fsFixtures`` (the bucket is ``fs_path``, no empty directories) on
  moto, one s3fs instance for the module and a fresh bucket per class; after each test
  no multipart upload may be left.

**Task paths**: ``fs_path`` is ``task.work_path`` of a set-up job
(``magicfs.committer_for(dest)``, ``setup_job()``, ``setup_task(task)``) and ``fs`` is
``committer.fs``; every job is aborted afterwards (cleaned up once committed).

* local (the store is fsspec's ``LocalFileSystem(auto_mkdir=True)``, as for plain paths:
  with the default ``auto_mkdir=False`` a ``get`` into a new local directory fails on
  plain and task paths alike, and fsspec's scenarios cannot even be created on plain
  paths) and memory, with the manifest committer (paths routed to the attempt
  directory): all five suites, sources and targets under the task path.
* S3, with the magic committer (one job per class; after each test no multipart upload
  and no object may be left under the work path): a task file is a deferred upload
  that nothing can read before job commit (``magicfs/filesystems/deferred_view.py``; the rows
  of ``tests/helpers/task_paths.py`` named below). So:

  - ``AbstractPutTests``, ``AbstractPipeTests``, ``AbstractOpenTests``: targets under
    the task path, sources local;
  - ``AbstractCopyTests``: targets under the task path, sources on a plain path of the
    bucket (the four ``fs_*`` scenario fixtures are overridden to build them there);
  - ``AbstractGetTests`` (all 14 tests) does not run: every one downloads from
    ``fs_path``, which on S3 raises ``DeferredFileError`` by design (row
    ``test_downloading_a_task_directory``); with plain sources no task path would be
    involved, which the plain S3 run already covers.

  Four tests read back what they wrote under the task path, which raises
  ``DeferredFileError`` on S3 (row ``test_reading_a_task_file``). Each runs through
  a thin adapter on a job of its own: fsspec's test runs until its read-back, which
  must raise ``DeferredFileError``; the rest of its steps run; the job commit must
  then publish exactly the bytes the test reads back:

  - ``AbstractCopyTests.test_copy_with_source_and_destination_as_list`` (``fs.cat``);
  - ``AbstractPutTests.test_copy_with_source_and_destination_as_list`` (``fs.cat``);
  - ``AbstractOpenTests.test_open_exclusive`` (``open(target, "rb")``);
  - ``AbstractPipeTests.test_pipe_exclusive`` (``fs.cat_file``).

**A failure of the wrapped filesystem itself**: ``AbstractOpenTests.test_open_exclusive``
fails on raw s3fs: its ``open(path, "xb")`` never raises (the check is made when the
file is uploaded, at close). On plain S3 paths the test runs on raw s3fs and on
``MagicFileSystem`` and must fail the same way on both (``TestPlainS3Open``).

**Run time**: each of fsspec's 32 glob edge cases costs 50-300 requests on S3, about
1-3 s against moto on two cores. Local and memory (plain and task paths) run all 32;
S3 runs the six in :data:`S3_GLOB_CASES`, one of each shape of result, unless
``MAGICFS_FSSPEC_ALL_GLOB_CASES=1`` (all 32 pass there too; about 3 minutes more).

Tests per store and path kind: 137 each for plain local, plain memory, task local and
task memory; 59 for plain S3 and 40 for task S3 (copy, put: 13 tests + 6 glob edge
cases each; get on plain S3 only; open; pipe).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import uuid
from dataclasses import dataclass
from hashlib import md5
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractGetTests,
    AbstractOpenTests,
    AbstractPipeTests,
    AbstractPutTests,
)
from fsspec.tests.abstract.common import GLOB_EDGE_CASES_TESTS
from helpers import object_keys, pending_uploads, visible_keys

import magicfs
from magicfs.errors import DeferredFileError, JobCommitError


def slash_join(*parts: str) -> str:
    """fsspec's memory wiring joins with ``/`` (the default is ``os.path.join``)."""
    return "/".join(parts)


#: The glob edge cases run on S3 (``MAGICFS_FSSPEC_ALL_GLOB_CASES=1``: all 32): module docstring.
S3_GLOB_CASES = [
    case
    for case in GLOB_EDGE_CASES_TESTS["argvalues"]
    if os.environ.get("MAGICFS_FSSPEC_ALL_GLOB_CASES") == "1"
    or case[:3]
    in {
        ("fil?1", False, None),  # a glob naming one file
        ("*", True, 2),  # recursion cut by maxdepth
        ("**/*1", True, None),  # "**" and recursion: files at every depth
        ("**/subdir0", False, None),  # matches a directory only: nothing is copied
        ("**/subdir0", True, None),  # one directory matched: its contents land in the target
        ("subdir[0-1]/*fil[e]*", False, None),  # a bracket glob below a directory
    }
]


def on_s3_glob_cases(test: Any) -> Any:
    """fsspec's glob edge-case ``test``, parametrized with :data:`S3_GLOB_CASES` only."""

    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        test(self, *args, **kwargs)

    run.__name__ = test.__name__
    run.__signature__ = inspect.signature(test)  # pytest finds the fixtures by it
    return pytest.mark.parametrize(GLOB_EDGE_CASES_TESTS["argnames"], S3_GLOB_CASES)(run)


# --- stores ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_raw(s3_server):
    """One s3fs instance for the module: building a client costs about 0.5 s."""
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options)


@pytest.fixture(scope="module")
def boto(s3_server):
    return s3_server.boto3_client()


@pytest.fixture(scope="class")
def class_bucket(boto, s3_raw):
    """A new bucket for each test class (each test checks it leaves nothing behind)."""
    name = f"fsspec-{uuid.uuid4().hex[:16]}"
    boto.create_bucket(Bucket=name)
    yield name
    assert pending_uploads(boto, name) == [], "a multipart upload was left behind"
    s3_raw.rm(name, recursive=True)


def assert_nothing_left(boto, bucket: str, prefix: str = "") -> None:
    """After the suite's own clean-up: no object and no multipart upload under ``prefix``."""
    assert pending_uploads(boto, bucket, prefix) == [], "a multipart upload was left behind"
    assert object_keys(boto, bucket, prefix) == [], "the test's clean-up left objects behind"


def delete_objects(boto, bucket: str, keys: list[str]) -> None:
    if keys:
        boto.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})


@pytest.fixture
def memory_root():
    """A fresh root of the (process-wide) memory filesystem, removed afterwards."""
    root = f"/fsspec-{uuid.uuid4().hex}"
    yield root
    memory = fsspec.filesystem("memory")
    if memory.exists(root):
        memory.rm(root, recursive=True)


# --- plain paths: pure pass-through ----------------------------------------------------------


class PlainLocal(AbstractFixtures):
    """fsspec's own local wiring (``LocalFixtures``), wrapped."""

    @pytest.fixture
    def fs(self):
        return magicfs.MagicFileSystem(fs=LocalFileSystem(auto_mkdir=True))

    @pytest.fixture
    def fs_path(self, tmpdir):
        return str(tmpdir)


class PlainMemory(AbstractFixtures):
    """fsspec's own memory wiring (``MemoryFixtures``), wrapped, in a root of its own."""

    @pytest.fixture
    def fs(self):
        return magicfs.MagicFileSystem(fs=fsspec.filesystem("memory"))

    @pytest.fixture
    def fs_path(self, memory_root):
        return memory_root

    @pytest.fixture
    def fs_join(self):
        return slash_join


class PlainS3(AbstractFixtures):
    """s3fs's own wiring (``S3fsFixtures``: the bucket is ``fs_path``), wrapped."""

    @pytest.fixture
    def fs(self, s3_raw, boto, class_bucket):
        s3_raw.invalidate_cache()
        yield magicfs.MagicFileSystem(fs=s3_raw)
        assert pending_uploads(boto, class_bucket) == [], "a multipart upload was left behind"
        # Not every fsspec test removes what it made (test_get_directory_recursive
        # leaves src/file): the next test of the class starts from an empty bucket.
        delete_objects(boto, class_bucket, object_keys(boto, class_bucket))

    @pytest.fixture
    def fs_path(self, class_bucket):
        return class_bucket

    @pytest.fixture
    def supports_empty_directories(self):
        return False


class TestPlainLocalCopy(AbstractCopyTests, PlainLocal):
    pass


class TestPlainLocalGet(AbstractGetTests, PlainLocal):
    pass


class TestPlainLocalPut(AbstractPutTests, PlainLocal):
    pass


class TestPlainLocalOpen(AbstractOpenTests, PlainLocal):
    pass


class TestPlainLocalPipe(AbstractPipeTests, PlainLocal):
    pass


class TestPlainMemoryCopy(AbstractCopyTests, PlainMemory):
    pass


class TestPlainMemoryGet(AbstractGetTests, PlainMemory):
    pass


class TestPlainMemoryPut(AbstractPutTests, PlainMemory):
    pass


class TestPlainMemoryOpen(AbstractOpenTests, PlainMemory):
    pass


class TestPlainMemoryPipe(AbstractPipeTests, PlainMemory):
    pass


class TestPlainS3Copy(AbstractCopyTests, PlainS3):
    test_copy_glob_edge_cases = on_s3_glob_cases(AbstractCopyTests.test_copy_glob_edge_cases)


class TestPlainS3Get(AbstractGetTests, PlainS3):
    test_get_glob_edge_cases = on_s3_glob_cases(AbstractGetTests.test_get_glob_edge_cases)


class TestPlainS3Put(AbstractPutTests, PlainS3):
    test_put_glob_edge_cases = on_s3_glob_cases(AbstractPutTests.test_put_glob_edge_cases)


class TestPlainS3Open(AbstractOpenTests, PlainS3):
    def test_open_exclusive(self, fs, fs_target, s3_raw):
        """s3fs itself fails this test: its ``open(path, "xb")`` never raises.

        s3fs checks ``xb`` only when it uploads (``If-None-Match: *`` at close), and a
        file closed with nothing written is PUT without the check: fsspec's test drops
        its ``xb`` handle unwritten, which replaces ``data`` with empty bytes. Plain
        paths must do exactly what s3fs does, so fsspec's test runs on both and must
        fail on both in the same way, with the same object left.
        """
        for tested, target in ((s3_raw, f"{fs_target}-raw"), (fs, fs_target)):
            with pytest.raises(pytest.fail.Exception, match=r"DID NOT RAISE .*FileExistsError"):
                super().test_open_exclusive(tested, target)
            gc.collect()  # the dropped handle is closed (already, on CPython)
            assert s3_raw.cat_file(target) == b""
        s3_raw.rm_file(f"{fs_target}-raw")


class TestPlainS3Pipe(AbstractPipeTests, PlainS3):
    pass


# --- task paths -----------------------------------------------------------------------------


@dataclass
class Job:
    """A set-up job with one set-up task attempt, and what its commit publishes."""

    committer: Any
    task: Any
    boto: Any = None  # S3: the files published are read with boto3

    @classmethod
    def start(cls, dest: str, boto: Any = None, **options: Any) -> Job:
        committer = magicfs.committer_for(dest, **options)
        committer.setup_job()
        task = committer.task_attempt(0)
        committer.setup_task(task)
        return cls(committer, task, boto)

    @property
    def fs(self) -> Any:
        return self.committer.fs

    def end(self) -> None:
        """Abort the job (or, once it has committed, clean it up)."""
        try:
            self.committer.abort_job()
        except JobCommitError:
            self.committer.cleanup_job()

    def commit(self) -> dict[str, bytes]:
        """Commit the task and the job; the destination's visible files and their bytes."""
        message = self.committer.commit_task(self.task)
        self.committer.commit_job([message])
        return self.published()

    def published(self) -> dict[str, bytes]:
        bucket, _, prefix = self.committer.dest.partition("/")
        return {
            key[len(prefix) + 1 :]: self.boto.get_object(Bucket=bucket, Key=key)["Body"].read()
            for key in visible_keys(self.boto, bucket, prefix + "/")
            if not key[len(prefix) + 1 :].startswith(("_", "."))
        }


class TaskLocal(AbstractFixtures):
    """A task's work path on a local disk, with fsspec's local store (``auto_mkdir=True``)."""

    @pytest.fixture
    def job(self, tmp_path):
        job = Job.start(f"file://{tmp_path}/out", fs=LocalFileSystem(auto_mkdir=True))
        yield job
        job.end()

    @pytest.fixture
    def fs(self, job):
        return job.fs

    @pytest.fixture
    def fs_path(self, job):
        return job.task.work_path


class TaskMemory(AbstractFixtures):
    """A task's work path in memory."""

    @pytest.fixture
    def job(self, memory_root):
        job = Job.start(f"memory://{memory_root}/out")
        yield job
        job.end()

    @pytest.fixture
    def fs(self, job):
        return job.fs

    @pytest.fixture
    def fs_path(self, job):
        return job.task.work_path

    @pytest.fixture
    def fs_join(self):
        return slash_join


class TaskS3(AbstractFixtures):
    """A task's work path on S3 (one job per class); sources of copies are plain paths."""

    @pytest.fixture(scope="class")
    @classmethod
    def job(cls, s3_raw, boto, class_bucket):
        job = Job.start(f"s3://{class_bucket}/out", boto, fs=s3_raw)
        yield job
        job.end()

    @pytest.fixture
    def fs(self, job, s3_raw, boto, class_bucket):
        s3_raw.invalidate_cache()
        yield job.fs
        assert_nothing_left(boto, class_bucket, job.task.work_path.partition("/")[2])
        assert_nothing_left(boto, class_bucket, "plain/")

    @pytest.fixture
    def fresh_job(self, s3_raw, boto, class_bucket):
        """A job of its own, for the tests that commit it (on another destination)."""
        job = Job.start(f"s3://{class_bucket}/out-{uuid.uuid4().hex[:8]}", boto, fs=s3_raw)
        yield job
        job.end()
        with contextlib.suppress(FileNotFoundError):  # published files, if it committed
            s3_raw.rm(job.committer.dest, recursive=True)

    @pytest.fixture
    def fs_path(self, job):
        return job.task.work_path

    @pytest.fixture
    def supports_empty_directories(self):
        return False

    # A task file has no bytes before job commit: the sources of copies are plain paths.
    @pytest.fixture
    def plain_path(self, class_bucket):
        return f"{class_bucket}/plain"

    @pytest.fixture
    def fs_bulk_operations_scenario_0(self, fs, fs_join, plain_path):
        source = self._bulk_operations_scenario_0(fs, fs_join, plain_path)
        yield source
        fs.rm(source, recursive=True)

    @pytest.fixture
    def fs_glob_edge_cases_files(self, fs, fs_join, plain_path):
        source = self._glob_edge_cases_files(fs, fs_join, plain_path)
        yield source
        fs.rm(source, recursive=True)

    @pytest.fixture
    def fs_dir_and_file_with_same_name_prefix(self, fs, fs_join, plain_path):
        source = self._dir_and_file_with_same_name_prefix(fs, fs_join, plain_path)
        yield source
        fs.rm(source, recursive=True)

    @pytest.fixture
    def fs_10_files_with_hashed_names(self, fs, fs_join, plain_path):
        source = self._10_files_with_hashed_names(fs, fs_join, plain_path)
        yield source
        fs.rm(source, recursive=True)


class TestTaskLocalCopy(AbstractCopyTests, TaskLocal):
    pass


class TestTaskLocalGet(AbstractGetTests, TaskLocal):
    pass


class TestTaskLocalPut(AbstractPutTests, TaskLocal):
    pass


class TestTaskLocalOpen(AbstractOpenTests, TaskLocal):
    pass


class TestTaskLocalPipe(AbstractPipeTests, TaskLocal):
    pass


class TestTaskMemoryCopy(AbstractCopyTests, TaskMemory):
    pass


class TestTaskMemoryGet(AbstractGetTests, TaskMemory):
    pass


class TestTaskMemoryPut(AbstractPutTests, TaskMemory):
    pass


class TestTaskMemoryOpen(AbstractOpenTests, TaskMemory):
    pass


class TestTaskMemoryPipe(AbstractPipeTests, TaskMemory):
    pass


def _hashed_files(under: str) -> dict[str, bytes]:
    """What ``*_with_source_and_destination_as_list`` writes: ``<md5(i)>.txt`` holding ``i``."""
    return {f"{under}/{md5(str(i).encode()).hexdigest()}.txt": str(i).encode() for i in range(10)}


class TestTaskS3Copy(AbstractCopyTests, TaskS3):
    test_copy_glob_edge_cases = on_s3_glob_cases(AbstractCopyTests.test_copy_glob_edge_cases)

    def test_copy_with_source_and_destination_as_list(
        self, fs_join, fs_10_files_with_hashed_names, fresh_job
    ):
        with pytest.raises(DeferredFileError, match="cannot read a task file"):
            super().test_copy_with_source_and_destination_as_list(
                fresh_job.fs,
                fresh_job.task.path("target"),
                fs_join,
                fs_10_files_with_hashed_names,
            )
        assert fresh_job.commit() == _hashed_files("target")


class TestTaskS3Put(AbstractPutTests, TaskS3):
    test_put_glob_edge_cases = on_s3_glob_cases(AbstractPutTests.test_put_glob_edge_cases)

    def test_copy_with_source_and_destination_as_list(
        self, fs_join, local_join, local_10_files_with_hashed_names, fresh_job
    ):
        with pytest.raises(DeferredFileError, match="cannot read a task file"):
            super().test_copy_with_source_and_destination_as_list(
                fresh_job.fs,
                fresh_job.task.path("target"),
                fs_join,
                local_join,
                local_10_files_with_hashed_names,
            )
        assert fresh_job.commit() == _hashed_files("target")


class TestTaskS3Open(AbstractOpenTests, TaskS3):
    def test_open_exclusive(self, fresh_job):
        fs, target = fresh_job.fs, fresh_job.task.path("target")
        with pytest.raises(DeferredFileError, match="cannot read a task file"):
            super().test_open_exclusive(fs, target)  # stops at its read-back
        # The rest of fsspec's test; its read-back is what the job commit publishes.
        with pytest.raises(FileExistsError):
            fs.open(target, "xb")
        assert fresh_job.commit() == {"target": b"data"}


class TestTaskS3Pipe(AbstractPipeTests, TaskS3):
    def test_pipe_exclusive(self, fresh_job):
        fs, target = fresh_job.fs, fresh_job.task.path("target")
        with pytest.raises(DeferredFileError, match="cannot read a task file"):
            super().test_pipe_exclusive(fs, target)  # stops at its first read-back
        # The rest of fsspec's test; its read-backs are what the job commit publishes.
        with pytest.raises(FileExistsError):
            fs.pipe_file(target, b"data", mode="create")
        fs.pipe_file(target, b"new data", mode="overwrite")
        assert fresh_job.commit() == {"target": b"new data"}
