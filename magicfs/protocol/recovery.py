"""The journal's state machine and the failure policy of a job commit.

A commit's journal (:mod:`magicfs.records.journal`) moves through these phases::

    (none) -> publishing -> committed
    (none) -> replacing (replace mode: publish, record, then delete the old) -> committed
    (none) -> deleting (replace mode, new names reuse old ones: delete the old first)
           -> publishing -> committed

Saved before anything becomes visible, it lets any process finish the commit (the same
records; no second conflict check) or roll it back. The one case where rolling back
would lose data — ``replace`` mode once an old file was deleted — is left to be
finished instead, both when a commit fails in-process and when ``abort_job()`` is asked
to roll it back (``force=True`` insists).

Without a journal, nothing fixes what the job is: only its driver knew whether every
task it needed had committed. So a commit that lists the committed tasks in a process
that did not set the job up is refused before anything changes, unless the caller says
what to publish (:meth:`Recovery.refuse_unmeant_listing`,
:mod:`magicfs.protocol.active_jobs`); when the caller declares the committed tasks the
whole job, ``_SUCCESS`` records that choice (:func:`recovered_diagnostics`).
"""

from __future__ import annotations

import datetime
import getpass
import logging
import os
import socket
import time

from ..errors import JobCommitError
from ..records.job_record import JobRecord
from ..records.journal import CommitJournal
from .attempts import Messages
from .commit_record import CommitRecord
from .hooks import CommitterHooks, Loaded
from .journal import JournalKeeper

log = logging.getLogger("magicfs.committer")


