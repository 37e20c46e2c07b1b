"""One job commit, run as named stages (in the manner of Hadoop's manifest committer)::

    end_job -> load -> validate -> conflict -> journal -> [delete_old] -> publish
            -> success (record) -> [delete_old] -> success (_SUCCESS) -> cleanup

``success`` writes the job commit record (:mod:`.commit_record`: what readers of whole
jobs read) and then ``_SUCCESS``. In ``replace`` mode the old files are deleted between
the two (``delete_old``; with a ``replace_retention`` past 0 they are left to the next
job or ``magicfs jobs vacuum``), so a reader of the old snapshot is not pulled from
under; only where a new file reuses an old file's name (or the committer writes no
record) does ``delete_old`` run before ``publish``, as it always did. Every commit then
finishes what earlier replace jobs left to delete (:mod:`.commit_record`).

In ``fail`` mode, stage *conflict* first claims the destination for the job
(:mod:`magicfs.stores.claims`), then checks it for data; the claim is released once
``_SUCCESS`` is saved (or when the commit is rolled back), so of fail-mode jobs racing
for one destination exactly one publishes.

The clean-up's listings (``list_for_clean_up``) start once ``_SUCCESS`` is saved and run
while the journal is saved as ``committed``: the job's outputs are complete by then.

With messages, ``load`` reads the records they name during ``end_job`` (they were saved
before the messages existed, so the job's end cannot change them: one round trip less;
a commit that turns out to resume from its journal drops what was read and loads the
journal's records). Messages that carry their records
(:attr:`~.attempts.TaskCommitMessage.record_json`) need no reads: ``end_job`` then
checks that the job was active when it ended it (one request for the job), and only
then are the carried records used; otherwise (a retried commit of a committed job, an
aborted one, one never set up) they are read from the store as before, so a job whose
records have gone is refused the same way with or without them.

Each stage runs once and is timed into the committer's statistics
(``job_stage_<name>``); a failure names its stage and the job
(:class:`~magicfs.errors.JobCommitError`) and is handled by the failure policy of
:mod:`.recovery` (rolled back, or left to be finished). Once ``success`` has saved
``_SUCCESS`` and the journal is marked ``committed``, the job is committed: ``cleanup``
runs as the committer's ``cleanup`` option says (:mod:`.cleanup`: inline, or on a
thread of its own after ``commit_job()`` has returned, or not at all).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from ..errors import JobCommitError, NothingToCommitError
from ..filesystems.listings import refreshes_listings_of
from ..parallel import in_background
from ..paths import join
from ..records.journal import CommitJournal
from ..statistics import FOREIGN_UPLOADS_ABORTED, IOStatisticsStore
from ..stores.spool import KeySet
from ..task_files import TASK_FILES
from .active_jobs import ACTIVE_JOBS
from .attempts import (
    JobSummary,
    Messages,
    carried_records,
    distinct,
    total_rows,
    without_records,
)
from .cleanup import BackgroundCleanup
from .hooks import CommitterHooks, Loaded, Published
from .options import elapsed
from .recovery import Recovery, recovered_diagnostics

log = logging.getLogger("magicfs.committer")


class StageTimer:
    """Which stage a job commit is in, each timed into the committer's statistics."""

    def __init__(self, stats: IOStatisticsStore):
        self.stats = stats
        self.current = "start"

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.current = name
        with self.stats.track(f"job_stage_{name}"):
            yield


