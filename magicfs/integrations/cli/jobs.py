"""``magicfs jobs list|recover|rollback|cleanup PATH``: jobs left under a destination.

After a driver dies, its job's state is still in the destination (see
:mod:`magicfs.committers.jobs`). ``list`` shows every such job, what happened to it and
the commands that end it; the other actions end one job (``--job ID``) exactly as the
committer's own methods do:

* ``recover``: ``commit_job()`` — finish an interrupted commit (its journal's task
  records, no second conflict check). A job whose commit never began (``active``, or
  ``ended`` with task records) is refused unless the operator says what to publish:
  ``--messages FILE`` (the tasks' commit messages: exactly those attempts) or
  ``--all-committed-tasks`` (every committed task is the whole job; ``_SUCCESS`` records
  the choice). Only the driver knew whether every task had committed;
* ``rollback``: ``abort_job()`` — delete every file an interrupted commit had made
  visible, abort every upload; refused (exit 1) for a ``replace`` commit that had
  already deleted old data, unless ``--force``, and for a job that has committed (its
  output stays; ``cleanup`` finishes an unfinished clean-up);
* ``cleanup``: ``cleanup_job()`` — finish the clean-up of a committed job (refused while
  a commit is unfinished). A job already committed and cleaned up (its ``_SUCCESS``
  names it, nothing else is left) needs nothing: exit 0, saying so.

PATH is the job's destination or any directory above it, the bucket's root included: a
job id with nothing of it at PATH itself is looked for below it (:func:`find_jobs`, the
bucket's job index) and the action is taken on the one job of that id found there; an id
found at more than one destination below PATH is refused (exit 1), naming each. A job id
of which nothing is left at PATH or below it (no marker, journal, task record or tree, no
``_SUCCESS`` naming it) is refused by every action (exit 1), naming the jobs that are
there. Exit 0 when done (``list``: also when nothing is found, unless
``--fail-if-any``), 1 when the action failed or was refused (the message says what is
left and what to run).
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import sys
from typing import Any

from ...committers import committer_for, default_committer
from ...committers.job_families import JOB_COMMITTERS, family_of
from ...committers.jobs import JobState, describe_job, find_jobs
from ...errors import JobCommitError, NothingToCommitError
from ...protocol.attempts import TaskCommitMessage
from ...protocol.commit_record import vacuum
from ...protocol.committer import OutputCommitter
from ...statistics import FOREIGN_UPLOADS_ABORTED
from ...stores.registry import DEFERRED_STORES
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    CliError,
    add_common_options,
    job_id_argument,
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
#: States whose commit never began: only the driver knew whether every task committed.
NOT_BEGUN = ("active", "ended")
#: A messages file is a list of small JSON documents; more than this is not one.
MESSAGES_BYTES = 256 << 20


def add_parser(sub: Any) -> None:
    jobs = sub.add_parser(
        "jobs",
        help="list the jobs left under a destination; recover, roll back or clean one up",
        description="Jobs of the magic-layout committers (magic, block-list, magic-layout) "
        "and of the manifest committer keep their state under the destination "
        "(__magic_job-<id>/ on a deferred store such as S3 or Azure Blob, _temporary/<id>/ "
        "elsewhere). After a driver died, list them and finish (recover) or roll back each "
        "one.",
    )
    actions = jobs.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="the jobs under PATH and what each needs next")
    _add_path(listing)
    listing.add_argument(
        "--fail-if-any", action="store_true", help="exit 1 when any job is found (a CI guard)"
    )
    listing.set_defaults(handler=run_list)
    vacuuming = actions.add_parser(
        "vacuum",
        help="delete the old files replace jobs left at PATH (their replace_retention passed)",
        description="A replace job deletes the old files after its new snapshot is "
        "published: at once with replace_retention 0, else the next job on the "
        "destination or this command once the retention has passed. A job killed before "
        "it deleted them leaves them too; this finishes every such deletion at PATH.",
    )
    _add_path(vacuuming)
    vacuuming.add_argument(
        "--ignore-retention",
        action="store_true",
        help="delete them now, even where a job's replace_retention has not passed (a "
        "reader of an old snapshot then fails with FileNotFoundError and resolves again)",
    )
    vacuuming.set_defaults(handler=run_vacuum)
    for name, text in ACTIONS.items():
        action = actions.add_parser(name, help=text, description=text)
        _add_path(action)
        action.add_argument(
            "--job", required=True, type=job_id_argument, metavar="ID", help="the job id"
        )
        action.add_argument(
            "--committer",
            choices=JOB_COMMITTERS,
            help=_committer_help(),
        )
        if name == "recover":
            _add_choices(action)
        if name == "rollback":
            action.add_argument(
                "--force",
                action="store_true",
                help="roll back a replace commit even after it deleted old data (the old "
                "data cannot come back; the new data is deleted too)",
            )
        action.set_defaults(handler=run_action)


def _committer_help() -> str:
    """``--committer``'s help: the default as :func:`committer_for` picks it (the registry)."""
    own = ", ".join(f"{spec.committer} on {spec.name}" for spec in DEFERRED_STORES)
    return (
        "the job's committer, when it is not PATH's default; default: the committer of "
        f"PATH's deferred store ({own}), manifest elsewhere"
    )


