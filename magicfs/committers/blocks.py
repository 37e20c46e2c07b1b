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
  active. A file opened and never closed, or written around magicfs, refuses the commit.
* ``commit_job`` (the base class's stages): end the job, load and validate every named
  pendingset before anything is published, journal, apply the conflict mode, publish
  every blob ``threads`` at a time, write ``_SUCCESS``, delete the job's tree.

**Abort.** Azure has no request that deletes staged blocks on their own (no "abort
upload"). An aborted or superseded attempt's blocks stay invisible — reads answer
``BlobNotFound``, listings skip them — until the next publish of the same name discards
them, or Azure does after 7 days. Publishing a blob discards every other attempt's
blocks staged on it, so after a commit only the blobs no attempt published keep staged
blocks. ``magicfs uploads list`` shows those (README "Azure: block lists").
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..errors import CommitFailedError, InvalidCommitData, JobNotActiveError, NothingToCommitError
from ..filesystems import MagicFileSystem
from ..layouts.magic import MagicJobLayout
from ..names import PENDING_SUFFIX, PENDINGSET_SUFFIX
from ..paths import final_destination, is_deferred_write
from ..protocol.attempts import Messages
from ..protocol.committer import Loaded, OutputCommitter, Published, TaskAttempt, TaskCommitMessage
from ..protocol.journal import JournalKeeper
from ..records import (
    MAX_FILENAMES,
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
)
from ..stores.azure.blocks import BlockStore
from ..stores.capabilities import has_block_lists
from ..stores.rename import RenameStore
from ..task_files import TaskFile

log = logging.getLogger("magicfs.committer.block_list")

T = TypeVar("T")


class BlockListCommitter(OutputCommitter):
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
        self.records = RenameStore(self.store_fs, self.threads)
        self.container, self.dest_blob = self.blocks.split(self.dest)
        self.block_size = block_size
        self.blocks_in_flight = blocks_in_flight
        self._fs = MagicFileSystem(
            fs=self.store_fs,
            block_lists=True,
            part_size=block_size,
            parts_in_flight=blocks_in_flight,
        )

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    @property
    def storage_options(self) -> dict[str, Any]:
        magic = {
            "block_lists": True,
            "part_size": self.block_size,
            "parts_in_flight": self.blocks_in_flight,
        }
        return {"magic": magic, self.protocol: dict(self.store_options)}

    def work_url_for(self, attempt_id: str) -> str:
        url: str = self.store_fs.unstrip_protocol(self.work_path_for(attempt_id))
        return "magic::" + url

    def work_path_for(self, attempt_id: str) -> str:
        return self.layout.work_path(attempt_id)

    def _display(self, path: str) -> str:
        return self.blocks.url(path)

    # -- job --------------------------------------------------------------------------------

    def _setup_job(self, resume: bool) -> None:
        if not resume:
            self.blocks.write(self.layout.job_marker, self.job_marker_document())

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
        self.require_active_job(task)
        self.blocks.write(
            self.layout.started_marker(task.attempt_id), task.attempt_id.encode()
        )

    def _commit_task(self, task: TaskAttempt, files: list[TaskFile]) -> TaskCommitMessage:
        start = time.monotonic()
        try:
            if self.records.info(self.layout.started_marker(task.attempt_id)) is None:
                raise self.not_started_error(task)
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
        attempt_record = self.layout.attempt_pendingset(task.attempt_id)
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
        return self.task_committed(
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
        stats = IOStatisticsSnapshot()
        seen: dict[str, str] = {}
        for commit in commits:
            source = commit.filename or "?"
            self._check_commit(commit, source)
            if commit.destination in seen:
                raise InvalidCommitData(
                    source,
                    "destinationKey",
                    f"{commit.destination} is also written by {seen[commit.destination]} "
                    "in the same task attempt",
                )
            seen[commit.destination] = source
            commit.job_id = self.job_id
            commit.task_id = task.attempt_id
            stats.aggregate(commit.iostatistics)
            commit.iostatistics = IOStatisticsSnapshot()
        stats.counters["committer_task_file_count"] = len(commits)
        return commits, stats

    def _load_pending(self, path: str) -> SinglePendingCommit:
        with self.stats.track("committer_load_single_pending_file"):
            data = self.records.read_bytes(path, SinglePendingCommit.MAX_BYTES)
        return SinglePendingCommit.from_json(data, source=self._display(path))

    def _check_commit(self, commit: SinglePendingCommit, source: str) -> None:
        """A record must be a block list of this store, land inside the destination where
        its own magic path says, and name only blocks of its own writer."""
        if not commit.is_block_list:
            raise InvalidCommitData(
                source,
                "extraData",
                "not an Azure block-list record (magicfs.store is not azure-block-list)",
            )
        commit.check_destination(self.container, self.dest_blob, source)
        own = "/".join(self.blocks.split(commit.filename or "")).removesuffix(PENDING_SUFFIX)
        if own and is_deferred_write(own) and final_destination(own) != commit.destination:
            raise InvalidCommitData(
                source,
                "destinationKey",
                f"{commit.destination} is not where a file written at {own} belongs "
                f"({final_destination(own)})",
            )
        lengths = {len(block) for block in commit.etags}
        if len(lengths) > 1 or any(not b.startswith(commit.upload_id) for b in commit.etags):
            raise InvalidCommitData(
                source,
                "etags",
                f"block ids must all start with the writer's uploadId {commit.upload_id!r} and "
                "have one length (Azure refuses a list of mixed lengths)",
            )

    def _abort_task(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Delete the attempt's directory and records: its blocks are never published."""
        self.records.delete_tree(self.layout.task_attempt_dir(task.attempt_id))
        self.records.delete_file(self.layout.attempt_pendingset(task.attempt_id))
        self.records.delete_file(self.layout.started_marker(task.attempt_id))
        task_record = self.layout.pendingset(task.task_id)
        if self._recorded_attempt(task_record) == task.attempt_id:
            self.records.delete_file(task_record)
        log.info("task %s: aborted", task.attempt_id)

    def _recorded_attempt(self, path: str) -> str | None:
        try:
            data = self.records.read_bytes(path, PendingSet.MAX_BYTES)
            return PendingSet.from_json(data, source=path).extra_data.get(TASK_ATTEMPT_ID_KEY)
        except (FileNotFoundError, ValueError):
            return None

    # -- job commit: the hooks of the base class's stages ------------------------------------

    def _records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if messages is not None:
            return self.check_messages(messages, self.layout.tasks_dir)
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

    def _load(self, records: list[str], messages: Messages | None = None) -> Loaded:
        def load(path: str) -> tuple[str, PendingSet]:
            source = self._display(path)
            try:
                data = self.records.read_bytes(path, PendingSet.MAX_BYTES)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"job {self.job_id}: task record {source} is missing (already committed "
                    "or aborted?)"
                ) from None
            return source, PendingSet.from_json(data, source=source)

        with self.stats.track("committer_load_pendingsets"):
            loaded = self._parallel(load, records)
        commits = [(source, i, c) for source, ps in loaded for i, c in enumerate(ps.commits)]
        statistics = IOStatisticsSnapshot()
        for _, pendingset in loaded:
            statistics.aggregate(pendingset.iostatistics)
        return Loaded(
            list(records),
            len(loaded),
            len(commits),
            sum(c.length for _, _, c in commits),
            payload=(loaded, commits),
            iostatistics=statistics,
        )

    def _validate(self, loaded: Loaded) -> None:
        pendingsets, commits = loaded.payload
        for source, pendingset in pendingsets:
            if pendingset.job_id and pendingset.job_id != self.job_id:
                raise InvalidCommitData(
                    source,
                    "jobId",
                    f"Mismatch in Job ID: the record is for job {pendingset.job_id}, this is "
                    f"job {self.job_id}",
                )
        seen: dict[str, str] = {}
        for source, index, commit in commits:
            try:
                self._check_commit(commit, source)
            except InvalidCommitData as e:
                raise InvalidCommitData(source, f"commits[{index}].{e.field}", e.problem) from None
            if commit.destination in seen:
                raise InvalidCommitData(
                    source,
                    f"commits[{index}].destinationKey",
                    f"{commit.destination} is also written by {seen[commit.destination]}: two "
                    "tasks write the same file",
                )
            seen[commit.destination] = source

    def _delete_files(self, paths: list[str]) -> None:
        self._parallel(self.records.delete_file, paths)

    def _publish(self, loaded: Loaded) -> Published:
        _, commits = loaded.payload

        def publish(commit: SinglePendingCommit) -> None:
            with self.stats.track("committer_commit_block_list"):
                try:
                    self.blocks.run(
                        self.blocks.publish(commit.bucket, commit.destination_key, commit.etags)
                    )
                except Exception as error:
                    if getattr(error, "error_code", None) != "InvalidBlockList":
                        raise
                    if not self._already_published(commit):
                        raise CommitFailedError(
                            f"job {self.job_id}: publishing {self._display(commit.destination)} "
                            "failed: InvalidBlockList: its blocks are gone (published over by "
                            "another writer of that name, or expired after 7 days)"
                        ) from error

        self._parallel(publish, [c for _, _, c in commits])
        self.stats.increment("committer_files_committed", loaded.files)
        names = sorted("/" + c.destination.partition("/")[2] for _, _, c in commits)
        return Published(loaded.files, loaded.bytes, names[:MAX_FILENAMES])

    def _already_published(self, commit: SinglePendingCommit) -> bool:
        """A retried publish whose list the blob already holds (the first reply was lost)."""
        ids = self.blocks.run(self.blocks.committed_ids(commit.bucket, commit.destination_key))
        return ids == commit.etags

    def _unpublish(self, loaded: Loaded) -> int:
        _, commits = loaded.payload

        def unpublish(commit: SinglePendingCommit) -> bool:
            if not self._already_published(commit):
                return False
            return self.blocks.run(self.blocks.delete(commit.bucket, commit.destination_key))

        return sum(self._parallel(unpublish, [c for _, _, c in commits]))

    def _save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        self.stats.increment("committer_tasks_completed", loaded.tasks)
        statistics = self.stats.snapshot()
        statistics.aggregate(loaded.iostatistics)
        success = SuccessData(
            committer=self.name,
            description=f"magicfs {type(self).__name__} for job {self.job_id}",
            job_id=self.job_id,
            job_id_source=self.job_id_source,
            metrics=self.metrics(published.files, published.bytes, loaded.tasks, start, rows),
            diagnostics=self.diagnostics(**{"magicfs.store": "azure-block-list"}),
            iostatistics=statistics,
        )
        for name in published.filenames:
            success.add_filename(name)
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
            self._parallel(self.records.delete_file, [p for p in files if p not in journal])
            for path in journal:  # the journal last: until it goes, a crash can resume
                self.records.delete_file(path)
            self.records.delete_tree(self.layout.magic_dir)

    # -- helpers --------------------------------------------------------------------------

    def _parallel(self, call: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        with concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-blocks") as pool:
            return list(pool.map(call, items))
