"""Making pending uploads visible, or throwing them away: the S3 half of every S3 committer.

* **complete** every pending commit in parallel (``threads`` at once). If one fails, no
  new completion starts and the failure is raised, naming the file; what to do about
  the completed ones is the committer's decision (roll back, or keep for a retry: see
  :mod:`magicfs.committers.base`).
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..errors import CommitFailedError
from ..progress import progress_bar
from ..records import SinglePendingCommit
from ..statistics import IOStatisticsStore
from .store import S3Store, error_code
from .sweep import abort_uploads, uploads_of
from .tracking import META_JOB_ID

log = logging.getLogger("magicfs.s3.commit")

IF_NONE_MATCH_KEY = "magicfs.if-none-match"


@dataclass
class CompletionResult:
    """Commits made visible, in completion order."""

    completed: list[SinglePendingCommit] = field(default_factory=list)
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

    def complete_all(self, commits: Sequence[SinglePendingCommit]) -> CompletionResult:
        """Make every commit visible; on the first failure stop and raise (see module docs)."""
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
        if failure is not None:
            assert failed is not None
            record = f", written at {failed.filename}" if failed.filename else ""
            raise CommitFailedError(
                f"could not complete s3://{failed.destination} (upload {failed.upload_id}"
                f"{record}): {type(failure).__name__}: {failure}; {len(result.completed)} of "
                f"{len(commits)} files had been completed"
            ) from failure
        return result

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
            if error_code(e) == "NoSuchUpload" and self._made_by_this_job(commit):
                log.info("s3://%s was completed by an earlier attempt", commit.destination)
                return
            raise

    def _made_by_this_job(self, commit: SinglePendingCommit) -> bool:
        head = self.store.head_object(commit.bucket, commit.destination_key)
        return (
            head is not None
            and head.get("ContentLength") == commit.length
            and (head.get("Metadata") or {}).get(META_JOB_ID) == self.job_id
        )

    # -- discard -------------------------------------------------------------------------

    def unpublish(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Delete the objects this job's completions created; returns how many."""
        commits = list(commits)
        with concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-unpublish") as pool:
            made = list(pool.map(self._made_by_this_job, commits))
        by_bucket: dict[str, list[str]] = {}
        for commit, ours in zip(commits, made, strict=True):
            if ours:
                by_bucket.setdefault(commit.bucket, []).append(commit.destination_key)
        for bucket, keys in by_bucket.items():
            self.store.delete_objects(bucket, keys)
            self.stats.increment("committer_commits_reverted", len(keys))
        return sum(len(keys) for keys in by_bucket.values())

    def abort(self, commits: Iterable[SinglePendingCommit]) -> int:
        """Abort the uploads (concurrently); uploads already gone are fine."""
        aborted = abort_uploads(self.store, uploads_of(commits))
        self.stats.increment("committer_commits_aborted", aborted)
        return aborted
