"""Finding and aborting a job's uploads on S3, from its records (:mod:`.tracking`).

**By key, at job end.** Every upload a marked job's writers create is on a key named
by an intent marker (or ``.pending``) in the job's tree, written before the upload existed.
So when a job ends (commit, abort, clean-up) its sweep lists the job's tree once,
collects those keys, lists the uploads under the destination once (paged: 1,000 per
request) and aborts every upload on one of its keys that no committed record names.
That finds everything: uploads of failed, superseded, speculative and unreported
attempts; a writer killed between creating its upload and closing it; the second
upload of a ``CreateMultipartUpload`` whose reply was lost and retried; files written
twice or after their task committed. It costs one listing per 1,000 pending uploads
under the destination, never a request per file.

**By snapshot, for an unmarked job** (:mod:`.tracking`: no other job covered its
destination at set-up, its writers put no marker): the candidates are also every upload
under the destination that is *not in the job's snapshot* (the upload ids its unmarked
record lists: those pending under the destination at set-up) and that no committed
record keeps, but those under a hidden name (:func:`hidden_below`: the job's own files
there keep their markers). An upload in the snapshot is never the job's: its writers
learn the mode from the committer, after set-up listed the snapshot and wrote the
record. No clock is read. A record that cannot be parsed (tampered with) makes the job
fall back to the marked rule: only keys its markers and records name (a warning names
the record). The listing still costs one request per 1,000 pending uploads; spared
candidates are the only extra (below).

**Other magicfs jobs of the magic layout are never touched** (what an unmarked job's sweep
*does* take from others is stated where the user chooses it: :mod:`.tracking` —
a plain multipart upload under the destination started during the job, and the uploads
of a staging committer's job writing to the same destination, which keeps no tree
here; ``intent_markers="always"`` is the setting for destinations shared that way).
A candidate another job's tree may own is left to
that job and reported (``left_for_other_jobs``), unless this job's own records name its
upload id (its ``.pending`` and its tasks' ``.pendingset``: a file whose task commit
waited for it, or written in memory, is named by the latter only). Another job ``K``
*may own* an upload if K's tree covers its
key (K's destination is at or above the key) and either K's markers or records name the
key, or K is unmarked and the upload is under K's destination, not under a hidden name
and not in K's snapshot (an unreadable snapshot: any such upload) — exactly what K's own
sweep may take, or an upload both spare would stay parked. The trees are
looked for (one listing with delimiter per directory level) at every level from the
bucket root to each candidate's directory, only when there are candidates: a job at
``out/`` covers ``out/year=1/``, and a nested job at ``out/year=1/`` covers part of ``out/``.

*Why this is enough* (ordering): a job's set-up writes its job marker, then lists the
other trees covering its destination and its snapshot (at once) and, alone, writes its
unmarked record, all before any writer of the job starts. The sweep lists the uploads (L1), then
the trees (L2). An upload ``U`` of another job K that is in L1 was created after K's
tree existed (K's writers write after K's set-up, or after their marker in K's tree),
and so after K's snapshot: U is never in it. K deletes its tree only after its own
sweep has aborted or its commit completed U. So if K's tree is missing from L2, U is
already aborted or completed (aborting it again is harmless); if it is there, U is
spared. Two jobs that could both own an upload can both spare it when their sweeps
overlap: so a job that spared uploads looks again once its own tree is deleted
(:func:`abort_spared`) and aborts those no remaining tree may own; the last of the two
to delete its tree sees the other's gone. What remains parked is reported.

**Uploads the job did not start are named.** An unmarked job's sweep takes, by its
snapshot, uploads on keys that no marker and no ``.pending`` of the job names; where no
``.pendingset`` of the job names its id either, nothing ties such an upload to the job:
it is most likely another tool's multipart upload under the destination (the writer of
this job that could have started it — one killed before it closed its file, in a process
that set up its attempt — leaves the same trace). Each one aborted is logged at WARNING
(logger ``magicfs.s3.sweep``: key, upload id, initiation time, and
``intent_markers="always"``, the setting that spares them) and counted
(:attr:`SweepOutcome.foreign_aborted`; the job's counter
:data:`~magicfs.statistics.FOREIGN_UPLOADS_ABORTED` and its summary's
``foreign_uploads_aborted``). An upload on a key the job's markers or records name is
the job's (a writer killed before its ``.pending``, a lost-reply duplicate) and is
aborted without a warning. Telling them apart costs one more listing of the job's tree
and a read of its ``.pendingset`` records, only when such uploads are there.

**By record, for one attempt or file.** Task abort and ``rm`` of a task file abort the
uploads their ``.pending`` records name (a speculative twin of the attempt may be
writing the same keys right now, so nothing is aborted by key before the job ends).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidCommitData, StoreCallError, UploadsLeftError
from ...names import MAGIC_JOB_PREFIX, PENDING_SUFFIX, PENDINGSET_SUFFIX, UNMARKED_FILE
from ...parallel import loop_map
from ...paths import (
    final_destination,
    is_deferred_write,
    marked_destinations,
    pending_file,
    split_magic_path,
)
from ...progress import progress_bar
from ...records import PendingSet, SinglePendingCommit
from .store import PendingUpload, S3Store, iterate
from .tracking import UnmarkedRecord

log = logging.getLogger("magicfs.s3.sweep")


@dataclass(frozen=True)
class RecordedUpload:
    """An upload to abort, and where it was found (for messages)."""

    bucket: str
    key: str
    upload_id: str
    source: str


@dataclass
class SweepOutcome:
    """What a job sweep did: uploads aborted (``foreign_aborted`` of them not started by
    the job, each logged), and uploads left for another job."""

    aborted: int = 0
    left_for_other_jobs: list[PendingUpload] = field(default_factory=list)
    foreign_aborted: list[PendingUpload] = field(default_factory=list)
    #: The ids among ``left_for_other_jobs`` that the job did not start either
    #: (:func:`abort_spared` logs and counts them if it aborts them).
    foreign_left: set[str] = field(default_factory=set)


#: Uploads a message names one by one; the rest are counted.
NAMED_UPLOADS = 3
#: Aborts in flight at once: the committers' S3 client has 16 connections by default
#: (:mod:`.client`), so more would only queue, and each would retry on its own.
ABORTS_IN_FLIGHT = 16


def abort_uploads(
    store: S3Store,
    uploads: Iterable[RecordedUpload],
    progress: bool | None = None,
    release: str | None = None,
    aborted: Callable[[RecordedUpload], None] | None = None,
) -> int:
    """Abort each upload (:data:`ABORTS_IN_FLIGHT` at once); uploads already gone are fine.
    Returns the aborts made; ``aborted`` is called with each upload this call aborted (not
    those already gone), also when others are left.

    **Bounded.** Once one abort has failed through all its retries (the store is down or
    refusing aborts: :attr:`StoreCallError.gave_up <magicfs.errors.StoreCallError>`), no
    further abort is started and those in flight are cancelled: a job's roll-back or
    clean-up then ends within about one call's retries however many uploads it has, where
    waiting out every abort's retries took 14 minutes for 200 uploads (see :mod:`.retry`).
    Everything not aborted is reported by :class:`~magicfs.errors.UploadsLeftError`: how
    many, the first few, the first error and ``release``, the command that aborts them
    later (a generic ``magicfs uploads abort`` line when none is given).
    """
    listed = list(uploads)
    settled: dict[int, bool] = {}  # position in `listed` -> aborted (False: already gone)
    errors: list[OSError] = []

    running: set[asyncio.Task[Any]] = set()

    async def abort(number: int) -> None:
        upload, task = listed[number], asyncio.current_task()
        assert task is not None
        running.add(task)
        try:
            settled[number] = await store.aabort_upload(upload.bucket, upload.key, upload.upload_id)
        except OSError as e:
            errors.append(e)
            if isinstance(e, StoreCallError) and e.gave_up:  # the store keeps refusing aborts:
                for other in running - {task}:  # start no more, stop the retries of the others
                    other.cancel()  # (counted as left)
                raise
        finally:
            running.discard(task)

    gave_up = False
    with progress_bar(len(listed), "aborting uploads", progress) as bar:
        try:
            for _ in loop_map(store.run_background, abort, range(len(listed)), ABORTS_IN_FLIGHT):
                bar.update()
        except StoreCallError:
            gave_up = True
    if aborted is not None:
        for number in sorted(n for n, done in settled.items() if done):
            aborted(listed[number])
    left = [upload for number, upload in enumerate(listed) if number not in settled]
    if left:
        raise _uploads_left(listed, left, errors[0], gave_up, release)
    return sum(settled.values())


def _uploads_left(
    listed: list[RecordedUpload],
    left: list[RecordedUpload],
    error: BaseException,
    gave_up: bool,
    release: str | None,
) -> UploadsLeftError:
    order = {id(u): n for n, u in enumerate(listed)}
    left.sort(key=lambda u: order[id(u)])
    named = ", ".join(
        f"s3://{u.bucket}/{u.key} (upload {u.upload_id})" for u in left[:NAMED_UPLOADS]
    )
    more = f" and {len(left) - NAMED_UPLOADS:,} more" if len(left) > NAMED_UPLOADS else ""
    stopped = "; the store kept failing aborts, so the rest were not waited for" if gave_up else ""
    command = release or (
        f"magicfs uploads abort --force s3://{left[0].bucket}/<prefix> (narrow it with --job "
        "or --older-than to spare other jobs' uploads)"
    )
    return UploadsLeftError(
        f"could not abort {len(left):,} of {len(listed):,} uploads, left parked: {named}{more}; "
        f"first error: {type(error).__name__}: {error}{stopped}. Abort them once the store "
        f"accepts aborts again: {command}",
        uploads=[(u.bucket, u.key, u.upload_id) for u in left],
        command=command,
    )


def release_command(bucket: str, dest_key: str, job_id: str) -> str:
    """The command that aborts what job ``job_id`` left parked under ``s3://bucket/dest_key``."""
    return f"magicfs uploads abort --force --job {job_id} s3://{bucket}/{dest_key}".rstrip("/")


