"""Finding the jobs whose state lives under a destination, and what each needs next.

For operators (``magicfs jobs``) and for scripts that recover after a crash: every job
of the magic and manifest committers keeps its state in the destination itself, in names
readers skip (``__magic_job-<id>/`` on S3, ``_temporary/<id>/`` elsewhere), so listing
them needs nothing but the destination:

* ``active``: set up, not ended (its job marker exists): tasks may still be running;
* ``committing``: a commit started and did not finish (its journal exists): finish it
  with ``commit_job()`` or roll it back with ``abort_job()``;
* ``committed``: the commit finished but its clean-up did not: ``cleanup_job()``;
* ``ended``: neither marker nor journal, but a tree is left (an abort or clean-up cut
  short, or a commit that stopped before its journal): ``abort_job()``.

Only the driver knew whether every task an ``active`` or ``ended`` job needs has
committed, so their next step is a roll-back; committing one takes the caller's word
for what to publish: ``commit_job(messages)`` or ``commit_job(all_committed_tasks=True)``
(:mod:`magicfs.protocol.active_jobs`).

:func:`describe_job` of one job id also tells two states :func:`find_jobs` never
returns (they leave no tree to find): ``done``, committed and cleaned up (its
``_SUCCESS`` names it, nothing else of it is left), and ``unknown``, nothing of it there.

(The staging committers keep their records in the staging directory, on the executors'
and driver's shared filesystem; recover them with ``committer_for(..., committer=
"directory", job_id=..., staging_dir=...)``.)
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidCommitData
from ..layouts.magic import MagicJobLayout
from ..layouts.manifest import ManifestJobLayout
from ..names import JOB_MARKER, MAGIC_JOB_PREFIX, MANIFEST_SUFFIX, PENDINGSET_SUFFIX, TEMPORARY
from ..paths import join
from ..protocol.committer import OutputCommitter
from ..stores.capabilities import speaks_s3
from ..stores.s3.failures import listing_error
from ..stores.s3.store import S3Store, iterate
from . import committer_for

STATES = ("active", "committing", "committed", "ended", "done", "unknown")
#: A job marker is a small JSON document; more than this is not one of ours.
MARKER_BYTES = 1 << 20


@dataclass
class JobState:
    """One job found under a destination."""

    job_id: str
    committer: str
    destination: str
    state: str
    phase: str | None  # the journal's phase, when a commit started
    task_records: int  # committed task records (pendingsets, manifests) found
    deletes: int  # old files a replace commit planned to delete (journal)
    started: str | None  # when the job was set up (its marker), ISO 8601 UTC
    host: str | None  # where it was set up

    @property
    def what_happened(self) -> str:
        """Of a job whose commit never began (``active``, ``ended``): what the store shows."""
        records = f"{self.task_records} task records"
        if self.state == "active":
            return f"the driver stopped before committing, or is still running; {records}"
        return (
            "ended before any commit began (an abort or clean-up cut short, or a commit "
            f"stopped before its journal); {records} left"
        )

    @property
    def next_step(self) -> str:
        """What happened to the job and the safe next step (the module docstring)."""
        say_what = (
            "; publish only by saying what: commit_job(messages) with the tasks' messages, "
            "or commit_job(all_committed_tasks=True) if the committed tasks are the whole job"
        )
        if self.state == "active":
            return (
                f"{self.what_happened}. Once the driver is known gone, roll it back: "
                f"abort_job(){say_what}"
            )
        if self.state == "ended" and self.task_records:
            return f"{self.what_happened}. Roll it back: abort_job(){say_what}"
        return {
            "committing": "commit interrupted: commit_job() finishes it with its journal's "
            "records, or abort_job() rolls it back",
            "committed": "committed, clean-up unfinished: cleanup_job()",
            "ended": "ended, tree left: abort_job() (or cleanup_job())",
            "done": "committed and cleaned up (its _SUCCESS names it): nothing to do",
            "unknown": "nothing of this job is left here",
        }[self.state]

    def to_dict(self) -> dict[str, Any]:
        """JSON keys in the records' style (camelCase)."""
        return {
            "jobId": self.job_id,
            "committer": self.committer,
            "destination": self.destination,
            "state": self.state,
            "phase": self.phase,
            "taskRecords": self.task_records,
            "deletes": self.deletes,
            "started": self.started,
            "host": self.host,
            "nextStep": self.next_step,
        }


