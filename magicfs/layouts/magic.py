"""Where a job's files live: the magic committer's directory layout (Hadoop 3.4+).

::

    dest/__magic_job-<job>/                              magic dir (one per job)
        _magicfs_job.json                                the job is active (see below)
        _magicfs_job.touched/<task id>                   another process or attempt touched
                                                         the task (``in_memory`` commits
                                                         then list its attempts)
        job-<job>/<NN>/                                  job attempt dir, NN = app attempt
            <task id>.pendingset                         last committed attempt of a task
                                                         (only once two attempts committed)
            tasks/<task attempt id>/__base/<relative>    where a task attempt writes: each
                                                         file's marker and .pending record,
                                                         every element of <relative> staged
                                                         (_year=1.magicfs-task/_p.csv.magicfs-
                                                         task.pending: magicfs.paths)
            tasks/<task attempt id>.aborted              aborted by another process than
                                                         the one that set it up
            tasks/<task attempt id>.started              (earlier versions: set up, not
                                                         aborted; still read)
            tasks/<task attempt id>.pendingset           an attempt's own committed record

**Which attempt of a task a job without messages commits.** Every committed attempt
saves its own record (the one its message names). An attempt whose commit finds another
attempt of its task already committed (its commit lists every attempt of the task: one
listing, :meth:`MagicJobLayout.task_attempts_prefix`) also saves the task's
``<task id>.pendingset``, Hadoop's record of the last committed attempt, where the
store's last-writer-wins makes "the last committed attempt wins" exact (HADOOP-17258).
(An ``in_memory`` first attempt lists only once its task is marked touched, which every
later attempt's commit does before its listing: the first attempt committing after
a later one still finds it.) So a task that committed once costs one record, and
:func:`chosen_records` reads the task's record where there is one, else the attempt's
own (of two attempts that committed at the same moment, neither seeing the other: the
higher attempt number).

**The job marker.** ``_magicfs_job.json`` exists from job setup until the job is
committed or aborted. Writers check it right after recording each upload, and task
commit checks it after saving its pendingset. A job ends by deleting the marker
*first*, then sweeping its uploads; so every upload is either seen by the sweep or
finds the marker gone and aborts itself. The marker's absence is permanent, so no
tombstone has to outlive the job (zombie attempts of seed 000, "Network Partitioning").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..names import (
    ABORTED_SUFFIX,
    BASE,
    JOB_DIR_PREFIX,
    JOB_MARKER,
    MAGIC_JOB_PREFIX,
    PENDINGSET_SUFFIX,
    STARTED_SUFFIX,
    TASKS_DIR,
    TOUCHED_DIR,
)
from ..paths import MagicPath, join, task_names, touched_marker

T = TypeVar("T")

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,127}$")


def check_job_id(job_id: str) -> str:
    """Job ids go into paths and attempt ids: letters, digits, ``.`` and ``-`` only."""
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise ValueError(
            f"invalid job id {job_id!r}: use 1-128 letters, digits, '.' or '-' "
            "(a UUID is ideal), starting with a letter or digit"
        )
    return job_id


def task_id(job_id: str, task: int) -> str:
    """Hadoop-style task id, e.g. ``task_<job>_0000_m_000007``."""
    return f"task_{job_id}_0000_m_{task:06d}"


def task_attempt_id(job_id: str, task: int, attempt: int) -> str:
    """Hadoop-style task attempt id, e.g. ``attempt_<job>_0000_m_000007_1``."""
    return f"attempt_{job_id}_0000_m_{task:06d}_{attempt}"


@dataclass(frozen=True)
class MagicJobLayout:
    """Paths of one job of the magic committer under destination ``dest``."""

    dest: str
    job_id: str
    app_attempt: int = 0

    @property
    def magic_dir(self) -> str:
        return join(self.dest, MAGIC_JOB_PREFIX + self.job_id)

    @property
    def job_marker(self) -> str:
        return join(self.magic_dir, JOB_MARKER)

    @property
    def job_attempt_dir(self) -> str:
        return join(self.magic_dir, JOB_DIR_PREFIX + self.job_id, f"{self.app_attempt:02d}")

    @property
    def tasks_dir(self) -> str:
        return join(self.job_attempt_dir, TASKS_DIR)

    def task_attempt_dir(self, attempt_id: str) -> str:
        return join(self.tasks_dir, attempt_id)

    def work_path(self, attempt_id: str) -> str:
        """Where the attempt writes: files below it land below ``dest``."""
        return join(self.task_attempt_dir(attempt_id), BASE)

    def pendingset(self, task_id: str) -> str:
        """The last committed attempt of a task (Hadoop's ``<task id>.pendingset``)."""
        return join(self.job_attempt_dir, task_id + PENDINGSET_SUFFIX)

    def attempt_pendingset(self, attempt_id: str) -> str:
        """One attempt's own committed record, named by the task commit message."""
        return join(self.tasks_dir, attempt_id + PENDINGSET_SUFFIX)

    def task_attempts_prefix(self, attempt_id: str) -> str:
        """The prefix every attempt of ``attempt_id``'s task shares (its directory, started
        marker and record): ``tasks/attempt_<job>_0000_m_000007_``."""
        return join(self.tasks_dir, attempt_id.rsplit("_", 1)[0] + "_")

    def started_marker(self, attempt_id: str) -> str:
        """Written by earlier versions' task set-up (deleted by its abort): still the proof
        that an attempt was set up, for a commit in another process."""
        return join(self.tasks_dir, attempt_id + STARTED_SUFFIX)

    def touched_marker(self, attempt_id: str) -> str:
        """Another process or attempt touched ``attempt_id``'s task
        (:data:`~magicfs.names.TOUCHED_DIR`)."""
        return touched_marker(self.magic_dir, attempt_id)

    @property
    def job_signals_prefix(self) -> str:
        """What the job marker and the touched markers' directory share
        (``<magic dir>/_magicfs_job.``): one listing of it says whether the job is active
        and which tasks were touched."""
        return join(self.magic_dir, JOB_MARKER.rsplit(".", 1)[0] + ".")

    def touched_tasks(self, listed: Iterable[str]) -> frozenset[str]:
        """The task ids a listing of :attr:`job_signals_prefix` names as touched."""
        directory = join(self.magic_dir, TOUCHED_DIR) + "/"
        return frozenset(p[len(directory) :] for p in listed if p.startswith(directory))

    def aborted_marker(self, attempt_id: str) -> str:
        """Left by an abort in another process than the one that set the attempt up
        (which knows its attempts from memory): it may never commit."""
        return join(self.tasks_dir, attempt_id + ABORTED_SUFFIX)

    def attempt_records(self, attempt_id: str, listed: Mapping[str, T]) -> AttemptRecords[T]:
        """Split a listing of :meth:`task_attempts_prefix`: the attempt's directory, started
        (or aborted) marker and pendingset share it, so one listing finds them all, and the records
        of the task's other committed attempts. Entries of attempts whose ids merely
        start with ``attempt_id`` are not the attempt's."""
        directory = self.task_attempt_dir(attempt_id) + "/"
        own = self.attempt_pendingset(attempt_id)
        prefix = self.task_attempts_prefix(attempt_id)
        return AttemptRecords(
            self.started_marker(attempt_id) in listed,
            own in listed,
            self.aborted_marker(attempt_id) in listed,
            task_names({p: v for p, v in listed.items() if p.startswith(directory)}),
            any(
                p != own and p.startswith(prefix) and _is_attempt_record(p[len(prefix) :])
                for p in listed
            ),
            sorted(p for p in listed if p.startswith(directory)),
        )

    def chosen_records(self, task_records: list[str], attempt_records: list[str]) -> list[str]:
        """The record to publish for each committed task, for a job commit without
        messages: the task's ``<task id>.pendingset`` where it has one (the last committed
        attempt, once two committed), else its attempt's own; of two attempts with no task
        record (they committed at the same moment), the higher attempt number. In task
        order."""
        chosen: dict[str, tuple[int, str]] = {}
        for path in attempt_records:
            attempt = path.rsplit("/", 1)[-1].removesuffix(PENDINGSET_SUFFIX)
            task, _, number = attempt.rpartition("_")
            key = "task" + task.removeprefix("attempt")
            rank = int(number) if number.isdigit() else -1
            if key not in chosen or rank > chosen[key][0]:
                chosen[key] = (rank, path)
        for path in task_records:
            chosen[path.rsplit("/", 1)[-1].removesuffix(PENDINGSET_SUFFIX)] = (1 << 62, path)
        return [chosen[task][1] for task in sorted(chosen)]


@dataclass(frozen=True)
class AttemptRecords(Generic[T]):
    """What one listing by a task attempt's name found (:meth:`MagicJobLayout.attempt_records`)."""

    started: bool  # its started marker
    saved: bool  # its own pendingset
    aborted: bool  # its aborted marker
    #: Its directory's entries (with what the listing gave), each marker under the name
    #: of the file it stands for (:func:`~magicfs.paths.task_names`): the attempt's files.
    files: dict[str, T]
    others_committed: bool = False  # another attempt of its task has a record
    #: Its directory's entries under their names on the store (markers and records):
    #: what deleting the attempt's records deletes.
    stored: list[str] = field(default_factory=list)


def _is_attempt_record(rest: str) -> bool:
    """``<attempt number>.pendingset`` (what follows a task's attempts prefix)."""
    number, _, suffix = rest.partition(".")
    return number.isdigit() and "." + suffix == PENDINGSET_SUFFIX


def job_marker_for(magic_path: MagicPath) -> str | None:
    """The job marker a writer must check, for paths in a ``__magic_job-<id>`` directory.

    Paths under a bare ``__magic`` directory belong to no magicfs job and are not checked.
    """
    if magic_path.magic.startswith(MAGIC_JOB_PREFIX) and magic_path.job_id:
        return join(magic_path.magic_dir, JOB_MARKER)
    return None
