"""An ``in_memory`` task commit that trusts its process's memory: no listing of the attempt.

Where an attempt's commits stay in the process that set it up (S3's ``in_memory``), that
process knows every file the attempt wrote, and whether it aborted or committed the
attempt (:data:`~magicfs.task_files.TASK_FILES`). The listing of the task's attempts
that a commit otherwise makes (:mod:`.magic_layout`) guards only what *other* processes
or attempts did: a file another process wrote into the attempt (refused in this mode), a
file it deleted there, an abort it made, or another attempt of the task that committed
(for "the last committed attempt wins"). Those rare events now say so: each first saves
the task's *touched* marker (:data:`~magicfs.names.TOUCHED_DIR`, beside the job marker),

* a writer in a process that did not set its attempt up, before its intent marker
  (:mod:`magicfs.stores.s3.writer`; once per process and task);
* a delete, through the task view, of such a process's files
  (:meth:`~magicfs.stores.deferred_writer.DeferredWritesBase.touch_tasks`);
* an abort in a process that did not set the attempt up, with its ``.aborted`` marker
  (both before the abort lists the attempt);
* a commit of a later attempt (number 1 and up: a retry or a speculative copy), before
  its listing,

and the commit of an attempt 0 in its own process saves its pendingset, then makes the
job check it must make anyway (the zombie handshake) as one listing of the job marker's
name (:attr:`~magicfs.layouts.magic.MagicJobLayout.job_signals_prefix`), which finds the
marker and the touched markers at once, shared by the task commits and writers of the
process that ask at the same time (:mod:`magicfs.stores.job_check`). Only a task found
touched is committed again by the listing commit (its pendingset saved anew, or the
attempt refused and aborted). So such a task costs two requests beyond its files' (the
pendingset PUT and a share of the listing), against Hadoop's in-memory magic committer's
two to three.

Why the order is sound: each event's marker is saved before the event's own effect
(the file's record, the delete, the abort's listing of the attempt, the later attempt's
listing), and the commit's listing follows its pendingset's save. A commit whose listing
misses a marker therefore saved its pendingset before that event began: the later attempt's
listing then sees it (and saves the task's record); the abort lists the attempt and
discards what its pendingset names, as an abort after a commit always does; a file
another process opens after the commit began is written after its task committed, and
never published. What no marker can say: files written around magicfs into the
attempt's directory (a plain ``put`` to a task path) are not refused at task commit in
this mode; they are never published, and the job's clean-up deletes them with its tree.
"""

from __future__ import annotations

import logging

from ..job_context import JobContext, job_context_of
from ..layouts.magic import MagicJobLayout
from ..protocol.attempts import TaskAttempt, TaskCommitMessage
from ..protocol.hooks import TaskCommit
from ..protocol.tasks import task_committed
from ..stores.deferred import DeferredStore, collect
from ..stores.job_check import JobCheck, job_check
from ..task_files import TASK_FILES, TaskFile
from .attempt_records import TaskRecordsJob, new_pendingset, save_task_record

log = logging.getLogger("magicfs.committer.magic_layout")


def trusting_job(job: TaskRecordsJob) -> bool:
    """Whether ``job``'s first attempts may trust their memory: its attempts' commits stay
    where they were set up, and its store keeps attempt records until the job ends (S3's
    ``in_memory``; Azure's commits delete what they list, so they list)."""
    hooks = job.store_hooks
    return hooks.keeps_attempt_records and hooks.commits_stay_where_set_up


def trusts_memory(job: TaskRecordsJob, task: TaskAttempt) -> bool:
    """Whether ``task``'s commit here may trust this process's memory: a trusting job,
    the task's first attempt (a later one lists: :func:`touches_task`), set up here and
    not ended here."""
    return (
        trusting_job(job)
        and task.attempt_number == 0
        and TASK_FILES.finished(job.job_id, task.attempt_id) is None
        and TASK_FILES.set_up_here(job.job_id, task.attempt_id)
    )


def touches_task(job: TaskRecordsJob, task: TaskAttempt) -> bool:
    """Whether ``task``'s commit marks its task touched before listing it: a later
    attempt, in a trusting job."""
    return trusting_job(job) and task.attempt_number > 0


def commit_from_memory(
    job: TaskRecordsJob, commit: TaskCommit, files: list[TaskFile]
) -> TaskCommitMessage | None:
    """Commit ``commit.task`` from this process's memory (``files``: its registry
    entries): its pendingset saved, then the job checked by one shared listing.
    ``None`` where that listing finds the task touched: the caller then commits it by
    listing (the pendingset saved here is replaced, or withdrawn with the attempt)."""
    task = commit.task
    try:
        commits, stats = job.store_hooks.gather_known(task.attempt_id, files)
    except BaseException:
        job.abort_task(task)
        raise
    pendingset = new_pendingset(job, task, commits, stats)
    data = pendingset.to_bytes()
    touched = []

    def check() -> bool:
        signals = job.job_signals()
        if signals is not None and task.task_id in signals:
            touched.append(task.task_id)
        return signals is not None

    save_task_record(job, task, pendingset, data, task_record=False, check=check)
    if touched:
        log.info(
            "task %s: touched by another process or attempt: committed by listing it",
            task.attempt_id,
        )
        return None
    record = job.layout.attempt_pendingset(task.attempt_id)
    size = pendingset.total_bytes
    return task_committed(job, task, record, len(commits), size, commit.start, "committed", data)


async def ajob_signals(
    deferred: DeferredStore, layout: MagicJobLayout, context: JobContext | None = None
) -> frozenset[str] | None:
    """``None`` once the job has ended (its marker is gone), else the ids of the tasks
    marked touched: one listing of the marker's name, started after this call and
    shared with the callers of this process that ask meanwhile, the writers' job checks
    included (:func:`~magicfs.stores.job_check.job_check`: any listing that starts after
    a commit's pendingset was saved answers its zombie handshake)."""
    marker = layout.job_marker

    async def head() -> bool:
        return await deferred.arecord_info(marker) is not None

    async def listing() -> JobCheck:
        found = await collect(deferred.alist_prefixed(layout.job_signals_prefix))
        return JobCheck(marker in found, layout.touched_tasks(found))

    context = context or job_context_of(marker)  # (shared with the job's writers)
    checked = await job_check(*deferred.check_key(marker), head, listing, context=context)
    if not checked.active:
        return None
    assert checked.touched is not None  # a listing (it asked for one)
    return checked.touched
