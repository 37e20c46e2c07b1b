"""Finding and aborting a job's uploads on S3, from its records (:mod:`.tracking`).

**By key, at job end.** Every upload a job's writers create is on a key named by an
intent marker (or ``.pending``) in the job's tree, written before the upload existed.
So when a job ends (commit, abort, clean-up) its sweep lists the job's tree once,
collects those keys, lists the uploads under the destination once (paged: 1,000 per
request) and aborts every upload on one of its keys that no committed record names.
That finds everything: uploads of failed, superseded, speculative and unreported
attempts; a writer killed between creating its upload and closing it; the second
upload of a ``CreateMultipartUpload`` whose reply was lost and retried; files written
twice or after their task committed. It costs one listing per 1,000 pending uploads
under the destination, never a request per file.

**Other jobs are never touched.** Uploads on keys no marker of this job names are not
this job's. If another job is active on the same destination *and* has a marker for
one of the same keys (two jobs writing one file: a conflict in itself), only the
uploads this job's own ``.pending`` records name are aborted on that key; the others
are left to that job and reported.

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
from ...names import MAGIC_JOB_PREFIX, PENDING_SUFFIX, PENDINGSET_SUFFIX
from ...parallel import loop_map
from ...paths import final_destination, is_deferred_write, split_magic_path
from ...progress import progress_bar
from ...records import SinglePendingCommit
from .store import PendingUpload, S3Store, iterate

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
    """What a job sweep did: uploads aborted, and uploads left for another job."""

    aborted: int = 0
    left_for_other_jobs: list[PendingUpload] = field(default_factory=list)


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
) -> int:
    """Abort each upload (:data:`ABORTS_IN_FLIGHT` at once); uploads already gone are fine.
    Returns the aborts made.

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
    limit = SinglePendingCommit.MAX_BYTES
    reads = [(p, store.run_background(store.aread(*store.split(p), limit))) for p in paths]
    commits = []
    for path, future in reads:
        try:
            commits.append(SinglePendingCommit.from_json(future.result(), source=f"s3://{path}"))
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
    """Destination keys named by the markers and ``.pending`` records among ``listing``."""
    keys = set()
    for path in listing:
        file = path.removesuffix(PENDING_SUFFIX)
        if path.endswith(PENDINGSET_SUFFIX) or not is_deferred_write(file):
            continue
        try:
            keys.add(store.split(final_destination(file))[1])
        except ValueError:  # not a file path (a directory marker, say)
            continue
    return keys


def uploads_on_keys(
    store: S3Store, bucket: str, prefix: str, keys: set[str]
) -> Iterable[PendingUpload]:
    """The pending uploads under ``prefix`` whose key is one of ``keys`` (paged listing)."""
    if not keys:
        return
    for upload in iterate(store, store.alist_uploads(bucket, prefix)):
        if upload.key in keys:
            yield upload


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
) -> SweepOutcome:
    """Abort every upload on one of the job's ``keys``, except the ids in ``keep``.

    ``keep``: the upload ids this job completed (or must keep). ``own_ids(keys)``: the
    upload ids the job's own records name on those keys (asked only for keys another
    active job also writes). ``uploads``: the destination's pending uploads, if the
    caller listed them already. See the module docstring.
    """
    prefix = f"{dest_key}/" if dest_key else ""
    listed = iterate(store, store.alist_uploads(bucket, prefix)) if uploads is None else uploads
    candidates = [u for u in listed if u.key in keys and u.upload_id not in keep]
    outcome = SweepOutcome()
    if not candidates:
        return outcome
    shared = _keys_of_other_jobs(store, bucket, dest_key, job_id) & {u.key for u in candidates}
    if shared:
        own = own_ids(shared)
        outcome.left_for_other_jobs = [
            u for u in candidates if u.key in shared and u.upload_id not in own
        ]
        for upload in outcome.left_for_other_jobs:
            log.warning(
                "job %s: leaving upload %s of s3://%s/%s to the other job writing that key",
                job_id,
                upload.upload_id,
                bucket,
                upload.key,
            )
        left = {u.upload_id for u in outcome.left_for_other_jobs}
        candidates = [u for u in candidates if u.upload_id not in left]
    outcome.aborted = abort_uploads(
        store,
        [RecordedUpload(bucket, u.key, u.upload_id, f"job {job_id}") for u in candidates],
        progress,
        release_command(bucket, dest_key, job_id),
    )
    return outcome


def recorded_ids(store: S3Store, listing: list[str], keys: set[str]) -> set[str]:
    """Upload ids named by the ``.pending`` records in ``listing`` whose file lands on ``keys``."""
    return {c.upload_id for c in load_pending(store, _pendings_for(store, listing, keys))}


def _keys_of_other_jobs(store: S3Store, bucket: str, dest_key: str, job_id: str) -> set[str]:
    """Keys named by the markers of other jobs whose magic tree exists under the destination
    (listed through the store: retried and paced like every other call of the job)."""
    trees = f"{dest_key}/{MAGIC_JOB_PREFIX}" if dest_key else MAGIC_JOB_PREFIX
    own = f"{bucket}/{trees}{job_id}/"
    keys: set[str] = set()
    try:
        for tree in iterate(store, store.alist_prefixes(bucket, trees)):
            if tree != own:
                keys |= tree_keys(store, iterate(store, store.alist_keys(*store.split(tree))))
    except FileNotFoundError:
        return set()
    return keys


def _pendings_for(store: S3Store, listing: list[str], keys: set[str]) -> list[str]:
    """The ``.pending`` records in ``listing`` whose file lands on one of ``keys``."""
    found = []
    for path in listing:
        if path.endswith(PENDING_SUFFIX) and split_magic_path(path) is not None:
            file = path.removesuffix(PENDING_SUFFIX)
            if is_deferred_write(file) and store.split(final_destination(file))[1] in keys:
                found.append(path)
    return found
