"""``magicfs uploads list|abort PATH``: the multipart uploads parked under a path.

Any registered deferred store is served through its operator view
(:mod:`magicfs.stores.operator_view`: listing, measuring and discarding its pending
writes), in one report with one JSON schema whatever the store. A store that cannot
discard them (Azure: the names holding staged blocks, which it bills for until they
expire) is listed the same way, each write without an upload id or initiation time;
``abort`` there changes nothing and says why (:func:`refuse_on_keeping_store`). On S3
the command is Hadoop's ``hadoop s3guard uploads``, with three
differences that make it safer to run:

* ``abort`` is a dry run unless ``--force`` (Hadoop prompts instead; a dry run works
  in scripts and shows exactly what ``--force`` would abort);
* ``--job ID`` narrows the selection to the uploads recorded in that job's magic tree
  (``PATH/__magic_job-<ID>/``), so another job writing to the same destination is never
  touched — the property the committers keep (each job sweeps only its own uploads).
  For an *unmarked* job (its tree holds ``_magicfs_unmarked``: no intent markers,
  :mod:`magicfs.stores.s3.tracking`) that is also every upload under its destination not
  in its snapshot (the uploads pending when it began) that no other job's tree may own,
  the rule of its own sweep (S3's operator view, :mod:`magicfs.stores.s3.operator_view`);
* every upload is shown with its parked bytes (what S3 bills for until it is aborted).

``--older-than`` needs the initiation times S3 lists; a store that does not tell them
refuses it. ``--job`` works wherever the job's magic tree can be listed.

Only uploads under PATH's prefix are listed, with a ``/`` appended as Hadoop does, so
``s3://bkt/data`` never matches ``s3://bkt/data10/...``; the bucket root lists all. The
listing is paged (ListMultipartUploads returns at most 1,000 uploads per request).
An upload is *older than* an age when it was initiated at or before now minus the age.

The command streams, so it runs in flat memory however many uploads a bucket has: each
listed upload goes through the filters, ListParts (:data:`LIST_PARTS_IN_FLIGHT` at
once) and, for ``abort --force``, AbortMultipartUpload (at most :data:`WINDOW` in
flight), both as coroutines on the store's IO loop (:func:`magicfs.parallel.loop_map`), and
is printed as soon as it is settled, in listing order. The text output has fixed column
widths and the totals come from running counters; ``--json`` writes one JSON document,
its ``uploads`` array one element at a time. What it holds at once: one listing
page, at most :data:`WINDOW` uploads per stage (with the parts of the uploads being
measured), the counters and the first failure; with ``--job``, the keys the job's magic
tree names are kept on disk (:class:`~magicfs.stores.spool.KeySet`, filled one page of the
tree's listing at a time), not in memory. Nothing is kept per upload once it is printed.

As the output is written while the work goes on, a store failure midway leaves what
was printed so far, with no total line (the ``--json`` document is left unterminated,
so it is never taken for a complete one), and exits 1. A reader that leaves early
(``| head``) stops the command there, as Unix tools do: rerun a forced abort for the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import logging
import sys
from collections.abc import Container, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from tqdm import tqdm

from ...layouts.magic import MagicJobLayout
from ...names import UNMARKED_FILE
from ...parallel import loop_map
from ...paths import marked_destinations
from ...progress import batches, progress_bar
from ...records._base import iso_seconds
from ...stores.operator_view import OperatorView, Owner, Pending
from ...stores.registry import DEFERRED_STORES, deferred_store_for, operator_view_for
from ...stores.spool import KeySet
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    JsonObjectWriter,
    add_common_options,
    duration,
    human_bytes,
    job_id_argument,
    open_fs,
    plural,
    store_errors,
)

log = logging.getLogger("magicfs.cli.uploads")


#: ListParts requests in flight at once (s3fs's client pool has 10 connections).
LIST_PARTS_IN_FLIGHT = 8
#: Requests submitted and not yet reported, per stage (ListParts, AbortMultipartUpload):
#: the most uploads a stage holds at once, whatever the length of the listing.
WINDOW = 2 * LIST_PARTS_IN_FLIGHT
#: Paths of a job's magic tree turned into keys at a time (one ListObjectsV2 page).
TREE_PAGE = 1000

#: Text columns: wide enough for every value they take, so the lines of a listing of any
#: length align without first reading it all. The status: the longest, ``already gone``;
#: initiated: ``2010-11-10T20:48:33Z``; bytes: ``5,497,558,138,880``, S3's largest object
#: (5 TiB). A wider value (more parked than S3 can complete) only shifts its own line.
STATUS_WIDTH = 12
INITIATED_WIDTH = 20
BYTES_WIDTH = 17


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    uploads = sub.add_parser(
        "uploads",
        help="list or abort the pending writes (S3 multipart uploads...) under a path",
        description="List or abort the pending (never completed) writes under a path on a "
        "deferred store: S3's multipart uploads, like Hadoop's 'hadoop s3guard uploads' "
        "(each upload's parts are billed until it is completed or aborted); Azure's staged "
        "blocks (listed: Azure cannot discard them); mem-deferred:// uploads.",
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
        help="s3://bucket[/prefix] (or abfs://, mem-deferred://): only uploads whose key "
        "starts with prefix/ (the bucket root: every upload of the bucket)",
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
        type=job_id_argument,
        help="only uploads recorded in that job's magic tree PATH/__magic_job-ID/ "
        "(markers, .pending and .pendingset files)",
    )
    add_common_options(parser)
    parser.set_defaults(handler=run)


@dataclass(slots=True)
class Upload:
    """One pending upload and what happened to it."""

    bucket: str
    key: str
    upload_id: str
    initiated: datetime.datetime | None
    #: The upload's URL, as its store names it (``s3://bucket/key``).
    url: str = ""
    parts: int = 0
    bytes: int = 0
    #: ``pending`` (listed), ``would abort``, ``aborted``, ``already gone``, ``failed``,
    #: ``cannot abort`` (``abort`` on a store that cannot discard: Azure's blocks)
    status: str = "pending"
    error: str | None = None

    @property
    def pending(self) -> Pending:
        path = f"{self.bucket}/{self.key}"
        return Pending(path, self.upload_id, self.initiated, self.parts, self.bytes)

    def initiated_text(self) -> str:
        return iso_seconds(self.initiated) if self.initiated else "(unknown)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "key": self.key,
            "uri": self.url,
            "upload_id": self.upload_id or None,
            "initiated": iso_seconds(self.initiated) if self.initiated else None,
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
    #: ``bucket/prefix`` as its store names it (``s3://bucket/prefix``).
    url: str = ""
    #: The deferred store's registered name (``s3``, ``azure-block-list``).
    store: str = ""
    #: What a staged piece of a pending write is called there (S3: ``part``).
    part_noun: str = "part"
    #: Can the store discard a pending write (``abort --force``)? Not Azure's blocks.
    can_abort: bool = True
    #: Why nothing is discarded there (the store's operator view says).
    cannot_discard: str = ""

    def describe(self) -> str:
        text = self.url
        if self.cutoff is not None:
            text += f", initiated at or before {iso_seconds(self.cutoff)}"
        if self.job:
            text += f", recorded by job {self.job}"
        return text


@dataclass
class Totals:
    """Running counters over the settled uploads: all the totals and exit code need."""

    count: int = 0
    bytes: int = 0
    aborted: int = 0
    #: Bytes of the aborted uploads.
    released: int = 0
    already_gone: int = 0
    failed: int = 0
    #: ``(url, error)`` of the first upload that could not be aborted.
    first_failure: tuple[str, str] | None = None

    def add(self, upload: Upload) -> None:
        self.count += 1
        self.bytes += upload.bytes
        if upload.status == "aborted":
            self.aborted += 1
            self.released += upload.bytes
        elif upload.status == "already gone":
            self.already_gone += 1
        elif upload.status == "failed":
            self.failed += 1
            if self.first_failure is None:
                self.first_failure = (upload.url, upload.error or "")

    def status_counts(self) -> dict[str, int]:
        return {
            "aborted": self.aborted,
            "already_gone": self.already_gone,
            "failed": self.failed,
        }


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
    view = operator_view_for(fs)
    if view is None:
        served = ", ".join(store.name for store in DEFERRED_STORES)
        raise CliError(
            f"{args.path}: uploads lists the pending writes of S3 (s3://), Azure's staged "
            f"blocks (abfs://) and the other deferred stores; this path is not on a "
            f"deferred store (registered deferred stores: {served})",
            EXIT_USAGE,
        )
    if not view.capabilities.discards_pending:
        refuse_on_keeping_store(args, view)
    bucket, key = view.split(path)
    if not bucket:
        raise CliError(f"{args.path}: no bucket (container) in the path", EXIT_USAGE)
    if args.older_than and not view.knows_initiation:
        raise CliError(
            f"{args.path}: --older-than selects by initiation time, which this store does "
            "not tell of its pending writes",
            EXIT_USAGE,
        )
    older_than = sum(args.older_than) if args.older_than else None
    selection = Selection(
        bucket=bucket,
        prefix=upload_prefix(key),
        older_than=older_than,
        job=args.job,
        cutoff=cutoff_for(older_than, datetime.datetime.now(datetime.UTC)),
        url=view.url(f"{bucket}/{upload_prefix(key)}"),
        store=_store_name(fs),
        part_noun=view.part_noun,
        can_abort=view.capabilities.discards_pending,
        cannot_discard=view.cannot_discard,
    )
    with store_errors(selection.url), recorded_by_job(view, selection) as recorded:
        uploads = measure(view, select(view, selection, recorded))
        if args.action == "abort":
            uploads = abort(view, uploads, dry_run=not args.force)
            if not selection.can_abort:
                uploads = _kept(uploads)
        with contextlib.closing(uploads):
            totals = report(args, selection, uploads)
    return exit_code(args, selection, totals)


def refuse_on_keeping_store(args: argparse.Namespace, view: OperatorView) -> None:
    """On a store that cannot discard pending writes (Azure's staged blocks), refuse what
    only a discarding store can do: ``abort --force``, and ``--job``/``--older-than``.

    Decision: ``abort`` there changes nothing and says why (each write's status is
    ``cannot abort``); ``--force`` is refused. The only way to force staged data out
    would be to publish something at that name, which would make a file visible:
    magicfs never does that.
    """
    if args.action == "abort" and args.force:
        raise CliError(f"{args.path}: cannot abort here. {view.cannot_discard}", EXIT_USAGE)
    if args.job or args.older_than:
        raise CliError(
            f"{args.path}: --job and --older-than select pending writes a store can "
            "discard; on this store the listing shows every name under PATH with "
            f"{view.part_noun}s",
            EXIT_USAGE,
        )


def _kept(uploads: Iterable[Upload]) -> Generator[Upload, None, None]:
    """``abort`` on a store that cannot discard: every write stays, and says so."""
    for upload in uploads:
        upload.status = "cannot abort"
        yield upload


def _store_name(fs: Any) -> str:
    spec = deferred_store_for(fs)
    return spec.name if spec is not None else ""


# -- selection --------------------------------------------------------------------------


def select(
    view: OperatorView,
    selection: Selection,
    recorded: Container[str] | Owner | None = None,
) -> Iterator[Upload]:
    """The pending uploads under the prefix that pass the age filter and, with a job, are
    on one of the ``recorded`` keys or owned by the job (:func:`recorded_by_job`);
    listed page by page as they are consumed, each filter logging its count once the
    listing is through."""
    uploads = _listed(view, selection)
    if selection.cutoff is not None:
        uploads = _initiated_by(uploads, selection.cutoff)
    if recorded is not None:
        uploads = _recorded(uploads, recorded, selection.job or "")
    return uploads


def _listed(view: OperatorView, selection: Selection) -> Iterator[Upload]:
    count = 0
    for listed in view.iterate(view.alist_pending(f"{selection.bucket}/{selection.prefix}")):
        count += 1
        _, key = view.split(listed.path)
        upload = Upload(selection.bucket, key, listed.upload_id, listed.initiated)
        upload.url = view.url(listed.path)
        upload.parts, upload.bytes = listed.parts or 0, listed.bytes
        yield upload
    log.info("%s under %s", plural(count, "upload"), selection.url)


def _initiated_by(uploads: Iterable[Upload], cutoff: datetime.datetime) -> Iterator[Upload]:
    count = 0
    for upload in uploads:
        if upload.initiated is not None and upload.initiated <= cutoff:
            count += 1
            yield upload
    log.info("%d of them initiated at or before %s", count, iso_seconds(cutoff))


def _recorded(
    uploads: Iterable[Upload], keys: Container[str] | Owner, job: str
) -> Iterator[Upload]:
    count = 0
    for upload in uploads:
        if keys(upload.pending) if callable(keys) else upload.key in keys:
            count += 1
            yield upload
    log.info("%d of them recorded by job %s", count, job)


@contextlib.contextmanager
def recorded_by_job(view: OperatorView, selection: Selection) -> Iterator[KeySet | Owner | None]:
    """The destination keys the job's magic tree names, on disk; ``None`` without a job.

    A marked job's writers record the key of every upload before creating it (the
    intent marker), so these keys cover also the uploads of writers that were killed, and
    the duplicates of lost upload replies. An unmarked job's tree says so
    (``_magicfs_unmarked``): its uploads are then those its store's view owns it
    (:meth:`~magicfs.stores.operator_view.OperatorView.job_owner`; S3: also those not in
    its snapshot that no other job's tree may own). The tree is listed page by page
    into a :class:`~magicfs.stores.spool.KeySet`, deleted when the block ends.
    """
    if not selection.job:
        yield None
        return
    keys = KeySet()
    try:
        dest = f"{selection.bucket}/{selection.prefix}".rstrip("/")
        unmarked = _fill_job_keys(view, selection, selection.job, keys)
        owner = None if unmarked is None else view.job_owner(dest, selection.job, keys, unmarked)
        yield keys if owner is None else owner
    finally:
        keys.discard()


def _fill_job_keys(view: OperatorView, selection: Selection, job: str, keys: KeySet) -> str | None:
    """Fill ``keys``; returns the path of the job's unmarked record, if it is unmarked."""
    dest = f"{selection.bucket}/{selection.prefix}".rstrip("/")
    layout = MagicJobLayout(dest, job)
    record = f"{layout.magic_dir}/{UNMARKED_FILE}"
    files = 0
    active = False
    unmarked = False
    tree = view.iterate(view.adapter.alist_records(layout.magic_dir))
    for page in batches(tree, TREE_PAGE):
        files += len(page)
        active = active or layout.job_marker in page
        unmarked = unmarked or record in page
        keys.update(tree_keys(view, page))
    if not files:
        log.warning(
            "job %s has no magic tree at %s/: it records no uploads (a committed or "
            "aborted job's tree is deleted)",
            job,
            view.url(layout.magic_dir),
        )
    elif active:
        log.warning(
            "job %s is still active (%s exists): its tasks and commit need these uploads",
            job,
            view.url(layout.job_marker),
        )
    log.info("job %s: %d files in its magic tree name %d keys", job, files, len(keys))
    return record if unmarked else None


def tree_keys(view: OperatorView, listing: Iterable[str]) -> set[str]:
    """Destination keys named by the markers and ``.pending`` records among ``listing``."""
    return {view.split(destination)[1] for destination in marked_destinations(listing)}


# -- requests, a bounded number in flight (magicfs.parallel) ---------------------------


def measure(view: OperatorView, uploads: Iterable[Upload]) -> Generator[Upload, None, None]:
    """Fill in parts and parked bytes (S3: ListParts, :data:`LIST_PARTS_IN_FLIGHT` at
    once, at most :data:`WINDOW` uploads held), in listing order; drop uploads ended
    meanwhile."""

    async def parts_of(upload: Upload) -> Upload | None:
        measured = await view.ameasure(upload.pending)
        if measured is None:
            log.info("%s upload %s ended while being listed", upload.url, upload.upload_id)
            return None
        upload.parts, upload.bytes = measured
        log.debug("%s upload %s: %d parts", upload.url, upload.upload_id, upload.parts)
        return upload

    for upload in loop_map(view.run_background, parts_of, uploads, LIST_PARTS_IN_FLIGHT, WINDOW):
        if upload is not None:
            yield upload


def abort(
    view: OperatorView, uploads: Iterable[Upload], dry_run: bool
) -> Generator[Upload, None, None]:
    """Abort each upload (at most :data:`WINDOW` in flight) and set its status, in listing
    order; a dry run only marks them."""
    if dry_run:
        for upload in uploads:
            upload.status = "would abort"
            yield upload
        return
    log.info("aborting the selected uploads")

    async def abort_one(upload: Upload) -> Upload:
        try:
            # False: completed or aborted meanwhile (S3: NoSuchUpload)
            gone = not await view.aabort(upload.pending)
            upload.status = "already gone" if gone else "aborted"
        except OSError as e:
            upload.status, upload.error = "failed", str(e)
            log.warning("could not abort %s upload %s: %s", upload.url, upload.upload_id, e)
        return upload

    yield from loop_map(view.run_background, abort_one, uploads, WINDOW, WINDOW)


# -- output -----------------------------------------------------------------------------


class Report(Protocol):
    """Where settled uploads are written, one at a time."""

    def start(self) -> None: ...

    def upload(self, upload: Upload) -> None: ...

    def finish(self, totals: Totals) -> None: ...


def report(args: argparse.Namespace, selection: Selection, uploads: Iterator[Upload]) -> Totals:
    """Write each upload as it comes, then the totals; returns the totals.

    The first upload is awaited before anything is written, so a store that cannot be
    read at all (no such bucket, access denied) leaves stdout empty.
    """
    first = next(uploads, None)
    writer: Report = JsonReport(args, selection) if args.json else TextReport(args, selection)
    totals = Totals()
    with _progress(args) as bar:
        writer.start()
        for upload in itertools.chain([] if first is None else [first], uploads):
            totals.add(upload)
            writer.upload(upload)
            bar.update()
        writer.finish(totals)
    return totals


def _progress(args: argparse.Namespace) -> tqdm:
    """A bar counting settled uploads (their number is unknown: ``total`` 0), shown only
    when stderr is a terminal and stdout is not (there, the lines are the progress)."""
    description = "aborting" if args.action == "abort" and args.force else "listing parts"
    bar = progress_bar(0, description, enabled=sys.stderr.isatty() and not sys.stdout.isatty())
    bar.unit = "upload"
    return bar


class TextReport:
    """The header, one line per upload in fixed-width columns, the total line."""

    def __init__(self, args: argparse.Namespace, selection: Selection) -> None:
        self.args = args
        self.selection = selection

    def start(self) -> None:
        print(f"Uploads under {self.selection.describe()}:")

    def upload(self, upload: Upload) -> None:
        print(upload_line(self.args.action, upload, self.selection.part_noun))

    def finish(self, totals: Totals) -> None:
        print(total_line(self.args, totals, self.selection))


class JsonReport:
    """The document ``--json`` promises, written as it is known: the selection, then the
    ``uploads`` array one element at a time, then the counters."""

    def __init__(self, args: argparse.Namespace, selection: Selection) -> None:
        self.args = args
        self.selection = selection
        self.out: JsonObjectWriter | None = None

    def start(self) -> None:
        self.out = out = JsonObjectWriter()
        selection = self.selection
        out.member("action", self.args.action)
        out.member("dry_run", self.args.action == "abort" and not self.args.force)
        out.member("path", selection.url)
        out.member("store", selection.store)
        out.member("can_abort", selection.can_abort)
        out.member("bucket", selection.bucket)
        out.member("prefix", selection.prefix)
        out.member("older_than_seconds", selection.older_than)
        out.member("initiated_before", iso_seconds(selection.cutoff) if selection.cutoff else None)
        out.member("job", selection.job)
        out.begin_array("uploads")

    def upload(self, upload: Upload) -> None:
        self._writer().element(upload.to_dict())

    def finish(self, totals: Totals) -> None:
        out = self._writer()
        out.end_array()
        out.member("count", totals.count)
        out.member("bytes", totals.bytes)
        for name, value in totals.status_counts().items():
            out.member(name, value)
        out.close()

    def _writer(self) -> JsonObjectWriter:
        if self.out is None:
            raise RuntimeError("report not started")
        return self.out


def upload_line(action: str, upload: Upload, part_noun: str = "part") -> str:
    """One upload's line of the text output (fixed columns: see :data:`BYTES_WIDTH`); a
    write with no upload id (Azure's staged blocks) ends with its staged pieces."""
    status = "" if action == "list" else f"{upload.status:<{STATUS_WIDTH}}  "
    which = f"upload {upload.upload_id}" if upload.upload_id else plural(upload.parts, part_noun)
    return (
        f"  {status}{upload.initiated_text():<{INITIATED_WIDTH}}  "
        f"{upload.bytes:>{BYTES_WIDTH},} bytes  {upload.url}  {which}"
    )


def total_line(args: argparse.Namespace, totals: Totals, selection: Selection) -> str:
    parked = human_bytes(totals.bytes)
    found = plural(totals.count, "upload")
    if not selection.can_abort:
        names = plural(totals.count, "name")
        line = f"Total: {names} with {selection.part_noun}s, {parked} staged."
        return line if args.action == "list" else f"{line}\n{selection.cannot_discard}"
    if args.action == "list":
        return f"Total: {found} found, {parked} parked."
    if not args.force:
        return (
            f"Total: {found} would be aborted, {parked} parked. "
            "Dry run: nothing was aborted; add --force to abort them."
        )
    released = human_bytes(totals.released)
    text = f"Total: {plural(totals.aborted, 'upload')} aborted, {released} released"
    if totals.already_gone:
        text += f"; {totals.already_gone:,} had already ended"
    if totals.failed:
        text += f"; {totals.failed:,} could not be aborted"
    return text + "."


def exit_code(args: argparse.Namespace, selection: Selection, totals: Totals) -> int:
    if totals.failed:
        url, error = totals.first_failure or ("?", "?")
        print(
            f"magicfs: {selection.url}: could not abort {plural(totals.failed, 'upload')}; "
            f"first: {url}: {error}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.action == "list" and args.fail_if_any and totals.count:
        print(
            f"magicfs: {plural(totals.count, 'pending upload')} under {selection.describe()}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK
