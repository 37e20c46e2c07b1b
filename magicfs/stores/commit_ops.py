"""Making pending files visible, or throwing them away: job commit's publish, written once.

Over any store with deferred writes (:class:`~.deferred.DeferredStore`: S3's
multipart uploads, Azure's block lists):

* **complete** every pending commit in parallel (``threads`` at once, as coroutines on
  the store's IO loop). If one fails, no new one starts and the failure is raised,
  naming the file; what to do about the published ones is the committer's decision
  (roll back, or keep for a retry: see :mod:`magicfs.protocol.committer`). A commit an
  earlier attempt of this job commit already published counts as done (the backend's
  ``apublish`` recognises it).
* **unpublish** (roll back) deletes the files this job's commits published (the
  backend's ``apublished``). It needs nothing but the commits, so it works the same
  after an in-process failure and after a driver died mid-commit.
* **abort** discards what the commits left pending, where the store can.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import CommitFailedError
from ..parallel import loop_map
from ..progress import batches, progress_bar
from ..records import SinglePendingCommit
from ..statistics import IOStatisticsStore
from .create_only import is_create_only
from .deferred import DeferredStore

log = logging.getLogger("magicfs.s3.commit")

#: Commits checked, then deleted, per round of a roll-back (an S3 DeleteObjects' worth).
ROLLBACK_BATCH = 1000


@dataclass
class CompletionResult:
    """How many commits were made visible, and their bytes."""

    files: int = 0
    bytes: int = 0


class CommitOperations:
    """Complete, unpublish and abort the pending commits of one job."""

    def __init__(
        self,
        store: DeferredStore,
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
        failed: list[tuple[SinglePendingCommit, BaseException]] = []
        report = Progress(self.store, total, self.job_id)

        async def complete(commit: SinglePendingCommit) -> None:
            try:
                with self.stats.track("committer_materialize_file"):
                    await self.acomplete(commit)
            except BaseException as error:
                failed.append((commit, error))
                raise
            result.files += 1  # counted here, on the IO loop: every completion, in order or not
            result.bytes += commit.length

        # `threads` completions in flight, as coroutines on the store's IO loop (no thread
        # per call); this thread reads `commits` and reports progress.
        with progress_bar(total, "completing uploads", self.progress) as bar:
            try:
                for _ in loop_map(self.store.run_background, complete, commits, self.threads):
                    bar.update()
                    report.update(bar, result.files)
            except Exception:
                if not failed:  # not a completion's failure: reading `commits`, say
                    raise
        report.finish(result.files)
        if self.store.capabilities.counts_throttling:  # elsewhere 0 would claim a count
            self.stats.increment("store_io_throttled", report.throttled)  # Hadoop's name
        self.stats.increment("committer_commits_completed", result.files)
        self.stats.increment("committer_bytes_committed", result.bytes)
        if failed:
            commit, failure = failed[0]
            record = f", written at {commit.filename}" if commit.filename else ""
            raise CommitFailedError(
                f"could not complete {self.store.url(commit.destination)} (upload "
                f"{commit.upload_id}{record}): {type(failure).__name__}: {failure}; "
                f"{result.files} of {total} files had been completed"
            ) from failure
        return result

    def complete(self, commit: SinglePendingCommit) -> None:
        """Complete one commit (see the module docstring for retried commits)."""
        self.store.run_background(self.acomplete(commit)).result()

    async def acomplete(self, commit: SinglePendingCommit) -> None:
        """:meth:`complete` for coroutines running on the store's IO loop."""
        await self.store.apublish(commit)

    def _made_by_this_job(self, commit: SinglePendingCommit) -> bool:
        return self.store.run_background(self.store.apublished(commit)).result()

    # -- discard -------------------------------------------------------------------------

    def unpublish(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Delete the files this job's commits published; returns how many.

        Streams ``commits`` in batches of :data:`ROLLBACK_BATCH` (one check each,
        ``threads`` at once, then the backend's delete of the batch).
        """
        deleted = 0
        with concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-unpublish") as pool:
            for batch in batches(commits, ROLLBACK_BATCH):
                made = list(pool.map(self._made_by_this_job, batch))
                ours = [commit for commit, mine in zip(batch, made, strict=True) if mine]
                if ours:
                    self.store.delete(ours)
                    self.stats.increment("committer_commits_reverted", len(ours))
                    deleted += len(ours)
                create_only = [commit for commit in batch if is_create_only(commit)]
                list(pool.map(self._rolled_back, create_only))  # their claims, once deleted
        return deleted

    def _rolled_back(self, commit: SinglePendingCommit) -> None:
        self.store.run_background(self.store.arolled_back(commit)).result()

    def abort(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Discard what the commits left pending (concurrently); what is gone is fine."""
        aborted = self.store.discard(commits)
        self.stats.increment("committer_commits_aborted", aborted)
        return aborted


class Progress:
    """Log lines for a long completion: rate, throttled replies, time left.

    The tqdm bar (on a terminal) shows rate and ETA itself and gets the number of
    throttled replies beside them; a job running without a terminal (Spark's driver,
    a scheduler) gets an INFO line every :attr:`every` seconds instead, and one at the
    end when the store throttled the job. Throttled replies are named only on a store
    that counts them (:attr:`~.deferred.DeferredCapabilities.counts_throttling`);
    elsewhere a 0 would claim what nobody counted.
    """

    every = 15.0

    def __init__(self, store: DeferredStore, total: int, job_id: str):
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
            throttled = (
                f"{self.throttled} throttled replies, "
                if self.store.capabilities.counts_throttling
                else ""
            )
            log.info(
                "job %s: completed %d of %d files (%.0f files/s, %sabout %.0f s left)",
                self.job_id,
                done,
                self.total,
                rate,
                throttled,
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