def find_jobs(
    dest: str, *, storage_options: dict[str, Any] | None = None, fs: Any = None
) -> list[JobState]:
    """Every magic or manifest committer job with state under ``dest`` (a URL)."""
    probe = committer_for(dest, storage_options=storage_options, fs=fs)
    store_fs, root = probe.store_fs, probe.dest
    store = getattr(probe, "store", None)
    if speaks_s3(store_fs) and isinstance(store, S3Store):
        bucket, key = store.split(root)
        trees = f"{key}/{MAGIC_JOB_PREFIX}" if key else MAGIC_JOB_PREFIX
        ids = [
            tree.rstrip("/").rsplit("/", 1)[-1][len(MAGIC_JOB_PREFIX) :]
            for tree in iterate(store, store.alist_prefixes(bucket, trees))
        ]
        kind = "magic"
    else:
        ids = [name for name in _names(store_fs, join(root, TEMPORARY)) if not name.isdigit()]
        kind = "manifest"
    found = []
    for job_id in sorted(ids):
        try:
            committer = committer_for(dest, committer=kind, job_id=job_id, fs=store_fs)
        except ValueError:  # not a valid job id: not one of ours
            continue
        found.append(describe_job(committer))
    return found


def describe_job(committer: OutputCommitter) -> JobState:
    """The state of ``committer``'s job (see the module docstring)."""
    keeper = committer._journal()
    journal = None
    if keeper is not None:
        with contextlib.suppress(InvalidCommitData):
            journal = keeper.read()
    marker = _marker(committer)
    records = _task_records(committer)
    if journal is not None:
        state = "committed" if journal.phase == "committed" else "committing"
    elif marker is not None:
        state = "active"
    elif records or _tree_left(committer):
        state = "ended"
    else:  # nothing of it left: cleaned up after its commit, or never here
        state = "done" if committer.job_state() == "committed" else "unknown"
    return JobState(
        job_id=committer.job_id,
        committer=committer.name,
        destination=committer.url,
        state=state,
        phase=journal.phase if journal else None,
        task_records=records,
        deletes=journal.deletes if journal else 0,
        started=_iso(marker.get("created")) if marker else None,
        host=marker.get("hostname") if marker else None,
    )


def _marker(committer: OutputCommitter) -> dict[str, Any] | None:
    layout = getattr(committer, "layout", None)
    if layout is None:
        return None
    store = getattr(committer, "store", None)
    if isinstance(store, S3Store):  # retried and paced (the store's calls)
        data = store.read(layout.job_marker, MARKER_BYTES)
        if data is None:
            return None
    else:
        try:
            data = committer.store_fs.cat_file(layout.job_marker, start=0, end=MARKER_BYTES)
        except FileNotFoundError:
            return None
    try:
        document = json.loads(data)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def _task_records(committer: OutputCommitter) -> int:
    layout = getattr(committer, "layout", None)
    if isinstance(layout, MagicJobLayout):
        directory, suffix = layout.job_attempt_dir, PENDINGSET_SUFFIX
    elif isinstance(layout, ManifestJobLayout):
        directory, suffix = layout.manifests_dir, MANIFEST_SUFFIX
    else:
        return 0
    store = getattr(committer, "store", None)
    if isinstance(store, S3Store):  # retried and paced (the store's calls)
        bucket, key = store.split(directory)
        files = iterate(store, store.alist_keys(bucket, f"{key}/", delimiter="/"))
        return sum(1 for path in files if path.endswith(suffix))
    return sum(1 for name in _names(committer.store_fs, directory) if name.endswith(suffix))


def _tree_left(committer: OutputCommitter) -> bool:
    """Is anything left under the job's own directory (its tree)? One listing request."""
    layout = getattr(committer, "layout", None)
    if isinstance(layout, MagicJobLayout):
        directory = layout.magic_dir
    elif isinstance(layout, ManifestJobLayout):
        directory = layout.job_dir
    else:
        return False
    store = getattr(committer, "store", None)
    if isinstance(store, S3Store):  # retried and paced (the store's calls)
        bucket, key = store.split(directory)
        return next(iterate(store, store.alist_keys(bucket, f"{key}/")), None) is not None
    return bool(_names(committer.store_fs, directory))


def _names(fs: Any, directory: str) -> list[str]:
    fs.invalidate_cache(directory)
    try:
        entries = fs.ls(directory, detail=False)
    except FileNotFoundError as e:
        failure = listing_error("list_objects_v2", directory, e)
        if failure is not e:  # the bucket itself is missing: no "no jobs" answer
            raise failure from e
        return []
    except NotADirectoryError:
        return []
    return [e.rstrip("/").rsplit("/", 1)[-1] for e in entries if e.rstrip("/") != directory]


def _iso(millis: Any) -> str | None:
    import datetime

    if not isinstance(millis, int):
        return None
    moment = datetime.datetime.fromtimestamp(millis / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["JOB_MARKER", "STATES", "JobState", "describe_job", "find_jobs"]
