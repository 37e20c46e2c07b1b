"""Where a job's files live: the magic committer's directory layout (Hadoop 3.4+).

::

    dest/__magic_job-<job>/                              magic dir (one per job)
        _magicfs_job.json                                the job is active (see below)
        job-<job>/<NN>/                                  job attempt dir, NN = app attempt
            <task id>.pendingset                         last committed attempt of a task
            tasks/<task attempt id>/__base/<relative>    where a task attempt writes
            tasks/<task attempt id>.started              the attempt was set up, not aborted
            tasks/<task attempt id>.pendingset           an attempt's own committed record

**The job marker.** ``_magicfs_job.json`` exists from job setup until the job is
committed or aborted. Writers check it right after recording each upload, and task
commit checks it after saving its pendingset. A job ends by deleting the marker
*first*, then sweeping its uploads; so every upload is either seen by the sweep or
finds the marker gone and aborts itself. The marker's absence is permanent, so no
tombstone has to outlive the job (zombie attempts of seed 000, "Network Partitioning").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..names import (
    BASE,
    JOB_DIR_PREFIX,
    JOB_MARKER,
    MAGIC_JOB_PREFIX,
    PENDINGSET_SUFFIX,
    STARTED_SUFFIX,
    TASKS_DIR,
)
from ..paths import MagicPath, join

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

    def started_marker(self, attempt_id: str) -> str:
        """Exists from task setup until the attempt is aborted: only then may it commit."""
        return join(self.tasks_dir, attempt_id + STARTED_SUFFIX)

    def attempt_records(self, attempt_id: str, listed: Mapping[str, T]) -> AttemptRecords[T]:
        """Split a listing of the prefix ``task_attempt_dir(attempt_id)``: the attempt's
        directory, started marker and pendingset share it, so one listing finds all three.
        Entries of attempts whose ids merely start with ``attempt_id`` are left out."""
        directory = self.task_attempt_dir(attempt_id) + "/"
        return AttemptRecords(
            self.started_marker(attempt_id) in listed,
            self.attempt_pendingset(attempt_id) in listed,
            {p: v for p, v in listed.items() if p.startswith(directory)},
        )


@dataclass(frozen=True)
class AttemptRecords(Generic[T]):
    """What one listing by a task attempt's name found (:meth:`MagicJobLayout.attempt_records`)."""

    started: bool  # its started marker
    saved: bool  # its own pendingset
    files: dict[str, T]  # its directory's entries, as listed (with what the listing gave)


def job_marker_for(magic_path: MagicPath) -> str | None:
    """The job marker a writer must check, for paths in a ``__magic_job-<id>`` directory.

    Paths under a bare ``__magic`` directory belong to no magicfs job and are not checked.
    """
    if magic_path.magic.startswith(MAGIC_JOB_PREFIX) and magic_path.job_id:
        return join(magic_path.magic_dir, JOB_MARKER)
    return None
