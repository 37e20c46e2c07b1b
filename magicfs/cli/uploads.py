"""``magicfs uploads list|abort PATH``: the multipart uploads parked under a path.

Hadoop's ``hadoop s3guard uploads``, with three differences that make it safer to run:

* ``abort`` is a dry run unless ``--force`` (Hadoop prompts instead; a dry run works
  in scripts and shows exactly what ``--force`` would abort);
* ``--job ID`` narrows the selection to the uploads recorded in that job's magic tree
  (``PATH/__magic_job-<ID>/``), so another job writing to the same destination is never
  touched — the property the committers keep (each job sweeps only its own uploads);
* every upload is shown with its parked bytes (what S3 bills for until it is aborted).

Only uploads under PATH's prefix are listed, with a ``/`` appended as Hadoop does, so
``s3://bkt/data`` never matches ``s3://bkt/data10/...``; the bucket root lists all. The
listing is paged (ListMultipartUploads returns at most 1,000 uploads per request).
An upload is *older than* an age when it was initiated at or before now minus the age.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import logging
import sys
from dataclasses import dataclass
from typing import Any

from ..capabilities import is_s3
from ..layout import MagicJobLayout, check_job_id
from ..progress import progress_bar
from ..s3.store import S3Store
from ..s3.sweep import tree_keys, uploads_on_keys
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_common_options,
    duration,
    human_bytes,
    open_fs,
    plural,
    print_json,
    store_errors,
)

log = logging.getLogger("magicfs.cli.uploads")

#: ListParts requests in flight at once (s3fs's client pool has 10 connections).
LIST_PARTS_THREADS = 8


def add_parser(sub: Any) -> None:
    uploads = sub.add_parser(
        "uploads",
        help="list or abort the pending multipart uploads under an S3 path",
        description="List or abort the pending (never completed) multipart uploads under an "
        "S3 path, like Hadoop's 'hadoop s3guard uploads'. Each upload's parts are billed "
        "until it is completed or aborted.",
    )
    actions = uploads.add_subparsers(dest="action", required=True, metavar="{list,abort}")
    listing = actions.add_parser(
        "list",
        help="list the pending uploads under PATH",
        description="List the pending multipart uploads under PATH with their initiation "
        "time and parked bytes.",
    )
    _add_selection(listing)
    listing.add_argument(
        "--fail-if-any",
        action="store_true",
        help="exit 1 when any upload is selected (a guard for pipelines and CI)",
    )
    abort = actions.add_parser(
        "abort",
        help="abort the pending uploads under PATH (a dry run unless --force)",
        description="Abort the selected pending multipart uploads under PATH. Without "
        "--force nothing is aborted: the uploads that would be are printed. Aborting the "
        "uploads of a running job makes its commit fail: use --older-than and --job.",
    )
    _add_selection(abort)
    abort.add_argument(
        "--force",
        action="store_true",
        help="really abort (default: dry run, print what would be aborted)",
    )


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="PATH",
        help="s3://bucket[/prefix]: only uploads whose key starts with prefix/ "
        "(the bucket root: every upload of the bucket)",
    )
    parser.add_argument(
        "--older-than",
        metavar="DURATION",
        action="append",
        type=duration,
        default=[],
        help="only uploads initiated at least this long ago: 7d, 24h, 30m, 90s or sums like "
        "1d12h; repeated options add up (like Hadoop's -days/-hours/-minutes/-seconds)",
    )
    parser.add_argument(
        "--job",
        metavar="ID",
        type=_job_id,
        help="only uploads recorded in that job's magic tree PATH/__magic_job-ID/ "
        "(markers, .pending and .pendingset files)",
    )
    add_common_options(parser)
    parser.set_defaults(handler=run)


def _job_id(text: str) -> str:
    try:
        return check_job_id(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@dataclass
class Upload:
    """One pending upload and what happened to it."""

    bucket: str
    key: str
    upload_id: str
    initiated: datetime.datetime | None
    parts: int = 0
    bytes: int = 0
    #: ``pending`` (listed), ``would abort``, ``aborted``, ``already gone``, ``failed``
    status: str = "pending"
    error: str | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def initiated_text(self) -> str:
        return _iso(self.initiated) if self.initiated else "(unknown)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "key": self.key,
            "uri": self.url,
            "upload_id": self.upload_id,
            "initiated": _iso(self.initiated) if self.initiated else None,
            "parts": self.parts,
            "bytes": self.bytes,
            "status": self.status,
            "error": self.error,
        }


@dataclass
class Selection:
    """Which uploads a command is about."""

    bucket: str
    prefix: str
    older_than: int | None
    job: str | None
    cutoff: datetime.datetime | None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def describe(self) -> str:
        text = self.url
        if self.cutoff is not None:
            text += f", initiated at or before {_iso(self.cutoff)}"
        if self.job:
            text += f", recorded by job {self.job}"
        return text


def upload_prefix(key: str) -> str:
    """The listing prefix for a path's key: ``data`` -> ``data/`` (never ``data10/``)."""
    key = key.strip("/")
    return f"{key}/" if key else ""