def load_pending(store: S3Store, paths: Iterable[str]) -> list[SinglePendingCommit]:
    """The ``.pending`` records at ``paths`` (loaded concurrently).

    Missing and unreadable records are logged and skipped: this serves clean-up, which
    must get as far as it can (the job's key sweep still finds their uploads).
    """
    return _load_commits(store, paths, SinglePendingCommit.MAX_BYTES, _pending_commits)


def load_pendingsets(store: S3Store, paths: Iterable[str]) -> list[SinglePendingCommit]:
    """The commits of the ``.pendingset`` records at ``paths``, as :func:`load_pending`."""
    return _load_commits(store, paths, PendingSet.MAX_BYTES, _pendingset_commits)


def _pending_commits(data: bytes, source: str) -> list[SinglePendingCommit]:
    return [SinglePendingCommit.from_json(data, source=source)]


def _pendingset_commits(data: bytes, source: str) -> list[SinglePendingCommit]:
    return PendingSet.from_json(data, source=source).commits


def _load_commits(
    store: S3Store,
    paths: Iterable[str],
    limit: int,
    parse: Callable[[bytes, str], list[SinglePendingCommit]],
) -> list[SinglePendingCommit]:
    """The commits the records at ``paths`` hold (read concurrently, each ``parse``d);
    missing and unreadable records skipped, the unreadable with a warning."""
    reads = [(p, store.run_background(store.aread(*store.split(p), limit))) for p in paths]
    commits = []
    for path, future in reads:
        try:
            commits += parse(future.result(), f"s3://{path}")
        except FileNotFoundError:
            continue
        except InvalidCommitData as e:
            log.warning("skipping unreadable record: %s", e)
    return commits


