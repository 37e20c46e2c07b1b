"""Finding the jobs whose state lives under a destination, and what each needs next.

For operators (``magicfs jobs``) and for scripts that recover after a crash: every job
of the magic and manifest committers keeps its state in the destination itself, in names
readers skip (``__magic_job-<id>/`` on S3, ``_temporary/<id>/`` elsewhere), so listing
them needs nothing but the destination; the jobs *below* a prefix are found through the
bucket's job index (:func:`find_jobs`, :mod:`magicfs.layouts.job_index`). A job is in
one of these states:

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
import logging
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidCommitData
from ..layouts import job_index
from ..names import JOB_MARKER, TEMPORARY
from ..paths import is_magic_element
from ..protocol.committer import OutputCommitter
from ..records._base import iso_millis
from . import committer_for
from .job_families import FAMILIES, JOB_COMMITTERS, family_of, listed_names
from .manifest import ManifestCommitter

log = logging.getLogger("magicfs.jobs")

STATES = ("active", "committing", "committed", "ended", "done", "unknown")
#: The states of a job that left nothing to find (:func:`describe_job`).
LEFT_NOTHING = ("done", "unknown")
#: Directories a walk for jobs visits at most (local disks, memory: no index there).
WALK_LIMIT = 100_000


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
    """Every magic, block-list or manifest committer job with state at ``dest`` (a URL)
    or at any destination below it, the bucket's root included; sorted by destination,
    then job id. Each job's :attr:`JobState.destination` is its own.

    Found in a number of requests bounded by the number of jobs, never by the files
    below ``dest``:

    * **at** ``dest``: its jobs' trees, by name (S3: one delimited listing of
      ``__magic_job-*``; other deferred stores: a listing of what those trees hold; and
      ``_temporary/``, but on S3). This finds the jobs that have no index entry: set up
      by Hadoop, by an older magicfs, or by a user whose permissions stop at their prefix;
    * **below** ``dest``, on a store with buckets (S3, Azure, GCS): the bucket's job index,
      ``__magicfs_jobs/<key of dest>/`` listed without a delimiter (:mod:`magicfs.layouts.
      job_index`: a request per 1,000 jobs), and one read of each entry, for its committer,
      where a store serves more than one (Azure);
    * **below** ``dest`` on a local disk or in memory (no bucket, no index): a walk of its
      directories for ``_temporary/`` (no request is sent; at most :data:`WALK_LIMIT`
      directories, beyond which it fails naming ``dest``).

    Then each job is described from its own tree (:func:`describe_job`: a few requests
    each). An index entry is a pointer, not the truth: one whose job left nothing (its
    clean-up was cut short between the tree and the entry, or the tree was deleted by
    hand) is not listed; it is logged (``magicfs.jobs``, INFO) and costs nothing else.
    """
    probe = committer_for(dest, storage_options=storage_options, fs=fs)
    found: dict[tuple[str, str], _Candidate] = {}
    for candidate in (*_trees_at(probe), *_below(probe)):
        key = (candidate.destination, candidate.job_id)
        found[key] = candidate.merged(found.get(key))
    jobs = []
    for candidate in sorted(found.values(), key=lambda c: (c.destination, c.job_id)):
        state = _describe(probe, candidate)
        if state is not None:
            jobs.append(state)
    return jobs


@dataclass(frozen=True)
class _Candidate:
    """A job some listing named: where, which, by which committer, and how it was found."""

    destination: str  # as the store names it (bucket first, no protocol)
    job_id: str
    committer: str
    tree: bool  # its tree was listed (else only an index entry names it)

    def merged(self, earlier: _Candidate | None) -> _Candidate:
        """This finding with an earlier one of the same job: its tree was seen if either
        saw it; the committer is the later finding's (the index's word over a name's)."""
        if earlier is None:
            return self
        return _Candidate(self.destination, self.job_id, self.committer, self.tree or earlier.tree)


def _trees_at(probe: OutputCommitter) -> list[_Candidate]:
    """The jobs whose trees lie directly at the probe's destination, by their names: each
    family that keeps jobs on the store asked for its own (on S3, the magic layout's one
    delimited listing; the manifest committer refuses S3, so no ``_temporary/`` is
    listed there). A tree is taken for the probe's committer when the probe is of its
    family, else for the family's committer on this store."""
    found = []
    for family in FAMILIES:
        committer = family.default_committer(probe.store_fs)
        if probe.name in family.committers:
            committer = probe.name
        if committer is None:
            continue
        found += [
            _Candidate(probe.dest, job_id, committer, True) for job_id in family.job_trees(probe)
        ]
    return found