class JobCommit:
    """One call of ``commit_job(messages)``: its stages, its journal, its loaded records."""

    def __init__(
        self, committer: CommitterHooks, messages: Messages | None, all_committed_tasks: bool
    ):
        self.committer = committer
        self.messages = distinct(messages)
        #: Some messages carry their records: the job's end checks it was active first.
        self.carrying = bool(carried_records(self.messages))
        #: The caller declared the committed tasks the whole job (see ``commit_job``).
        self.all_committed_tasks = all_committed_tasks
        #: Set up in this process: the only one that may list without saying so.
        self.set_up_here = ACTIVE_JOBS.set_up_here(committer.job_id, committer.url)
        self.journal_read = False  # read before the job ends (a listing not meant)
        self.resumed = False  # the commit resumes from its journal
        self.start = time.monotonic()
        self.stages = StageTimer(committer.stats)
        self.keeper = committer.journal_keeper()
        self.recovery = Recovery(committer, self.keeper)
        self.journal: CommitJournal | None = None
        self.loaded: Loaded | None = None
        self.named: concurrent.futures.Future[Loaded] | None = None  # read during end_job
        self.ending: concurrent.futures.Future[bool] | None = None  # see _end_job

    def run(self) -> JobSummary:
        """The whole commit; a retried one resumes from its journal."""
        c = self.committer
        TASK_FILES.settle(c.job_id)  # this process's files still closing: let them finish
        if self.messages is None and not self.all_committed_tasks and not self.set_up_here:
            self.journal = self.recovery.refuse_unmeant_listing()
            self.journal_read = True
        was_active = self._end_job()
        published: Published | None = None
        try:  # the loaded records (on local disk) serve every stage, clean-up included
            if self.journal is not None:
                self.recovery.check_resumable(self.journal, self.messages)
                if self.journal.phase == "committed":
                    self._ended()
                    return self._finish_clean_up(self.journal)
            # A commit another process began (its journal says its mode, not our options).
            resumed_fail = self.journal is not None and self.journal.conflict_mode == "fail"
            published, filenames = self._make_visible(was_active)
            loaded = self.loaded
            assert loaded is not None
            if c.claims_destination() or resumed_fail:
                release_claim(c)  # its files and _SUCCESS are visible: the next job may check
            c.stats.increment("committer_jobs_completed")
            if c.options.cleanup != "off":  # its listings run while the journal is saved
                published.listed = c.list_for_clean_up()
            if self.journal is not None:
                self.recovery.mark_committed(
                    self.journal, published.files, published.bytes, loaded.tasks
                )
            summary = summarise(
                c, published.files, published.bytes, loaded.tasks, self.start, filenames
            )
            self.loaded = None  # the clean-up owns it now (and discards it),
            done, published = published, None  # and the listings it is handed
            summary.cleanup_incomplete = clean_up_committed(
                c,
                counting_foreign(c, summary, lambda: self._clean_up(loaded, done)),
                skipped=loaded.discard,
            )
            return summary
        finally:
            if self.loaded is not None:
                self.loaded.discard()
            if published is not None and published.listed is not None:
                published.listed.discard()
            if self.ending is not None:  # a commit that failed before it: let it end
                concurrent.futures.wait([self.ending])

    def _clean_up(self, loaded: Loaded, published: Published) -> str | None:
        """Stage cleanup (timed, wherever it runs); then the loaded records go."""
        try:
            with self.stages("cleanup"):
                return try_clean_up(self.committer, loaded, published)
        finally:
            loaded.discard()

    def _end_job(self) -> bool:
        """Stage end_job: end the job while its journal is read and the records the
        messages name are loaded (the three at once).

        Messages that carry their records need the job checked before it ends; its end
        (the marker's delete) then goes on while the records are checked and the journal
        saved (one round trip less), and is waited for before anything is published
        (:meth:`_ended`). A journal saved while the marker is still there reads as a
        commit under way, as the journal always does, and a retried commit ends the job
        again."""
        c = self.committer
        # (A pool of this call, not the job context's: its two threads end with the stage,
        # and a commit of a flow without a context, classic or manifest, needs them too.)
        with self.stages("end_job"), concurrent.futures.ThreadPoolExecutor(2) as pool:
            if self.carrying:
                ending = pool.submit(c.job_active)
            else:
                ending = pool.submit(c.end_job, self.messages is None)
            if self.messages is not None and c.loads_named_while_ending and not self.carrying:
                self.named = pool.submit(self._load_named)
            try:
                if not self.journal_read:
                    self.journal = self.keeper.read() if self.keeper is not None else None
                was_active = _ending_result(c, ending, self._advice(journal_saved=False))
            except BaseException:
                self._drop_named()
                raise
            if self.carrying:
                self.ending = in_background(c.end_job, False, name="magicfs-end-job")
            if self.journal is not None:  # resuming: the journal names what to load
                self._drop_named()
            return was_active

    def _ended(self) -> None:
        """The job's end, if it goes on in the background, done (its failure is the
        end_job stage's: :func:`_ending_result`)."""
        ending, self.ending = self.ending, None
        if ending is not None:
            with self.stages("end_job"):
                _ending_result(self.committer, ending, self._advice(journal_saved=True))

    def _advice(self, journal_saved: bool) -> str:
        """What finishes a commit whose job could not be ended: with its journal saved, a
        retry anywhere; without, the choice of what to publish again (the same messages,
        or every committed task where none were given)."""
        c = self.committer
        if journal_saved:
            return f"run commit_job() again, or from any process {c.options.recover_command()}"
        if self.messages is not None:
            return (
                "run commit_job() again with the same messages (from another process, "
                f"with them as JSON lines in FILE: {c.options.recover_command(messages=True)})"
            )
        return (
            "run commit_job() again in this process (from another: "
            f"{c.options.recover_command(all_committed_tasks=True)})"
        )

    def _load_named(self) -> Loaded:
        assert self.messages is not None
        c = self.committer
        return c.load_records(c.records_to_commit(self.messages, True), self.messages)

    def _drop_named(self) -> None:
        """Records read during end_job that will not be used: wait, then discard them."""
        named, self.named = self.named, None
        if named is not None:
            concurrent.futures.wait([named])
            if named.exception() is None:
                named.result().discard()

    def _make_visible(self, was_active: bool) -> tuple[Published, list[str]]:
        """Stages load to success; a failure goes through the failure policy."""
        c = self.committer
        try:
            with c.stats.track("committer_commit_job"):
                loaded = self._load(was_active)
                with self.stages("validate"):
                    c.validate_records(loaded)
                self.resumed = self.journal is not None
                if self.journal is None:
                    self._conflict_and_journal(loaded)
                self._ended()
                if self.journal is not None and self.journal.phase == "deleting":
                    with self.stages("delete_old"):
                        self.recovery.delete_old(self.journal)
                with self.stages("publish"):
                    published = c.publish(loaded)
                replacing = self.journal is not None and self.journal.phase == "replacing"
                with self.stages("success"):  # the record first: what snapshot readers read
                    retire = self._old_pages() if replacing else None
                    record = self.recovery.record.publish(loaded, self.resumed, retire)
                if replacing:
                    with self.stages("delete_old"):
                        self.recovery.retire_old(record)
                with self.stages("success"):
                    self.recovery.record.vacuum_others()
                    rows = total_rows(self.messages)
                    filenames = c.save_success(loaded, published, self.start, rows)
            return published, filenames
        except (NothingToCommitError, _JobNotEnded):
            raise
        except BaseException as failure:
            c.stats.increment("committer_jobs_failed")
            c.report_failure(self.stages.current, failure, self.start)
            stage = self.stages.current
            raise self.recovery.failed(stage, failure, self.journal, self.loaded) from failure

    def _load(self, was_active: bool) -> Loaded:
        """Stage load: the journal's records when resuming, else the tasks' records (those
        the messages name were read during end_job)."""
        c = self.committer
        with self.stages("load"):
            named, self.named = self.named, None
            try:
                if named is not None:
                    self.loaded = named.result()
                else:
                    records = (
                        self.journal.records
                        if self.journal is not None
                        else c.records_to_commit(self.messages, was_active)
                    )
                    messages = self.messages if was_active else without_records(self.messages)
                    self.loaded = c.load_records(records, messages)
            except FileNotFoundError:
                self._check_not_committed_already()
                raise
            if self.all_committed_tasks and self.journal is None and not self.set_up_here:
                self.loaded.diagnostics.update(recovered_diagnostics())
            return self.loaded

    def _check_not_committed_already(self) -> None:
        """Task records are missing: was this a retried ``commit_job(messages)`` of a finished job?

        Its records went with its tree, and failing to load them must not read as "rolled
        back". Asked only once a record is missing, so a first commit pays no extra request.
        """
        c = self.committer
        if self.journal is None and self.messages is not None and c.success_names_this_job():
            raise NothingToCommitError(
                f"job {c.job_id}: nothing to commit at {c.url}: it has already been "
                "committed (its _SUCCESS names it)"
            )

    def _conflict_and_journal(self, loaded: Loaded) -> None:
        """Stages conflict and journal of a first commit (a resumed one has both)."""
        c = self.committer
        with self.stages("conflict"):
            if c.claims_destination():  # before the check: two jobs must not both pass it
                c.take_claim()
            c.check_no_conflict("job commit")
            doomed = c.plan_replace(loaded) if c.options.conflict_mode == "replace" else []
            after = bool(doomed) and self._old_files_can_wait(loaded, doomed)
        if self.keeper is not None:
            with self.stages("journal"):
                journal = self.recovery.new_journal(loaded, doomed, after)
                self.journal = self.keeper.start(journal, doomed)
        elif doomed:
            c.delete_files(doomed)

    def _old_pages(self) -> Iterator[list[str]]:
        """The old files a ``replacing`` commit retires (its journal's delete pages)."""
        assert self.keeper is not None and self.journal is not None
        return self.keeper.pages(self.journal)

    def _old_files_can_wait(self, loaded: Loaded, doomed: list[str]) -> bool:
        """``replace`` mode: may the old files stay until the new ones are published and
        recorded (readers of the old snapshot keep reading)? Not when the committer
        writes no record, nor when a new file takes an old file's name: publishing it
        replaces that old file in place, so the old data goes first, as it always did
        (``docs/readers.md``). One pass over the new names, kept in a local spool."""
        files = self.committer.committed_files(loaded)
        if files is None:
            return False
        dest = self.committer.dest
        new = KeySet()
        try:
            new.update(join(dest, entry.path) for entry in files)
            return not any(path in new for path in doomed)
        finally:
            new.discard()

    def _finish_clean_up(self, journal: CommitJournal) -> JobSummary:
        """A commit that got as far as ``_SUCCESS``: only its clean-up is left to do."""
        c = self.committer
        log.info("job %s: already committed; finishing its clean-up", c.job_id)
        release_claim(c)  # a driver killed before it released the claim
        result = journal.result
        summary = summarise(
            c,
            result.get("files", 0),
            result.get("bytes", 0),
            result.get("tasks", 0),
            self.start,
            [],
        )
        summary.cleanup_incomplete = clean_up_committed(
            c, counting_foreign(c, summary, lambda: try_clean_up(c, None, Published(0, 0)))
        )
        return summary