def _add_choices(parser: argparse.ArgumentParser) -> None:
    """``recover``'s two ways to say what a job whose commit never began publishes."""
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument(
        "--messages",
        metavar="FILE",
        help="publish exactly the task attempts these commit messages name: one "
        "TaskCommitMessage.to_json() per line (the documented way to save them, see "
        "docs/recovery.md), or a JSON list of those strings or of the objects they hold",
    )
    choice.add_argument(
        "--all-committed-tasks",
        action="store_true",
        help="publish every committed task as the whole job (you know no task is missing); "
        "_SUCCESS records this choice (diagnostics magicfs.recovered)",
    )


def _add_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="the jobs' destination (fsspec URL)")
    add_common_options(parser)


# -- list ----------------------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    fs, path = open_fs(args.path, args)
    url = fs.unstrip_protocol(path)
    with store_errors(url):
        jobs = find_jobs(url, fs=fs)
    default = default_committer(url, fs)
    if args.json:
        documents = [{**job.to_dict(), "commands": _commands(job, default)} for job in jobs]
        print_json({"destination": url, "jobs": documents})
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
            for command, why in _explained_commands(job, default):
                print(f"      {command}" + (f"    # {why}" if why else ""))
    return EXIT_FAILED if args.fail_if_any and jobs else EXIT_OK


def run_vacuum(args: argparse.Namespace) -> int:
    fs, path = open_fs(args.path, args)
    url = fs.unstrip_protocol(path)
    with store_errors(url):
        committer = committer_for(url, fs=fs)
        done = vacuum(committer.flow, now=(1 << 62) if args.ignore_retention else None)
    if args.json:
        documents = [
            {"jobId": r.job_id, "deleted": r.deleted, "waitingSeconds": r.waiting_ms / 1000}
            for r in done
        ]
        print_json({"destination": url, "replaceJobs": documents})
        return EXIT_OK
    if not done:
        print(f"{url}: no old files of a replace job left to delete")
    for retired in done:
        if retired.waiting_ms:
            print(
                f"{url}: replace job {retired.job_id}: its old files stay "
                f"{retired.waiting_ms / 1000:.0f}s more (replace_retention)"
            )
        else:
            deleted = plural(retired.deleted, "old file")
            print(f"{url}: replace job {retired.job_id}: deleted {deleted}")
    return EXIT_OK


def _explained_commands(job: JobState, default: str) -> list[tuple[str, str]]:
    """The commands that end ``job``, the recommended one first, each with why (or ``""``);
    they name its committer when it is not the ``default`` one of PATH's store."""
    committer = f"--committer {job.committer} " if job.committer != default else ""
    base = f"{committer}--job {job.job_id} {job.destination}"
    if job.state in NOT_BEGUN:
        rollback = (f"magicfs jobs rollback {base}", "once its driver is known gone")
        if not job.task_records:
            return [rollback]
        return [
            rollback,
            (f"magicfs jobs recover --messages FILE {base}", "or publish exactly these tasks"),
            (
                f"magicfs jobs recover --all-committed-tasks {base}",
                f"or publish the {plural(job.task_records, 'committed task')} as the whole job",
            ),
        ]
    verb = {"committed": "cleanup", "committing": "recover"}.get(job.state, "rollback")
    return [(f"magicfs jobs {verb} {base}", "")]


def _commands(job: JobState, default: str) -> list[str]:
    return [command for command, _ in _explained_commands(job, default)]


