"""The magic committer: task output streams to S3 as uploads that only job commit completes.

Layout: see :mod:`magicfs.layouts.magic`. One job, start to end (the stages are the base
class's, :mod:`magicfs.protocol.committer`):

* ``setup_job``: check the conflict mode, delete an old ``_SUCCESS``, write the job
  marker (from now on the job accepts writers) and, alongside it, the job's entry in the
  bucket's job index (:mod:`magicfs.layouts.job_index`). Then, with ``intent_markers="auto"``,
  look for other jobs' trees at the destination and above it (one delimited listing
  per directory level, at once): none found, the job is *unmarked* — it writes its
  unmarked record in its tree and its writers put no per-file intent marker
  (:mod:`magicfs.stores.s3.tracking`). Before writing that record it lists the uploads
  already pending under the destination (one request per 1,000; more than 1,000 and
  the job stays marked) and keeps their ids in it, the job's *snapshot*: none of them is
  ever the job's. Write-then-list: of two jobs whose destinations are the same, or one
  above the other, at least one sees the other's tree.
* tasks write through ``committer.fs`` under ``task.path(...)`` (deferred uploads, each
  recorded by an intent marker — marked jobs and ``xb`` files — and, once closed, a
  ``.pending``: :mod:`magicfs.stores.s3.writer`).
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
  the keys its markers name and, unmarked, every upload under the destination not in its snapshot
  (:func:`magicfs.stores.s3.sweep.sweep_job`): everything not committed is aborted —
  failed, superseded, speculative and unreported attempts, killed writers, lost-reply
  duplicates — but what another job's tree may own. Then delete the tree, journal
  last (the job's index entry in the same DeleteObjects), and look again at what was
  left to other jobs (:func:`~magicfs.stores.s3.sweep.abort_spared`).

All but the S3 parts is the magic-layout committer's flow (:mod:`.magic_layout`); this
class is its S3 configuration: ``in_memory``, checksums, the refusal that tells a file
written around magicfs from an unclosed one, task abort by records, the uploads sweep.

What an unmarked job gives up: a plain (non-magicfs) multipart upload under the
destination started during the job is aborted by its sweep (as Hadoop's
``fs.s3a.committer.abort.pending.uploads``), as are those of a staging committer's job
writing to the same destination at the same time (it keeps no tree here to be seen by).
``xb`` keeps its promise across processes: its writer keeps a marker and, in an unmarked
job, also looks for a ``.pending`` at the path (a file closed there by an unmarked
writer); a task commit refuses a path this process wrote without a marker when another
process's marker is there too (the same path written twice in one attempt).

Writers skip the marker only in the process that set up their task attempt
(:func:`magicfs.task_files.attempt_set_up_here`), so a task commit there still refuses a
file that another process opened and never closed (its marker). What remains: if the
attempt's own set-up process is killed mid-write and another process commits the
attempt, that process's unclosed file has no marker and is not seen: it is left out of
the commit and its upload is swept at job end. ``intent_markers="always"`` keeps markers
for destinations shared with other writers.

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
from collections.abc import Container
from typing import Any

from ..errors import CommitFailedError, InvalidCommitData
from ..filesystems import MagicFileSystem
from ..filesystems.magic import MagicOptions
from ..names import PENDING_SUFFIX, UNMARKED_FILE
from ..paths import is_deferred_write
from ..protocol.committer import Published, TaskAttempt, elapsed
from ..records import IOStatisticsSnapshot, SinglePendingCommit
from ..stores.deferred import DeferredStoreSpec, collect
from ..stores.s3.checksums import DEFAULT_ALGORITHM as DEFAULT_CHECKSUM
from ..stores.s3.checksums import checked_algorithm
from ..stores.s3.store import PendingUpload
from ..stores.s3.sweep import (
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
from ..stores.s3.tracking import SNAPSHOT_LIMIT, UnmarkedRecord, is_magicfs_marker
from ..stores.s3.writer import MARKER_PUT_COUNTER
from ..stores.spool import KeySet
from ..stores.validation import check_commit
from ..task_files import TaskFile
from .magic_layout import MagicLayoutCommitter
from .pendingsets import S3PendingsetCommitter

log = logging.getLogger("magicfs.committer.magic")


class MagicCommitter(MagicLayoutCommitter, S3PendingsetCommitter):
    """Hadoop's S3A magic committer for fsspec: zero-rename commit on S3.

    Options beyond :class:`OutputCommitter`'s: ``in_memory`` (writers keep commit data
    in the task's process: fewer requests, but task commit must run in the process
    that wrote the files; see :mod:`magicfs.stores.s3.tracking`); ``retry_policy`` (how every
    S3 call is retried: :mod:`magicfs.stores.s3.retry`); ``checksum`` (``"CRC32"``: the
    writers' part checksums, verified at job commit; ``None``: none declared or recorded
    (a store that refuses checksum headers also needs ``request_checksum_calculation=
    "when_required"``): :mod:`magicfs.stores.s3.checksums`); ``intent_markers``
    (``"auto"``: a marker per file only when another job's tree covers the destination
    at set-up; ``"always"``: a marker per file, for destinations that other writers
    share: see the module docstring).
    """

    name = "magic"
    INTENT_MARKERS = ("auto", "always")

    def __init__(
        self,
        dest: str,
        *,
        in_memory: bool = False,
        checksum: str | None = DEFAULT_CHECKSUM,
        intent_markers: str = "auto",
        **options: Any,
    ):
        if intent_markers not in self.INTENT_MARKERS:
            raise ValueError(
                f"intent_markers must be one of {', '.join(self.INTENT_MARKERS)}; "
                f"got {intent_markers!r}"
            )
        self.in_memory = in_memory
        self.checksum = checked_algorithm(checksum)
        self.intent_markers = intent_markers
        #: Known to be an unmarked job (set-up decided it, or its tree says so).
        self.unmarked = False
        #: The snapshot this committer's set-up took (its sweep then reads no record back).
        self._snapshot: UnmarkedRecord | None = None
        self._spared: list[PendingUpload] = []
        super().__init__(dest, **options)

    def _view_options(self, spec: DeferredStoreSpec | None = None) -> dict[str, Any]:
        return {
            "in_memory": self.in_memory,
            "retry_policy": self.retry_policy,
            "checksum": self.checksum,
            "intent_markers": not self.unmarked,
        }

    def _magic_options(self) -> MagicOptions:
        magic = MagicOptions(job_root=self.dest)
        if self.in_memory:
            magic["in_memory"] = True
        if self.checksum != DEFAULT_CHECKSUM:
            magic["checksum"] = self.checksum
        if self.unmarked:
            magic["intent_markers"] = False
        return magic

    # -- job set-up: marked or unmarked ---------------------------------------------------

    @property
    def _unmarked_record(self) -> str:
        return f"{self.layout.magic_dir}/{UNMARKED_FILE}"

    def _setup_job(self, resume: bool) -> None:
        """The job marker, then (``"auto"``) whether the job is alone; a resumed job reads
        its mode back from its tree. Writers learn it from :attr:`fs` and
        :attr:`storage_options` (a writer that does not know it writes markers: safe)."""
        super()._setup_job(resume)
        if resume:
            self._snapshot = self._read_unmarked()
            self.unmarked = self._snapshot is not None
        elif self.intent_markers == "auto":
            self.unmarked = self._go_unmarked()
        if self.unmarked:
            self._fs = MagicFileSystem(fs=self.store_fs, job_root=self.dest, **self._view_options())

    def _go_unmarked(self) -> bool:
        """Alone on the destination with at most :data:`SNAPSHOT_LIMIT` pending uploads
        under it: write the unmarked record with their ids (the snapshot).

        The snapshot is taken alongside the listing of other jobs' trees (one round trip,
        not two): what makes it sound is only that it follows the job marker's save and
        precedes the job's first writer (:mod:`magicfs.stores.s3.sweep`)."""
        snapshot = self.store.run_background(
            asnapshot(self.store, self.bucket, self.dest_key, SNAPSHOT_LIMIT)
        )
        try:
            others = other_jobs_cover(self.store, self.bucket, self.dest_key, self.job_id)
        finally:
            concurrent.futures.wait([snapshot])
        if others:
            log.info(
                "job %s: %d other jobs' trees cover %s (e.g. s3://%s): intent markers on",
                self.job_id,
                len(others),
                self.url,
                others[0],
            )
            return False
        before = snapshot.result()
        if before is None:
            log.info(
                "job %s: more than %d uploads are pending under %s: intent markers on "
                "(abort stale ones with 'magicfs uploads abort')",
                self.job_id,
                SNAPSHOT_LIMIT,
                self.url,
            )
            return False
        self._put(self._unmarked_record, UnmarkedRecord.document(self.job_id, before))
        self._snapshot = UnmarkedRecord(frozenset(before))
        return True

    def _read_unmarked(self) -> UnmarkedRecord | None:
        return self.store.run(aread_unmarked(self.store, *self.store.split(self._unmarked_record)))

    def _store_diagnostics(self) -> dict[str, str]:
        return {"magicfs.in_memory": str(self.in_memory).lower()}

    # -- tasks ----------------------------------------------------------------------------

    def _gather_task_commits(
        self, task: TaskAttempt, files: list[TaskFile], entries: dict[str, dict[str, str]]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """Load and validate the attempt's commits (this process's, or its ``.pending`` files)."""
        listing = sorted(entries)
        markers = [p for p in listing if is_deferred_write(p)]
        pendings = {p.removesuffix(PENDING_SUFFIX) for p in listing if p.endswith(PENDING_SUFFIX)}
        # Files this process wrote: their commits are known here, nothing to read back.
        known = {f.path: f.commit for f in files if f.commit is not None}
        self._refuse_doubled(task, known, set(markers))
        unlisted = (pendings | known.keys()) - set(markers)
        if unlisted and (self.unmarked or self._read_unmarked() is not None):
            # Unmarked writers put no marker: a file is its .pending, or known here.
            markers = sorted({*markers, *unlisted})
        if self.in_memory:
            self._refuse_unaccounted(task, [m for m in markers if m not in known], "in_memory")
        else:
            orphans = sorted(pendings - set(markers))
            if orphans:  # records of files deleted or replaced: their uploads must go
                self._discard_records([p + PENDING_SUFFIX for p in orphans])
            unaccounted = [m for m in markers if m not in pendings and m not in known]
            self._refuse_unaccounted(task, unaccounted, "file")
        elsewhere = [m for m in markers if m not in known]
        pending = self._load_pendings([m + PENDING_SUFFIX for m in elsewhere])
        loaded = dict(zip(elsewhere, pending, strict=True))
        commits = [known.get(m) or loaded[m] for m in markers]
        sources = {
            id(c): c.filename or f"s3://{m}.pending" for m, c in zip(markers, commits, strict=True)
        }
        for marker in known.keys() - set(markers):  # written here, but its marker is gone
            self._operations().abort([known[marker]])
        stats = self._checked_task_commits(task, commits, [sources[id(c)] for c in commits])
        return commits, stats

    def _refuse_doubled(
        self, task: TaskAttempt, known: dict[str, SinglePendingCommit], markers: set[str]
    ) -> None:
        """An unmarked writer of this process put no marker: a marker at its path is another
        process's writer of the same path in this attempt (an ``xb`` writer let in, say).
        Which file the job should publish is unknown: refuse, naming it."""
        doubled = sorted(p for p, c in known.items() if p in markers and not _wrote_marker(c))
        if doubled:
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(doubled)} files were written both by "
                f"this process and by another process, e.g. s3://{doubled[0]}: which one to "
                "publish is unknown, and a create-only ('xb') writer may have been let in. "
                "Write each file of an attempt from one process (the attempt has been aborted)"
            )

    def _refuse_unaccounted(self, task: TaskAttempt, markers: list[str], mode: str) -> None:
        """Files of the attempt that cannot be committed: say exactly why (one HEAD each)."""
        if not markers:
            return
        heads = {m: self.deferred.run_background(self.deferred.arecord_info(m)) for m in markers}
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
        self._delete_files(paths)

    def _abort_task(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Abort every upload of the attempt that a record names, and delete its records.

        A marker whose upload no record names (its writer was killed, or its ``.pending``
        was tampered with) is kept: it is how the job's sweep finds that upload, by key,
        when the job ends. (Aborting by key now could hit a speculative twin of this
        attempt writing the same keys.) Idempotent.
        """
        start = time.monotonic()
        listing = self._list(self.layout.task_attempt_dir(task.attempt_id))
        task_record = self.layout.pendingset(task.task_id)
        commits = [f.commit for f in files if f.commit is not None]
        commits += load_pending(self.store, [p for p in listing if p.endswith(PENDING_SUFFIX)])
        aborted = abort_uploads(self.store, uploads_of(commits), release=self._release)
        named = {_marker_of(c.filename) for c in commits if self._trustworthy(c)} | {
            f.path for f in files if f.commit is not None
        }
        kept = [p for p in listing if is_deferred_write(p) and p not in named]
        records = [p for p in listing if p not in kept]
        records += [
            self.layout.attempt_pendingset(task.attempt_id),
            self.layout.started_marker(task.attempt_id),
        ]
        if self._recorded_attempt(task_record) == task.attempt_id:
            records.append(task_record)
        self._delete_files(records)
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

    # -- clean-up: the uploads sweep --------------------------------------------------------

    def _discard_left(self, published: Published | None) -> None:
        """Sweep the job's uploads, keeping the committed ones: every upload on a key the
        job's markers name is aborted and, if the tree says the job is unmarked, every
        upload under the destination not in its snapshot, but what other jobs' trees may own
        (:func:`~magicfs.stores.s3.sweep.sweep_job`). Streamed for jobs of any size: the
        tree's keys wait on local disk."""
        keys = KeySet()
        unmarked = False
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # both listings at once
                prefix = f"{self.dest_key}/" if self.dest_key else ""
                uploads = pool.submit(
                    self.store.run, collect(self.store.alist_uploads(self.bucket, prefix))
                )
                for page in self._tree_pages():
                    keys.update(tree_keys(self.store, page))
                    unmarked = unmarked or self._unmarked_record in page
                listed = uploads.result()
            snapshot = None
            if unmarked:  # known from set-up, else read back (another process's commit)
                snapshot = self._snapshot or self._read_unmarked()
            kept = self.kept_uploads(published)
            aborted = self._sweep(keys, kept, self.progress, listed, snapshot)
            if aborted:
                # An abort racing a part upload can leave the upload alive: look again.
                self._sweep(keys, kept, False, None, snapshot)
        finally:
            keys.discard()
        self.stats.increment("committer_commits_aborted", aborted)

    def _clean_up(self, loaded: Any, published: Published | None) -> None:
        """The flow's clean-up; then, with the tree gone, the uploads left to other jobs
        whose trees are gone too are aborted (:func:`~magicfs.stores.s3.sweep.abort_spared`)."""
        self._spared = []
        super()._clean_up(loaded, published)
        spared, self._spared = self._spared, []
        aborted = abort_spared(self.store, self.bucket, self.dest_key, self.job_id, spared)
        self.stats.increment("committer_commits_aborted", aborted)

    def _sweep(
        self,
        keys: KeySet,
        keep: Container[str],
        progress: bool | None,
        uploads: list[PendingUpload] | None = None,
        snapshot: UnmarkedRecord | None = None,
    ) -> int:
        outcome = sweep_job(
            self.store,
            self.bucket,
            self.dest_key,
            self.job_id,
            keys,
            keep,
            lambda shared: recorded_ids(self.store, self._list(self.layout.magic_dir), shared),
            progress,
            uploads,
            snapshot=snapshot,
        )
        seen = {u.upload_id for u in self._spared}
        self._spared += [u for u in outcome.left_for_other_jobs if u.upload_id not in seen]
        return outcome.aborted

    @property
    def _release(self) -> str:
        """The command that aborts the uploads this job leaves parked (messages)."""
        return release_command(self.bucket, self.dest_key, self.job_id)


def _marker_of(record: str) -> str:
    """The marker path of a ``.pending`` record's location (``s3://bkt/...x.pending``)."""
    return record.removeprefix("s3://").removesuffix(PENDING_SUFFIX)


def _wrote_marker(commit: SinglePendingCommit) -> bool:
    """Did the file's writer put an intent marker? (its record's own counter says)"""
    return commit.iostatistics.counters.get(MARKER_PUT_COUNTER, 1) != 0
