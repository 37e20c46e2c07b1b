"""Find and abort the uploads recorded under magic paths (markers and ``.pending`` files).

Used wherever magic files are thrown away: ``MagicFileSystem.rm`` on magic paths,
task abort, job abort. A ``.pending`` names its upload; a marker without a
``.pending`` (a file still being written, or whose writer died) names it in its
metadata. Loading is done concurrently on s3fs's IO loop.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidCommitData
from ..paths import PENDING_SUFFIX, PENDINGSET_SUFFIX, final_destination, is_deferred_write
from ..progress import progress_bar
from ..records import PendingSet, SinglePendingCommit
from .store import S3Store
from .tracking import META_UPLOAD_ID

log = logging.getLogger("magicfs.s3.sweep")


@dataclass(frozen=True)
class RecordedUpload:
    """An upload found through the record (``source``) that names it."""

    bucket: str
    key: str
    upload_id: str
    source: str


def recorded_uploads(store: S3Store, paths: Iterable[str]) -> list[RecordedUpload]:
    """The uploads named by the markers, ``.pending`` and ``.pendingset`` files among ``paths``.

    The marker is the authoritative record: the writer PUT it, naming its upload, before
    any ``.pending`` existed, and a ``.pending`` may be unreadable or tampered with. So
    every marker is read (one HEAD each); a ``.pending`` only where its marker names no
    upload (a marker written by Hadoop, or none at all); every ``.pendingset`` (the only
    record of in-memory writers). Unreadable records are logged and skipped: this serves
    clean-up, which must get as far as it can. Costs one request per file, so it is used
    only where uploads are thrown away, never on the commit path.
    """
    paths = list(paths)
    found: dict[tuple[str, str, str], RecordedUpload] = {}

    def add(upload: RecordedUpload | None) -> None:
        if upload is not None:
            found.setdefault((upload.bucket, upload.key, upload.upload_id), upload)

    set_reads = [
        (p, store.submit_read(*store.split(p), PendingSet.MAX_BYTES))
        for p in paths
        if p.endswith(PENDINGSET_SUFFIX)
    ]
    markers = [p for p in paths if is_deferred_write(p)]
    heads = [(p, store.submit("head_object", **_location(store, p))) for p in markers]
    for path, future in set_reads:
        for commit in _commits_of_set(path, future):
            add(RecordedUpload(commit.bucket, commit.destination_key, commit.upload_id, path))
    named_by_marker = set()
    for path, future in heads:
        upload = _from_marker(store, path, future)
        if upload is not None:
            named_by_marker.add(path)
        add(upload)
    pending_reads = [
        (p, store.submit_read(*store.split(p), SinglePendingCommit.MAX_BYTES))
        for p in paths
        if p.endswith(PENDING_SUFFIX) and p[: -len(PENDING_SUFFIX)] not in named_by_marker
    ]
    for path, future in pending_reads:
        add(_from_pending(path, future))
    return list(found.values())


def abort_uploads(
    store: S3Store, uploads: Iterable[RecordedUpload], progress: bool | None = None
) -> int:
    """Abort each upload (concurrently); uploads already gone are fine. Returns aborts made."""
    futures = {
        store.submit("abort_multipart_upload", Bucket=u.bucket, Key=u.key, UploadId=u.upload_id): u
        for u in uploads
    }
    aborted = 0
    errors: list[str] = []
    with progress_bar(len(futures), "aborting uploads", progress) as bar:
        for future in concurrent.futures.as_completed(futures):
            bar.update()
            try:
                future.result()
                aborted += 1
            except FileNotFoundError:
                pass  # NoSuchUpload: already aborted or completed
            except OSError as e:
                errors.append(f"{futures[future].source}: {e}")
    if errors:
        raise OSError(f"could not abort {len(errors)} uploads; first: {errors[0]}")
    return aborted


def _commits_of_set(path: str, future: concurrent.futures.Future) -> list[SinglePendingCommit]:
    try:
        return PendingSet.from_json(future.result(), source=f"s3://{path}").commits
    except FileNotFoundError:
        return []
    except InvalidCommitData as e:
        log.warning("skipping unreadable record: %s", e)
        return []


def _location(store: S3Store, path: str) -> dict[str, str]:
    bucket, key = store.split(path)
    return {"Bucket": bucket, "Key": key}


def _from_pending(path: str, future: concurrent.futures.Future) -> RecordedUpload | None:
    try:
        commit = SinglePendingCommit.from_json(future.result(), source=f"s3://{path}")
    except FileNotFoundError:
        return None
    except InvalidCommitData as e:
        log.warning("skipping unreadable record: %s", e)
        return None
    return RecordedUpload(commit.bucket, commit.destination_key, commit.upload_id, path)


def _from_marker(
    store: S3Store, path: str, future: concurrent.futures.Future
) -> RecordedUpload | None:
    try:
        metadata = future.result().get("Metadata") or {}
    except FileNotFoundError:
        return None
    upload_id = metadata.get(META_UPLOAD_ID)
    if not upload_id:
        return None  # not a magicfs marker (e.g. a directory marker)
    bucket, key = store.split(final_destination(path))
    return RecordedUpload(bucket, key, upload_id, path)