def uploads_of(commits: Iterable[SinglePendingCommit]) -> list[RecordedUpload]:
    return [
        RecordedUpload(c.bucket, c.destination_key, c.upload_id, c.filename or "") for c in commits
    ]


def tree_keys(store: S3Store, listing: Iterable[str]) -> set[str]:
    """Destination keys named by the markers and ``.pending`` records among ``listing``
    (:func:`~magicfs.paths.marked_destinations`, without their bucket)."""
    return {store.split(destination)[1] for destination in marked_destinations(listing)}


def uploads_on_keys(
    store: S3Store, bucket: str, prefix: str, keys: set[str]
) -> Iterable[PendingUpload]:
    """The pending uploads under ``prefix`` whose key is one of ``keys`` (paged listing)."""
    if not keys:
        return
    for upload in iterate(store, store.alist_uploads(bucket, prefix)):
        if upload.key in keys:
            yield upload


def _log_left(job_id: str, bucket: str, uploads: Iterable[PendingUpload]) -> None:
    """Say which uploads the sweep leaves to another job whose tree covers them."""
    for upload in uploads:
        log.warning(
            "job %s: leaving upload %s of s3://%s/%s to the other job whose tree covers it",
            job_id,
            upload.upload_id,
            bucket,
            upload.key,
        )


