"""What a magic-layout task commit or abort saves on the store, and deletes.

The attempt's pendingset, saved and then the job checked (the zombie handshake: a commit
either saved its record before the job's end began, or finds the job gone and withdraws
its uploads); the committed attempt's records dropped where the store does not keep them;
an abort's markers in another process than the attempt's own, saved while the job is
checked. Functions of the committer (:class:`~.magic_layout.MagicLayoutCommitter`), which
both of its commit paths share (:mod:`.magic_layout`, listing; :mod:`.memory_commits`,
from memory).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import JobNotActiveError
from ..protocol.tasks import require_active_job
from ..records import (
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    declared_checksums,
)
from ..stores.deferred import DeferredStore

if TYPE_CHECKING:
    from ..protocol.attempts import TaskAttempt
    from .magic_layout import MagicLayoutCommitter

log = logging.getLogger("magicfs.committer.magic_layout")


def new_pendingset(
    job: MagicLayoutCommitter,
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
    job: MagicLayoutCommitter,
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
        job.operations().abort(pendingset.commits)
        job.abort_task(task)
        raise


def drop_attempt_records(job: MagicLayoutCommitter, task: TaskAttempt, listed: list[str]) -> None:
    """Delete the committed attempt's markers and records (``listed`` by its commit),
    as Hadoop's magic committer deletes the attempt directory at task commit: the
    pendingset now holds every commit. Failures, and anything written into the
    directory after the listing, are left for the job's clean-up."""
    try:
        job.delete_files(listed)
    except Exception as error:
        log.warning("task %s: its file records stay until job clean-up: %s", task.attempt_id, error)


def leave_aborted_marker(job: MagicLayoutCommitter, task: TaskAttempt, touched: bool) -> None:
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
