"""Hadoop's classic FileOutputCommitter, algorithms v1 and v2, for any fsspec filesystem.

The baseline everyone knows, and what the benchmarks measure magicfs against. Layout::

    dest/_temporary/<app attempt>/_temporary/<task attempt id>/...   a task attempt writes
    dest/_temporary/<app attempt>/<task id>/...                      v1: a committed task

* **v1**: task commit renames the attempt directory to the committed task directory
  (O(1) on a local disk; a copy and delete of every byte on an object store); job
  commit merges every committed task directory into the destination with
  ``mergePaths`` (renaming whole directories where the destination has none), deletes
  ``_temporary`` and writes a zero-byte ``_SUCCESS``.
* **v2**: task commit merges the attempt's files straight into the destination; job
  commit only writes ``_SUCCESS``. Output is visible before the job commits and a
  failed job's committed tasks stay visible: **unsafe**, kept for comparison only.

Both follow the seed document's ``mergePaths`` pseudo-code, run by the protocol's
job-commit stages (:mod:`magicfs.protocol.job_commit`; publish = merge). Neither can
roll back: a v1 commit that fails half-way leaves the files it merged visible, as
Hadoop's does. Tasks write plain paths (``task.path(...)`` is under the attempt
directory); ``committer.fs`` is the store's own filesystem. Deliberately classic: no
records, no journal, no validation, a zero-byte ``_SUCCESS``; two jobs writing to one
destination share ``_temporary/<app attempt>`` and collide, as in Hadoop.

What they share with the other committers (:mod:`magicfs.protocol.committer`):

* a **job marker**, ``_temporary/<app attempt>/_magicfs_job-<job id>.json``, written by
  ``setup_job`` and deleted when the job ends (commit, abort, clean-up): the job is
  active while it exists, on every store (a directory cannot say so: S3 has none), so
  ``setup_job`` refuses the id of an active job;
* job commit refuses a message of another job, and a job that is not active (never
  set up, already committed or aborted: :class:`~magicfs.errors.NothingToCommitError`,
  nothing changed). Unlike the others they cannot refuse ``setup_job`` for the id of a
  job that *committed* here: Hadoop's zero-byte ``_SUCCESS`` names no job, and nothing
  else of a committed job is left.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import fsspec

from ..errors import NothingToCommitError
from ..names import CLASSIC_JOB_MARKER_PREFIX, CLASSIC_JOB_MARKER_SUFFIX, TEMPORARY
from ..paths import join
from ..protocol.attempts import Messages
from ..protocol.committer import Loaded, OutputCommitter, Published, TaskAttempt, TaskCommitMessage
from ..protocol.hooks import CommitterHooks, TaskCommit
from ..protocol.tasks import task_committed
from ..stores.local import TaskLocalFileSystem
from ..stores.rename import RenameStore
from ..task_files import TaskFile

log = logging.getLogger("magicfs.committer.classic")


class FileOutputFlow(CommitterHooks):
    """The protocol's hooks of :class:`FileOutputCommitter` (its ``flow``), built from that
    committer's keywords (its docstring says what they are)."""

    name = "file-v1"
    can_roll_back = False
    loads_named_while_ending = False  # named records are refused once the job has ended

    def __init__(self, dest: str, *, algorithm: int = 1, **options: Any):
        if algorithm not in (1, 2):
            raise ValueError(f"FileOutputCommitter algorithm must be 1 or 2, not {algorithm}")
        super().__init__(dest, **options)
        if algorithm == 2 and self.options.conflict_mode == "replace":
            raise ValueError(
                "conflict_mode 'replace' is not supported by the file-v2 committer: its tasks "
                "publish into the destination at task commit, so at job commit the job's own "
                "output cannot be told from old data, and deleting old data before the tasks "
                "run would lose it if the job failed. Use committer='file-v1', or the magic "
                "(S3) or manifest committer, which delete old data at job commit"
            )
        self.algorithm = algorithm
        self.name = f"file-v{algorithm}"
        self.store = RenameStore(self.store_fs, self.options.threads)

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The store's filesystem; on a local disk one that makes parent directories."""
        return TaskLocalFileSystem() if self.store.needs_parent_directories else self.store_fs

    @property
    def storage_options(self) -> dict[str, Any]:
        """Plain URLs of the store; on a local disk, parent directories are made as needed."""
        options = dict(self.options.store_options)
        if self.store.needs_parent_directories:
            options["auto_mkdir"] = True
        return options

    @property
    def temp_root(self) -> str:
        return join(self.dest, TEMPORARY)

    @property
    def job_attempt_dir(self) -> str:
        return join(self.temp_root, str(self.options.app_attempt))

    def task_attempt_dir(self, attempt_id: str) -> str:
        return join(self.job_attempt_dir, TEMPORARY, attempt_id)

    def committed_task_dir(self, task_id_: str) -> str:
        return join(self.job_attempt_dir, task_id_)

    # -- job ---------------------------------------------------------------------------------

    @property
    def job_marker(self) -> str:
        """``_temporary/<app attempt>/_magicfs_job-<job id>.json``: the job is active."""
        name = f"{CLASSIC_JOB_MARKER_PREFIX}{self.job_id}{CLASSIC_JOB_MARKER_SUFFIX}"
        return join(self.job_attempt_dir, name)

    def prepare_job(self, resume: bool) -> None:
        self.store.mkdirs(self.job_attempt_dir)
        if not resume:
            self.store.write_bytes(self.job_marker, self._job_marker_document())

    def job_active(self) -> bool:
        """Set up and not yet ended: its job marker exists."""
        return self.store.info(self.job_marker) is not None

    def end_job(self, check: bool = True) -> bool:
        """Delete the job marker; returns whether it was there.

        Always looked up, ``check`` or not: with no task records to load, the marker is
        what tells a job to commit from one never set up or already ended.
        """
        was_active = self.job_active()
        self.store.delete_file(self.job_marker)
        return was_active

    def claims_destination(self) -> bool:
        """v2's tasks have published before job commit: nothing left to claim."""
        return self.algorithm != 2 and super().claims_destination()

    def check_no_conflict(self, stage: str) -> None:
        """``fail`` mode; v2 checks at job setup only (see the class docstring)."""
        if self.algorithm == 2 and stage != "job setup":
            return  # its tasks have published by now: the job's own files are no conflict
        super().check_no_conflict(stage)

    def journal_keeper(self) -> None:
        """The classic committers keep no journal: a commit that dies is not resumable."""
        return None

    def records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if not was_active:
            raise NothingToCommitError(
                f"job {self.job_id}: nothing to commit at {self.url}: it was never set up, or "
                f"has already been committed or aborted (no job marker; the {self.name} "
                "committer's zero-byte _SUCCESS names no job, so which cannot be told)"
            )
        if messages is not None:
            return self._check_messages(messages, self.job_attempt_dir)
        if self.algorithm == 2:
            return []
        return [
            entry["name"]
            for entry in self.store.children(self.job_attempt_dir)
            if entry.get("type") == "directory" and not entry["name"].endswith("/" + TEMPORARY)
        ]

    def load_records(self, records: list[str], messages: Messages | None = None) -> Loaded:
        size = sum(m.bytes for m in messages or [] if m is not None)
        files = sum(m.files for m in messages or [] if m is not None)
        return Loaded(list(records), len(records), files, size)

    def delete_files(self, paths: list[str]) -> None:
        for path in paths:
            self.store.delete_file(path)

    def publish(self, loaded: Loaded) -> Published:
        """v1: merge every committed task directory (``mergePaths``); v2: already in place."""
        if self.algorithm == 2:
            return Published(loaded.files, loaded.bytes)
        files = sum(self._merge_v1(directory, self.dest) for directory in loaded.records)
        return Published(files, loaded.bytes)

    def unpublish(self, loaded: Loaded) -> int:
        return 0  # can_roll_back is False: merged files stay (as in Hadoop)

    def save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        self.stats.increment("committer_files_committed", published.files)
        if self.options.success_file:
            self.store.write_bytes(
                self.options.success_path, b""
            )  # zero bytes, as Hadoop writes it
        return []

    def clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        if published is None:
            self.store.delete_tree(self.job_attempt_dir)
        self.store.delete_tree(self.temp_root)

    # -- tasks ---------------------------------------------------------------------------------

    def work_path_for(self, attempt_id: str) -> str:
        return self.task_attempt_dir(attempt_id)

    def prepare_task(self, task: TaskAttempt) -> None:
        """Nothing on object stores; the attempt directory on a local disk."""
        self.store.mkdirs(task.work_path)

    def needs_task_commit(self, task: TaskAttempt) -> bool:
        return cast(bool, self.store.fs.exists(task.work_path))

    def commit_task_files(
        self, commit: TaskCommit, files_known: list[TaskFile]
    ) -> TaskCommitMessage:
        task = commit.task
        start = time.monotonic()
        found = self.store.scan(task.work_path)
        files = [i for i in found.values() if i.get("type") != "directory"]
        committed = self.committed_task_dir(task.task_id)
        with self.stats.track("committer_commit_task"):
            if found or self.store.fs.exists(task.work_path):
                if self.algorithm == 1:
                    self.store.delete_tree(committed)
                    self.store.rename_dir(task.work_path, committed)
                else:
                    self._merge_v2(task.work_path, self.dest)
                    self.store.delete_tree(task.work_path)
        size = sum(int(i.get("size") or 0) for i in files)
        return task_committed(self, task, committed, len(files), size, start, "committed")

    def abort_task_files(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        self.store.delete_tree(task.work_path)

    # -- mergePaths (seed document, "The FileOutputCommitter") ------------------------------

    def _merge_v1(self, source: str, dest: str) -> int:
        """Merge ``source`` into ``dest``; returns the number of files moved."""
        target = self.store.info(dest)
        source_info = self.store.info(source)
        if source_info is None:
            return 0
        if source_info.get("type") != "directory":
            if target is not None:
                self._delete(dest, target)
            self.store.rename(source, dest)
            return 1
        if target is not None and target.get("type") == "directory":
            return sum(
                self._merge_v1(child["name"], join(dest, _name(child)))
                for child in self.store.children(source)
            )
        if target is not None:
            self._delete(dest, target)
        return self.store.rename_dir(source, dest)

    def _merge_v2(self, source: str, dest: str) -> int:
        """v2: recurse down the source tree and rename every file into ``dest``."""
        source_info = self.store.info(source)
        if source_info is None:
            return 0
        target = self.store.info(dest)
        if source_info.get("type") != "directory":
            if target is not None:
                self._delete(dest, target)
            self.store.rename(source, dest)
            return 1
        if target is not None and target.get("type") != "directory":
            self._delete(dest, target)
        self.store.mkdirs(dest)
        return sum(
            self._merge_v2(child["name"], join(dest, _name(child)))
            for child in self.store.children(source)
        )

    def _delete(self, path: str, info: dict[str, Any]) -> None:
        if info.get("type") == "directory":
            self.store.delete_tree(path)
        else:
            self.store.delete_file(path)


class FileOutputCommitter(OutputCommitter):
    """``committer="file-v1"`` (``algorithm=1``) or ``"file-v2"`` (``algorithm=2``).

    Conflict modes: v1 keeps the shared rules (``fail`` checked at job setup and again at
    job commit, ``replace`` deletes the old data at job commit), as nothing of the job is
    visible before its commit. v2 publishes every task's files at *task* commit, so by
    job commit the job's own output cannot be told from old data:

    * ``fail`` is checked at job setup only, before any task publishes (data that
      appears in the destination later is not detected);
    * ``replace`` is refused (``ValueError`` when the committer is made): old data could
      only be deleted before the tasks run, and a failed job would then have lost it.
      Use ``file-v1``, or the ``magic`` (S3) or ``manifest`` committer, which delete it
      at job commit.
    """

    name = "file-v1"
    flow_class = FileOutputFlow
    flow: FileOutputFlow


def _name(entry: dict[str, Any]) -> str:
    name: str = entry["name"]
    return name.rstrip("/").rsplit("/", 1)[-1]