# -- recover, rollback, cleanup ----------------------------------------------------------------


def run_action(args: argparse.Namespace) -> int:
    fs, path = open_fs(args.path, args)
    url = fs.unstrip_protocol(path)
    messages = read_messages(args.messages, args.job) if getattr(args, "messages", None) else None
    with store_errors(url):
        committer, before = _the_job(args, url, fs)
        _refuse(args, before)
        if messages is not None and before.state in NOT_BEGUN:
            check_records_exist(committer, messages, args.messages)
        try:
            outcome = _act(args, committer, before, messages)
        except (JobCommitError, NothingToCommitError) as e:
            raise CliError(str(e)) from None
    document = {
        "jobId": committer.job_id,
        "destination": committer.url,
        "action": args.action,
        "stateBefore": before.state,
        **outcome,
    }
    if args.json:
        print_json(document)
    else:
        print(_done(committer, args.action, before, outcome))
    sys.stdout.flush()
    return EXIT_OK


def _the_job(args: argparse.Namespace, url: str, fs: Any) -> tuple[OutputCommitter, JobState]:
    """The committer of job ``--job`` and its state: at PATH itself or, when nothing of it
    is there, the one job of that id :func:`find_jobs` finds below PATH (PATH is then an
    ancestor of its destination, the bucket's root included).

    Decision: an id found at more than one destination below PATH is refused, naming each
    one, rather than acted on at a guess; so is an id found nowhere (naming the jobs that
    are there). PATH itself wins over anything below it: it is exactly what was asked.
    """
    committer = committer_for(url, committer=args.committer, job_id=args.job, fs=fs)
    before = describe_job(committer)
    if before.state != "unknown":
        return committer, before
    below = find_jobs(url, fs=fs)
    named = [job for job in below if job.job_id == args.job]
    if not named:
        raise CliError(_unknown_job(committer, below))
    if len(named) > 1:
        where = "; ".join(f"{job.destination} ({job.committer}, {job.state})" for job in named)
        raise CliError(
            f"job {args.job}: found at {len(named)} destinations below {url}: {where}. "
            f"Nothing was changed: name the one you mean, e.g. magicfs jobs {args.action} "
            f"--job {args.job} {named[0].destination}"
        )
    job = named[0]
    log.info("job %s: not at %s itself; found below it, at %s", args.job, url, job.destination)
    committer = committer_for(
        job.destination, committer=args.committer or job.committer, job_id=args.job, fs=fs
    )
    return committer, describe_job(committer)


def _unknown_job(committer: OutputCommitter, found: list[JobState]) -> str:
    """The refusal of a job id of which nothing is left: which jobs are there instead."""
    there = ", ".join(f"{job.job_id} at {job.destination}" for job in found) or "none"
    return (
        f"no job {committer.job_id} at {committer.url}: nothing of it is there or below "
        f"it (no job marker, journal, task record or tree of the {committer.name} committer, "
        f"no _SUCCESS naming it). Jobs found there: {there} (magicfs jobs list "
        f"{committer.url})"
    )


def _refuse(args: argparse.Namespace, before: JobState) -> None:
    """Refuse, before anything changes, what the job's state makes wrong to do."""
    base = f"--job {before.job_id} {before.destination}"
    if args.action == "recover" and before.state in NOT_BEGUN:
        if before.state == "ended" and not before.task_records:
            raise CliError(
                f"job {before.job_id} at {before.destination}: nothing to recover: no task "
                f"of it committed ({before.what_happened}); roll it back: magicfs jobs "
                f"rollback {base}"
            )
        if args.messages is None and not args.all_committed_tasks:
            raise CliError(
                f"job {before.job_id} at {before.destination}: not recovered: no commit of "
                f"it began ({before.what_happened}), and only its driver knew whether every "
                f"task had committed. Say what to publish: magicfs jobs recover --messages "
                f"FILE {base} (exactly the tasks' commit messages, one to_json() per line) or "
                f"magicfs jobs recover --all-committed-tasks {base} (the "
                f"{plural(before.task_records, 'committed task')} are the whole job; recorded "
                f"in _SUCCESS). Or, once the driver is known gone, roll it back: magicfs jobs "
                f"rollback {base}"
            )
    if args.action == "rollback" and before.state in ("committed", "done"):
        left = (
            f"; its clean-up is unfinished: magicfs jobs cleanup {base}"
            if before.state == "committed"
            else ""
        )
        raise CliError(
            f"job {before.job_id} has already committed to {before.destination}: nothing to "
            f"roll back, its output stays{left}"
        )


