"""Making pending uploads visible, or throwing them away: the S3 half of every S3 committer.

* **complete** every pending commit in parallel (``threads`` at once). If one fails, no
  new completion starts and the failure is raised, naming the file; what to do about
  the completed ones is the committer's decision (roll back, or keep for a retry: see
  :mod:`magicfs.protocol.committer`).
* A completion answered with ``NoSuchUpload`` counts as done when the destination
  object exists with this job's id in its metadata and the recorded length: that is a
  retried job commit finding its own earlier work (real S3 forgets completed upload
  ids; moto answers a repeated completion with success).
* **unpublish** (roll back) deletes the objects that this job's completions created:
  those whose upload is gone and whose object carries this job's id and the recorded
  length. It needs nothing but the commits, so it works the same after an in-process
  failure and after a driver died mid-commit.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from fsspec.asyn import sync

from ...errors import CommitFailedError
from ...progress import batches, progress_bar
from ...records import SinglePendingCommit
from ...statistics import IOStatisticsStore
from .store import DELETE_BATCH, S3Store, error_code
from .sweep import abort_uploads, uploads_of
from .tracking import META_JOB_ID

log = logging.getLogger("magicfs.s3.commit")

IF_NONE_MATCH_KEY = "magicfs.if-none-match"


@dataclass
class CompletionResult:
    """How many commits were made visible, and their bytes."""

    files: int = 0
    bytes: int = 0


class CommitOperations:
    """Complete, unpublish and abort pending uploads for one job."""

    def __init__(
        self,
        store: S3Store,
        job_id: str,
        stats: IOStatisticsStore,
        threads: int = 8,
        progress: bool | None = None,
    ):
        self.store = store
        self.job_id = job_id
        self.stats = stats
        self.threads = threads
        self.progress = progress

    # -- complete ----------------------------------------------------------------------

    def complete_all(
        self, commits: Iterable[SinglePendingCommit], total: int | None = None
    ) -> CompletionResult:
        """Make every commit visible; on the first failure stop and raise (see module docs).

        ``commits`` is consumed as it goes (at most a few per thread are held at once),
        so a spooled job of any size completes in flat memory. ``total`` (the number of
        commits) sizes the progress bar and the progress log.
        """
        if total is None:
            commits = list(commits)
            total = len(commits)
        result = CompletionResult()
        failure: BaseException | None = None
        failed: SinglePendingCommit | None = None
        stop = threading.Event()
        report = Progress(self.store, total, self.job_id)

        async def complete(commit: SinglePendingCommit) -> bool:
            if stop.is_set():
                return False
            try:
                with self.stats.track("committer_materialize_file"):
                    await self.acomplete(commit)
            except BaseException:
                stop.set()  # before another completion can start
                raise
            return True

        def settle(done: Iterable[concurrent.futures.Future[bool]]) -> None:
            nonlocal failure, failed
            for future in done:
                commit = running.pop(future)
                error = future.exception()
                if error is None:
                    if future.result():
                        result.files += 1
                        result.bytes += commit.length
                elif failure is None:
                    failure, failed = error, commit
                    stop.set()
                bar.update()
                report.update(bar, result.files)

        # `threads` completions in flight, as coroutines on the store's IO loop (no thread
        # per call); this thread feeds them from `commits` and settles the finished ones.
        running: dict[concurrent.futures.Future[bool], SinglePendingCommit] = {}
        with progress_bar(total, "completing uploads", self.progress) as bar:
            for commit in commits:
                if stop.is_set():
                    break
                if len(running) >= self.threads:
                    done, _ = concurrent.futures.wait(
                        running, return_when=concurrent.futures.FIRST_COMPLETED
                    )
                    settle(done)
                running[self.store.run_background(complete(commit))] = commit
            settle(concurrent.futures.wait(running).done)
        report.finish(result.files)
        self.stats.increment("store_io_throttled", report.throttled)  # Hadoop's name
        self.stats.increment("committer_commits_completed", result.files)
        self.stats.increment("committer_bytes_committed", result.bytes)
        if failure is not None:
            assert failed is not None
            record = f", written at {failed.filename}" if failed.filename else ""
            raise CommitFailedError(
                f"could not complete s3://{failed.destination} (upload {failed.upload_id}"
                f"{record}): {type(failure).__name__}: {failure}; {result.files} of "
                f"{total} files had been completed"
            ) from failure
        return result

    def complete(self, commit: SinglePendingCommit) -> None:
        """Complete one upload (see the module docstring for retried commits)."""
        sync(self.store.fs.loop, self.acomplete, commit)

    async def acomplete(self, commit: SinglePendingCommit) -> None:
        """:meth:`complete` for coroutines running on the store's IO loop."""
        try:
            await self.store.acomplete_upload(
                commit.bucket,
                commit.destination_key,
                commit.upload_id,
                commit.etags,
                length=commit.length,
                if_none_match=commit.extra_data.get(IF_NONE_MATCH_KEY) == "*",
            )
        except OSError as e:
            if error_code(e) == "NoSuchUpload" and await self._amade_by_this_job(commit):
                log.info("s3://%s was completed by an earlier attempt", commit.destination)
                return
            raise

    def _made_by_this_job(self, commit: SinglePendingCommit) -> bool:
        return cast(bool, sync(self.store.fs.loop, self._amade_by_this_job, commit))

    async def _amade_by_this_job(self, commit: SinglePendingCommit) -> bool:
        head = await self.store.ahead_object(commit.bucket, commit.destination_key)
        return (
            head is not None
            and head.get("ContentLength") == commit.length
            and (head.get("Metadata") or {}).get(META_JOB_ID) == self.job_id
        )

    # -- discard -------------------------------------------------------------------------

    def unpublish(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Delete the objects this job's completions created; returns how many.

        Streams ``commits`` in batches of :data:`~.store.DELETE_BATCH` (one HEAD each,
        ``threads`` at once, then one DeleteObjects per bucket and batch).
        """
        deleted = 0
        with concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-unpublish") as pool:
            for batch in batches(commits, DELETE_BATCH):
                made = list(pool.map(self._made_by_this_job, batch))
                by_bucket: dict[str, list[str]] = {}
                for commit, ours in zip(batch, made, strict=True):
                    if ours:
                        by_bucket.setdefault(commit.bucket, []).append(commit.destination_key)
                for bucket, keys in by_bucket.items():
                    self.store.delete_objects(bucket, keys)
                    self.stats.increment("committer_commits_reverted", len(keys))
                    deleted += len(keys)
        return deleted

    def abort(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Abort the uploads (concurrently); uploads already gone are fine."""
        aborted = abort_uploads(self.store, uploads_of(commits))
        self.stats.increment("committer_commits_aborted", aborted)
        return aborted


class Progress:
    """Log lines for a long completion: rate, throttled replies, time left.

    The tqdm bar (on a terminal) shows rate and ETA itself and gets the number of
    throttled replies beside them; a job running without a terminal (Spark's driver,
    a scheduler) gets an INFO line every :attr:`every` seconds instead, and one at the
    end when the store throttled the job.
    """

    every = 15.0

    def __init__(self, store: S3Store, total: int, job_id: str):
        self.store = store
        self.total = total
        self.job_id = job_id
        self.start = time.monotonic()
        self.last = self.start
        self.throttled_before = store.throttled

    @property
    def throttled(self) -> int:
        return self.store.throttled - self.throttled_before

    def update(self, bar: Any, done: int) -> None:
        now = time.monotonic()
        if self.throttled and not bar.disable:
            bar.set_postfix(throttled=self.throttled, refresh=False)
        if now - self.last >= self.every:
            self.last = now
            rate = done / max(now - self.start, 1e-9)
            left = (self.total - done) / rate if rate else float("inf")
            log.info(
                "job %s: completed %d of %d files (%.0f files/s, %d throttled replies, "
                "about %.0f s left)",
                self.job_id,
                done,
                self.total,
                rate,
                self.throttled,
                left,
            )

    def finish(self, done: int) -> None:
        if self.throttled:
            seconds = time.monotonic() - self.start
            log.info(
                "job %s: completed %d files in %.1f s (%.0f files/s); the store throttled "
                "%d replies, each retried",
                self.job_id,
                done,
                seconds,
                done / max(seconds, 1e-9),
                self.throttled,
            )