class _JobNotEnded(JobCommitError):
    """The job could not be ended (or checked): left for ``commit_job()`` to finish."""


def _ending_result(c: CommitterHooks, ending: concurrent.futures.Future[bool], advice: str) -> bool:
    """What ending the job (or checking it) returned. Its failure is the end_job stage's
    and undoes nothing: nothing is published yet and the tasks' output is whole (the
    journal saved, when the end went on while it was), so ``commit_job()`` again
    finishes the job; the error says so (``advice``: how, :meth:`JobCommit._advice`)."""
    try:
        return ending.result()
    except Exception as failure:
        raise _JobNotEnded(
            f"job {c.job_id}: commit to {c.url} failed in stage end_job: "
            f"{type(failure).__name__}: {failure}. Nothing was published and nothing "
            f"rolled back: {advice}",
            job_id=c.job_id,
            stage="end_job",
            recoverable=True,
        ) from failure


def release_claim(committer: CommitterHooks) -> None:
    """Release a committed job's claim on its destination (``fail`` mode). A failure is
    logged, not raised: the job is committed; the claim left names it, and
    ``cleanup_job()`` or ``abort_job()`` of the job, from any process, releases it."""
    try:
        committer.release_claim()
    except Exception as e:
        log.warning(
            "job %s: committed, but its claim on %s could not be released (%s: %s): later "
            "conflict_mode='fail' jobs are refused until it is; release it with %s",
            committer.job_id,
            committer.url,
            type(e).__name__,
            e,
            f"magicfs jobs cleanup --job {committer.job_id} {committer.url}",
        )


