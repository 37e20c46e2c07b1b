"""The staging committers (Netflix's, in Hadoop's S3A): tasks write to local disk.

``committer="directory"`` and ``committer="partitioned"``, S3 only. A task attempt
writes plain local files under its staging directory (``buffer_dir``, private to the
user: mode 0700); ``committer.fs`` is the local filesystem. Task commit uploads every
file as a multipart upload to its final key *without completing it* and hands the
pending uploads to the job as a ``.pendingset`` committed through FileOutputCommitter
v1 on a consistent store with rename (``staging_dir``: a local directory by default —
on a multi-machine cluster, a shared filesystem every executor and the driver see).
Job commit completes the uploads exactly as the magic committer does
(:mod:`magicfs.s3.commit_ops`).

Conflict modes, as Hadoop applies them:

* **directory**: over the whole destination. ``fail`` refuses a destination with
  visible data at job setup; ``replace`` deletes the destination's visible data at job
  commit, after every task's record loaded and validated.
* **partitioned**: per partition directory the job writes to (the parent directory of
  each file; files at the top are always appended). ``fail`` refuses at *task* commit,
  before any upload, if one of its partitions exists; ``replace`` deletes exactly the
  partitions the job has output for, at job commit.

Decisions and limits: unique file names (``part-0000-<job uuid>.parquet``) are off by
default (``unique_filenames=True`` turns them on). As in Hadoop the last committed attempt
of a task wins; the uploads of the attempt it replaces are aborted when it is replaced.
Uploads of a task killed *during* its task commit are recorded nowhere: a bucket
lifecycle rule must reclaim them (the magic committer records every upload).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import getpass
import logging
import os
import shutil
import tempfile
import time
from typing import Any

import fsspec

from ..errors import CommitConflictError, InvalidCommitData
from ..filesystem import is_s3
from ..local import TaskLocalFileSystem
from ..paths import join
from ..records import (
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
)
from ..s3.commit_ops import CommitOperations
from ..s3.store import S3Store
from ..s3.upload import upload_pending
from ..s3.validation import validate_pendingsets
from .base import JobSummary, OutputCommitter, TaskAttempt, TaskCommitMessage, total_rows
from .classic import FileOutputCommitter

log = logging.getLogger("magicfs.committer.staging")

TABLE_ROOT = "table_root"
PENDINGSET_SUFFIX = ".pendingset"


def add_uuid(path: str, uuid: str) -> str:
    """Hadoop's ``addUUID``: ``dir/part-0000.gz.csv`` -> ``dir/part-0000-<uuid>.gz.csv``.

    Inserted before the first ``.`` of the file name (a dot in a directory does not
    count), appended when there is none, and not at all if the path holds it already.
    """
    if not path or not uuid:
        raise ValueError("add_uuid needs a path and a uuid")
    if path.endswith("/"):
        raise ValueError(f"cannot add a uuid to a directory path: {path!r}")
    if uuid in path:
        return path
    parent, separator, name = path.rpartition("/")
    stem, dot, extensions = name.partition(".")
    return f"{parent}{separator}{stem}-{uuid}{dot}{extensions}"


def partitions_of(relative_paths: list[str]) -> set[str]:
    """The partition directories of the files (``table_root`` for files at the top)."""
    return {p.rpartition("/")[0] or TABLE_ROOT for p in relative_paths}


class StagingCommitter(OutputCommitter):
    """``committer="directory"`` (``partitioned=False``) or ``"partitioned"``."""

    name = "directory"

    def __init__(
        self,
        dest: str,
        *,
        partitioned: bool = False,
        buffer_dir: str | None = None,
        staging_dir: str | None = None,
        unique_filenames: bool = False,
        part_size: int = 8 << 20,
        **options: Any,
    ):
        super().__init__(dest, **options)
        if not is_s3(self.store_fs):
            raise ValueError(f"{dest}: the staging committers need an S3 destination (s3://)")
        self.partitioned = partitioned
        self.name = "partitioned" if partitioned else "directory"
        self.unique_filenames = unique_filenames
        self.part_size = part_size
        self.store = S3Store(self.store_fs)
        self.bucket, self.dest_key = self.store.split(self.dest)
        user = _user()
        self.buffer_dir = buffer_dir or os.path.join(
            tempfile.gettempdir(), f"magicfs-staging-{user}"
        )
        self.staging_dir = staging_dir or (
            "file://" + os.path.join(self.buffer_dir, self.job_id, "staging-uploads")
        )
        # Pending sets travel from tasks to the job through FileOutputCommitter v1.
        self.wrapped = FileOutputCommitter(
            self.staging_dir,
            algorithm=1,
            job_id=self.job_id,
            success_file=False,
            threads=self.threads,
        )

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """Tasks write to local disk (directories are made as needed)."""
        return TaskLocalFileSystem()

    def _operations(self) -> CommitOperations:
        return CommitOperations(self.store, self.job_id, self.stats, self.threads, self.progress)

    # -- job ------------------------------------------------------------------------------------

    def setup_job(self) -> None:
        if not self.partitioned:
            self.check_no_conflict("job setup")
        if self.success_file:
            self.store.delete_objects(self.bucket, [self._key(self.success_path)])
        _private_directory(self.buffer_dir)
        self.wrapped.setup_job()
        log.info("job %s: set up for %s (%s committer)", self.job_id, self.url, self.name)

    # -- tasks -----------------------------------------------------------------------------------

    def work_path_for(self, attempt_id: str) -> str:
        """A private local directory: tasks write plain local files."""
        return os.path.join(self.buffer_dir, self.job_id, "tasks", attempt_id)

    def setup_task(self, task: TaskAttempt) -> None:
        _private_directory(self.buffer_dir)
        os.makedirs(task.work_path, mode=0o700, exist_ok=True)
        self.wrapped.setup_task(self._wrapped_task(task))

    def needs_task_commit(self, task: TaskAttempt) -> bool:
        if not os.path.isdir(task.work_path):
            raise FileNotFoundError(
                f"task attempt {task.attempt_id}: no staging directory {task.work_path}"
            )
        return bool(self._local_files(task))

    def commit_task(self, task: TaskAttempt) -> TaskCommitMessage:
        start = time.monotonic()
        files = self._local_files(task)
        commits: list[SinglePendingCommit] = []
        try:
            if self.partitioned and self.conflict_mode == "fail":
                self._check_partitions_absent([relative for _, relative in files])
            commits = self._upload_all(task, files)
            pendingset = PendingSet(
                job_id=self.job_id,
                commits=commits,
                iostatistics=IOStatisticsSnapshot(
                    counters={"committer_task_file_count": len(commits)}
                ),
                extra_data={TASK_ATTEMPT_ID_KEY: task.attempt_id},
            )
            wrapped = self._wrapped_task(task)
            record = join(wrapped.work_path, task.task_id + PENDINGSET_SUFFIX)
            self.wrapped.store.write_bytes(record, pendingset.to_bytes())
            self._abort_superseded(task)
            self.wrapped.commit_task(wrapped)
        except BaseException:
            self._operations().abort(commits)
            self.abort_task(task)
            raise
        shutil.rmtree(task.work_path, ignore_errors=True)
        record = self._committed_record(task.task_id)
        return self.task_committed(
            task, record, len(commits), pendingset.total_bytes, start, "uploaded"
        )

    def abort_task(self, task: TaskAttempt) -> None:
        """Delete the local data; nothing was uploaded before task commit."""
        shutil.rmtree(task.work_path, ignore_errors=True)
        self.wrapped.abort_task(self._wrapped_task(task))

    def _local_files(self, task: TaskAttempt) -> list[tuple[str, str]]:
        """(local path, relative path) of every file, skipping hidden names (``_x``, ``.x``)."""
        found = []
        for root, directories, names in os.walk(task.work_path):
            directories[:] = sorted(d for d in directories if not d.startswith(("_", ".")))
            for name in sorted(names):
                if not name.startswith(("_", ".")):
                    path = os.path.join(root, name)
                    found.append((path, os.path.relpath(path, task.work_path).replace(os.sep, "/")))
        return found

    def _destination_key(self, relative: str) -> str:
        relative = add_uuid(relative, self.job_id) if self.unique_filenames else relative
        return f"{self.dest_key}/{relative}" if self.dest_key else relative

    def _upload_all(
        self, task: TaskAttempt, files: list[tuple[str, str]]
    ) -> list[SinglePendingCommit]:
        uploaded: list[SinglePendingCommit] = []

        def upload(item: tuple[str, str]) -> SinglePendingCommit:
            local, relative = item
            partition = relative.rpartition("/")[0]
            with self.stats.track("committer_upload_file"):
                return upload_pending(
                    self.store,
                    local,
                    self.bucket,
                    self._destination_key(relative),
                    part_size=self.part_size,
                    text=f"partition: {partition}" if partition else "",
                )

        with concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-staging") as pool:
            futures = [pool.submit(upload, item) for item in files]
            failure = None
            for future in futures:
                try:
                    commit = future.result()
                except BaseException as e:  # keep collecting: every upload made must be aborted
                    failure = failure or e
                    continue
                commit.job_id, commit.task_id = self.job_id, task.attempt_id
                uploaded.append(commit)
        if failure is not None:
            self._operations().abort(uploaded)
            raise failure
        return uploaded

    def _check_partitions_absent(self, relatives: list[str]) -> None:
        for partition in sorted(partitions_of(relatives) - {TABLE_ROOT}):
            path = join(self.dest, partition)
            if self.store_fs.exists(path):
                raise CommitConflictError(
                    f"{self.store_fs.unstrip_protocol(path)}: partition already exists and "
                    "conflict_mode is 'fail'"
                )

    def _wrapped_task(self, task: TaskAttempt) -> TaskAttempt:
        return self.wrapped.task_attempt(task.task_index, task.attempt_number)

    def _committed_record(self, task_id_: str) -> str:
        return join(self.wrapped.committed_task_dir(task_id_), task_id_ + PENDINGSET_SUFFIX)

    def _abort_superseded(self, task: TaskAttempt) -> None:
        """Another attempt of this task committed before: abort its uploads (last wins)."""
        try:
            previous = self._load_record(self._committed_record(task.task_id))
        except (FileNotFoundError, InvalidCommitData):
            return
        if previous.task_attempt_id != task.attempt_id:
            self._operations().abort(previous.commits)

    # -- job commit ------------------------------------------------------------------------

    def commit_job(self, messages: list[TaskCommitMessage] | None = None) -> JobSummary:
        start = time.monotonic()
        try:
            with self.stats.track("committer_commit_job"):
                pendingsets = self._load_pendingsets(messages)
                commits = validate_pendingsets(pendingsets, self.bucket, self.dest_key, self.job_id)
                if self.conflict_mode == "replace":
                    self._replace(commits)
                operations = self._operations()
                result = operations.complete_all(commits)
                try:
                    success = self._write_success(pendingsets, result, start, total_rows(messages))
                except BaseException:
                    operations.revert(result.completed)
                    raise
        except BaseException:
            self.stats.increment("committer_jobs_failed")
            self._abort_quietly()
            raise
        self.cleanup_job()
        summary = self.summarise(
            len(result.completed), result.bytes, len(pendingsets), start, success.filenames
        )
        return summary

    def _load_pendingsets(
        self, messages: list[TaskCommitMessage] | None
    ) -> list[tuple[str, PendingSet]]:
        if messages is None:
            records = [
                self._committed_record(_basename(entry["name"]))
                for entry in self.wrapped.store.children(self.wrapped.job_attempt_dir)
                if entry.get("type") == "directory"
                and not _basename(entry["name"]).startswith(("_", "."))
            ]
        else:
            records = self.check_messages(messages, self.wrapped.job_attempt_dir)
        return [(record, self._load_record(record)) for record in records]

    def _load_record(self, path: str) -> PendingSet:
        data = self.wrapped.store.read_bytes(path, PendingSet.MAX_BYTES)
        return PendingSet.from_json(data, source=self.wrapped.store.fs.unstrip_protocol(path))

    def _replace(self, commits: list[SinglePendingCommit]) -> None:
        if not self.partitioned:
            self.delete_visible_data()
            return
        prefix = f"{self.dest_key}/" if self.dest_key else ""
        partitions = {c.destination_key[len(prefix) :].rpartition("/")[0] for c in commits} - {""}
        doomed: list[str] = []
        for partition in sorted(partitions):
            with contextlib.suppress(FileNotFoundError):
                doomed.extend(self.store_fs.find(join(self.dest, partition)))
        if doomed:
            self._delete_files(doomed)
        log.info(
            "job %s: replaced %d partitions (%d files deleted)",
            self.job_id,
            len(partitions),
            len(doomed),
        )

    def _write_success(self, pendingsets, result, start: float, rows: int | None) -> SuccessData:
        success = self.success_from_pendingsets(
            pendingsets,
            result.completed,
            result.bytes,
            start,
            rows,
            f"magicfs StagingCommitter ({self.name}) for job {self.job_id}",
            **{"magicfs.staging_dir": self.staging_dir},
        )
        if self.success_file:
            self.store.put_object(self.bucket, self._key(self.success_path), success.to_bytes())
        return success

    # -- abort and clean-up ----------------------------------------------------------------

    def abort_job(self) -> None:
        """Abort every upload in the committed task records, then clean up."""
        aborted = 0
        for entry in self.wrapped.store.children(self.wrapped.job_attempt_dir):
            name = _basename(entry["name"])
            if entry.get("type") != "directory" or name.startswith(("_", ".")):
                continue
            try:
                aborted += self._operations().abort(
                    self._load_record(self._committed_record(name)).commits
                )
            except (FileNotFoundError, InvalidCommitData) as e:
                log.warning("job %s: skipping unreadable task record: %s", self.job_id, e)
        self.cleanup_job()
        log.info("job %s: aborted %d uploads (%s)", self.job_id, aborted, self.name)

    def cleanup_job(self) -> None:
        self.wrapped.cleanup_job()
        shutil.rmtree(os.path.join(self.buffer_dir, self.job_id), ignore_errors=True)

    def _abort_quietly(self) -> None:
        try:
            self.abort_job()
        except Exception as e:
            log.warning("job %s: abort after a failed commit was incomplete: %s", self.job_id, e)

    def _delete_files(self, paths: list[str]) -> None:
        self.store.delete_objects(self.bucket, [self._key(p) for p in paths])

    def _key(self, path: str) -> str:
        return self.store.split(path)[1]


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # containers without a user name
        return str(os.getuid())


def _private_directory(path: str) -> None:
    """Create ``path`` readable by this user only (staged data is the job's output)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