def sweep_job(
    store: S3Store,
    bucket: str,
    dest_key: str,
    job_id: str,
    keys: Container[str],
    keep: Container[str],
    own_ids: Callable[[set[str]], set[str]],
    progress: bool | None = None,
    uploads: Iterable[PendingUpload] | None = None,
    *,
    snapshot: UnmarkedRecord | None = None,
) -> SweepOutcome:
    """Abort every upload of the job, except the ids in ``keep``: those on one of its
    ``keys``, those on a key inside the job's own tree (no writer's: the conditional-write
    probe's, left by a process killed while probing) and, for an unmarked job
    (``snapshot``: its record), those under the destination not in its snapshot.

    ``keep``: the upload ids this job completed (or must keep). ``own_ids(keys)``: the
    upload ids the job's own records name on those keys (asked only for keys another
    job's tree may own). ``uploads``: the destination's pending uploads, if the caller
    listed them already. See the module docstring.
    """
    prefix = f"{dest_key}/" if dest_key else ""
    listed = iterate(store, store.alist_uploads(bucket, prefix)) if uploads is None else uploads
    own_tree = f"{prefix}{MAGIC_JOB_PREFIX}{job_id}/"
    candidates = [
        u
        for u in listed
        if u.upload_id not in keep
        and (
            u.key in keys
            or u.key.startswith(own_tree)  # a probe's, its process killed (.conditional)
            or _unmarked_candidate(u, snapshot, dest_key)
        )
    ]
    outcome = SweepOutcome()
    if not candidates:
        return outcome
    others = other_jobs(store, bucket, job_id, {u.key for u in candidates})
    shared = [u for u in candidates if any(o.may_own(u) for o in others)]
    # Taken by the snapshot alone: on a key no marker or .pending of the job names.
    unrecorded = [u for u in candidates if u.key not in keys and not u.key.startswith(own_tree)]
    asked = {u.key for u in (*shared, *unrecorded)}
    own = own_ids(asked) if asked else set()
    foreign = {u.upload_id: u for u in unrecorded if u.upload_id not in own}
    if shared:
        outcome.left_for_other_jobs = [u for u in shared if u.upload_id not in own]
        outcome.foreign_left = {u.upload_id for u in outcome.left_for_other_jobs} & set(foreign)
        _log_left(job_id, bucket, outcome.left_for_other_jobs)
        left = {u.upload_id for u in outcome.left_for_other_jobs}
        candidates = [u for u in candidates if u.upload_id not in left]

    def aborted(upload: RecordedUpload) -> None:
        found = foreign.get(upload.upload_id)
        if found is not None:
            outcome.foreign_aborted.append(found)
            log_foreign_abort(job_id, bucket, found)

    outcome.aborted = abort_uploads(
        store,
        [RecordedUpload(bucket, u.key, u.upload_id, f"job {job_id}") for u in candidates],
        progress,
        release_command(bucket, dest_key, job_id),
        aborted,
    )
    return outcome


def log_foreign_abort(job_id: str, bucket: str, upload: PendingUpload) -> None:
    """The WARNING for an upload the job did not start that its clean-up aborted."""
    initiated = upload.initiated.isoformat() if upload.initiated else "unknown"
    log.warning(
        "job %s: aborted multipart upload %s of s3://%s/%s (initiated %s), which the job "
        "did not start: no record of the job names it (another tool's upload under the "
        "destination, or a writer of this job killed before saving its record); "
        "intent_markers='always' leaves other writers' uploads alone",
        job_id,
        upload.upload_id,
        bucket,
        upload.key,
        initiated,
    )


