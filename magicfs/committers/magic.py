"""The magic committer: task output streams to S3 as uploads that only job commit completes.

Layout: see :mod:`magicfs.layouts.magic`. One job, start to end (the stages are the base
class's, :mod:`magicfs.protocol.committer`):

* ``setup_job``: check the conflict mode, delete an old ``_SUCCESS``, write the job
  marker (from now on the job accepts writers).
* tasks write through ``committer.fs`` under ``task.path(...)`` (deferred uploads, each
  recorded by an intent marker and, once closed, a ``.pending``: :mod:`magicfs.stores.s3.writer`).
* ``commit_task``: list the attempt's directory (one paged listing), load and validate
  its ``.pending`` files (one GET each; in ``in_memory`` mode the commits come from this
  process), save them as one ``.pendingset`` twice: as ``tasks/<attempt>.pendingset``
  (this exact attempt; the task commit message names it) and as
  ``<task id>.pendingset`` (the last committed attempt of the task wins, HADOOP-17258;
  job commit without messages reads these). Then check that the job is still active.
  Refused, with the attempt aborted, when a file is still open, was opened but never
  closed, or was written *around* magicfs (a plain object at a task path).
* ``commit_job``: end the job (delete the marker), load the pendingsets named by the
  messages (or listed), validate all of them before anything is completed, save the
  journal, apply the conflict mode, complete every upload in parallel, write
  ``_SUCCESS``, clean up.
* clean-up (after commit or abort): list the job's tree once and sweep the uploads on
  the keys its markers name (:func:`magicfs.stores.s3.sweep.sweep_job`): everything not
  committed is aborted — failed, superseded, speculative and unreported attempts,
  killed writers, lost-reply duplicates. Then delete the tree, journal last.

Decision (differs from Hadoop, which deletes the attempt directory at task commit):
the attempt directory stays until the job ends. It costs nothing extra (the job's
clean-up deletes it in the same batches) and its markers are what let the job find
every upload of attempts Spark never reported (its ``abort(messages)`` sees ``None``
for them). Committing the same attempt twice is therefore harmless.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any

from ..errors import CommitFailedError, InvalidCommitData, JobNotActiveError, NothingToCommitError
from ..filesystems import MagicFileSystem
from ..filesystems.magic import MagicOptions
from ..layouts.magic import MagicJobLayout
from ..names import JOURNAL_FILE, PENDING_SUFFIX, PENDINGSET_SUFFIX, STARTED_SUFFIX
from ..paths import is_deferred_write
from ..progress import batches
from ..protocol.attempts import Messages
from ..protocol.committer import Loaded, Published, TaskAttempt, TaskCommitMessage, elapsed
from ..protocol.journal import JournalKeeper
from ..records import TASK_ATTEMPT_ID_KEY, IOStatisticsSnapshot, PendingSet, SinglePendingCommit
from ..stores.capabilities import is_s3
from ..stores.s3.checksums import DEFAULT_ALGORITHM as DEFAULT_CHECKSUM
from ..stores.s3.checksums import checked_algorithm
from ..stores.s3.store import DELETE_BATCH, PendingUpload, iterate
from ..stores.s3.sweep import (
    abort_uploads,
    load_pending,
    recorded_ids,
    release_command,
    sweep_job,
    tree_keys,
    uploads_of,
)
from ..stores.s3.tracking import is_magicfs_marker
from ..stores.spool import KeySet, OrderedPaths
from ..stores.validation import check_commit
from ..task_files import TaskFile
from .pendingsets import S3PendingsetCommitter

log = logging.getLogger("magicfs.committer.magic")


class MagicCommitter(S3PendingsetCommitter):
    """Hadoop's S3A magic committer for fsspec: zero-rename commit on S3.

    Options beyond :class:`OutputCommitter`'s: ``in_memory`` (writers keep commit data
    in the task's process: fewer requests, but task commit must run in the process
    that wrote the files; see :mod:`magicfs.stores.s3.tracking`); ``retry_policy`` (how every
    S3 call is retried: :mod:`magicfs.stores.s3.retry`); ``checksum`` (``"CRC32"``: the
    writers' part checksums, verified at job commit; ``None``: none declared or recorded
    (a store that refuses checksum headers also needs ``request_checksum_calculation=
    "when_required"``): :mod:`magicfs.stores.s3.checksums`).
    """

    name = "magic"

    def __init__(
        self,
        dest: str,
        *,
        in_memory: bool = False,
        checksum: str | None = DEFAULT_CHECKSUM,
        **options: Any,
    ):
        super().__init__(dest, **options)
        if not is_s3(self.store_fs):
            raise ValueError(f"{dest}: the magic committer needs an S3 destination (s3://)")
        self.in_memory = in_memory
        self.checksum = checked_algorithm(checksum)
        self.layout = MagicJobLayout(self.dest, self.job_id, self.app_attempt)
        self._fs = MagicFileSystem(
            fs=self.store_fs,
            in_memory=in_memory,
            retry_policy=self.retry_policy,
            checksum=self.checksum,
            job_root=self.dest,  # writes to the destination outside task paths: refused
        )

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    @property
    def storage_options(self) -> dict[str, Any]:
        magic = MagicOptions(job_root=self.dest)
        if self.in_memory:
            magic["in_memory"] = True
        if self.checksum != DEFAULT_CHECKSUM:
            magic["checksum"] = self.checksum
        return {"magic": magic, self.protocol: dict(self.store_options)}

    def work_url_for(self, attempt_id: str) -> str:
        url: str = self.store_fs.unstrip_protocol(self.work_path_for(attempt_id))
        return "magic::" + url

    # -- job setup ----------------------------------------------------------------------------

    def _setup_job(self, resume: bool) -> None:
        if not resume:
            self._put(self.layout.job_marker, self._job_marker_document())

    def job_active(self) -> bool:
        return (
            self.store.run(self.store.ahead_object(self.bucket, self._key(self.layout.job_marker)))
            is not None
        )

    def _end_job(self, check: bool = True) -> bool:
        """Delete the job marker: from now on writers and task commits of this job fail."""
        was_active = self.job_active() if check else False
        self.store.run(self.store.adelete_object(self.bucket, self._key(self.layout.job_marker)))
        return was_active

    def _journal(self) -> JournalKeeper:
        return JournalKeeper(self.store, self.layout.magic_dir, self.dest, self.job_id)

    # -- tasks --------------------------------------------------------------------------------

    def work_path_for(self, attempt_id: str) -> str:
        return self.layout.work_path(attempt_id)

    def _setup_task(self, task: TaskAttempt) -> None:
        self._require_active_job(task)
        self._put(self.layout.started_marker(task.attempt_id), task.attempt_id.encode())

    def _check_started(
        self, task: TaskAttempt, started: concurrent.futures.Future[dict[str, Any]]
    ) -> None:
        """A task attempt commits only if it was set up and has not been aborted."""
        try:
            started.result()
        except FileNotFoundError:
            raise self._not_started_error(task) from None

    def _commit_task(self, task: TaskAttempt, files: list[TaskFile]) -> TaskCommitMessage:
        start = time.monotonic()
        started = self.store.run_background(
            self.store.acall(
                "head_object",
                Bucket=self.bucket,
                Key=self._key(self.layout.started_marker(task.attempt_id)),
            )
        )
        try:
            # The started check runs alongside the listing: one round trip, not two.
            try:
                commits, stats = self._gather_task_commits(task, files)
            except BaseException:
                self._check_started(task, started)  # "never set up / aborted" explains it best
                raise
            self._check_started(task, started)
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
            saves = [
                self.store.run_background(
                    self.store.aput_object(self.bucket, self._key(path), data)
                )
                for path in (attempt_record, self.layout.pendingset(task.task_id))
            ]
            for save in saves:
                save.result()
            if not self.job_active():
                raise JobNotActiveError(
                    f"job {self.job_id} ended before task attempt {task.attempt_id} committed; "
                    "its uploads have been aborted"
                )
        except BaseException:
            self._operations().abort(commits)
            self.abort_task(task)
            raise
        return self._task_committed(
            task, attempt_record, len(commits), pendingset.total_bytes, start, "committed"
        )

    def _gather_task_commits(
        self, task: TaskAttempt, files: list[TaskFile]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """Load and validate the attempt's commits (this process's, or its ``.pending`` files)."""
        listing = self._find(self.layout.task_attempt_dir(task.attempt_id))
        markers = [p for p in listing if is_deferred_write(p)]
        pendings = {p.removesuffix(PENDING_SUFFIX) for p in listing if p.endswith(PENDING_SUFFIX)}
        # Files this process wrote: their commits are known here, nothing to read back.
        known = {f.path: f.commit for f in files if f.commit is not None}
        if self.in_memory:
            self._refuse_unaccounted(task, [m for m in markers if m not in known], "in_memory")
        else:
            orphans = sorted(pendings - set(markers))
            if orphans:  # records of files deleted or replaced: their uploads must go
                self._discard_records([p + PENDING_SUFFIX for p in orphans])
            unaccounted = [m for m in markers if m not in pendings and m not in known]
            self._refuse_unaccounted(task, unaccounted, "file")
        elsewhere = [m for m in markers if m not in known]
        loaded = dict(
            zip(
                elsewhere, self._load_pendings([m + PENDING_SUFFIX for m in elsewhere]), strict=True
            )
        )
        commits = [known.get(m) or loaded[m] for m in markers]
        sources = {
            id(c): c.filename or f"s3://{m}.pending" for m, c in zip(markers, commits, strict=True)
        }
        for marker in known.keys() - set(markers):  # written here, but its marker is gone
            self._operations().abort([known[marker]])
        stats = self._checked_task_commits(task, commits, [sources[id(c)] for c in commits])
        return commits, stats

    def _refuse_unaccounted(self, task: TaskAttempt, markers: list[str], mode: str) -> None:
        """Files of the attempt that cannot be committed: say exactly why (one HEAD each)."""
        if not markers:
            return
        heads = {
            m: self.store.run_background(self.store.acall("head_object", **self._location(m)))
            for m in markers
        }
        around, unclosed = [], []
        for marker, head in heads.items():
            try:
                response = head.result()
            except FileNotFoundError:
                continue  # deleted meanwhile
            if not is_magicfs_marker(response.get("Metadata")):
                around.append((marker, response.get("ContentLength", 0)))
            else:
                unclosed.append(marker)
        if around:
            marker, size = around[0]
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(around)} files were written directly to "
                f"the store, around magicfs, e.g. s3://{marker} (a plain {size}-byte object, "
                "no deferred upload): they would never be committed. Write task files with "
                "committer.fs (job.fs), or open task.url(...) with committer.storage_options "
                "(the attempt has been aborted)"
            )
        if unclosed and mode == "in_memory":
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(unclosed)} files were not written by "
                f"this process, e.g. s3://{unclosed[0]}: in in_memory mode a task must commit "
                "in the process that wrote its files (the attempt has been aborted)"
            )
        if unclosed:
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(unclosed)} files were opened but not "
                f"closed successfully, e.g. s3://{unclosed[0]}; close every file before "
                "committing the task (its uploads have been aborted)"
            )

    def _discard_records(self, paths: list[str]) -> None:
        abort_uploads(
            self.store, uploads_of(load_pending(self.store, paths)), release=self._release
        )
        self.store.run(self.store.adelete_objects(self.bucket, [self._key(p) for p in paths]))

    def _load_pendings(self, paths: list[str]) -> list[SinglePendingCommit]:
        futures = [
            (
                path,
                self.store.run_background(
                    self.store.aread(*self.store.split(path), SinglePendingCommit.MAX_BYTES)
                ),
            )
            for path in paths
        ]
        commits = []
        for path, future in futures:
            with self.stats.track("committer_load_single_pending_file"):
                data = future.result()
            commits.append(SinglePendingCommit.from_json(data, source=f"s3://{path}"))
        return commits

    def _abort_task(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Abort every upload of the attempt that a record names, and delete its records.

        A marker whose upload no record names (its writer was killed, or its ``.pending``
        was tampered with) is kept: it is how the job's sweep finds that upload, by key,
        when the job ends. (Aborting by key now could hit a speculative twin of this
        attempt writing the same keys.) Idempotent.
        """
        start = time.monotonic()
        listing = self._find(self.layout.task_attempt_dir(task.attempt_id))
        attempt_record = self.layout.attempt_pendingset(task.attempt_id)
        task_record = self.layout.pendingset(task.task_id)
        commits = [f.commit for f in files if f.commit is not None]
        commits += load_pending(self.store, [p for p in listing if p.endswith(PENDING_SUFFIX)])
        aborted = abort_uploads(self.store, uploads_of(commits), release=self._release)
        named = {_marker_of(c.filename) for c in commits if self._trustworthy(c)} | {
            f.path for f in files if f.commit is not None
        }
        kept = [p for p in listing if is_deferred_write(p) and p not in named]
        records = [p for p in listing if p not in kept]
        records += [attempt_record, self.layout.started_marker(task.attempt_id)]
        if self._recorded_attempt(task_record) == task.attempt_id:
            records.append(task_record)
        self.store.run(self.store.adelete_objects(self.bucket, [self._key(p) for p in records]))
        log.info(
            "task %s: aborted %d uploads in %.2fs%s",
            task.attempt_id,
            aborted,
            elapsed(start),
            f"; {len(kept)} markers kept for the job's sweep" if kept else "",
        )

    def _trustworthy(self, commit: SinglePendingCommit) -> bool:
        """Does a loaded record really name the upload of the file it lies next to?"""
        if not commit.filename:
            return False
        try:
            check_commit(commit, self.bucket, self.dest_key, commit.filename)
        except InvalidCommitData:
            return False
        return True

    # -- job commit: the hooks of the base class's stages -------------------------------------

    def _records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if messages is not None:
            return self._check_messages(messages, self.layout.tasks_dir)
        # The job has ended before this listing: a task commit either saved its record
        # before (and is listed) or finds the job gone and withdraws. Paged and uncached:
        # a job of 100,000 tasks has 100,000 records here.
        bucket, key = self.store.split(self.layout.job_attempt_dir)
        records = [
            p
            for p in iterate(self.store, self.store.alist_keys(bucket, key + "/", delimiter="/"))
            if p.endswith(PENDINGSET_SUFFIX)
        ]
        if not was_active and (not records or self._success_names_this_job()):
            raise self._nothing_to_commit(bool(records) or self._tree_left())
        return records

    def _tree_left(self) -> bool:
        bucket, key = self.store.split(self.layout.magic_dir)
        return next(iterate(self.store, self.store.alist_keys(bucket, key + "/")), None) is not None

    def _nothing_to_commit(self, tree_left: bool) -> NothingToCommitError:
        if self._success_names_this_job():
            state = "it has already been committed (its _SUCCESS names it)"
        else:
            state = "it was never set up, or has already been committed or aborted"
        left = (
            f"; its tree {self.store_fs.unstrip_protocol(self.layout.magic_dir)} remains: "
            f"cleanup_job() deletes it (magicfs jobs cleanup --job {self.job_id} {self.url})"
            if tree_left
            else ""
        )
        return NothingToCommitError(
            f"job {self.job_id}: nothing to commit at {self.url}: {state}{left}"
        )

    def _submit_read(
        self, path: str, pool: concurrent.futures.Executor
    ) -> concurrent.futures.Future[bytes]:
        # A coroutine on the store's IO loop: no thread of `pool` waits for it.
        return self.store.run_background(
            self.store.aread(*self.store.split(path), PendingSet.MAX_BYTES)
        )

    def _delete_files(self, paths: list[str]) -> None:
        self.store.run(self.store.adelete_objects(self.bucket, [self._key(p) for p in paths]))

    def _save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        success = self._success_data(
            loaded,
            published,
            start,
            rows,
            f"magicfs {type(self).__name__} for job {self.job_id}",
            **{"magicfs.in_memory": str(self.in_memory).lower()},
        )
        if self.success_file:
            self._put(self.success_path, success.to_bytes())
        return success.filenames

    # -- clean-up ------------------------------------------------------------------------------

    def _clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """Sweep the job's uploads (keeping the committed ones), then delete its tree.

        Streamed, for jobs of any size: the tree is listed page by page (twice: once for
        the keys its markers name, kept on disk, once to delete it), never held whole.
        """
        with self.stats.track("committer_cleanup"):
            keep = self.kept_uploads(published)
            prefix = f"{self.dest_key}/" if self.dest_key else ""
            tree_bucket, tree = self.store.split(self.layout.magic_dir)
            keys = KeySet()
            try:
                with concurrent.futures.ThreadPoolExecutor(1) as pool:  # both listings at once
                    uploads = pool.submit(
                        lambda: list(
                            iterate(self.store, self.store.alist_uploads(self.bucket, prefix))
                        )
                    )
                    for page in batches(
                        iterate(self.store, self.store.alist_keys(tree_bucket, tree + "/")), 1000
                    ):
                        keys.update(tree_keys(self.store, page))
                    listed = uploads.result()

                def sweep(progress: bool | None, uploads: list[PendingUpload] | None = None) -> int:
                    return sweep_job(
                        self.store,
                        self.bucket,
                        self.dest_key,
                        self.job_id,
                        keys,
                        keep,
                        lambda shared: recorded_ids(
                            self.store,
                            list(
                                iterate(self.store, self.store.alist_keys(tree_bucket, tree + "/"))
                            ),
                            shared,
                        ),
                        progress,
                        uploads,
                    ).aborted

                aborted = sweep(self.progress, listed)
                if aborted:
                    # An abort racing a part upload can leave the upload alive: look again.
                    sweep(False)
            finally:
                keys.discard()
            self.stats.increment("committer_commits_aborted", aborted)
            # Task records go after the files, the journal last: a clean-up cut short must
            # not leave a tree that a retried commit would read as a job with fewer tasks.
            records = OrderedPaths()  # on disk: a job may have any number of tasks
            try:
                for page in batches(
                    iterate(self.store, self.store.alist_keys(tree_bucket, tree + "/")),
                    DELETE_BATCH,
                ):
                    ranked = [_deletion_order(p) for p in page]
                    records.add(r for r in ranked if r[0] > 0)
                    files = [self._key(p) for rank, p in ranked if rank == 0]
                    self.store.run(self.store.adelete_objects(self.bucket, files))
                for batch in records.batches(DELETE_BATCH):
                    self.store.run(
                        self.store.adelete_objects(self.bucket, [self._key(p) for p in batch])
                    )
            finally:
                records.discard()
            self.store_fs.invalidate_cache(self.layout.magic_dir)

    # -- helpers ----------------------------------------------------------------------------------

    def _key(self, path: str) -> str:
        return self.store.split(path)[1]

    @property
    def _release(self) -> str:
        """The command that aborts the uploads this job leaves parked (messages)."""
        return release_command(self.bucket, self.dest_key, self.job_id)

    def _location(self, path: str) -> dict[str, str]:
        bucket, key = self.store.split(path)
        return {"Bucket": bucket, "Key": key}

    def _put(self, path: str, data: bytes) -> None:
        self.store.run(self.store.aput_object(self.bucket, self._key(path), data))

    def _find(self, path: str) -> list[str]:
        self.store_fs.invalidate_cache(path)
        try:
            return sorted(self.store_fs.find(path))
        except FileNotFoundError:
            return []


def _marker_of(record: str) -> str:
    """The marker path of a ``.pending`` record's location (``s3://bkt/...x.pending``)."""
    return record.removeprefix("s3://").removesuffix(PENDING_SUFFIX)


def _deletion_order(path: str) -> tuple[int, str]:
    """Files and markers first, then task records, then the journal's pages, the journal last."""
    name = path.rsplit("/", 1)[-1]
    if name == JOURNAL_FILE:
        return (3, path)
    if name.startswith("_magicfs_commit."):
        return (2, path)
    if name.endswith(PENDINGSET_SUFFIX) or name.endswith(STARTED_SUFFIX):
        return (1, path)
    return (0, path)