def _below(probe: OutputCommitter) -> list[_Candidate]:
    """The jobs at or below the probe's destination that the store's index names (or, with
    no index, that a walk of the directories finds); the index is read the way the
    probe's family calls its store."""
    where = job_index.bucket_and_key(probe.store_fs, probe.dest)
    family = family_of(probe.name)
    if where is None or family is None:
        return _walk(probe)
    bucket, key = where
    entries = family.indexed(probe, bucket, job_index.index_directory(bucket, key))
    return [
        _Candidate(
            entry.destination,
            entry.job_id,
            entry.committer if entry.committer in JOB_COMMITTERS else probe.name,
            False,
        )
        for entry in entries
    ]


def _walk(probe: OutputCommitter) -> list[_Candidate]:
    """The manifest jobs below the probe's destination on a store with no buckets (a
    local disk, memory): every directory's ``_temporary/``, by a walk that lists
    directories only where it must (no request is sent) and refuses to go on past
    :data:`WALK_LIMIT` directories rather than answer for part of the tree."""
    fs, found = probe.store_fs, []
    waiting, visited = [probe.dest], 0
    while waiting:
        directory = waiting.pop()
        visited += 1
        if visited > WALK_LIMIT:
            raise OSError(
                f"{fs.unstrip_protocol(probe.dest)}: more than {WALK_LIMIT:,} directories "
                "below it; list the jobs of a directory closer to their destinations"
            )
        for entry in _directories(fs, directory):
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            if name == TEMPORARY:
                found += [
                    _Candidate(directory, job_id, ManifestCommitter.name, True)
                    for job_id in listed_names(fs, entry)
                    if not job_id.isdigit()
                ]
            elif not is_magic_element(name):  # a job's magic tree holds no job
                waiting.append(entry)
    return found


def _directories(fs: Any, directory: str) -> list[str]:
    """The subdirectories of ``directory`` (symbolic links left out: no cycles)."""
    try:
        entries = fs.ls(directory, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [
        e["name"].rstrip("/")
        for e in entries
        if e.get("type") == "directory"
        and not e.get("islink")
        and e["name"].rstrip("/") != directory.rstrip("/")
    ]


def _describe(probe: OutputCommitter, candidate: _Candidate) -> JobState | None:
    """The state of the job ``candidate`` names, or ``None``: not a valid job id, or a job
    that left nothing to find (``done``, ``unknown``: an index entry that outlived its job
    is logged)."""
    url = probe.store_fs.unstrip_protocol(candidate.destination)
    committer = _committer(url, candidate, probe)
    if committer is None:
        return None
    state = describe_job(committer)
    if state.state not in LEFT_NOTHING:
        return state
    if not candidate.tree:
        log.info(
            "job %s at %s: its job index entry names it, but it left nothing there: not "
            "listed (the entry is stale; deleting it is safe)",
            candidate.job_id,
            url,
        )
    return None


def _committer(url: str, candidate: _Candidate, probe: OutputCommitter) -> OutputCommitter | None:
    """The committer of the job ``candidate`` names: the one its index entry names, or,
    should that one not serve this store, the store's own; ``None`` for an invalid id."""
    for name in dict.fromkeys((candidate.committer, probe.name)):
        try:
            return committer_for(url, committer=name, job_id=candidate.job_id, fs=probe.store_fs)
        except ValueError:  # not a committer of this store, or not a valid job id
            continue
    return None


def describe_job(committer: OutputCommitter) -> JobState:
    """The state of ``committer``'s job (see the module docstring)."""
    keeper = committer.flow.journal_keeper()
    journal = None
    if keeper is not None:
        with contextlib.suppress(InvalidCommitData):
            journal = keeper.read()
    family = family_of(committer.name)
    marker = family.marker(committer) if family else None
    records = family.task_records(committer) if family else 0
    if journal is not None:
        state = "committed" if journal.phase == "committed" else "committing"
    elif marker is not None:
        state = "active"
    elif records or (family is not None and family.tree_left(committer)):
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
        started=iso_millis(marker.get("created")) if marker else None,
        host=marker.get("hostname") if marker else None,
    )


__all__ = ["JOB_MARKER", "STATES", "JobState", "describe_job", "find_jobs"]