def abort_spared(
    store: S3Store,
    bucket: str,
    dest_key: str,
    job_id: str,
    spared: list[PendingUpload],
    foreign: Container[str] = (),
) -> tuple[int, list[PendingUpload]]:
    """Once the job's own tree is deleted: abort the uploads it left for other jobs that no
    remaining tree may own now (see the module docstring). Returns the aborts made and
    those of them the job did not start (ids in ``foreign``: each logged)."""
    if not spared:
        return 0, []
    others = other_jobs(store, bucket, job_id, {u.key for u in spared})
    orphaned = [u for u in spared if not any(o.may_own(u) for o in others)]
    by_id = {u.upload_id: u for u in orphaned if u.upload_id in foreign}
    not_started: list[PendingUpload] = []

    def aborted(upload: RecordedUpload) -> None:
        found = by_id.get(upload.upload_id)
        if found is not None:
            not_started.append(found)
            log_foreign_abort(job_id, bucket, found)

    count = abort_uploads(
        store,
        [RecordedUpload(bucket, u.key, u.upload_id, f"job {job_id}") for u in orphaned],
        False,
        release_command(bucket, dest_key, job_id),
        aborted,
    )
    return count, not_started


def recorded_ids(store: S3Store, listing: list[str], keys: set[str]) -> set[str]:
    """Upload ids named by the records in ``listing`` whose file lands on ``keys``: the
    ``.pending`` beside a file, and the tasks' ``.pendingset`` (the only record of a file
    whose task commit waited for its close, or of an in-memory attempt's)."""
    ids = {c.upload_id for c in load_pending(store, _pendings_for(store, listing, keys))}
    sets = [p for p in listing if p.endswith(PENDINGSET_SUFFIX)]
    return ids | {c.upload_id for c in load_pendingsets(store, sets) if c.destination_key in keys}


def _unmarked_candidate(
    upload: PendingUpload, snapshot: UnmarkedRecord | None, dest_key: str
) -> bool:
    """Is ``upload`` an unmarked job's candidate (not in its snapshot)? Never under a
    hidden name, never with an unreadable snapshot."""
    if snapshot is None or not snapshot.may_own(upload.upload_id):
        return False
    return not hidden_below(dest_key, upload.key)


def hidden_below(dest_key: str, key: str) -> bool:
    """Does ``key`` have an element starting with ``_`` or ``.`` below ``dest_key``?

    Such names are not visible data (the convention of Spark, Hive and pyarrow): the
    classic committers' ``_temporary/``, Spark's ``.spark-staging-*``. An unmarked job's
    sweep never takes an upload under one by snapshot (it may be theirs); its own writers
    keep their intent marker for such a file (:mod:`.writer`), so its sweep finds it by key.
    """
    relative = key[len(dest_key) + 1 :] if dest_key else key
    return any(element.startswith(("_", ".")) for element in relative.split("/"))


@dataclass(frozen=True)
class OtherJob:
    """Another job's tree, as a sweep sees it: what of the destination it may own."""

    tree: str  # bucket/.../__magic_job-<id>/
    dest_key: str  # the key of its destination ("" for the bucket root)
    keys: frozenset[str]  # keys its markers and records name
    #: Unmarked: its snapshot (the uploads under its destination that are never its own;
    #: ``before=None``, unreadable: it may own any). ``None``: a marked job.
    snapshot: UnmarkedRecord | None

    def may_own(self, upload: PendingUpload) -> bool:
        """Exactly what that job's own sweep may take (else an upload both spare is parked
        for good): keys its markers and records name; unmarked, uploads under its
        destination not in its snapshot and not under a hidden name (an unreadable snapshot:
        any such upload, spared rather than taken from a job that may be writing it)."""
        if upload.key in self.keys:
            return True
        under = not self.dest_key or upload.key.startswith(self.dest_key + "/")
        if not under or self.snapshot is None or hidden_below(self.dest_key, upload.key):
            return False
        return self.snapshot.before is None or upload.upload_id not in self.snapshot.before