def clean_up_committed(
    committer: CommitterHooks,
    work: Callable[[], str | None],
    skipped: Callable[[], None] = lambda: None,
) -> str | None:
    """Run a committed job's clean-up ``work`` as the committer's ``cleanup`` option says
    (:mod:`.cleanup`); what it left, as far as known when this returns.

    ``work`` releases what it was given (the loaded records' local spill file) when it
    ends; with clean-up off it never runs, so ``skipped`` releases them instead.
    """
    c = committer
    if c.options.cleanup == "inline":
        return work()
    if c.options.cleanup == "off":
        skipped()
        left = (
            f"clean-up of job {c.job_id} is off (cleanup='off'): the output is complete; "
            f"its tree and any upload of a failed or speculative attempt stay until "
            f"cleanup_job() (magicfs jobs cleanup --job {c.job_id} {c.url})"
        )
        log.info("job %s: %s", c.job_id, left)
        return left
    c._cleanup_run = BackgroundCleanup(c.job_id, closing_context(c, refreshes_listings_of(c, work)))
    return None


def closing_context(
    committer: CommitterHooks, work: Callable[[], str | None]
) -> Callable[[], str | None]:
    """``work`` (a background clean-up), then the job's context closed: the job ended in
    this process once it has (:meth:`CommitterHooks.close_context` leaves it to us)."""

    def run() -> str | None:
        try:
            return work()
        finally:
            if committer.context is not None:
                committer.context.close()

    return run


