"""Job commit from ``.pendingset`` records, streamed: the magic, staging and block-list committers.

These committers end a task with one pendingset (the task's pending files) and a job
with publishing every file those name, through the store's adapter
(:mod:`magicfs.stores.deferred`: S3 multipart uploads, Azure block lists). This is that
job commit, the hooks of the base class's stages (:mod:`magicfs.protocol.committer`),
written once and run in flat memory:

* **load**: the task records are read ``threads`` at a time and in order; each one's
  commits go to a :class:`~magicfs.stores.spool.CommitSpool` on local disk and the record
  is dropped. Memory holds a few records per thread, however many files the job has.
* **validate**: one pass over the spool: every record is this job's, every commit
  lands inside the destination where its own magic path says (:mod:`magicfs.stores.validation`),
  no destination is written twice (one indexed query), the store can publish each
  (the adapter's ``check``). Nothing has been published yet.
* **publish**: the spool streams into the adapter's publishes, ``threads`` at once,
  with the progress of :mod:`magicfs.stores.commit_ops` (and, on S3, its rate control).
* **roll back** streams the same spool; ``_SUCCESS`` lists the first
  :data:`~magicfs.records.MAX_FILENAMES` destinations in order, as Hadoop does.

Measured (``benchmarks/large_jobs.py``, README "Large jobs"): the driver's peak memory
does not grow with the number of files; the disk holds about 0.4 KB per file.
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from typing import Any

import fsspec

from ..errors import InvalidCommitData
from ..filesystems.originals import store_filesystem
from ..parallel import thread_map
from ..protocol.attempts import Messages
from ..protocol.committer import Loaded, OutputCommitter, Published, TaskAttempt
from ..records import (
    MAX_FILENAMES,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
    check_checksums_agree,
)
from ..stores.commit_ops import CommitOperations
from ..stores.deferred import DeferredStore
from ..stores.s3.client import client_config
from ..stores.s3.deferred import S3Deferred
from ..stores.s3.retry import DEFAULT_POLICY, RetryPolicy
from ..stores.s3.store import S3Store
from ..stores.spool import CommitSpool
from ..stores.validation import check_commit


class PendingsetCommitter(OutputCommitter):
    """A committer whose task records are pendingsets of deferred writes.

    A subclass sets, in its constructor, :attr:`deferred` (the store's adapter,
    :class:`~magicfs.stores.deferred.DeferredStore`), :attr:`bucket` and :attr:`dest_key`
    (the destination's bucket or container, and key).
    """

    deferred: DeferredStore
    bucket: str
    dest_key: str

    # -- what the committer supplies ------------------------------------------------------

    def _read_record(self, path: str) -> bytes:
        """The bytes of the task record at ``path`` (``FileNotFoundError`` if none)."""
        raise NotImplementedError

    def _read_records(self, paths: list[str]) -> Iterator[bytes]:
        """The bytes of each task record, in order, at most :attr:`threads` read at once:
        :meth:`_read_record` on threads, unless the committer reads without blocking a
        thread (magic layout)."""
        return thread_map(self._read_record, paths, self.threads, name="magicfs-load")

    def _display(self, path: str) -> str:
        """``path`` as messages name it (with its protocol)."""
        return path if "://" in path else self.deferred.url(path)

    def _operations(self) -> CommitOperations:
        return CommitOperations(self.deferred, self.job_id, self.stats, self.threads, self.progress)

    # -- task commit -------------------------------------------------------------------------

    def _checked_task_commits(
        self, task: TaskAttempt, commits: list[SinglePendingCommit], sources: list[str]
    ) -> IOStatisticsSnapshot:
        """Check an attempt's commits (``sources``: the record each came from) before its
        pendingset is saved: each is publishable by this store, lands where its magic path
        says, and no two write one file. Stamps them with the job and attempt; returns the
        writers' statistics, summed (the pendingset's, not each commit's)."""
        stats = IOStatisticsSnapshot()
        seen: dict[str, str] = {}
        check_checksums_agree(commits, sources)
        for commit, source in zip(commits, sources, strict=True):
            self.deferred.check(commit, source)
            check_commit(commit, self.bucket, self.dest_key, source)
            if commit.destination in seen:
                raise InvalidCommitData(
                    source,
                    "destinationKey",
                    f"{self.deferred.url(commit.destination)} is also written by "
                    f"{seen[commit.destination]} in the same task attempt",
                )
            seen[commit.destination] = source
            commit.job_id = self.job_id
            commit.task_id = task.attempt_id
            stats.aggregate(commit.iostatistics)
            commit.iostatistics = IOStatisticsSnapshot()
        stats.counters["committer_task_file_count"] = len(commits)
        return stats

    def _recorded_attempt(self, pendingset_path: str) -> str | None:
        """Which attempt committed this task-level pendingset (``None`` if absent/unreadable)."""
        try:
            data = self._read_record(pendingset_path)
            pendingset = PendingSet.from_json(data, source=self._display(pendingset_path))
        except (FileNotFoundError, InvalidCommitData):
            return None
        return pendingset.task_attempt_id or None

    # -- the stages' hooks ----------------------------------------------------------------

    def _load(self, records: list[str], messages: Messages | None = None) -> Loaded:
        spool = CommitSpool()
        try:
            with self.stats.track("committer_load_pendingsets"):
                reads = self._read_records(records)
                for path in records:
                    self._spool(spool, path, reads)
        except BaseException:
            spool.discard()
            raise
        return Loaded(
            list(records), len(spool.records), spool.files, spool.bytes, spool, spool.iostatistics
        )

    def _spool(self, spool: CommitSpool, path: str, reads: Iterator[bytes]) -> None:
        source = self._display(path)
        try:
            data = next(reads)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"job {self.job_id}: task record {source} is missing (already committed or "
                "aborted?)"
            ) from None
        spool.add(source, PendingSet.from_json(data, source=source))

    def _validate(self, loaded: Loaded) -> None:
        spool: CommitSpool = loaded.payload
        for source, job_id in zip(spool.records, spool.job_ids, strict=True):
            if job_id and job_id != self.job_id:
                raise InvalidCommitData(
                    source,
                    "jobId",
                    f"Mismatch in Job ID: the record is for job {job_id}, this is job "
                    f"{self.job_id}",
                )
        for source, index, commit in spool.rows():
            try:
                self.deferred.check(commit, source)
                check_commit(commit, self.bucket, self.dest_key, source)
            except InvalidCommitData as e:
                problem = f"{e.problem} (the record of {self.deferred.url(commit.destination)})"
                raise InvalidCommitData(source, f"commits[{index}].{e.field}", problem) from None
        duplicate = spool.first_duplicate()
        if duplicate is not None:
            destination, (owner, _), (source, index) = duplicate
            raise InvalidCommitData(
                source,
                f"commits[{index}].destinationKey",
                f"{self.deferred.url(destination)} is also written by {owner}: two tasks "
                "write the same file",
            )
        spool.validated = True

    def _publish(self, loaded: Loaded) -> Published:
        spool: CommitSpool = loaded.payload
        result = self._operations().complete_all(spool.commits(), spool.files)
        return Published(result.files, result.bytes, payload=spool)

    def _unpublish(self, loaded: Loaded) -> int:
        spool: CommitSpool = loaded.payload
        if not spool.validated:  # never delete on the word of a record that fails its checks
            self._validate(loaded)
        return self._operations().unpublish(spool.commits())

    def _success_data(
        self,
        loaded: Loaded,
        published: Published,
        start: float,
        rows: int | None,
        description: str,
        **diagnostics: str,
    ) -> SuccessData:
        """``_SUCCESS`` of the job; statistics are the job's plus every task's, as in Hadoop."""
        spool: CommitSpool = loaded.payload
        self.stats.increment("committer_files_committed", published.files)
        self.stats.increment("committer_tasks_completed", loaded.tasks)
        statistics = self.stats.snapshot()
        statistics.aggregate(spool.iostatistics)
        success = SuccessData(
            committer=self.name,
            description=description,
            job_id=self.job_id,
            job_id_source=self.job_id_source,
            metrics=self._success_metrics(
                published.files, published.bytes, loaded.tasks, start, rows
            ),
            diagnostics=self._success_diagnostics(**diagnostics, **loaded.diagnostics),
            iostatistics=statistics,
        )
        for destination in spool.first_destinations(MAX_FILENAMES):
            success.add_filename("/" + destination.partition("/")[2])
        return success

    @staticmethod
    def kept_uploads(published: Published | None) -> Container[str]:
        """The upload ids a clean-up after ``published`` must not abort (a container)."""
        if published is None or published.payload is None:
            return frozenset()
        spool: CommitSpool = published.payload
        return spool


