"""``magicfs inspect FILE``: validate a commit record and show what it says.

The kind of record is taken from the file name (``*.pending``, ``*.pendingset``,
``*-manifest.json``, ``_SUCCESS``), as Hadoop's readers know it, else from its content
(the ``name``/``type`` constants, then the fields only one kind has), or from
``--kind``. Validation is the same strict loading the committers use, so a record
``inspect`` accepts is one a job commit would accept, and a refused one fails with the
same ``<file>: <field>: <problem>`` message. Exit 1 when the record is invalid.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from ...errors import InvalidCommitData
from ...records import (
    MANIFEST_COMMITTER_CLASS,
    MANIFEST_TYPE,
    SUCCESS_NAME,
    ManifestSuccessData,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
    TaskManifest,
)
from ...records._base import Record
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    CliError,
    add_common_options,
    non_negative,
    open_fs,
    print_json,
)
from .common import read_limited as read_file
from .render import manifest as render_manifest
from .render import pending as render_pending
from .render import pendingset as render_pendingset
from .render import success as render_success

log = logging.getLogger("magicfs.cli.inspect")

#: kind -> (record class, what to call it)
KINDS: dict[str, tuple[type[Record], str]] = {
    "pending": (SinglePendingCommit, ".pending (one pending upload)"),
    "pendingset": (PendingSet, ".pendingset (a task's pending uploads)"),
    "manifest": (TaskManifest, "task manifest"),
    "success": (SuccessData, "_SUCCESS (job summary)"),
}
_LARGEST_RECORD = max(cls.MAX_BYTES for cls, _ in KINDS.values())


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "inspect",
        help="validate and pretty-print a .pending, .pendingset, task manifest or _SUCCESS",
        description="Validate a commit record strictly (as job commit would) and print what "
        "it says. Exit 1 with the error, naming file and field, when it is invalid.",
    )
    parser.add_argument("file", metavar="FILE", help="the record: an fsspec URL or local path")
    parser.add_argument(
        "--kind",
        choices=sorted(KINDS),
        help="read FILE as this kind of record instead of telling it from its name or content",
    )
    parser.add_argument(
        "--limit",
        type=non_negative,
        default=20,
        metavar="N",
        help="list at most N uploads, files, ETags or directories in text output "
        "(default 20; 0 = all)",
    )
    add_common_options(parser)
    parser.set_defaults(handler=run)


def kind_from_name(name: str) -> str | None:
    """What Hadoop's readers would take a file of this name to be."""
    if name == "_SUCCESS":
        return "success"
    if name.endswith(".pendingset"):
        return "pendingset"
    if name.endswith(".pending"):
        return "pending"
    if name.endswith("-manifest.json"):
        return "manifest"
    return None


def kind_from_content(data: bytes) -> str | None:
    """Guess from the JSON: the format constants first, then fields only one kind has."""
    try:
        document = json.loads(data)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    if document.get("name") == SUCCESS_NAME:
        return "success"
    if document.get("type") == MANIFEST_TYPE:
        return "manifest"
    if "commits" in document:
        return "pendingset"
    if "uploadId" in document:
        return "pending"
    return None


def load(data: bytes, kind: str, source: str) -> Record:
    """Validate ``data`` as ``kind``; raises :class:`InvalidCommitData` naming ``source``."""
    cls = KINDS[kind][0]
    record = cls.from_json(data, source=source)
    if isinstance(record, SuccessData) and record.committer == MANIFEST_COMMITTER_CLASS:
        # Same fields; re-read so --json shows the manifest committer's own form.
        record = ManifestSuccessData.from_json(data, source=source)
    return record


def run(args: argparse.Namespace) -> int:
    url = args.file.rstrip("/") or args.file
    fs, path = open_fs(url, args)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    kind = args.kind or kind_from_name(name)
    limit = KINDS[kind][0].MAX_BYTES if kind else _LARGEST_RECORD
    data = read_file(fs, path, limit, url)
    kind = kind or kind_from_content(data)
    if kind is None:
        raise CliError(
            f"{url}: cannot tell which record this is: not named *.pending, *.pendingset, "
            "*-manifest.json or _SUCCESS, and its content matches none; use --kind"
        )
    log.info("%s: reading %d bytes as %s", url, len(data), kind)
    try:
        record = load(data, kind, url)
    except InvalidCommitData as e:
        if args.json:
            print_json(
                {"file": url, "kind": kind, "valid": False, "field": e.field, "error": str(e)}
            )
        print(f"magicfs: invalid {kind} record: {e}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print_json({"file": url, "kind": kind, "valid": True, "record": record.to_dict()})
    else:
        print("\n".join(describe(record, kind, url, args.limit)))
    return EXIT_OK


def describe(record: Record, kind: str, url: str, limit: int) -> list[str]:
    what = KINDS[kind][1]
    lines = [f"{url}: valid {what}, Hadoop {type(record).__name__}"]
    if isinstance(record, SinglePendingCommit):
        return lines + render_pending(record, limit)
    if isinstance(record, PendingSet):
        return lines + render_pendingset(record, limit)
    if isinstance(record, TaskManifest):
        return lines + render_manifest(record, limit)
    assert isinstance(record, SuccessData)
    return lines + render_success(record, limit)