def counting_foreign(
    committer: CommitterHooks, summary: JobSummary, work: Callable[[], str | None]
) -> Callable[[], str | None]:
    """``work`` (a clean-up) that sets ``summary.foreign_uploads_aborted`` when it ends:
    the uploads it aborted that the job did not start (each logged at WARNING by the
    store's sweep). A background clean-up updates the summary in place when it ends
    (``wait_cleanup()`` returns after that)."""
    before = committer.stats.counter(FOREIGN_UPLOADS_ABORTED)

    def counted() -> str | None:
        try:
            return work()
        finally:
            after = committer.stats.counter(FOREIGN_UPLOADS_ABORTED)
            summary.foreign_uploads_aborted = after - before

    return counted


def try_clean_up(
    committer: CommitterHooks, loaded: Loaded | None, published: Published | None
) -> str | None:
    """Clean up after a successful commit; what is left (and how to finish) on failure."""
    try:
        committer.clean_up(loaded, published)
    except Exception as e:
        incomplete = (
            f"clean-up of job {committer.job_id} did not finish ({type(e).__name__}: {e}); "
            f"the output is complete. Finish it with cleanup_job() (magicfs jobs cleanup "
            f"--job {committer.job_id} {committer.url})"
        )
        log.warning("job %s: %s", committer.job_id, incomplete)
        return incomplete
    return None


def summarise(
    committer: CommitterHooks, files: int, size: int, tasks: int, start: float, filenames: list[str]
) -> JobSummary:
    """The :class:`JobSummary` of a committed job, logged at INFO."""
    c = committer
    summary = JobSummary(
        job_id=c.job_id,
        destination=c.url,
        committer=c.name,
        files=files,
        bytes=size,
        tasks=tasks,
        seconds=elapsed(start),
        success_file=c.store_fs.unstrip_protocol(c.options.success_path)
        if c.options.success_file
        else None,
        filenames=list(filenames),
        counters=dict(c.stats.counters()),
    )
    log.info(
        "job %s: committed %d files (%d bytes) from %d tasks to %s in %.2fs (%s committer)",
        c.job_id,
        files,
        size,
        tasks,
        c.url,
        summary.seconds,
        c.name,
    )
    return summary