def cutoff_for(age_seconds: int | None, now: datetime.datetime) -> datetime.datetime | None:
    """Uploads initiated at or before this moment are old enough; ``None``: no age filter."""
    if age_seconds is None:
        return None
    try:
        return now - datetime.timedelta(seconds=age_seconds)
    except OverflowError:  # older than year 1: nothing can be that old
        return datetime.datetime.min.replace(tzinfo=datetime.UTC)


def run(args: argparse.Namespace) -> int:
    fs, path = open_fs(args.path, args)
    if not is_s3(fs):
        raise CliError(f"{args.path}: uploads needs an s3:// path", EXIT_USAGE)
    store = S3Store(fs)
    bucket, key = store.split(path)
    if not bucket:
        raise CliError(f"{args.path}: no bucket in the path", EXIT_USAGE)
    older_than = sum(args.older_than) if args.older_than else None
    selection = Selection(
        bucket=bucket,
        prefix=upload_prefix(key),
        older_than=older_than,
        job=args.job,
        cutoff=cutoff_for(older_than, datetime.datetime.now(datetime.UTC)),
    )
    with store_errors(selection.url):
        uploads = select(fs, store, selection)
        uploads = measure(store, uploads)
        if args.action == "abort":
            abort(store, uploads, dry_run=not args.force)
    report(args, selection, uploads)
    return exit_code(args, selection, uploads)


def select(fs: Any, store: S3Store, selection: Selection) -> list[Upload]:
    """The pending uploads under the prefix that pass the age and job filters."""
    listed = [
        Upload(selection.bucket, u.key, u.upload_id, u.initiated)
        for u in store.list_uploads(selection.bucket, selection.prefix)
    ]
    log.info("%s under %s", plural(len(listed), "upload"), selection.url)
    uploads = listed
    if selection.cutoff is not None:
        cutoff = selection.cutoff
        uploads = [u for u in uploads if u.initiated is not None and u.initiated <= cutoff]
        log.info("%d of them initiated at or before %s", len(uploads), _iso(cutoff))
    if selection.job:
        recorded = recorded_by_job(fs, store, selection)
        uploads = [u for u in uploads if (u.bucket, u.key, u.upload_id) in recorded]
        log.info("%d of them recorded by job %s", len(uploads), selection.job)
    return uploads


def recorded_by_job(fs: Any, store: S3Store, selection: Selection) -> set[tuple[str, str, str]]:
    """``(bucket, key, upload id)`` of every upload on a key the job's magic tree names.

    A job's writers record the key of every upload before creating it (the intent
    marker), so this finds also the uploads of writers that were killed, and the
    duplicates of lost ``CreateMultipartUpload`` replies.
    """
    dest = f"{selection.bucket}/{selection.prefix}".rstrip("/")
    layout = MagicJobLayout(dest, selection.job or "")
    try:
        listing = sorted(fs.find(layout.magic_dir))
    except FileNotFoundError:
        listing = []
    if not listing:
        log.warning(
            "job %s has no magic tree at s3://%s/: it records no uploads (a committed or "
            "aborted job's tree is deleted)",
            selection.job,
            layout.magic_dir,
        )
    elif layout.job_marker in listing:
        log.warning(
            "job %s is still active (s3://%s exists): its tasks and commit need these uploads",
            selection.job,
            layout.job_marker,
        )
    keys = tree_keys(store, listing)
    found = {
        (selection.bucket, upload.key, upload.upload_id)
        for upload in uploads_on_keys(store, selection.bucket, selection.prefix, keys)
    }
    log.info(
        "job %s: %d files in its magic tree name %d keys, with %d uploads",
        selection.job,
        len(listing),
        len(keys),
        len(found),
    )
    return found


