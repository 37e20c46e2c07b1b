"""The block-list committer: zero-copy job commit on Azure Blob.

S3's magic committer on Azure's primitive (:mod:`magicfs.stores.azure`): a task's files
are blocks staged on their *final* blobs, invisible until job commit publishes each
with one Put Block List. No byte is copied or renamed, so job commit costs one request
per file whatever its size (the manifest committer's Azure rename is a server-side copy
plus a delete: O(bytes)). Layout and records are the magic committer's
(:mod:`magicfs.layouts.magic`; ``.pending`` / ``.pendingset``, whose ``etags`` are the
ordered block ids and ``extraData["magicfs.store"]`` is ``azure-block-list``).

* ``setup_job``: delete an old ``_SUCCESS`` as the conflict mode says, write the job marker.
* tasks write through ``committer.fs`` under ``task.path(...)``
  (:mod:`magicfs.filesystems.block_view`).
* ``commit_task``: list the attempt's directory, load its ``.pending`` files (or take
  this process's), check each, save one ``.pendingset`` as ``tasks/<attempt>.pendingset``
  (the message names it) and ``<task id>.pendingset``; then check the job is still
  active, and delete the attempt's markers and ``.pending`` files (as Hadoop's magic
  committer deletes the attempt directory; a second commit of the attempt returns its
  saved record). A file opened and never closed, or written around magicfs, refuses the
  commit.
* ``commit_job``: the base class's stages, and the pendingset job commit the S3
  committers run (:mod:`.pendingsets`: streamed through a local spool, validated before
  anything is published, published ``threads`` at a time, rolled back on failure) over
  Azure's deferred-write backend (:mod:`magicfs.stores.azure.deferred`); then
  ``_SUCCESS`` and the job's tree deleted, journal last.

**Abort.** Azure has no request that deletes staged blocks on their own (no "abort
upload"). An aborted or superseded attempt's blocks stay invisible — reads answer
``BlobNotFound``, listings skip them — until the next publish of the same name discards
them, or Azure does after 7 days. Publishing a blob discards every other attempt's
blocks staged on it, so after a commit only the blobs no attempt published keep staged
blocks. ``magicfs uploads list`` shows those (README "Azure: block lists").
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import CommitFailedError, JobNotActiveError, NothingToCommitError
from ..filesystems import MagicFileSystem
from ..filesystems.magic import MagicOptions
from ..layouts.magic import MagicJobLayout
from ..names import PENDING_SUFFIX, PENDINGSET_SUFFIX
from ..paths import is_deferred_write
from ..protocol.attempts import Messages
from ..protocol.committer import Loaded, Published, TaskAttempt, TaskCommitMessage
from ..protocol.journal import JournalKeeper
from ..records import (
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
)
from ..stores.azure.blocks import BlockStore
from ..stores.azure.deferred import BlockListDeferred
from ..stores.capabilities import has_block_lists
from ..stores.rename import RenameStore
from ..task_files import TaskFile
from .pendingsets import PendingsetCommitter

log = logging.getLogger("magicfs.committer.block_list")


class BlockListCommitter(PendingsetCommitter):
    """Zero-copy commit on Azure Blob (adlfs ``abfs://``/``az://``) through block lists.

    Options beyond :class:`OutputCommitter`'s: ``block_size`` (8 MiB) and
    ``blocks_in_flight`` (4) of the task writers.
    """

    name = "block-list"

    def __init__(
        self,
        dest: str,
        *,
        block_size: int = 8 << 20,
        blocks_in_flight: int = 4,
        **options: Any,
    ):
        super().__init__(dest, **options)
        if not has_block_lists(self.store_fs):
            raise ValueError(
                f"{dest}: the block-list committer needs an Azure Blob destination "
                "(abfs:// or az://, through adlfs)"
            )
        self.layout = MagicJobLayout(self.dest, self.job_id, self.app_attempt)
        self.blocks = BlockStore(self.store_fs)
        self.deferred = BlockListDeferred(self.blocks)
        self.records = RenameStore(self.store_fs, self.threads)
        self.bucket, self.dest_key = self.blocks.split(self.dest)
        self.block_size = block_size
        self.blocks_in_flight = blocks_in_flight
        self._fs = MagicFileSystem(
            fs=self.store_fs,
            block_lists=True,
            part_size=block_size,
            parts_in_flight=blocks_in_flight,
            job_root=self.dest,
        )

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    @property
    def storage_options(self) -> dict[str, Any]:
        magic = MagicOptions(
            {
                "block_lists": True,
                "part_size": self.block_size,
                "parts_in_flight": self.blocks_in_flight,
                "job_root": self.dest,
            }
        )
        return {"magic": magic, self.protocol: dict(self.store_options)}

    def work_url_for(self, attempt_id: str) -> str:
        url: str = self.store_fs.unstrip_protocol(self.work_path_for(attempt_id))
        return "magic::" + url

    def work_path_for(self, attempt_id: str) -> str:
        return self.layout.work_path(attempt_id)

    # -- job --------------------------------------------------------------------------------

    def _setup_job(self, resume: bool) -> None:
        if not resume:
            self.blocks.write(self.layout.job_marker, self._job_marker_document())

    def job_active(self) -> bool:
        return self.records.info(self.layout.job_marker) is not None

    def _end_job(self, check: bool = True) -> bool:
        was_active = self.job_active() if check else False
        self.records.delete_file(self.layout.job_marker)
        return was_active

    def _journal(self) -> JournalKeeper:
        return JournalKeeper(self.blocks, self.layout.magic_dir, self.dest, self.job_id)

    # -- tasks ------------------------------------------------------------------------------

    def _setup_task(self, task: TaskAttempt) -> None:
        self._require_active_job(task)
        self.blocks.write(self.layout.started_marker(task.attempt_id), task.attempt_id.encode())

    def _commit_task(self, task: TaskAttempt, files: list[TaskFile]) -> TaskCommitMessage:
        start = time.monotonic()
        attempt_record = self.layout.attempt_pendingset(task.attempt_id)
        try:
            if self.records.info(self.layout.started_marker(task.attempt_id)) is None:
                raise self._not_started_error(task)
            saved = self._saved_pendingset(attempt_record)
            if saved is not None:  # committed before: its files' records are gone
                return self._task_committed(
                    task, attempt_record, len(saved.commits), saved.total_bytes, start, "kept"
                )
            commits, stats = self._gather_task_commits(task, files)
        except BaseException:
            self.abort_task(task)
            raise
        pendingset = PendingSet(
            job_id=self.job_id,
            commits=commits,
            iostatistics=stats,
            extra_data={TASK_ATTEMPT_ID_KEY: task.attempt_id},
        )
        try:
            data = pendingset.to_bytes()
            for path in (attempt_record, self.layout.pendingset(task.task_id)):
                self.blocks.write(path, data)
            if not self.job_active():
                raise JobNotActiveError(
                    f"job {self.job_id} ended before task attempt {task.attempt_id} committed; "
                    "its files will never be published"
                )
        except BaseException:
            self.abort_task(task)
            raise
        self._drop_file_records(task)
        return self._task_committed(
            task, attempt_record, len(commits), pendingset.total_bytes, start, "committed"
        )

    def _gather_task_commits(
        self, task: TaskAttempt, files: list[TaskFile]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """The attempt's commits: this process's, or loaded from its ``.pending`` files."""
        attempt_dir = self.layout.task_attempt_dir(task.attempt_id)
        found = self.records.scan(attempt_dir)
        listing = sorted(p for p, info in found.items() if info.get("type") != "directory")
        markers = [p for p in listing if is_deferred_write(p)]
        pendings = {p.removesuffix(PENDING_SUFFIX) for p in listing if p.endswith(PENDING_SUFFIX)}
        known = {f.path: f.commit for f in files if f.commit is not None}
        unaccounted = [m for m in markers if m not in pendings and m not in known]
        if unaccounted:
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(unaccounted)} files were opened but not "
                f"closed successfully, or written around magicfs, e.g. "
                f"{self._display(unaccounted[0])}: they would never be committed. Write task "
                "files with committer.fs (job.fs) and close each before committing the task "
                "(the attempt has been aborted)"
            )
        for orphan in sorted(pendings - set(markers)):  # records of deleted files
            self.records.delete_file(orphan + PENDING_SUFFIX)
        commits = [
            known.get(m) or self._load_pending(m + PENDING_SUFFIX)
            for m in markers
            if m in known or m in pendings
        ]
        stats = self._checked_task_commits(task, commits, [c.filename or "?" for c in commits])
        return commits, stats

    def _saved_pendingset(self, path: str) -> PendingSet | None:
        data = self.records.read(path, PendingSet.MAX_BYTES)
        return None if data is None else PendingSet.from_json(data, source=self._display(path))

    def _drop_file_records(self, task: TaskAttempt) -> None:
        """Delete the committed attempt's markers and ``.pending`` files, as Hadoop's
        magic committer deletes the attempt directory at task commit.

        The pendingset now holds every commit; nothing needs the per-file records (on
        Azure no upload is left to sweep by them), and deleting them here, in parallel
        task commits, keeps the job commit at one request per file. A second commit of
        the attempt returns its saved pendingset. Failures are left for the job's clean-up.
        """
        attempt_dir = self.layout.task_attempt_dir(task.attempt_id)
        try:
            found = self.records.scan(attempt_dir)
            files = [p for p, info in found.items() if info.get("type") != "directory"]
            self.blocks.run(self.blocks.delete_many(files))
        except Exception as error:
            log.warning(
                "task %s: its file records stay until job clean-up: %s", task.attempt_id, error
            )

    def _load_pending(self, path: str) -> SinglePendingCommit:
        with self.stats.track("committer_load_single_pending_file"):
            data = self.records.read_bytes(path, SinglePendingCommit.MAX_BYTES)
        return SinglePendingCommit.from_json(data, source=self._display(path))

    def _abort_task(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Delete the attempt's directory and records: its blocks are never published."""
        self.records.delete_tree(self.layout.task_attempt_dir(task.attempt_id))
        self.records.delete_file(self.layout.attempt_pendingset(task.attempt_id))
        self.records.delete_file(self.layout.started_marker(task.attempt_id))
        task_record = self.layout.pendingset(task.task_id)
        if self._recorded_attempt(task_record) == task.attempt_id:
            self.records.delete_file(task_record)
        log.info("task %s: aborted", task.attempt_id)

    # -- job commit: the hooks of the base class's stages ------------------------------------

    def _records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if messages is not None:
            return self._check_messages(messages, self.layout.tasks_dir)
        records = [
            p
            for p in self.records.list_names(self.layout.job_attempt_dir)
            if p.endswith(PENDINGSET_SUFFIX)
        ]
        if not was_active and (not records or self._success_names_this_job()):
            if self._success_names_this_job():
                state = "it has already been committed (its _SUCCESS names it)"
            else:
                state = "it was never set up, or has already been committed or aborted"
            raise NothingToCommitError(
                f"job {self.job_id}: nothing to commit at {self.url}: {state}"
            )
        return records

    def _read_record(self, path: str) -> bytes:
        return self.records.read_bytes(path, PendingSet.MAX_BYTES)

    def _delete_files(self, paths: list[str]) -> None:
        self.blocks.run(self.blocks.delete_many(paths))

    def _save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        success = self._success_data(
            loaded,
            published,
            start,
            rows,
            f"magicfs {type(self).__name__} for job {self.job_id}",
            **{"magicfs.store": "azure-block-list"},
        )
        if self.success_file:
            self.blocks.write(self.success_path, success.to_bytes())
        return success.filenames

    def _clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """Delete the job's tree, journal last (blocks left staged expire: module docstring)."""
        with self.stats.track("committer_cleanup"):
            keeper = self._journal()
            journal = keeper.all_paths(keeper.read())
            found = self.records.scan(self.layout.magic_dir)
            files = [p for p, i in found.items() if i.get("type") != "directory"]
            self.blocks.run(self.blocks.delete_many([p for p in files if p not in journal]))
            for path in journal:  # the journal last: until it goes, a crash can resume
                self.records.delete_file(path)
            self.records.delete_tree(self.layout.magic_dir)
