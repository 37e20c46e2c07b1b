"""The hooks each committer fills in: the public interface the protocol's parts receive.

The job commit's stages (:mod:`magicfs.protocol.job_commit`), recovery
(:mod:`magicfs.protocol.recovery`) and the task side (:mod:`magicfs.protocol.tasks`) are
collaborators of the committer, not layers of it: each receives the committer as a
:class:`CommitterHooks` and calls only what this class declares. Job commit asks
``journal_keeper`` where the journal lives, then calls::

    end_job -> records_to_commit -> load_records -> validate_records -> [plan_replace]
             -> [delete_files] -> publish -> save_success -> [list_for_clean_up]
             -> clean_up

and on failure ``report_failure``, then ``unpublish`` and ``clean_up`` to roll back.
Task set-up calls ``prepare_task``; task commit opens a :class:`TaskCommit` (the
per-commit state, closed when the commit ends), calls ``begin_task_commit`` before the
attempt's files have settled and ``commit_task_files`` after; task abort calls
``abort_task_files``. The names are public because other classes call them; they are
hooks, not verbs for users (those are :class:`~magicfs.protocol.committer.OutputCommitter`'s).

This module also holds the values passed between the parts: :class:`Loaded`,
:class:`Published`, :class:`CleanUpListing` and :class:`TaskCommit`.
"""

from __future__ import annotations

import concurrent.futures
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

import fsspec

from ..records.job_record import CommittedFile
from ..statistics import IOStatisticsSnapshot
from ..stores.capabilities import is_local
from ..task_files import TaskFile
from .attempts import Messages, TaskAttempt, TaskCommitMessage
from .journal import JournalKeeper, RecordIO
from .options import CommitterOptions


@dataclass
class Loaded:
    """The task records a job commit publishes, loaded and (after ``validate``) checked.

    ``payload`` is the committer's own form of them (pendingsets, manifests on disk);
    ``diagnostics``: what this commit adds to ``_SUCCESS``'s diagnostics (how its records
    were chosen, when whoever recovered it said so).
    """

    records: list[str]
    tasks: int
    files: int
    bytes: int
    payload: Any = None
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)
    diagnostics: dict[str, str] = field(default_factory=dict)

    def discard(self) -> None:
        """Release local resources (the manifest committer's spill files)."""
        discard = getattr(self.payload, "discard", None)
        if discard is not None:
            discard()


class CleanUpListing(Protocol):
    """What a committer started listing early for its clean-up
    (:meth:`CommitterHooks.list_for_clean_up`)."""

    def discard(self) -> None:
        """Release it (its local files), used or not."""


@dataclass
class Published:
    """What the publish stage made visible; ``listed``: what the committer listed for
    the clean-up after it (:meth:`CommitterHooks.list_for_clean_up`), set by job commit."""

    files: int
    bytes: int
    filenames: list[str] = field(default_factory=list)
    payload: Any = None
    listed: CleanUpListing | None = None


@dataclass
class TaskCommit:
    """One call of ``commit_task``: Hadoop's ``CommitContext`` for a task.

    Opened when the commit begins and closed when it ends, however it ends; what a
    committer starts for this commit lives here, never on the committer (two attempts
    committing at once in one process each have their own). ``early``: a request the
    committer started before the attempt's files had settled (the magic layout's
    listing); closing cancels it if nobody waited for it.
    """

    task: TaskAttempt
    start: float = field(default_factory=time.monotonic)
    early: concurrent.futures.Future[Any] | None = None

    def close(self) -> None:
        if self.early is not None:
            self.early.cancel()
            self.early = None


