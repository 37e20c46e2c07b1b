"""``magicfs jobs list|recover|rollback|cleanup PATH``: jobs left under a destination.

After a driver dies, its job's state is still in the destination (see
:mod:`magicfs.committers.jobs`). ``list`` shows every such job and what it needs next;
the other actions end one job (``--job ID``) exactly as the committer's own methods do:

* ``recover``: ``commit_job()`` — finish an interrupted commit (the same task records,
  no second conflict check), or commit the committed tasks of a job whose driver died
  before committing;
* ``rollback``: ``abort_job()`` — delete every file an interrupted commit had made
  visible, abort every upload; refused (exit 1) for a ``replace`` commit that had
  already deleted old data, unless ``--force``;
* ``cleanup``: ``cleanup_job()`` — finish the clean-up of a committed job (refused while
  a commit is unfinished).

Exit 0 when done (``list``: also when nothing is found, unless ``--fail-if-any``), 1 when
the action failed (the message says what is left and what to run).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ...committers import committer_for
from ...committers.jobs import describe_job, find_jobs
from ...errors import JobCommitError, NothingToCommitError
from ...layouts.magic import check_job_id
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    CliError,
    add_common_options,
    open_fs,
    plural,
    print_json,
    store_errors,
)

log = logging.getLogger("magicfs.cli.jobs")

ACTIONS = {
    "recover": "finish the job's commit (commit_job())",
    "rollback": "roll the job back (abort_job()): nothing of it stays visible",
    "cleanup": "finish a committed job's clean-up (cleanup_job())",
}


def add_parser(sub: Any) -> None:
    jobs = sub.add_parser(
        "jobs",
        help="list the jobs left under a destination; recover, roll back or clean one up",
        description="Jobs of the magic and manifest committers keep their state under the "
        "destination (__magic_job-<id>/ on S3, _temporary/<id>/ elsewhere). After a driver "
        "died, list them and finish (recover) or roll back each one.",
    )
    actions = jobs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the jobs under PATH and what each needs next")
    _add_path(listing)
    listing.add_argument(
        "--fail-if-any", action="store_true", help="exit 1 when any job is found (a CI guard)"
    )
    listing.set_defaults(handler=run_list)
    for name, text in ACTIONS.items():
        action = actions.add_parser(name, help=text, description=text)
        _add_path(action)
        action.add_argument("--job", required=True, type=_job_id, metavar="ID", help="the job id")
        action.add_argument(
            "--committer",
            choices=("magic", "manifest"),
            help="default: magic for s3:// destinations, manifest elsewhere",
        )
        if name == "rollback":
            action.add_argument(
                "--force",
                action="store_true",
                help="roll back a replace commit even after it deleted old data (the old "
                "data cannot come back; the new data is deleted too)",
            )
        action.set_defaults(handler=run_action)


def _add_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="the jobs' destination (fsspec URL)")
    add_common_options(parser)


def _job_id(text: str) -> str:
    try:
        return check_job_id(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run_list(args: argparse.Namespace) -> int:
    fs, path = open_fs(args.path, args)
    url = fs.unstrip_protocol(path)
    with store_errors(url):
        jobs = find_jobs(url, fs=fs)
    if args.json:
        print_json({"destination": url, "jobs": [job.to_dict() for job in jobs]})
    else:
        print(f"Jobs under {url}: {len(jobs) or 'none'}")
        for job in jobs:
            started = f", set up {job.started} on {job.host}" if job.started else ""
            phase = f", phase {job.phase}" if job.phase else ""
            deletes = f", {plural(job.deletes, 'old file')} to delete" if job.deletes else ""
            print(
                f"  {job.job_id}  {job.committer}  {job.state}{phase}{deletes}, "
                f"{plural(job.task_records, 'committed task')}{started}"
            )
            print(f"      destination: {job.destination}")
            print(f"      next: {job.next_step}")
            print(f"      magicfs jobs {_command(job.state)} --job {job.job_id} {job.destination}")
    return EXIT_FAILED if args.fail_if_any and jobs else EXIT_OK


def _command(state: str) -> str:
    return {"committed": "cleanup", "ended": "rollback"}.get(state, "recover")


def run_action(args: argparse.Namespace) -> int:
    fs, path = open_fs(args.path, args)
    url = fs.unstrip_protocol(path)
    committer = committer_for(url, committer=args.committer, job_id=args.job, fs=fs)
    with store_errors(url):
        before = describe_job(committer)
        try:
            outcome = _act(args, committer)
        except (JobCommitError, NothingToCommitError) as e:
            raise CliError(str(e)) from None
    document = {
        "jobId": committer.job_id,
        "destination": url,
        "action": args.action,
        "stateBefore": before.state,
        **outcome,
    }
    if args.json:
        print_json(document)
    else:
        detail = ", ".join(f"{key} {value}" for key, value in outcome.items() if value is not None)
        print(f"job {committer.job_id} at {url}: {args.action} done ({detail})")
    sys.stdout.flush()
    return EXIT_OK


def _act(args: argparse.Namespace, committer: Any) -> dict[str, Any]:
    if args.action == "recover":
        summary = committer.commit_job()
        return {
            "files": summary.files,
            "bytes": summary.bytes,
            "cleanupIncomplete": summary.cleanup_incomplete,
        }
    if args.action == "rollback":
        committer.abort_job(force=args.force)
        return {}
    committer.cleanup_job()
    return {}