def levels_above(key: str) -> list[str]:
    """Every directory that may hold a job's tree covering ``key``: the bucket root (``""``)
    and each directory of ``key``'s path (``out/a.csv``: ``""``, ``out``)."""
    parts = key.split("/")[:-1]
    return ["", *("/".join(parts[:n]) for n in range(1, len(parts) + 1))]


def trees_at(store: S3Store, bucket: str, levels: Iterable[str]) -> list[str]:
    """The job trees (``bucket/<level>/__magic_job-<id>/``) directly under each of
    ``levels``: one delimited listing per level, all at once."""

    async def at(level: str) -> list[str]:
        prefix = f"{level}/{MAGIC_JOB_PREFIX}" if level else MAGIC_JOB_PREFIX
        try:
            return [t async for t in store.alist_prefixes(bucket, prefix)]
        except FileNotFoundError:
            return []

    async def every() -> list[list[str]]:
        return await asyncio.gather(*(at(level) for level in sorted(set(levels))))

    return [tree for found in store.run(every()) for tree in found]


def other_jobs_cover(store: S3Store, bucket: str, dest_key: str, job_id: str) -> list[str]:
    """The other jobs' trees at the destination or above it (set-up's question: is the
    job alone?). Nested jobs are not seen here: their sweeps see this one."""
    own = _tree_of(bucket, dest_key, job_id)
    return [t for t in trees_at(store, bucket, levels_above(f"{dest_key}/x")) if t != own]


def other_jobs(store: S3Store, bucket: str, job_id: str, keys: set[str]) -> list[OtherJob]:
    """The trees of jobs other than ``job_id`` that cover one of ``keys``, each listed
    (and an unmarked one's record read). Listed through the store: retried and paced."""
    levels = {level for key in keys for level in levels_above(key)}
    found = []
    for tree in trees_at(store, bucket, levels):
        if tree.rstrip("/").rsplit("/", 1)[-1] == MAGIC_JOB_PREFIX + job_id:
            continue
        tree_bucket, tree_key = store.split(tree)
        tree_key = tree_key.rstrip("/") + "/"  # split() drops it: `job-1/` must not list `job-10`
        listing = list(iterate(store, store.alist_keys(tree_bucket, tree_key)))
        record = f"{tree_bucket}/{tree_key}{UNMARKED_FILE}"
        unmarked = (
            store.run(aread_unmarked(store, tree_bucket, tree_key + UNMARKED_FILE))
            if record in listing
            else None
        )
        found.append(
            OtherJob(
                tree,
                tree_key.rstrip("/").rpartition("/")[0],
                frozenset(tree_keys(store, listing)),
                unmarked,
            )
        )
    return found


async def asnapshot(store: S3Store, bucket: str, dest_key: str, limit: int) -> list[str] | None:
    """The ids of the uploads pending under ``dest_key`` (an unmarked job's snapshot), or
    ``None`` when there are more than ``limit``: one request (two when a page is full)."""
    prefix = f"{dest_key}/" if dest_key else ""
    found: list[str] = []
    async for upload in store.alist_uploads(bucket, prefix):
        found.append(upload.upload_id)
        if len(found) > limit:
            return None
    return found


async def aread_unmarked(store: S3Store, bucket: str, key: str) -> UnmarkedRecord | None:
    """A job's unmarked record (``None``: there is none, the job writes markers)."""
    try:
        response = await store.acall("get_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None
    try:
        data: bytes = await response["Body"].read()
    finally:
        response["Body"].close()
    return UnmarkedRecord.parse(data, f"s3://{bucket}/{key}")


def _tree_of(bucket: str, dest_key: str, job_id: str) -> str:
    directory = f"{bucket}/{dest_key}" if dest_key else bucket
    return f"{directory}/{MAGIC_JOB_PREFIX}{job_id}/"


def _pendings_for(store: S3Store, listing: list[str], keys: set[str]) -> list[str]:
    """The ``.pending`` records in ``listing`` whose file lands on one of ``keys``."""
    found = []
    for path in listing:
        if path.endswith(PENDING_SUFFIX) and split_magic_path(path) is not None:
            file = pending_file(path)
            if is_deferred_write(file) and store.split(final_destination(file))[1] in keys:
                found.append(path)
    return found
