"""Making pending uploads visible, or throwing them away: the S3 half of every S3 committer.

* **complete** every pending commit in parallel (``threads`` at once). If one fails,
  no new completion starts; the ones already done are **reverted** (their objects
  deleted), every other upload is **aborted**, and the first error is raised: nothing
  of a failed job stays visible.
* A completion answered with ``NoSuchUpload`` counts as done when the destination
  object exists with this job's id in its metadata and the recorded length: that is a
  retried job commit finding its own earlier work (real S3 forgets completed upload
  ids; moto answers a repeat completion with success).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..errors import CommitFailedError
from ..progress import progress_bar
from ..records import SinglePendingCommit
from ..statistics import IOStatisticsStore
from .store import S3Store, error_code
from .sweep import RecordedUpload, abort_uploads
from .tracking import META_JOB_ID

log = logging.getLogger("magicfs.s3.commit")

IF_NONE_MATCH_KEY = "magicfs.if-none-match"


@dataclass
class CompletionResult:
    """Commits made visible, in completion order."""

    completed: list[SinglePendingCommit] = field(default_factory=list)
    bytes: int = 0


class CommitOperations:
    """Complete, revert and abort pending uploads for one job."""

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

    def complete_all(self, commits: Sequence[SinglePendingCommit]) -> CompletionResult:
        """Make every commit visible, or none: see the module docstring."""
        result = CompletionResult()
        failure: BaseException | None = None
        failed: SinglePendingCommit | None = None
        stop = threading.Event()
        lock = threading.Lock()

        def complete(commit: SinglePendingCommit) -> None:
            if stop.is_set():
                return
            try:
                with self.stats.track("committer_materialize_file"):
                    self.complete(commit)
            except BaseException:
                stop.set()  # before this worker can pick up another commit
                raise
            with lock:
                result.completed.append(commit)
                result.bytes += commit.length

        with (
            progress_bar(len(commits), "completing uploads", self.progress) as bar,
            concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-commit") as pool,
        ):
            futures = {pool.submit(complete, commit): commit for commit in commits}
            for future in concurrent.futures.as_completed(futures):
                error = future.exception()
                if error is not None and failure is None:
                    failure, failed = error, futures[future]
                    stop.set()
                bar.update()
        self.stats.increment("committer_commits_completed", len(result.completed))
        self.stats.increment("committer_bytes_committed", result.bytes)
        if failure is None:
            return result

        done = {id(commit) for commit in result.completed}
        not_done = [commit for commit in commits if id(commit) not in done]
        log.error(
            "job %s: completing s3://%s failed (%s); reverting %d completed files and "
            "aborting %d uploads",
            self.job_id,
            failed.destination if failed else "?",
            failure,
            len(result.completed),
            len(not_done),
        )
        problems = []
        try:
            self.revert(result.completed)
        except OSError as e:
            problems.append(f"revert failed: {e}")
        try:
            self.abort(not_done)
        except OSError as e:
            problems.append(f"abort failed: {e}")
        detail = f"; {'; '.join(problems)}" if problems else ""
        raise CommitFailedError(
            f"job {self.job_id}: could not complete s3://{failed.destination if failed else '?'}"
            f": {failure}. {len(result.completed)} completed files were deleted again and "
            f"{len(not_done)} uploads aborted{detail}"
        ) from failure

    def complete(self, commit: SinglePendingCommit) -> None:
        """Complete one upload (see the module docstring for retried commits)."""
        try:
            self.store.complete_upload(
                commit.bucket,
                commit.destination_key,
                commit.upload_id,
                commit.etags,
                length=commit.length,
                if_none_match=commit.extra_data.get(IF_NONE_MATCH_KEY) == "*",
            )
        except OSError as e:
            if error_code(e) == "NoSuchUpload" and self._already_completed(commit):
                log.info("s3://%s was completed by an earlier attempt", commit.destination)
                return
            raise

    def _already_completed(self, commit: SinglePendingCommit) -> bool:
        head = self.store.head_object(commit.bucket, commit.destination_key)
        return (
            head is not None
            and head.get("ContentLength") == commit.length
            and (head.get("Metadata") or {}).get(META_JOB_ID) == self.job_id
        )

    # -- discard -------------------------------------------------------------------------

    def revert(self, commits: Iterable[SinglePendingCommit]) -> None:
        """Delete the objects these commits created (used when a job commit fails)."""
        by_bucket: dict[str, list[str]] = {}
        for commit in commits:
            by_bucket.setdefault(commit.bucket, []).append(commit.destination_key)
        for bucket, keys in by_bucket.items():
            self.store.delete_objects(bucket, keys)
            self.stats.increment("committer_commits_reverted", len(keys))

    def abort(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Abort the uploads (concurrently); uploads already gone are fine."""
        uploads = [
            RecordedUpload(c.bucket, c.destination_key, c.upload_id, c.filename or "")
            for c in commits
        ]
        aborted = abort_uploads(self.store, uploads)
        self.stats.increment("committer_commits_aborted", aborted)
        return aborted