def measure(store: S3Store, uploads: list[Upload]) -> list[Upload]:
    """Fill in parts and parked bytes (ListParts, in parallel); drop uploads ended meanwhile."""

    def parts_of(upload: Upload) -> list[dict[str, Any]] | None:
        try:
            return store.list_parts(upload.bucket, upload.key, upload.upload_id)
        except FileNotFoundError:  # completed or aborted since it was listed
            log.info("%s upload %s ended while being listed", upload.url, upload.upload_id)
            return None

    if not uploads:
        return []
    kept = []
    with (
        concurrent.futures.ThreadPoolExecutor(min(LIST_PARTS_THREADS, len(uploads))) as pool,
        progress_bar(len(uploads), "listing parts") as bar,
    ):
        for upload, parts in zip(uploads, pool.map(parts_of, uploads), strict=True):
            bar.update()
            if parts is None:
                continue
            upload.parts = len(parts)
            upload.bytes = sum(int(part.get("Size") or 0) for part in parts)
            log.debug("%s upload %s: %d parts", upload.url, upload.upload_id, upload.parts)
            kept.append(upload)
    return kept


def abort(store: S3Store, uploads: list[Upload], dry_run: bool) -> None:
    """Abort each upload (in parallel) and set its status; a dry run only marks them."""
    if dry_run:
        for upload in uploads:
            upload.status = "would abort"
        return
    log.info("aborting %d uploads", len(uploads))
    futures = {
        store.submit("abort_multipart_upload", Bucket=u.bucket, Key=u.key, UploadId=u.upload_id): u
        for u in uploads
    }
    with progress_bar(len(futures), "aborting") as bar:
        for future in concurrent.futures.as_completed(futures):
            upload = futures[future]
            bar.update()
            try:
                future.result()
                upload.status = "aborted"
            except FileNotFoundError:  # NoSuchUpload: completed or aborted meanwhile
                upload.status = "already gone"
            except OSError as e:
                upload.status, upload.error = "failed", str(e)
                log.warning("could not abort %s upload %s: %s", upload.url, upload.upload_id, e)


def report(args: argparse.Namespace, selection: Selection, uploads: list[Upload]) -> None:
    if args.json:
        print_json(
            {
                "action": args.action,
                "dry_run": args.action == "abort" and not args.force,
                "path": selection.url,
                "bucket": selection.bucket,
                "prefix": selection.prefix,
                "older_than_seconds": selection.older_than,
                "initiated_before": _iso(selection.cutoff) if selection.cutoff else None,
                "job": selection.job,
                "uploads": [u.to_dict() for u in uploads],
                "count": len(uploads),
                "bytes": sum(u.bytes for u in uploads),
                **_status_counts(uploads),
            }
        )
        return
    print(f"Uploads under {selection.describe()}:")
    width = max((len(f"{u.bytes:,}") for u in uploads), default=1)
    status_width = max((len(u.status) for u in uploads), default=0)
    for u in uploads:
        status = "" if args.action == "list" else f"{u.status:<{status_width}}  "
        print(
            f"  {status}{u.initiated_text()}  {u.bytes:>{width},} bytes  "
            f"{u.url}  upload {u.upload_id}"
        )
    print(total_line(args, uploads))


def _status_counts(uploads: list[Upload]) -> dict[str, int]:
    return {
        "aborted": sum(u.status == "aborted" for u in uploads),
        "already_gone": sum(u.status == "already gone" for u in uploads),
        "failed": sum(u.status == "failed" for u in uploads),
    }


def total_line(args: argparse.Namespace, uploads: list[Upload]) -> str:
    parked = human_bytes(sum(u.bytes for u in uploads))
    found = plural(len(uploads), "upload")
    if args.action == "list":
        return f"Total: {found} found, {parked} parked."
    if not args.force:
        return (
            f"Total: {found} would be aborted, {parked} parked. "
            "Dry run: nothing was aborted; add --force to abort them."
        )
    counts = _status_counts(uploads)
    released = human_bytes(sum(u.bytes for u in uploads if u.status == "aborted"))
    text = f"Total: {plural(counts['aborted'], 'upload')} aborted, {released} released"
    if counts["already_gone"]:
        text += f"; {counts['already_gone']:,} had already ended"
    if counts["failed"]:
        text += f"; {counts['failed']:,} could not be aborted"
    return text + "."


def exit_code(args: argparse.Namespace, selection: Selection, uploads: list[Upload]) -> int:
    failed = [u for u in uploads if u.status == "failed"]
    if failed:
        print(
            f"magicfs: {selection.url}: could not abort {plural(len(failed), 'upload')}; "
            f"first: {failed[0].url}: {failed[0].error}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.action == "list" and args.fail_if_any and uploads:
        print(
            f"magicfs: {plural(len(uploads), 'pending upload')} under {selection.describe()}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _iso(moment: datetime.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    text = moment.astimezone(datetime.UTC).isoformat(timespec="seconds")
    return text.replace("+00:00", "Z")
