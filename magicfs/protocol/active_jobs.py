"""The jobs this process set up and has not ended: one small registry, for two rules.

Only the process that set a job up (its driver) knows whether every task the job needs
has committed; the store only shows which tasks did. So:

* **listing needs the driver** (:mod:`.recovery`): ``commit_job()`` without messages
  publishes the listed committed tasks only in the process where ``setup_job()`` ran for
  the same job id and destination, and only until that process has committed or aborted
  the job. Anywhere else, with no journal, whoever commits must say what to publish: the
  tasks' messages, or ``all_committed_tasks=True`` (the committed tasks are the whole
  job). A commit that had begun (its journal exists) finishes with the journal's records
  in any process;
* **a forgotten job is reported at exit**: a process that ends with a job it set up
  still active (no ``commit_job``/``abort_job``/``cleanup_job`` finished here) logs a
  warning naming the job, its destination and the commands that finish or roll it back;
  its uploads stay parked until one runs.

A job is registered when ``setup_job()`` returns (``resume=True`` too: the process that
continues a job takes its driver's place) and forgotten when the job is committed,
aborted or cleaned up here, or when a commit fails and was rolled back. A commit that
failed and is left to be finished stays registered: it is not done.

Keyed by job id and destination URL, with the process id (a forked child inherits the
registry but not the job: it neither lists nor is warned about its parent's jobs).
Thread-safe; one instance per process (:data:`ACTIVE_JOBS`). It lives in this module,
never in a committer, so nothing of it pickles to executors.

**Per process, not in the job's context** (:mod:`magicfs.job_context`): a context lives
while some object of its job holds it, and the job this registry must warn about is the
one whose every object the script dropped before ending it. So its entries outlive their
contexts; the context is closed when the job ends here, as the entry is forgotten
(:meth:`magicfs.protocol.committer.OutputCommitter._ending_job`).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from ..lifecycle import at_last_exit

log = logging.getLogger("magicfs.active_jobs")


@dataclass(frozen=True)
class ActiveJob:
    """One job set up by this process: what to name when it is left active at exit."""

    job_id: str
    destination: str  # URL
    recover: str  # the command that publishes its committed tasks
    rollback: str  # the command that rolls it back
    pid: int


class ActiveJobs:
    """The process's jobs that were set up here and have not ended (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], ActiveJob] = {}

    def set_up(self, job_id: str, destination: str, *, recover: str, rollback: str) -> None:
        """``setup_job()`` returned in this process (``recover``/``rollback``: the
        commands the exit warning names)."""
        job = ActiveJob(job_id, destination, recover, rollback, os.getpid())
        with self._lock:
            self._jobs[(job_id, destination)] = job

    def ended(self, job_id: str, destination: str) -> None:
        """The job was committed, aborted or cleaned up here (or was not there at all)."""
        with self._lock:
            self._jobs.pop((job_id, destination), None)

    def set_up_here(self, job_id: str, destination: str) -> bool:
        """Was the job set up by this very process, and not ended since?"""
        with self._lock:
            job = self._jobs.get((job_id, destination))
        return job is not None and job.pid == os.getpid()

    def left(self) -> list[ActiveJob]:
        """This process's jobs still active, oldest first."""
        with self._lock:
            jobs = list(self._jobs.values())
        return [job for job in jobs if job.pid == os.getpid()]


#: The registry of this process.
ACTIVE_JOBS = ActiveJobs()


def warning_for(job: ActiveJob) -> str:
    """What the exit warning says about ``job``: what is left, and how to end it."""
    return (
        f"job {job.job_id} at {job.destination} was set up by this process and is still "
        "active at exit: neither commit_job() nor abort_job() finished it here, so its "
        "files stay invisible and its uploads parked. Once no process is running it, roll "
        f"it back: {job.rollback} ; or, if every task it needed has committed, publish "
        f"them: {job.recover} (or --messages FILE: exactly the tasks' messages)"
    )


def _warn_at_exit() -> None:
    """A script that ends without committing or aborting its job hears about it."""
    for job in ACTIVE_JOBS.left():
        log.warning("magicfs: %s", warning_for(job))


at_last_exit(_warn_at_exit)
