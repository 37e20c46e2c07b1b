"""``magicfs success PATH``: did the job that wrote PATH commit, and what did it commit?

The counterpart of Hadoop's ``mapred successfile``: reads the JSON ``_SUCCESS`` of a
destination (or the file itself) and prints the job summary. Exit 1 when there is no
``_SUCCESS``, when it is the zero-byte marker of the classic FileOutputCommitter (no
summary to check, and not written by a committer that commits safely on S3), when it
is not a valid record, or when it says ``success: false``. Scripts gate on the exit
code; ``--json`` gives them the numbers.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ...errors import InvalidCommitData
from ...names import SUCCESS_FILE
from ...paths import join
from ...records import SuccessData
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    NotFound,
    add_common_options,
    non_negative,
    open_fs,
    print_json,
    store_errors,
)
from .common import read_limited as read_file
from .inspect_record import load
from .render import JobTotals
from .render import success as render_success

log = logging.getLogger("magicfs.cli.success")


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "success",
        help="summary of a committed job from its _SUCCESS; exit 1 if absent or not a success",
        description="Print the job summary in a destination's JSON _SUCCESS: committer, job "
        "id, host, date, files, bytes, duration, committed files and IOStatistics. Exit 1 "
        "when _SUCCESS is missing, zero-byte (classic FileOutputCommitter), invalid, or "
        "says success=false.",
    )
    parser.add_argument(
        "path",
        metavar="PATH",
        help="the job's destination directory or its _SUCCESS file (fsspec URL or local path)",
    )
    parser.add_argument(
        "--limit",
        type=non_negative,
        default=20,
        metavar="N",
        help="list at most N committed file names in text output (default 20; 0 = all; "
        "_SUCCESS itself keeps the first 100)",
    )
    add_common_options(parser)
    parser.set_defaults(handler=run)


def success_file(fs: Any, path: str, url: str) -> tuple[str, str]:
    """``(path, url)`` of the ``_SUCCESS`` meant: PATH itself if it is one, else PATH/_SUCCESS.

    A PATH that is some other file (a summary report copy) is read as it is.
    """
    if path.rstrip("/").rsplit("/", 1)[-1] == SUCCESS_FILE:
        return path, url
    with store_errors(url):
        if fs.isfile(path):
            return path, url
    return join(path, SUCCESS_FILE), join(url, SUCCESS_FILE)


def run(args: argparse.Namespace) -> int:
    url = args.path.rstrip("/") or args.path
    fs, path = open_fs(url, args)
    path, url = success_file(fs, path, url)
    try:
        data = read_file(fs, path, SuccessData.MAX_BYTES, url)
    except NotFound:
        return fail(
            args,
            url,
            f"{url}: no _SUCCESS file: the job has not committed (or its committer writes none)",
        )
    try:
        record = load(data, "success", url)
    except InvalidCommitData as e:
        return fail(args, url, str(e))
    assert isinstance(record, SuccessData)
    if args.json:
        print_json(
            {
                "file": url,
                "ok": record.success,
                "error": None if record.success else "success is false",
                "summary": summary(record),
                "record": record.to_dict(),
            }
        )
    else:
        print(f"{url}: job {record.job_id or '(no id)'}")
        print("\n".join(render_success(record, args.limit)))
    if not record.success:
        print(f"magicfs: {url}: the job did not succeed (success: false)", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def summary(record: SuccessData) -> dict[str, Any]:
    """The numbers a script wants, whichever committer wrote the file."""
    return {
        "success": record.success,
        "committer": record.committer,
        "job_id": record.job_id,
        "job_id_source": record.job_id_source,
        "hostname": record.hostname,
        "date": record.date,
        "timestamp": record.timestamp,
        **JobTotals.of(record).to_dict(),
        "filenames": list(record.filenames),
    }


def fail(args: argparse.Namespace, url: str, message: str) -> int:
    """Report a missing or unusable ``_SUCCESS``: stderr always, JSON too with ``--json``."""
    if args.json:
        print_json({"file": url, "ok": False, "error": message, "summary": None, "record": None})
    print(f"magicfs: {message}", file=sys.stderr)
    return EXIT_FAILED
