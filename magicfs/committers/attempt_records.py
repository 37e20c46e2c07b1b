"""What a magic-layout task commit or abort saves on the store, and deletes.

The attempt's pendingset, saved and then the job checked (the zombie handshake: a commit
either saved its record before the job's end began, or finds the job gone and withdraws
its uploads); the committed attempt's records dropped where the store does not keep them;
an abort's markers in another process than the attempt's own, saved while the job is
checked. Functions of the job as :class:`TaskRecordsJob` names it (what the
magic-layout committer's two commit paths share: :mod:`.magic_layout`, listing;
:mod:`.memory_commits`, from memory), so that neither module imports the committer's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from ..errors import JobNotActiveError
from ..layouts.magic import MagicJobLayout
from ..protocol.attempts import TaskAttempt
from ..protocol.tasks import TaskJob, require_active_job
from ..records import (
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    declared_checksums,
)
from ..stores.deferred import DeferredStore
from ..stores.job_hooks import DeferredJobHooks
from .pendingsets import PendingsetRecords

log = logging.getLogger("magicfs.committer.magic_layout")


class TaskRecordsJob(TaskJob, Protocol):
    """What a magic-layout task commit or abort uses of its job, and all it uses."""

    @property
    def layout(self) -> MagicJobLayout: ...

    @property
    def deferred(self) -> DeferredStore: ...

    @property
    def store_hooks(self) -> DeferredJobHooks: ...

    def job_signals(self) -> frozenset[str] | None:
        """``None`` once the job has ended, else the tasks marked touched."""

    @property
    def records(self) -> PendingsetRecords:
        """The job's pendingset records (their checks, and the commit operations)."""

    def abort_task(self, task: TaskAttempt) -> None: ...

    def delete_files(self, paths: list[str]) -> None: ...


def new_pendingset(
    job: TaskRecordsJob,
    task: TaskAttempt,
    commits: list[SinglePendingCommit],
    stats: IOStatisticsSnapshot,
) -> PendingSet:
    """The attempt's pendingset: its commits, its writers' statistics, and the attempt
    and checksums it declares."""
    return PendingSet(
        job_id=job.job_id,
        commits=commits,
        iostatistics=stats,
        extra_data={TASK_ATTEMPT_ID_KEY: task.attempt_id, **declared_checksums(commits)},
    )


def save_task_record(
    job: TaskRecordsJob,
    task: TaskAttempt,
    pendingset: PendingSet,
    data: bytes,
    task_record: bool,
    check: Callable[[], bool] | None = None,
) -> None:
    """Save the attempt's pendingset (``data``; and, where another attempt of the task
    has committed, the task's: both at once; :mod:`magicfs.layouts.magic`), then check
    the job is still active (``check``, else the committer's ``job_active``); on any failure
    withdraw the commits and abort the attempt."""
    try:
        paths = [job.layout.attempt_pendingset(task.attempt_id)]
        if task_record:
            paths.append(job.layout.pendingset(task.task_id))
        saves = [job.deferred.run_background(job.deferred.awrite_record(p, data)) for p in paths]
        for save in saves:
            save.result()
        if not (check or job.job_active)():
            withdrawn = (
                "its uploads have been aborted"
                if job.deferred.capabilities.discards_pending
                else "its files will never be published"
            )
            raise JobNotActiveError(
                f"job {job.job_id} ended before task attempt {task.attempt_id} "
                f"committed; {withdrawn}"
            )
    except BaseException:
        job.records.operations().abort(pendingset.commits)
        job.abort_task(task)
        raise


def drop_attempt_records(job: TaskRecordsJob, task: TaskAttempt, listed: list[str]) -> None:
    """Delete the committed attempt's markers and records (``listed`` by its commit),
    as Hadoop's magic committer deletes the attempt directory at task commit: the
    pendingset now holds every commit. Failures, and anything written into the
    directory after the listing, are left for the job's clean-up."""
    try:
        job.delete_files(listed)
    except Exception as error:
        log.warning("task %s: its file records stay until job clean-up: %s", task.attempt_id, error)


def leave_aborted_marker(job: TaskRecordsJob, task: TaskAttempt, touched: bool) -> None:
    """An abort in a process that did not set the attempt up: only a marker can tell
    the process that did (and any other) that the attempt may not commit; ``touched``:
    with its task's touched marker, where that commit may trust its memory
    (:mod:`.memory_commits`). Saved while the job is checked, and taken back if it has
    ended (its tree is being deleted; nothing of the attempt can commit then anyway)."""
    markers = [job.layout.aborted_marker(task.attempt_id)]
    if touched:
        markers.append(job.layout.touched_marker(task.attempt_id))
    with contextlib.suppress(JobNotActiveError):
        save_checked(job.deferred, markers, b"", lambda: require_active_job(job, task))


def save_checked(
    deferred: DeferredStore, paths: list[str], data: bytes, check: Callable[[], None]
) -> None:
    """Save the records at ``paths`` while ``check`` runs: one round trip, not two (an
    abort's ``.aborted`` marker, and its task's touched marker, and the job check). A
    check that raises has the records deleted again, so an ended job's tree never keeps
    one (the check is no guarantee by itself: a job may end right after it; its clean-up
    then deletes the records)."""
    saves = [deferred.run_background(deferred.awrite_record(path, data)) for path in paths]
    try:
        check()
    except BaseException:
        concurrent.futures.wait(saves)  # the deletes must follow the saves
        try:
            deferred.run(deferred.adelete_records(paths))
        except Exception as error:  # the refusal is what the caller must see
            log.warning("%s: left for the job's clean-up to delete: %s", ", ".join(paths), error)
        raise
    for save in saves:
        save.result()