def _act(
    args: argparse.Namespace,
    committer: OutputCommitter,
    before: JobState,
    messages: list[TaskCommitMessage] | None,
) -> dict[str, Any]:
    if args.action == "recover":
        summary = committer.commit_job(messages, all_committed_tasks=args.all_committed_tasks)
        return {
            "files": summary.files,
            "bytes": summary.bytes,
            "tasks": summary.tasks,
            "recoveredFrom": _recovered_from(args, before),
            "cleanupIncomplete": summary.cleanup_incomplete,
            "foreignUploadsAborted": summary.foreign_uploads_aborted,
        }
    earlier = committer.stats.counter(FOREIGN_UPLOADS_ABORTED)
    if args.action == "rollback":
        committer.abort_job(force=args.force)
    elif before.state != "done":  # done: already cleaned up, nothing to do (idempotent)
        committer.cleanup_job()
    return {"foreignUploadsAborted": committer.stats.counter(FOREIGN_UPLOADS_ABORTED) - earlier}


def _recovered_from(args: argparse.Namespace, before: JobState) -> str:
    """What decided the published set: the journal, the messages, or the operator's word."""
    if before.state not in NOT_BEGUN:
        return "journal"
    return "messages" if args.messages is not None else "all-committed-tasks"


def _done(
    committer: OutputCommitter, action: str, before: JobState, outcome: dict[str, Any]
) -> str:
    """The line that says what the action did (and the uploads it aborted that the job did
    not start, each also logged at WARNING)."""
    line = _what_was_done(committer, action, before, outcome)
    foreign = outcome.get("foreignUploadsAborted", 0)
    if foreign:
        line += (
            f". Its clean-up also aborted {plural(foreign, 'multipart upload')} under the "
            "destination that the job did not start (logged above with key, upload id and "
            "initiation time)"
        )
    return line


def _what_was_done(
    committer: OutputCommitter, action: str, before: JobState, outcome: dict[str, Any]
) -> str:
    head = f"job {committer.job_id} at {committer.url}"
    if action == "recover":
        chosen = {
            "journal": "the records its interrupted commit's journal names",
            "messages": "exactly the attempts the messages name",
            "all-committed-tasks": "every committed task, as you declared (recorded in _SUCCESS)",
        }[outcome["recoveredFrom"]]
        line = (
            f"{head}: committed {plural(outcome['files'], 'file')} "
            f"({plural(outcome['bytes'], 'byte')}) of {plural(outcome['tasks'], 'task')}: "
            f"{chosen}"
        )
        incomplete = outcome.get("cleanupIncomplete")
        return f"{line}. {incomplete}" if incomplete else line
    if action == "rollback":
        return (
            f"{head}: rolled back (it was {before.state}): nothing of it is visible, "
            "nothing of its tree is left"
        )
    if before.state == "done":
        return f"{head}: already committed and cleaned up (its _SUCCESS names it): nothing to do"
    return f"{head}: cleaned up (it was {before.state}): nothing of its tree is left"


# -- the messages of --messages FILE -------------------------------------------------------------


def read_messages(path: str, job_id: str) -> list[TaskCommitMessage]:
    """The task commit messages in ``path``, in any of the three shapes a driver writes:
    JSON lines (one ``message.to_json()`` per line: the documented way, appended as each
    task commits, so a driver killed mid-job has saved every message so far), a JSON list
    of ``to_json()`` strings (``json.dump([m.to_json() for m in messages], f)``) or a JSON
    list of the objects those strings hold.

    Each must be a whole :class:`TaskCommitMessage` of job ``job_id``, one per task: a
    wrong file is refused here, naming the entry and field, before the job is touched.
    """
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"--messages {path}: cannot read it: {e}") from None
    if len(text) > MESSAGES_BYTES:
        raise CliError(f"--messages {path}: larger than {MESSAGES_BYTES:,} bytes")
    entries = _message_documents(path, text)
    if not entries:
        raise CliError(
            f"--messages {path}: no messages in it (one message.to_json() per line, or a "
            "JSON list of them)"
        )
    messages = [_message(path, where, entry) for where, entry in entries]
    tasks: dict[str, str] = {}
    for message, (where, _) in zip(messages, entries, strict=True):
        if message.job_id != job_id:
            raise CliError(
                f"--messages {path}: {where}: job_id is {message.job_id!r}, not the job "
                f"recovered ({job_id}): give the messages of job {job_id}"
            )
        if message.task_id in tasks:
            raise CliError(
                f"--messages {path}: {where}: a second message for task {message.task_id} "
                f"(attempts {tasks[message.task_id]} and {message.attempt_id}): keep the "
                "one attempt to publish"
            )
        tasks[message.task_id] = message.attempt_id
    return messages