class CommitterHooks(CommitterOptions, ABC):
    """Every hook of the protocol in one place: those to fill in, and the optional ones."""

    #: Whether a failed commit can take back what it made visible (not the classic ones).
    can_roll_back: ClassVar[bool] = True
    #: Whether a job commit may load the records its messages name while the job ends
    #: (one round trip less): true where :meth:`records_to_commit` takes named records
    #: whether or not the job was still active (not the classic ones).
    loads_named_while_ending: ClassVar[bool] = True

    # -- what tasks write with ----------------------------------------------------------

    @property
    @abstractmethod
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem tasks write their output with (``task.path(...)`` paths)."""

    @abstractmethod
    def work_path_for(self, attempt_id: str) -> str:
        """Where the attempt writes (what ``task.path(...)`` builds on)."""

    def work_url_for(self, attempt_id: str) -> str:
        """:meth:`work_path_for` as a URL (what ``task.url(...)`` builds on).

        Default: the store's own URL of it; on a local disk ``local://<path>`` (fsspec's
        other name for its local filesystem), not ``file://``: pandas opens ``file://``
        URLs with urllib, which cannot write them, while ``local://`` goes to fsspec with
        :attr:`storage_options` like any store's URL. (A plain path would not do: pandas
        refuses ``storage_options`` with one.) Committers whose tasks write through
        ``magic::`` URLs override this.
        """
        path = self.work_path_for(attempt_id)
        if is_local(self.store_fs):
            return "local://" + path
        return cast(str, self.store_fs.unstrip_protocol(path))

    # -- task hooks ---------------------------------------------------------------------

    @abstractmethod
    def prepare_task(self, task: TaskAttempt) -> None:
        """Task set-up: create what the attempt needs in the store."""

    def begin_task_commit(self, commit: TaskCommit) -> None:  # optional hook
        """Task commit, before this process's files of the attempt have settled: start
        what need not wait for them (kept on ``commit``)."""

    @abstractmethod
    def commit_task_files(self, commit: TaskCommit, files: list[TaskFile]) -> TaskCommitMessage:
        """Commit the attempt; ``files``: what this process knows it wrote."""

    @abstractmethod
    def abort_task_files(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Abort the attempt: discard what it staged, delete its records."""

    def job_active(self) -> bool:
        """Whether the job has been set up and has not ended (its marker, where it keeps one)."""
        return False

    # -- job hooks ----------------------------------------------------------------------

    @abstractmethod
    def prepare_job(self, resume: bool) -> None:
        """Create what the job needs in the store (a resumed job keeps what it has)."""

    def check_no_conflict(self, stage: str) -> None:
        """``fail`` mode: refuse a destination with visible data (``stage``: when checked)."""
        if self.conflict_mode == "fail":
            self.destination.refuse_visible_data(stage)

    def claims_destination(self) -> bool:
        """Whether job commit claims the destination before its ``fail``-mode check, so
        that of jobs racing for it exactly one publishes (:mod:`magicfs.stores.claims`).
        ``fail`` mode, where the check at job commit is the destination's (not file-v2,
        whose tasks publish first, nor the partitioned staging committer, which checks
        each partition)."""
        return self.conflict_mode == "fail"

    def take_claim(self) -> None:
        """Claim the destination for this job, or refuse naming the job that holds it."""
        destination = self.destination
        holder = destination.fail_claim().take(self.job_id, self.url)
        if holder is not None:
            destination.refuse_claimed(self.job_id, holder, self.rollback_command(holder.job_id))

    def release_claim(self) -> bool:
        """Release the destination's claim if this job holds it (a committed, aborted or
        rolled-back job, in any process); whether it did. Another job's is kept.

        Whatever this committer's ``conflict_mode``: the process that finishes or rolls
        back a job (``magicfs jobs``) need not know the mode it ran with (one read)."""
        return self.destination.fail_claim().release(self.job_id)

    def end_job(self, check: bool = True) -> bool:
        """End the job (no writer or task may join it any more).

        Returns whether it was active (looked up only if ``check``: one request less when
        the caller's messages say what to commit).
        """
        return self.job_active() if check else False

    def record_io(self, keeper: JournalKeeper | None) -> RecordIO | None:  # optional hook
        """What writes the job commit record at the destination: the journal's writer,
        where the journal lives on the destination's store (``None``: no record)."""
        return keeper.io if keeper is not None else None

    @abstractmethod
    def journal_keeper(self) -> JournalKeeper | None:
        """Where this job's commit journal lives (``None``: the committer keeps none)."""

    @abstractmethod
    def records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        """The task records to publish: those the messages name, or the listed ones.

        Raises :class:`~magicfs.errors.NothingToCommitError` when the job has nothing
        (left) to commit.
        """

    @abstractmethod
    def load_records(self, records: list[str], messages: Messages | None = None) -> Loaded:
        """Load (and check the form of) the task records; ``messages`` when the caller gave them."""

    def validate_records(self, loaded: Loaded) -> None:  # optional hook
        """Every check that can fail, before anything becomes visible."""

    def plan_replace(self, loaded: Loaded) -> list[str]:
        """``replace`` mode: the files to delete (default: all visible data)."""
        return self.destination.visible_files()

    @abstractmethod
    def delete_files(self, paths: list[str]) -> None:
        """Delete ``paths`` (missing ones are fine)."""

    def replaced_partitions(self, loaded: Loaded) -> list[str] | None:  # optional hook
        """``replace`` mode: the partition directories (relative to the destination) whose
        old files the job replaces, when it replaces those only (the partitioned staging
        committer); ``None``: the whole destination. What the job commit record says."""
        return None

    def removed_old_files(self) -> None:  # optional hook
        """``replace`` mode: the old files are deleted (after the new ones were
        published and recorded); tidy what they leave (a local disk's empty directories)."""

    @abstractmethod
    def publish(self, loaded: Loaded) -> Published:
        """Make every file visible; idempotent (files already visible count as done)."""

    @abstractmethod
    def unpublish(self, loaded: Loaded) -> int:
        """Roll back: delete every file of ``loaded`` that was made visible; returns how many."""

    def committed_files(self, loaded: Loaded) -> Iterator[CommittedFile] | None:  # optional
        """The files ``loaded`` publishes, relative to the destination, one at a time: what
        the job commit record lists (:mod:`.commit_record`). ``None``: this committer
        writes no record (the classic committers, whose tasks' files are not listed)."""
        return None

    @abstractmethod
    def save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        """Write ``_SUCCESS`` (if enabled); returns the file names it lists."""

    def list_for_clean_up(self) -> CleanUpListing | None:  # optional hook
        """Start what a committed job's clean-up lists, now: job commit calls it once
        ``_SUCCESS`` is saved, so the listings run while the journal is saved as
        ``committed`` (one round trip less), and hands the result to :meth:`clean_up`
        as :attr:`Published.listed` (``None``: nothing to start; the clean-up lists what
        it needs itself)."""
        return None

    @abstractmethod
    def clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """Delete the job's tree (journal last) and abort what is left; ``published`` is
        ``None`` for an aborted job (after a commit, its ``listed`` is the clean-up's to
        use and discard)."""

    def report_failure(  # optional hook
        self, stage: str, failure: BaseException, start: float
    ) -> None:
        """A chance to record a failed commit (the manifest committer's report)."""
