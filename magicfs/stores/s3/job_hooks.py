"""The magic committer's S3 parts: its options and the hooks of the magic-layout flow.

``committer_for(..., committer="magic")`` is the magic-layout committer
(:mod:`magicfs.committers.magic_layout`) configured with this store's
:class:`S3CommitOptions` and :class:`S3JobHooks`; the flow, the records and the job
commit are the layout's. What S3 adds:

* **Unmarked jobs** (``intent_markers="auto"``). After the job marker's save, set-up
  looks for other jobs' trees at the destination and above it (one delimited listing
  per directory level, at once): none found, the job is *unmarked* — it writes its
  unmarked record in its tree and its writers put no per-file intent marker
  (:mod:`.tracking`). Before writing that record it lists the uploads already pending
  under the destination (one request per 1,000; more than 1,000 and the job stays
  marked) and keeps their ids in it, the job's *snapshot*: none of them is ever the
  job's. Write-then-list: of two jobs whose destinations are the same, or one above
  the other, at least one sees the other's tree. Writers skip the marker only in the
  process that set up their task attempt (:func:`magicfs.task_files.attempt_set_up_here`),
  so a task commit there still refuses a file that another process opened and never
  closed (its marker). ``intent_markers="always"`` keeps markers for destinations
  shared with other writers.
* **Task commit** tells a file written *around* magicfs (a plain object at a task
  path) from an unclosed one (one HEAD each, only when a commit is refused), refuses a
  path written by two processes in one attempt, and in ``in_memory`` mode a file this
  process has no record of.
* **Task abort** aborts every upload a record names (the release command in messages)
  and keeps the markers whose upload no record names for the job's sweep.
* **Clean-up** lists the job's tree once and sweeps the uploads on the keys its
  markers name and, unmarked, every upload under the destination not in its snapshot
  (:func:`.sweep.sweep_job`): everything not committed is aborted — failed,
  superseded, speculative and unreported attempts, killed writers, lost-reply
  duplicates — but what another job's tree may own; with the tree gone, it looks again
  at what was left to other jobs (:func:`.sweep.abort_spared`).

What an unmarked job gives up: a plain (non-magicfs) multipart upload under the
destination started during the job is aborted by its sweep (as Hadoop's
``fs.s3a.committer.abort.pending.uploads``), as are those of a staging committer's job
writing to the same destination at the same time (it keeps no tree here to be seen by).

Decision (differs from Hadoop, which deletes the attempt directory at task commit):
the attempt directory stays until the job ends (:attr:`S3JobHooks.keeps_attempt_records`).
It costs nothing extra (the job's clean-up deletes it in the same batches) and its
markers are what let the job find every upload of attempts Spark never reported.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Container, Iterable
from typing import TYPE_CHECKING, Any, cast

from ...errors import CommitFailedError, InvalidCommitData
from ...names import PENDING_SUFFIX, PENDINGSET_SUFFIX, UNMARKED_FILE
from ...paths import is_deferred_write, marker_path, pending_file, pending_records
from ...records import SinglePendingCommit
from ...statistics import FOREIGN_UPLOADS_ABORTED
from ...task_files import TaskFile
from ..deferred import collect
from ..job_hooks import DeferredJobHooks, LayoutJob, PendingListing, StoreOptions
from ..spool import KeySet
from ..validation import check_commit
from .checksums import DEFAULT_ALGORITHM as DEFAULT_CHECKSUM
from .checksums import checked_algorithm
from .client import client_config
from .retry import DEFAULT_POLICY, RetryPolicy
from .store import PendingUpload, S3Store
from .sweep import (
    abort_spared,
    abort_uploads,
    aread_unmarked,
    asnapshot,
    load_pending,
    other_jobs_cover,
    recorded_ids,
    release_command,
    sweep_job,
    tree_keys,
    uploads_of,
)
from .tracking import SNAPSHOT_LIMIT, UnmarkedRecord, is_magicfs_marker
from .writer import MARKER_PUT_COUNTER

if TYPE_CHECKING:
    from .deferred import S3Deferred

log = logging.getLogger("magicfs.committer.magic")

INTENT_MARKERS = ("auto", "always")


@dataclasses.dataclass(frozen=True)
class S3CommitOptions(StoreOptions):
    """The magic committer's S3 options.

    ``in_memory``: writers keep commit data in the task's process (fewer requests; task
    commit must run in the process that wrote the files: :mod:`.tracking`).
    ``checksum`` (``"CRC32"``): the writers' part checksums, verified at job commit;
    ``None``: none declared or recorded (a store that refuses checksum headers also
    needs ``request_checksum_calculation="when_required"``): :mod:`.checksums`.
    ``intent_markers``: ``"auto"``, a marker per file only when another job's tree
    covers the destination at set-up; ``"always"``, a marker per file, for destinations
    other writers share (module docstring). ``retry_policy``: how every S3 call is
    retried (:mod:`.retry`). ``max_request_rate``: a fixed cap, in requests per second,
    on this job's calls (:mod:`.rate`); throttling is handled without it (adaptive rate
    control, botocore's ``standard`` retries: :mod:`.client`).
    """

    in_memory: bool = False
    checksum: str | None = DEFAULT_CHECKSUM
    intent_markers: str = "auto"
    retry_policy: RetryPolicy = DEFAULT_POLICY
    max_request_rate: float | None = None

    def __post_init__(self) -> None:
        if self.intent_markers not in INTENT_MARKERS:
            raise ValueError(
                f"intent_markers must be one of {', '.join(INTENT_MARKERS)}; "
                f"got {self.intent_markers!r}"
            )
        object.__setattr__(self, "checksum", checked_algorithm(self.checksum))

    def view_options(self) -> dict[str, Any]:
        return {
            "in_memory": self.in_memory,
            "retry_policy": self.retry_policy,
            "checksum": self.checksum,
            "max_request_rate": self.max_request_rate,
        }

    def adapter_options(self) -> dict[str, Any]:
        return {"retry_policy": self.retry_policy, "max_request_rate": self.max_request_rate}

    def filesystem_options(self, options: dict[str, Any], threads: int) -> dict[str, Any]:
        # Timeouts, botocore's retries and the connection pool: .client.
        return {**options, "config_kwargs": client_config(options.get("config_kwargs"), threads)}

    def diagnostics(self) -> dict[str, str]:
        return {"magicfs.in_memory": str(self.in_memory).lower()}


class S3JobHooks(DeferredJobHooks):
    """The magic committer's S3 hooks (module docstring)."""

    options: S3CommitOptions

    def __init__(self, job: LayoutJob, options: StoreOptions):
        super().__init__(job, options)
        self.store: S3Store = cast("S3Deferred", job.deferred).store  # this store's adapter
        #: Known to be an unmarked job (set-up decided it, or its tree says so).
        self.unmarked = False
        #: The snapshot this job's set-up took (its sweep then reads no record back).
        self.snapshot: UnmarkedRecord | None = None
        #: Uploads the sweep left to other jobs that this job did not start (their abort,
        #: once the tree is gone, is logged and counted as such).
        self._foreign_spared: set[str] = set()

    @property
    def unmarked_record(self) -> str:
        return f"{self.job.magic_dir}/{UNMARKED_FILE}"

    def view_options(self) -> dict[str, Any]:
        return {**self.options.view_options(), "intent_markers": not self.unmarked}

    @property
    def commits_stay_where_set_up(self) -> bool:
        return self.options.in_memory

    # -- job set-up: marked or unmarked ---------------------------------------------------

    def after_setup(self, resume: bool) -> bool:
        """Whether the job is alone (``"auto"``); a resumed job reads its mode back from
        its tree. Writers learn it from the committer's ``fs`` and ``storage_options``
        (a writer that does not know it writes markers: safe)."""
        if resume:
            self.snapshot = self.read_unmarked()
            self.unmarked = self.snapshot is not None
        elif self.options.intent_markers == "auto":
            self.unmarked = self._go_unmarked()
        return self.unmarked

    def _go_unmarked(self) -> bool:
        """Alone on the destination with at most :data:`SNAPSHOT_LIMIT` pending uploads
        under it: write the unmarked record with their ids (the snapshot).

        The snapshot is taken alongside the listing of other jobs' trees (one round trip,
        not two): what makes it sound is only that it follows the job marker's save and
        precedes the job's first writer (:mod:`.sweep`)."""
        job = self.job
        snapshot = self.store.run_background(
            asnapshot(self.store, job.bucket, job.dest_key, SNAPSHOT_LIMIT)
        )
        try:
            others = other_jobs_cover(self.store, job.bucket, job.dest_key, job.job_id)
        finally:
            concurrent.futures.wait([snapshot])
        if others:
            log.info(
                "job %s: %d other jobs' trees cover %s (e.g. s3://%s): intent markers on",
                job.job_id,
                len(others),
                job.url,
                others[0],
            )
            return False
        before = snapshot.result()
        if before is None:
            log.info(
                "job %s: more than %d uploads are pending under %s: intent markers on "
                "(abort stale ones with 'magicfs uploads abort')",
                job.job_id,
                SNAPSHOT_LIMIT,
                job.url,
            )
            return False
        job.put(self.unmarked_record, UnmarkedRecord.document(job.job_id, before))
        self.snapshot = UnmarkedRecord(frozenset(before))
        return True

    def read_unmarked(self) -> UnmarkedRecord | None:
        return self.store.run(aread_unmarked(self.store, *self.store.split(self.unmarked_record)))

    # -- tasks ----------------------------------------------------------------------------

    def find_records(
        self,
        attempt_id: str,
        known: dict[str, SinglePendingCommit],
        entries: dict[str, dict[str, str]],
    ) -> tuple[list[str], dict[str, SinglePendingCommit], dict[str, str]]:
        """The generic rule, with S3's refusals (module docstring): unmarked writers put
        no marker, so there a file is also its ``.pending``, or known here; a refused
        file says why (around magicfs, unclosed, another process's in ``in_memory``)."""
        listing = sorted(entries)
        markers = [p for p in listing if is_deferred_write(p)]
        records = pending_records(listing)
        pendings = set(records)
        self._refuse_doubled(attempt_id, known, set(markers))
        unlisted = (pendings | known.keys()) - set(markers)
        if unlisted and (self.unmarked or self.read_unmarked() is not None):
            markers = sorted({*markers, *unlisted})
        if self.options.in_memory:
            unaccounted = [m for m in markers if m not in known]
            self._refuse_unaccounted(attempt_id, unaccounted, "in_memory")
        else:
            orphans = sorted(pendings - set(markers))
            if orphans:  # records of files deleted or replaced: their uploads must go
                self.discard_records([records[p] for p in orphans])
            unaccounted = [m for m in markers if m not in pendings and m not in known]
            self._refuse_unaccounted(attempt_id, unaccounted, "file")
        for marker in known.keys() - set(markers):  # written here, but its marker is gone
            self.job.operations().abort([known[marker]])
        return markers, self.load_beside([m for m in markers if m not in known], records), {}

    def _refuse_doubled(
        self, attempt_id: str, known: dict[str, SinglePendingCommit], markers: set[str]
    ) -> None:
        """An unmarked writer of this process put no marker: a marker at its path is another
        process's writer of the same path in this attempt (an ``xb`` writer let in, say).
        Which file the job should publish is unknown: refuse, naming it."""
        doubled = sorted(p for p, c in known.items() if p in markers and not _wrote_marker(c))
        if doubled:
            raise CommitFailedError(
                f"task attempt {attempt_id}: {len(doubled)} files were written both by "
                f"this process and by another process, e.g. s3://{doubled[0]}: which one to "
                "publish is unknown, and a create-only ('xb') writer may have been let in. "
                "Write each file of an attempt from one process (the attempt has been aborted)"
            )

    def _refuse_unaccounted(self, attempt_id: str, markers: list[str], mode: str) -> None:
        """Files of the attempt that cannot be committed: say exactly why (one HEAD each)."""
        if not markers:
            return
        deferred = self.job.deferred
        heads = {m: deferred.run_background(_amarker_info(deferred, m)) for m in markers}
        around, unclosed = [], []
        for marker, head in heads.items():
            info = head.result()
            if info is None:
                continue  # deleted meanwhile
            if not is_magicfs_marker(info["metadata"]):
                around.append((marker, info["size"]))
            else:
                unclosed.append(marker)
        if around:
            marker, size = around[0]
            raise CommitFailedError(
                f"task attempt {attempt_id}: {len(around)} files were written directly to "
                f"the store, around magicfs, e.g. s3://{marker} (a plain {size}-byte object, "
                "no deferred upload): they would never be committed. Write task files with "
                "committer.fs (job.fs), or open task.url(...) with committer.storage_options "
                "(the attempt has been aborted)"
            )
        if unclosed and mode == "in_memory":
            raise CommitFailedError(
                f"task attempt {attempt_id}: {len(unclosed)} files were not written by "
                f"this process, e.g. s3://{unclosed[0]}: in in_memory mode a task must commit "
                "in the process that wrote its files (the attempt has been aborted)"
            )
        if unclosed:
            raise CommitFailedError(
                f"task attempt {attempt_id}: {len(unclosed)} files were opened but not "
                f"closed successfully, e.g. s3://{unclosed[0]}; close every file before "
                "committing the task (its uploads have been aborted)"
            )

    def discard_records(self, paths: list[str]) -> None:
        abort_uploads(self.store, uploads_of(load_pending(self.store, paths)), release=self.release)
        self.job.delete_files(paths)

    def discard_attempt(
        self, attempt_id: str, files: list[TaskFile], listing: list[str]
    ) -> list[str]:
        """Abort every upload of the attempt that a record names. A marker whose upload no
        record names (its writer was killed, or its ``.pending`` was tampered with) is
        kept: it is how the job's sweep finds that upload, by key, when the job ends.
        (Aborting by key now could hit a speculative twin of this attempt writing the
        same keys.) Idempotent."""
        start = time.monotonic()
        commits = [f.commit for f in files if f.commit is not None]
        commits += load_pending(self.store, [p for p in listing if p.endswith(PENDING_SUFFIX)])
        aborted = abort_uploads(self.store, uploads_of(commits), release=self.release)
        named = {_marker_of(c.filename) for c in commits if self._trustworthy(c)} | {
            f.path for f in files if f.commit is not None
        }
        log.info(
            "task %s: aborted %d uploads in %.2fs", attempt_id, aborted, time.monotonic() - start
        )
        return [p for p in listing if is_deferred_write(p) and p not in named]

    def _trustworthy(self, commit: SinglePendingCommit) -> bool:
        """Does a loaded record really name the upload of the file it lies next to?"""
        if not commit.filename:
            return False
        try:
            check_commit(commit, self.job.bucket, self.job.dest_key, commit.filename)
        except InvalidCommitData:
            return False
        return True

    # -- clean-up: the uploads sweep --------------------------------------------------------

    def list_left(self) -> PendingListing:
        """Start listing the uploads under the destination (one request per 1,000)."""
        prefix = f"{self.job.dest_key}/" if self.job.dest_key else ""
        listing = collect(self.store.alist_uploads(self.job.bucket, prefix))
        return self.job.deferred.run_background(listing)

    def discard_left(
        self, keep: Container[str], tree: Iterable[list[str]], listed: PendingListing | None = None
    ) -> list[Any]:
        """Sweep the job's uploads, keeping the committed ones: every upload on a key the
        job's markers name is aborted and, if the tree says the job is unmarked, every
        upload under the destination not in its snapshot, but what other jobs' trees may
        own (:func:`.sweep.sweep_job`). Streamed for jobs of any size: the tree's keys wait
        on local disk. The uploads' listing (``listed``, or started here) runs while the
        tree is read. Returns the uploads left to other jobs."""
        job = self.job
        uploads = listed if listed is not None else self.list_left()
        keys = KeySet()
        unmarked = False
        spared: dict[str, PendingUpload] = {}
        pendingsets: list[str] = []  # one per committed task: kept for the sweep
        try:
            for page in tree:
                keys.update(tree_keys(self.store, page))
                pendingsets += [p for p in page if p.endswith(PENDINGSET_SUFFIX)]
                unmarked = unmarked or self.unmarked_record in page
            listed_uploads: list[PendingUpload] = uploads.result()
            snapshot = None
            if unmarked:  # known from set-up, else read back (another process's commit)
                snapshot = self.snapshot or self.read_unmarked()
            sweep = (keys, keep, pendingsets)
            aborted = self._sweep(*sweep, job.progress, listed_uploads, snapshot, spared)
            if aborted:
                # An abort racing a part upload can leave the upload alive: look again.
                self._sweep(*sweep, False, None, snapshot, spared)
        finally:
            keys.discard()
        job.stats.increment("committer_commits_aborted", aborted)
        return list(spared.values())

    def after_tree_deleted(self, left: list[Any]) -> None:
        """With the tree gone, the uploads left to other jobs whose trees are gone too are
        aborted (:func:`.sweep.abort_spared`)."""
        job = self.job
        aborted, foreign = abort_spared(
            self.store, job.bucket, job.dest_key, job.job_id, left, self._foreign_spared
        )
        job.stats.increment("committer_commits_aborted", aborted)
        job.stats.increment(FOREIGN_UPLOADS_ABORTED, len(foreign))

    def _sweep(
        self,
        keys: KeySet,
        keep: Container[str],
        pendingsets: list[str],
        progress: bool | None,
        uploads: list[PendingUpload] | None,
        snapshot: UnmarkedRecord | None,
        spared: dict[str, PendingUpload],
    ) -> int:
        job = self.job

        def own_ids(asked: set[str]) -> set[str]:
            """The upload ids the job's records name on ``asked``. Only a key the tree
            names can have a ``.pending`` beside its file (the tree is listed again for
            it); on any other key only a task's ``.pendingset`` can, and those were kept
            from the clean-up's one listing of the tree."""
            if any(key in keys for key in asked):
                return recorded_ids(self.store, job.list_records(job.magic_dir), asked)
            return recorded_ids(self.store, pendingsets, asked)

        outcome = sweep_job(
            self.store,
            job.bucket,
            job.dest_key,
            job.job_id,
            keys,
            keep,
            own_ids,
            progress,
            uploads,
            snapshot=snapshot,
        )
        for upload in outcome.left_for_other_jobs:
            spared.setdefault(upload.upload_id, upload)
        self._foreign_spared |= outcome.foreign_left
        job.stats.increment(FOREIGN_UPLOADS_ABORTED, len(outcome.foreign_aborted))
        return outcome.aborted

    @property
    def release(self) -> str:
        """The command that aborts the uploads this job leaves parked (messages)."""
        return release_command(self.job.bucket, self.job.dest_key, self.job.job_id)


def _marker_of(record: str) -> str:
    """The task file a ``.pending`` record's location (``s3://bkt/...x.pending``) stands
    for, as a listing of the tree names it (:func:`~magicfs.paths.pending_file`)."""
    return pending_file(record.removeprefix("s3://"))


def _wrote_marker(commit: SinglePendingCommit) -> bool:
    """Did the file's writer put an intent marker? (its record's own counter says)"""
    return commit.iostatistics.counters.get(MARKER_PUT_COUNTER, 1) != 0


async def _amarker_info(deferred: Any, file: str) -> dict[str, Any] | None:
    """What is stored for task file ``file``: its marker (this version's name,
    :func:`~magicfs.paths.marker_path`, then 0.1.0's at the path itself: a plain object
    written there around magicfs is found so), or ``None``."""
    info: dict[str, Any] | None = await deferred.arecord_info(marker_path(file))
    if info is None:
        info = await deferred.arecord_info(file)
    return info