def _message_documents(path: str, text: str) -> list[tuple[str, Any]]:
    """(where, parsed JSON) of each message: list entries (a string entry is the JSON
    text of one, ``to_json()``'s, and is parsed), or lines."""
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, list):
        return [
            (f"entry {index}", _parsed(path, f"entry {index}", entry))
            for index, entry in enumerate(document)
        ]
    if isinstance(document, dict):
        return [("entry 0", document)]
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append((f"line {number}", _parsed(path, f"line {number}", json.loads(line))))
        except ValueError as e:
            raise CliError(
                f"--messages {path}: line {number}: not JSON ({e}): the file must hold a "
                "JSON list of task commit messages, or one message per line"
            ) from None
    return entries


def _parsed(path: str, where: str, entry: Any) -> Any:
    """A list entry as a message's JSON: a string (``to_json()``'s text) is parsed."""
    if not isinstance(entry, str):
        return entry
    try:
        return json.loads(entry)
    except ValueError as e:
        raise CliError(
            f"--messages {path}: {where}: a string that is not a message's JSON ({e}): each "
            "string entry must be one task's message.to_json()"
        ) from None


#: The fields of a message and the JSON types they take.
_FIELDS: dict[str, tuple[type, ...]] = {
    "committer": (str,),
    "job_id": (str,),
    "task_id": (str,),
    "attempt_id": (str,),
    "record": (str,),
    "files": (int,),
    "bytes": (int,),
}


def _message(path: str, where: str, entry: Any) -> TaskCommitMessage:
    """One entry as a message, or a refusal naming its field."""
    if not isinstance(entry, dict):
        raise CliError(
            f"--messages {path}: {where}: not a JSON object but {type(entry).__name__}: each "
            "entry is one task's commit message (TaskCommitMessage.to_json())"
        )
    for name, types in _FIELDS.items():
        value = entry.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            raise CliError(
                f"--messages {path}: {where}: field {name} is missing or not a "
                f"{types[0].__name__} (a TaskCommitMessage has {', '.join(_FIELDS)})"
            )
    rows = entry.get("rows")
    if rows is not None and (not isinstance(rows, int) or isinstance(rows, bool)):
        raise CliError(f"--messages {path}: {where}: field rows is not an integer")
    carried = entry.get("record_json")  # the record itself; the job checks it as it reads one
    if carried is not None and not isinstance(carried, str):
        raise CliError(f"--messages {path}: {where}: field record_json is not a string")
    return TaskCommitMessage(
        **{name: entry[name] for name in _FIELDS}, rows=rows, record_json=carried
    )


def check_records_exist(
    committer: OutputCommitter, messages: list[TaskCommitMessage], path: str
) -> None:
    """Every record the messages name is one of this job's task records and is there
    (else the commit would fail and abort the job): one listing of its tasks directory."""
    fs = committer.store_fs
    family = family_of(committer.name)
    if family is None:  # not a committer of ``magicfs jobs``
        return
    tasks_dir = family.records_dir(committer)
    outside = [m for m in messages if m.record.rsplit("/", 1)[0] != tasks_dir]
    if outside:
        raise CliError(
            f"--messages {path}: the message of task {outside[0].task_id} names a record "
            f"outside job {committer.job_id}'s task records ({outside[0].record}, not in "
            f"{fs.unstrip_protocol(tasks_dir)}): give this job's messages"
        )
    present = family.stored_records(committer)
    missing = sorted({m.record for m in messages} - present)
    if missing:
        raise CliError(
            f"--messages {path}: {plural(len(missing), 'record')} they name "
            f"{'is' if len(missing) == 1 else 'are'} not there, e.g. "
            f"{fs.unstrip_protocol(missing[0])}: not the messages of this job's committed "
            "tasks as they stand (an attempt aborted since?); nothing was changed"
        )