class Recovery:
    """What a job's journal says may happen next, for ``committer``'s job."""

    def __init__(self, committer: CommitterHooks, keeper: JournalKeeper | None):
        self.committer = committer
        self.keeper = keeper
        #: The job's commit record (written by job commit's ``success`` stage).
        self.record = CommitRecord(committer, committer.record_io(keeper))

    def new_journal(self, loaded: Loaded, doomed: list[str], after: bool) -> CommitJournal:
        """The journal of a commit about to start (``doomed``: old files to delete,
        ``after`` the new ones are published and recorded, or first)."""
        c = self.committer
        phase = "publishing"
        if doomed:
            phase = "replacing" if after else "deleting"
        return CommitJournal(
            job_id=c.job_id,
            committer=c.name,
            destination=c.url,
            conflict_mode=c.options.conflict_mode,
            phase=phase,
            records=list(loaded.records),
        )

    def check_resumable(self, journal: CommitJournal, messages: Messages | None) -> None:
        """A started commit is finished with its own records, by a committer of its kind."""
        c = self.committer
        if journal.committer != c.name:
            raise JobCommitError(
                f"job {c.job_id}: its interrupted commit was started by the "
                f"{journal.committer} committer; finish it with that committer",
                job_id=c.job_id,
                stage="load",
                recoverable=True,
            )
        if messages is not None and any(m is not None for m in messages):
            named = {m.record for m in messages if m is not None}
            if named != set(journal.records):
                raise JobCommitError(
                    f"job {c.job_id}: a commit of this job already started with "
                    f"{len(journal.records)} task records and must finish with exactly those; "
                    f"these messages name others. Run commit_job() without messages to finish "
                    f"it, or abort_job() to roll it back",
                    job_id=c.job_id,
                    stage="load",
                    recoverable=True,
                )
        log.info(
            "job %s: finishing an interrupted commit (%d task records, phase %s)",
            c.job_id,
            len(journal.records),
            journal.phase,
        )

    def refuse_unmeant_listing(self) -> CommitJournal:
        """``commit_job()`` without messages where the job was not set up: the journal.

        With a journal, the commit began and finishes with exactly its records (returned).
        With none, the committed tasks are listed as the commit would list them (the job
        is not ended): nothing to publish raises the commit's own
        :class:`~magicfs.errors.NothingToCommitError` (never set up, already committed);
        anything else is refused before anything changes, the error naming both ways to
        say what to publish and the rollback.
        """
        c = self.committer
        journal = self.keeper.read() if self.keeper is not None else None
        if journal is not None:
            return journal
        active = c.job_active()
        records = c.records_to_commit(None, active)
        state = (
            "it is still active: its driver stopped before committing, or is still running"
            if active
            else "it has ended but its task records are left (a commit or abort was cut short)"
        )
        raise JobCommitError(
            f"job {c.job_id} at {c.url}: not committed: {len(records)} task records, no "
            f"commit begun (no journal), and {state}. Without messages, commit_job() "
            "lists the committed tasks only in the process that set the job up, the one that "
            "knows whether every task has committed. Say what to publish: "
            "commit_job(messages) with the tasks' messages (magicfs jobs recover --messages "
            f"FILE --job {c.job_id} {c.url}), or commit_job(all_committed_tasks=True) if the "
            "committed tasks are the whole job "
            f"({c.options.recover_command(all_committed_tasks=True)}); or, once its driver "
            f"is known gone, roll it back with abort_job() ({c.options.rollback_command()})",
            job_id=c.job_id,
            stage="load",
            recoverable=True,
        )

    def old_data_deleted(self, journal: CommitJournal) -> bool:
        """Has a replace commit deleted any old file yet? (Then rolling back would lose it.)

        Past the ``deleting`` phase, yes. During it, and during ``replacing`` (the old
        files go after the new ones are recorded), the delete pages are compared with one
        listing of the destination: a commit stopped before its first delete can still be
        rolled back exactly.
        """
        if not journal.deletes:
            return False
        if journal.phase not in ("deleting", "replacing"):
            return True
        assert self.keeper is not None
        c = self.committer
        try:
            present = set(c.store_fs.find(c.dest))
        except FileNotFoundError:
            return True
        return any(path not in present for paths in self.keeper.pages(journal) for path in paths)

    def delete_old(self, journal: CommitJournal) -> None:
        """``replace`` mode: delete what the journal's pages name, then move to publishing."""
        assert self.keeper is not None
        deleted = 0
        for paths in self.keeper.pages(journal):
            self.committer.delete_files(paths)
            deleted += len(paths)
        log.info("%s: replace mode deleted %d existing files", self.committer.url, deleted)
        journal.phase = "publishing"
        journal.updated = int(time.time() * 1000)
        self.keeper.save(journal)

    def retire_old(self, record: JobRecord | None) -> None:
        """``replace`` mode, phase ``replacing``: the new snapshot is published (its
        record, naming the old files in its retire list, is written). With the
        committer's ``replace_retention`` at 0, delete the old files now; past 0, leave
        them for readers of the old snapshot, to the next job on the destination or
        ``magicfs jobs vacuum`` once it has passed (:mod:`.commit_record`).

        A commit that stops here is committed for snapshot readers and not yet for
        ``_SUCCESS``-aware ones: the next job, ``magicfs jobs vacuum`` or ``commit_job()``
        again (any process: ``magicfs jobs recover``) deletes the rest.
        """
        c = self.committer
        assert record is not None  # phase "replacing" is chosen only with a record
        if c.options.replace_retention > 0:
            log.info(
                "job %s: replace mode keeps the old files for %.0fs (replace_retention) for "
                "readers of the old snapshot; the next job at %s or `magicfs jobs vacuum %s` "
                "deletes them then",
                c.job_id,
                c.options.replace_retention,
                c.url,
                c.url,
            )
            return
        deleted = self.record.retire_own(record)
        log.info("%s: replace mode deleted %d old files", c.url, deleted)

    def mark_committed(self, journal: CommitJournal, files: int, size: int, tasks: int) -> None:
        """Record a whole commit (a retry then only finishes clean-up); failing is harmless."""
        assert self.keeper is not None
        journal.phase = "committed"
        journal.result = {"files": files, "bytes": size}
        journal.result["tasks"] = tasks
        journal.updated = int(time.time() * 1000)
        try:
            self.keeper.save(journal)
        except Exception as e:  # the output is complete: only a retry's shortcut is lost
            log.warning(
                "job %s: could not mark the journal committed: %s", self.committer.job_id, e
            )

    def failed(
        self,
        stage: str,
        failure: BaseException,
        journal: CommitJournal | None,
        loaded: Loaded | None,
    ) -> JobCommitError:
        """Roll back and abort a failed commit, or leave it to be finished; the error says which."""
        c = self.committer
        what = (
            f"job {c.job_id}: commit to {c.url} failed in stage {stage}: "
            f"{type(failure).__name__}: {failure}"
        )
        if journal is not None and self.old_data_deleted(journal):
            log.error("%s; old data was deleted, the job is left to be finished", what)
            return JobCommitError(
                f"{what}. The destination's old data had already been deleted (replace mode), "
                "so the job was NOT rolled back (that would lose old and new data both): run "
                f"commit_job() again to finish it ({c.options.recover_command()})",
                job_id=c.job_id,
                stage=stage,
                recoverable=True,
            )
        try:
            undone = 0
            if journal is not None and loaded is not None:
                self._withdraw(loaded, journal)  # before a file of it goes again
                undone = c.unpublish(loaded)
            c.clean_up(None, None)
            c.release_claim()  # rolled back: the next fail-mode job may commit
        except Exception as e:
            log.error("%s; rolling back failed too: %s", what, e)
            return JobCommitError(
                f"{what}. Rolling the job back failed too ({type(e).__name__}: {e}): run "
                f"abort_job() again ({c.options.rollback_command()})",
                job_id=c.job_id,
                stage=stage,
                recoverable=True,
            )
        return self._aborted(what, stage, undone)

    def _withdraw(self, loaded: Loaded, journal: CommitJournal) -> None:
        """A commit rolled back: its job commit record goes first, if its committer
        writes one (so no reader resolves a file about to be deleted)."""
        if self.committer.committed_files(loaded) is not None:
            self.record.withdraw(since=journal.created)

    def _aborted(self, what: str, stage: str, undone: int) -> JobCommitError:
        """The error of a failed commit that was aborted (and, where possible, rolled back)."""
        c = self.committer
        if not c.can_roll_back:
            detail = (
                ": files it had already moved into the destination stay there (the "
                f"{c.name} committer cannot take them back)"
            )
            log.error("%s; the job was aborted%s", what, detail)
            return JobCommitError(
                f"{what}. The job was aborted{detail}", job_id=c.job_id, stage=stage
            )
        detail = f" ({undone} files it had made visible were deleted again)" if undone else ""
        log.error("%s; the job was rolled back%s", what, detail)
        return JobCommitError(
            f"{what}. The job was aborted: nothing of it is visible{detail}",
            job_id=c.job_id,
            stage=stage,
        )

    def roll_back(self, journal: CommitJournal, force: bool) -> int:
        """``abort_job()`` of an interrupted commit: delete what it published; how many.

        Refused (unless ``force``) once a replace commit deleted old data.
        """
        c = self.committer
        if not force and self.old_data_deleted(journal):
            raise JobCommitError(
                f"job {c.job_id}: its commit had already deleted the destination's old "
                f"data ({journal.deletes} files, replace mode) when it stopped; rolling back "
                "cannot bring that back. Finish the commit with commit_job() "
                f"({c.options.recover_command()}) to keep the new data, or abort_job(force=True) "
                "to discard the new data too",
                job_id=c.job_id,
                stage="abort",
                recoverable=True,
            )
        loaded = c.load_records(journal.records)
        try:
            self._withdraw(loaded, journal)
            return c.unpublish(loaded)
        finally:
            loaded.discard()


#: What ``_SUCCESS`` says of a commit whose committed tasks were declared the whole job.
ALL_COMMITTED_TASKS = (
    "all-committed-tasks: the committed tasks were published as the whole job, as whoever "
    "committed it declared (not the process that set the job up; no commit had begun)"
)


def recovered_diagnostics() -> dict[str, str]:
    """``_SUCCESS`` diagnostics of a commit that published every committed task because
    its caller said they are the whole job: the choice, who made it, when."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in some containers
        user = "unknown"
    now = datetime.datetime.now(datetime.UTC)
    return {
        "magicfs.recovered": ALL_COMMITTED_TASKS,
        "magicfs.recovered.by": f"{user}@{socket.gethostname()} (pid {os.getpid()})",
        "magicfs.recovered.at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
