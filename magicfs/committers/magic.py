"""The magic committer: task output streams to S3 as uploads that only job commit completes.

Layout: see :mod:`magicfs.layout`. One job, start to end:

* ``setup_job``: check the conflict mode, delete an old ``_SUCCESS``, write the job
  marker (from now on the job accepts writers).
* tasks write through ``committer.fs`` under ``task.path(...)`` (deferred uploads,
  each recorded by a marker and, once closed, a ``.pending``).
* ``commit_task``: list the attempt's ``.pending`` files (one paged listing), load and
  validate them (one GET each), save them as one ``.pendingset`` twice: as
  ``tasks/<attempt>.pendingset`` (this exact attempt; the task commit message names
  it) and as ``<task id>.pendingset`` (the last committed attempt of the task wins,
  HADOOP-17258; job commit without messages reads these). Then check that the job is
  still active.
* ``commit_job``: end the job (delete the marker), load the pendingsets named by the
  messages (or listed), validate all of them before anything is completed, apply the
  conflict mode, complete every upload in parallel, write ``_SUCCESS``, clean up.
* clean-up (after commit or abort): list the job's tree once, abort every upload of an
  attempt that was not committed (superseded, failed, speculative or unreported
  attempts: their markers and records are still there), check the destination's
  upload listing for any that survived, delete the tree.

Decision (differs from Hadoop, which deletes the attempt directory at task commit):
the attempt directory stays until the job ends. It costs nothing extra (the job's
clean-up deletes it in the same batches) and it is what lets the job find the uploads
of attempts Spark never reported (its ``abort(messages)`` sees ``None`` for them) and
of attempts superseded by a later one, so no upload is ever left parked. Committing
the same attempt twice is therefore harmless (the second commit saves the same record).

A retried ``commit_job`` after a crash part-way (same job id, tree still there) loads
the same pendingsets and completes again: uploads already completed are recognised by
the job id in their object metadata (see :mod:`magicfs.s3.commit_ops`), so the output
is the same as after an uninterrupted commit. After a successful commit or an abort the
tree is gone and a repeated ``commit_job`` raises ``FileNotFoundError``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Iterable
from typing import Any

import fsspec

from ..errors import CommitFailedError, InvalidCommitData, JobNotActiveError, NothingToCommitError
from ..filesystem import MagicFileSystem, is_s3
from ..layout import STARTED_SUFFIX, MagicJobLayout
from ..paths import PENDING_SUFFIX, PENDINGSET_SUFFIX, is_deferred_write
from ..records import (
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
)
from ..s3.commit_ops import CommitOperations
from ..s3.store import S3Store
from ..s3.sweep import abort_uploads, recorded_uploads
from ..s3.tracking import IN_MEMORY_COMMITS
from ..s3.validation import check_commit, validate_pendingsets
from .base import (
    JobSummary,
    OutputCommitter,
    TaskAttempt,
    TaskCommitMessage,
    elapsed,
    total_rows,
)

log = logging.getLogger("magicfs.committer.magic")


class MagicCommitter(OutputCommitter):
    """Hadoop's S3A magic committer for fsspec: zero-rename commit on S3.

    Options beyond :class:`OutputCommitter`'s: ``in_memory`` (writers keep commit data
    in the task's process: fewer requests, but task commit must run in the process
    that wrote the files; see :mod:`magicfs.s3.tracking`).
    """

    name = "magic"

    def __init__(self, dest: str, *, in_memory: bool = False, **options: Any):
        super().__init__(dest, **options)
        if not is_s3(self.store_fs):
            raise ValueError(f"{dest}: the magic committer needs an S3 destination (s3://)")
        self.in_memory = in_memory
        self.layout = MagicJobLayout(self.dest, self.job_id, self.app_attempt)
        self.store = S3Store(self.store_fs)
        self.bucket, self.dest_key = self.store.split(self.dest)
        self._fs = MagicFileSystem(fs=self.store_fs, in_memory=in_memory)

    def _make_store_fs(self, dest: str) -> fsspec.AbstractFileSystem:
        # Job commit runs `threads` requests at once: give the client enough connections.
        options = dict(self.storage_options)
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", max(10, self.threads * 2))
        options["config_kwargs"] = config
        return fsspec.filesystem("s3", **options)

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    def _operations(self) -> CommitOperations:
        return CommitOperations(self.store, self.job_id, self.stats, self.threads, self.progress)

    # -- job setup ----------------------------------------------------------------------------

    def setup_job(self) -> None:
        start = time.monotonic()
        self.check_no_conflict("job setup")
        if self.success_file:
            self.store.delete_objects(self.bucket, [self._key(self.success_path)])
        self._put(self.layout.job_marker, self.job_marker_document())
        log.info(
            "job %s: set up for %s (magic committer, conflict mode %s) in %.2fs",
            self.job_id,
            self.url,
            self.conflict_mode,
            elapsed(start),
        )

    def job_active(self) -> bool:
        return self.store.head_object(self.bucket, self._key(self.layout.job_marker)) is not None

    # -- tasks --------------------------------------------------------------------------------

    def work_path_for(self, attempt_id: str) -> str:
        return self.layout.work_path(attempt_id)

    def setup_task(self, task: TaskAttempt) -> None:
        self._check_task(task)
        self.require_active_job(task)
        self._put(self.layout.started_marker(task.attempt_id), task.attempt_id.encode())

    def _check_started(self, task: TaskAttempt, started: concurrent.futures.Future) -> None:
        """A task attempt commits only if it was set up and has not been aborted."""
        try:
            started.result()
        except FileNotFoundError:
            raise self.not_started_error(task) from None

    def commit_task(self, task: TaskAttempt) -> TaskCommitMessage:
        self._check_task(task)
        start = time.monotonic()
        started = self.store.submit(
            "head_object",
            Bucket=self.bucket,
            Key=self._key(self.layout.started_marker(task.attempt_id)),
        )
        in_memory = IN_MEMORY_COMMITS.take(self.job_id, task.attempt_id) if self.in_memory else []
        try:
            self._check_started(task, started)
            commits, stats = self._gather_task_commits(task, in_memory)
        except BaseException:
            self._operations().abort(in_memory)
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
                self.store.submit("put_object", Bucket=self.bucket, Key=self._key(path), Body=data)
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
        return self.task_committed(
            task, attempt_record, len(commits), pendingset.total_bytes, start, "committed"
        )

    def _gather_task_commits(
        self, task: TaskAttempt, in_memory: list[SinglePendingCommit]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """Load and validate the attempt's pending commits (memory, or ``.pending`` files)."""
        if self.in_memory:
            commits = in_memory
            sources = {id(c): f"memory:{task.attempt_id}" for c in commits}
        else:
            listing = self._find(self.layout.task_attempt_dir(task.attempt_id))
            pendings = [p for p in listing if p.endswith(PENDING_SUFFIX)]
            closed = {p[: -len(PENDING_SUFFIX)] for p in pendings}
            still_open = [p for p in listing if is_deferred_write(p) and p not in closed]
            if still_open:
                raise CommitFailedError(
                    f"task attempt {task.attempt_id}: {len(still_open)} files were opened but "
                    f"not closed successfully, e.g. s3://{still_open[0]}; close every file "
                    "before committing the task (its uploads have been aborted)"
                )
            commits = self._load_pendings(pendings)
            sources = {id(c): c.filename or "" for c in commits}
        stats = IOStatisticsSnapshot()
        seen: dict[str, str] = {}
        for commit in commits:
            source = sources[id(commit)]
            self._check_commit(commit, source)
            if commit.destination in seen:
                raise InvalidCommitData(
                    source,
                    "destinationKey",
                    f"s3://{commit.destination} is also written by {seen[commit.destination]} "
                    "in the same task attempt",
                )
            seen[commit.destination] = source
            commit.job_id = self.job_id
            commit.task_id = task.attempt_id
            stats.aggregate(commit.iostatistics)
            commit.iostatistics = IOStatisticsSnapshot()
        stats.counters["committer_task_file_count"] = len(commits)
        return commits, stats

    def _load_pendings(self, paths: list[str]) -> list[SinglePendingCommit]:
        futures = [
            (path, self.store.submit_read(*self.store.split(path), SinglePendingCommit.MAX_BYTES))
            for path in paths
        ]
        commits = []
        for path, future in futures:
            with self.stats.track("committer_load_single_pending_file"):
                data = future.result()
            commits.append(SinglePendingCommit.from_json(data, source=f"s3://{path}"))
        return commits

    def abort_task(self, task: TaskAttempt) -> None:
        """Abort every upload of the attempt and delete its records. Idempotent."""
        self._check_task(task)
        start = time.monotonic()
        commits = IN_MEMORY_COMMITS.take(self.job_id, task.attempt_id)
        listing = self._find(self.layout.task_attempt_dir(task.attempt_id))
        attempt_record = self.layout.attempt_pendingset(task.attempt_id)
        task_record = self.layout.pendingset(task.task_id)
        records = [*listing, attempt_record, self.layout.started_marker(task.attempt_id)]
        if self._recorded_attempt(task_record) == task.attempt_id:
            records.append(task_record)
        uploads = recorded_uploads(self.store, records)
        aborted = abort_uploads(self.store, uploads) + self._operations().abort(commits)
        self.store.delete_objects(self.bucket, [self._key(p) for p in records])
        log.info("task %s: aborted %d uploads in %.2fs", task.attempt_id, aborted, elapsed(start))

    def _recorded_attempt(self, pendingset_path: str) -> str | None:
        """Which attempt committed this task-level pendingset (``None`` if absent/unreadable)."""
        try:
            pendingset = PendingSet.load(self.store_fs, pendingset_path)
        except (FileNotFoundError, InvalidCommitData):
            return None
        return pendingset.task_attempt_id or None

    # -- job commit ----------------------------------------------------------------------------

    def commit_job(self, messages: list[TaskCommitMessage] | None = None) -> JobSummary:
        start = time.monotonic()
        try:
            with self.stats.track("committer_commit_job"):
                summary = self._commit(messages, start)
        except NothingToCommitError:
            raise
        except BaseException:
            self.stats.increment("committer_jobs_failed")
            self._cleanup(committed_attempts=set(), committed_ids=set(), quiet=True)
            raise
        return summary

    def _commit(self, messages: list[TaskCommitMessage] | None, start: float) -> JobSummary:
        with self.stats.track("committer_load_pendingsets"):
            if messages is None:
                # The job must end before listing: a task commit either saved its record
                # before this point (and is listed) or finds the job gone.
                pendingsets = self._load_listed_pendingsets(self._end_job(check_active=True))
            else:
                # Messages fix the set of tasks: end the job while their records load.
                ending = self.store.submit(
                    "delete_object", Bucket=self.bucket, Key=self._key(self.layout.job_marker)
                )
                try:
                    pendingsets = self._load_message_pendingsets(messages)
                finally:
                    concurrent.futures.wait([ending])  # ended before any clean-up sweep
                ending.result()
        commits = self._validate_job(pendingsets)
        self.check_no_conflict("job commit")
        if self.conflict_mode == "replace":
            self.delete_visible_data()
        operations = self._operations()
        result = operations.complete_all(commits)
        try:
            success = self._write_success(
                pendingsets, result.completed, result.bytes, start, total_rows(messages)
            )
        except BaseException:
            operations.revert(result.completed)
            raise
        self.stats.increment("committer_jobs_completed")
        committed_attempts = {self._committed_attempt(path, p) for path, p in pendingsets}
        self._cleanup(committed_attempts, {c.upload_id for c in commits}, quiet=True)
        summary = self.summarise(
            len(result.completed), result.bytes, len(pendingsets), start, success.filenames
        )
        return summary

    def _end_job(self, check_active: bool = False) -> bool:
        """Delete the job marker: from now on writers and task commits of this job fail.

        Returns whether the marker was there (only looked up if ``check_active``).
        """
        was_active = self.job_active() if check_active else False
        self.store.delete_objects(self.bucket, [self._key(self.layout.job_marker)])
        return was_active

    def _load_listed_pendingsets(self, was_active: bool) -> list[tuple[str, PendingSet]]:
        directory = self.layout.job_attempt_dir
        self.store_fs.invalidate_cache(directory)
        try:
            entries = self.store_fs.ls(directory, detail=False, refresh=True)
        except FileNotFoundError:
            entries = []
        paths = [p for p in entries if p.endswith(PENDINGSET_SUFFIX)]
        if not was_active and (not entries or self._already_committed()):
            raise NothingToCommitError(
                f"job {self.job_id}: nothing to commit at {self.url}: the job was never set "
                "up, or has already been committed or aborted"
            )
        return self._load_pendingsets(paths)

    def _already_committed(self) -> bool:
        """Did a commit of this job get as far as writing its ``_SUCCESS``?"""
        try:
            return SuccessData.load(self.store_fs, self.success_path).job_id == self.job_id
        except (FileNotFoundError, InvalidCommitData):
            return False

    def _load_message_pendingsets(
        self, messages: list[TaskCommitMessage]
    ) -> list[tuple[str, PendingSet]]:
        return self._load_pendingsets(self.check_messages(messages, self.layout.tasks_dir))

    def _load_pendingsets(self, paths: Iterable[str]) -> list[tuple[str, PendingSet]]:
        futures = [
            (path, self.store.submit_read(*self.store.split(path), PendingSet.MAX_BYTES))
            for path in paths
        ]
        loaded = []
        for path, future in futures:
            try:
                data = future.result()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"job {self.job_id}: task record s3://{path} is missing (already committed "
                    "or aborted?)"
                ) from None
            loaded.append((path, PendingSet.from_json(data, source=f"s3://{path}")))
        return loaded

    def _validate_job(self, pendingsets: list[tuple[str, PendingSet]]) -> list[SinglePendingCommit]:
        """Every check that can fail, before anything is completed."""
        return validate_pendingsets(pendingsets, self.bucket, self.dest_key, self.job_id)

    def _check_commit(self, commit: SinglePendingCommit, source: str) -> None:
        check_commit(commit, self.bucket, self.dest_key, source)

    def _write_success(
        self,
        pendingsets: list[tuple[str, PendingSet]],
        completed: list[SinglePendingCommit],
        total_bytes: int,
        start: float,
        rows: int | None,
    ) -> SuccessData:
        success = self.success_from_pendingsets(
            pendingsets,
            completed,
            total_bytes,
            start,
            rows,
            f"magicfs {type(self).__name__} for job {self.job_id}",
            **{"magicfs.in_memory": str(self.in_memory).lower()},
        )
        if self.success_file:
            self._put(self.success_path, success.to_bytes())
        return success

    # -- abort and clean-up ----------------------------------------------------------------------

    def abort_job(self) -> None:
        """Abort every upload of the job and delete its tree; the destination is untouched."""
        start = time.monotonic()
        self._end_job()
        aborted = self._cleanup(committed_attempts=set(), committed_ids=set(), quiet=False)
        log.info("job %s: aborted %d uploads in %.2fs", self.job_id, aborted, elapsed(start))

    def cleanup_job(self) -> None:
        """Delete the job's tree, aborting any upload still recorded in it. Idempotent."""
        self._end_job()
        self._cleanup(committed_attempts=set(), committed_ids=set(), quiet=False)

    def _cleanup(self, committed_attempts: set[str], committed_ids: set[str], quiet: bool) -> int:
        try:
            with self.stats.track("committer_cleanup"):
                return self._sweep(committed_attempts, committed_ids)
        except Exception as e:
            if not quiet:
                raise
            log.warning("job %s: clean-up incomplete: %s", self.job_id, e)
            return 0

    def _sweep(self, committed_attempts: set[str], committed_ids: set[str]) -> int:
        listing = self._find(self.layout.magic_dir)
        candidates = []
        tasks_prefix = self.layout.tasks_dir + "/"
        for path in listing:
            if path.startswith(tasks_prefix):
                attempt = path[len(tasks_prefix) :].split("/", 1)[0]
                attempt = attempt.removesuffix(PENDINGSET_SUFFIX).removesuffix(STARTED_SUFFIX)
                if attempt not in committed_attempts:
                    candidates.append(path)
            elif path.endswith(PENDINGSET_SUFFIX) and not committed_attempts:
                candidates.append(path)  # abort: task-level sets too
        uploads = [
            u for u in recorded_uploads(self.store, candidates) if u.upload_id not in committed_ids
        ]
        aborted = abort_uploads(self.store, uploads, self.progress)
        if uploads:
            # An abort racing a part upload can leave the upload alive: look once more.
            doomed = {u.upload_id for u in uploads}
            for upload in self.store.list_uploads(self.bucket, self.dest_key + "/"):
                if upload.upload_id in doomed:
                    self.store.abort_upload(self.bucket, upload.key, upload.upload_id)
        # Records of the tasks go last: a clean-up cut short must not leave a tree that a
        # retried commit would read as a job with fewer tasks.
        ordered = sorted(listing, key=lambda p: (p.endswith(PENDINGSET_SUFFIX), p))
        self.store.delete_objects(self.bucket, [self._key(p) for p in ordered])
        self.stats.increment("committer_commits_aborted", aborted)
        return aborted

    # -- helpers ----------------------------------------------------------------------------------

    @staticmethod
    def _committed_attempt(path: str, pendingset: PendingSet) -> str:
        """The task attempt a pendingset came from: its extra data, its commits, its name."""
        if pendingset.task_attempt_id:
            return pendingset.task_attempt_id
        if pendingset.commits and pendingset.commits[0].task_id:
            return pendingset.commits[0].task_id
        return path.rsplit("/", 1)[-1].removesuffix(PENDINGSET_SUFFIX)

    def _check_task(self, task: TaskAttempt) -> None:
        if task.job_id != self.job_id:
            raise ValueError(f"task attempt {task.attempt_id} belongs to job {task.job_id}")

    def _delete_files(self, paths: list[str]) -> None:
        self.store.delete_objects(self.bucket, [self._key(p) for p in paths])

    def _key(self, path: str) -> str:
        return self.store.split(path)[1]

    def _put(self, path: str, data: bytes) -> None:
        self.store.put_object(self.bucket, self._key(path), data)

    def _find(self, path: str) -> list[str]:
        self.store_fs.invalidate_cache(path)
        try:
            return sorted(self.store_fs.find(path))
        except FileNotFoundError:
            return []
