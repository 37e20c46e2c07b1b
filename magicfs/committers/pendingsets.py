"""Job commit from ``.pendingset`` records, streamed: the magic-layout and staging committers.

These committers end a task with one pendingset (the task's pending files) and a job
with publishing every file those name, through the store's adapter
(:mod:`magicfs.stores.deferred`: S3 multipart uploads, Azure block lists). This is that
job commit, written once as a collaborator the committers hold
(:class:`PendingsetRecords`: their ``load_records``, ``validate_records``, ``publish``
and ``unpublish`` hooks delegate to it), run in flat memory:

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
does not grow with the number of files; the disk holds about 1.2 KB per file.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator

from ..errors import InvalidCommitData
from ..parallel import thread_map
from ..protocol.hooks import CommitterHooks, Loaded, Published
from ..records import (
    MAX_FILENAMES,
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
    check_checksums_agree,
)
from ..records.job_record import CommittedFile
from ..stores.commit_ops import CommitOperations
from ..stores.deferred import DeferredStore
from ..stores.spool import CommitSpool
from ..stores.validation import check_commit


class PendingsetRecords:
    """The pendingset job commit of one committer (``job``), over its store's adapter.

    ``read_record(path)`` reads one task record's bytes (``FileNotFoundError`` if none);
    ``read_records(paths)`` reads several, in order, at most ``threads`` at once
    (default: ``read_record`` on threads); ``display(path)`` names a record in messages.
    The committer keeps one of these for its life; it holds no per-commit state (a job
    commit's spool travels in its :class:`~magicfs.protocol.hooks.Loaded`).
    """

    def __init__(
        self,
        job: CommitterHooks,
        deferred: DeferredStore,
        read_record: Callable[[str], bytes],
        read_records: Callable[[list[str]], Iterator[bytes]] | None = None,
        display: Callable[[str], str] | None = None,
    ):
        self.job = job
        self.deferred = deferred
        self.read_record = read_record
        self.read_records = read_records or self._read_on_threads
        self._display = display
        self.bucket, self.dest_key = deferred.split(job.dest)

    def _read_on_threads(self, paths: list[str]) -> Iterator[bytes]:
        return thread_map(self.read_record, paths, self.job.options.threads, name="magicfs-load")

    def display(self, path: str) -> str:
        """A record's ``path`` as messages name it (with its protocol; ``display`` where
        the records live elsewhere than the store, as the staging committers' do)."""
        if self._display is not None:
            return self._display(path)
        return path if "://" in path else self.deferred.url(path)

    def operations(self) -> CommitOperations:
        job = self.job
        return CommitOperations(
            self.deferred, job.job_id, job.stats, job.options.threads, job.options.progress
        )

    # -- task commit -------------------------------------------------------------------------

    def checked_task_commits(
        self, attempt_id: str, commits: list[SinglePendingCommit], sources: list[str]
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
            commit.job_id = self.job.job_id
            commit.task_id = attempt_id
            stats.aggregate(commit.iostatistics)
            commit.iostatistics = IOStatisticsSnapshot()
        stats.counters["committer_task_file_count"] = len(commits)
        return stats

    def recorded_attempt(self, pendingset_path: str) -> str | None:
        """Which attempt committed this task-level pendingset (``None`` if absent/unreadable)."""
        try:
            data = self.read_record(pendingset_path)
            pendingset = PendingSet.from_json(data, source=self.display(pendingset_path))
        except (FileNotFoundError, InvalidCommitData):
            return None
        return pendingset.task_attempt_id or None

    # -- the stages -------------------------------------------------------------------------

    def load(
        self, records: list[str], carried: dict[str, tuple[bytes, str]] | None = None
    ) -> Loaded:
        """Read ``records`` into a spool; those the task commit messages carry
        (``carried``: :func:`~magicfs.protocol.attempts.carried_records`) are not read."""
        carried = carried or {}
        spool = CommitSpool()
        try:
            with self.job.stats.track("committer_load_pendingsets"):
                reads = self.read_records([p for p in records if p not in carried])
                for path in records:
                    if path in carried:
                        self._spool_carried(spool, path, *carried[path])
                    else:
                        self._spool(spool, path, reads)
        except BaseException:
            spool.discard()
            raise
        return Loaded(
            list(records), len(spool.records), spool.files, spool.bytes, spool, spool.iostatistics
        )

    def _spool(self, spool: CommitSpool, path: str, reads: Iterator[bytes]) -> None:
        source = self.display(path)
        try:
            data = next(reads)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"job {self.job.job_id}: task record {source} is missing (already committed or "
                "aborted?)"
            ) from None
        spool.add(source, PendingSet.from_json(data, source=source))

    def _spool_carried(self, spool: CommitSpool, path: str, data: bytes, attempt: str) -> None:
        """A record as its task's message carried it: checked like one read, and that
        it is the record of the attempt whose message carried it."""
        source = f"{self.display(path)} (as task attempt {attempt}'s commit message carried it)"
        pendingset = PendingSet.from_json(data, source=source)
        if pendingset.task_attempt_id != attempt:
            raise InvalidCommitData(
                source,
                f"extraData.{TASK_ATTEMPT_ID_KEY}",
                f"the record is of attempt {pendingset.task_attempt_id or '(none)'}, not of "
                f"{attempt}: commit the job with the messages its task commits returned",
            )
        spool.add(source, pendingset)

    def validate(self, loaded: Loaded) -> None:
        spool: CommitSpool = loaded.payload
        job_id = self.job.job_id
        for source, record_job in zip(spool.records, spool.job_ids, strict=True):
            if record_job and record_job != job_id:
                raise InvalidCommitData(
                    source,
                    "jobId",
                    f"Mismatch in Job ID: the record is for job {record_job}, this is job {job_id}",
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

    def publish(self, loaded: Loaded) -> Published:
        spool: CommitSpool = loaded.payload
        result = self.operations().complete_all(spool.commits(), spool.files)
        return Published(result.files, result.bytes, payload=spool)

    def committed_files(self, loaded: Loaded) -> Iterator[CommittedFile]:
        """The files of ``loaded``, relative to the destination (the job commit record)."""
        spool: CommitSpool = loaded.payload
        prefix = len(self.dest_key) + 1 if self.dest_key else 0
        for commit in spool.commits():
            yield CommittedFile(commit.destination_key[prefix:], commit.length)

    def unpublish(self, loaded: Loaded) -> int:
        spool: CommitSpool = loaded.payload
        if not spool.validated:  # never delete on the word of a record that fails its checks
            self.validate(loaded)
        return self.operations().unpublish(spool.commits())

    def success_data(
        self,
        loaded: Loaded,
        published: Published,
        start: float,
        rows: int | None,
        description: str,
        **diagnostics: str,
    ) -> SuccessData:
        """``_SUCCESS`` of the job; statistics are the job's plus every task's, as in Hadoop."""
        job = self.job
        spool: CommitSpool = loaded.payload
        job.stats.increment("committer_files_committed", published.files)
        job.stats.increment("committer_tasks_completed", loaded.tasks)
        statistics = job.stats.snapshot()
        statistics.aggregate(spool.iostatistics)
        success = SuccessData(
            committer=job.name,
            description=description,
            job_id=job.job_id,
            job_id_source=job.options.job_id_source,
            metrics=job.success_metrics(
                published.files, published.bytes, loaded.tasks, start, rows
            ),
            diagnostics=job.success_diagnostics(**diagnostics, **loaded.diagnostics),
            iostatistics=statistics,
        )
        for destination in spool.first_destinations(MAX_FILENAMES):
            success.add_filename("/" + destination.partition("/")[2])
        return success


def kept_uploads(published: Published | None) -> Container[str]:
    """The upload ids a clean-up after ``published`` must not abort (a container)."""
    if published is None or published.payload is None:
        return frozenset()
    spool: CommitSpool = published.payload
    return spool