class S3PendingsetCommitter(PendingsetCommitter):
    """A pendingset committer on S3 (magic, staging): multipart uploads.

    Options beyond :class:`OutputCommitter`'s: ``retry_policy`` (how every S3 call is
    retried: :mod:`magicfs.stores.s3.retry`) and ``max_request_rate`` (a fixed cap, in
    requests per second, on this job's calls: :mod:`magicfs.stores.s3.rate`). Throttling
    is handled without either: every call starts through the store's adaptive rate
    control (:mod:`magicfs.stores.s3.rate`), and the S3 client gets a short connect
    timeout and botocore's ``standard`` retries (:mod:`magicfs.stores.s3.client`; what
    ``storage_options["config_kwargs"]`` sets is kept).
    """

    def __init__(
        self,
        dest: str,
        *,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
        max_request_rate: float | None = None,
        **options: Any,
    ):
        super().__init__(dest, **options)
        self.retry_policy = retry_policy
        self.max_request_rate = max_request_rate
        self.store = S3Store(self.store_fs, retry_policy, max_request_rate)
        self.deferred = S3Deferred(self.store, self.job_id, self._scratch_dir)
        self.bucket, self.dest_key = self.store.split(self.dest)

    def _scratch_dir(self) -> str:
        """Where store probes may write a throw-away key: beside the job's journal, in
        its hidden tree (cleaned up with it)."""
        journal = self._journal()
        return journal.directory if journal is not None else self.dest

    @classmethod
    def _store_filesystem(
        cls, protocol: str, options: dict[str, Any], threads: int
    ) -> fsspec.AbstractFileSystem:
        # Timeouts, botocore's retries and the connection pool: magicfs.stores.s3.client.
        options["config_kwargs"] = client_config(options.get("config_kwargs"), threads)
        return store_filesystem("s3", **options)
