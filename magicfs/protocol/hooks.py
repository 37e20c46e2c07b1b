"""The hooks each committer fills in: the public interface the protocol's parts receive.

The job commit's stages (:mod:`magicfs.protocol.job_commit`), recovery
(:mod:`magicfs.protocol.recovery`) and the task side (:mod:`magicfs.protocol.tasks`) are
collaborators of the committer, not layers of it: each receives the committer's
*flow*, the :class:`CommitterHooks` it holds (``committer.flow``; never the committer,
whose public names are the user's verbs), and calls only what this class declares. Job commit asks
``journal_keeper`` where the journal lives, then calls::

    end_job -> records_to_commit -> load_records -> validate_records -> [plan_replace]
             -> [delete_files] -> publish -> save_success -> [list_for_clean_up]
             -> clean_up

and on failure ``report_failure``, then ``unpublish`` and ``clean_up`` to roll back.
Task set-up calls ``prepare_task``; task commit opens a :class:`TaskCommit` (the
per-commit state, closed when the commit ends), calls ``begin_task_commit`` before the
attempt's files have settled and ``commit_task_files`` after; task abort calls
``abort_task_files``. The names are public because other classes call them; they are
hooks, not verbs for users (those are :class:`~magicfs.protocol.committer.OutputCommitter`'s,
which builds its flow from its keywords and calls it).

This module also holds the values passed between the parts: :class:`Loaded`,
:class:`Published`, :class:`CleanUpListing` and :class:`TaskCommit`.
"""

from __future__ import annotations

import concurrent.futures
import json
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

import fsspec

from ..job_context import JobContext
from ..records.job_record import CommittedFile
from ..statistics import IOStatisticsSnapshot, IOStatisticsStore
from ..stores.capabilities import is_local
from ..task_files import TaskFile
from .attempts import Messages, TaskAttempt, TaskCommitMessage, check_messages
from .cleanup import BackgroundCleanup
from .journal import JournalKeeper, RecordIO
from .options import CommitterOptions, default_store_filesystem, elapsed


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


class CommitterHooks(ABC):
    """Every hook of the protocol in one place: those to fill in, and the optional ones.

    The configuration is a value it holds (:attr:`options`, a frozen
    :class:`~.options.CommitterOptions`), not a base class: ``job_id``, ``dest``,
    ``store_fs`` and ``url`` read from it; everything else is ``options.<name>``.
    """

    name: str = "abstract"  # per instance where one class serves several (file-v1/v2)
    #: The clean-up of this committer's job still running in this process, if any.
    _cleanup_run: BackgroundCleanup | None = None
    #: The job's state in this process (:mod:`magicfs.job_context`), where the flow
    #: keeps one (the S3 flows); closed when the job ends here (:meth:`close_context`).
    context: JobContext | None = None

    def __init__(self, dest: str, **options: Any):
        """``options``: :meth:`CommitterOptions.build <.options.CommitterOptions.build>`'s
        keywords (a committer's own are its flow's constructor's, before these)."""
        #: The configuration, checked once (:class:`~.options.CommitterOptions`).
        self.options = CommitterOptions.build(
            dest, store_filesystem=self._store_filesystem, **options
        )
        #: The id is a UUID drawn here and not set up yet: job setup need not look it up.
        self._fresh_job_id = options.get("job_id") is None
        self.stats = IOStatisticsStore()

    def _store_filesystem(
        self, protocol: str, options: dict[str, Any], threads: int
    ) -> fsspec.AbstractFileSystem:
        """The store's filesystem for a destination of ``protocol`` (no ``fs=`` given).

        Given everything it may use, because the constructor calls it before the
        committer is whole (the S3 committers add their client settings).
        """
        return default_store_filesystem(protocol, options, threads)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("stats", None)  # per process; holds a lock
        state.pop("_cleanup_run", None)  # a thread of this process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.stats = IOStatisticsStore()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dest={self.url!r}, job_id={self.job_id!r})"

    def close_context(self) -> None:
        """The job ended in this process (committed, aborted or cleaned up): close its
        context, so its pools shut down and a later writer of the job id gets a fresh
        one. A clean-up still running in the background closes it when it ends
        (:func:`.job_commit.clean_up_committed`): it may still use the job's pools."""
        run = self._cleanup_run
        if self.context is not None and (run is None or not run.running):
            self.context.close()

    # -- the configuration's names every caller reads -----------------------------------

    @property
    def job_id(self) -> str:
        return self.options.job_id

    @property
    def dest(self) -> str:
        """The destination, a path of :attr:`store_fs`."""
        return self.options.dest

    @property
    def store_fs(self) -> fsspec.AbstractFileSystem:
        """The store's own filesystem (never a magic wrapper)."""
        return self.options.store_fs

    @property
    def url(self) -> str:
        """The destination with its protocol, for messages and ``_SUCCESS``."""
        return self.options.url

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options that go with :meth:`TaskAttempt.url` URLs (``storage_options=``).

        For committers whose tasks write through ``magic::`` URLs they are nested per
        protocol, as fsspec's chained URLs expect (``{"magic": {...}, "s3": {...}}``).
        """
        return dict(self.options.store_options)

    def success_names_this_job(self) -> bool:
        """Whether the destination's ``_SUCCESS`` says this job committed there."""
        return self.options.destination.success_job_id() == self.job_id

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

    def needs_task_commit(self, task: TaskAttempt) -> bool:
        """Always true: even an attempt that wrote nothing commits (an empty record)."""
        return True

    @abstractmethod
    def prepare_task(self, task: TaskAttempt) -> None:
        """Task set-up: create what the attempt needs in the store."""

    def begin_task_commit(self, commit: TaskCommit) -> None:  # noqa: B027 (an optional hook: nothing by default)
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
        if self.options.conflict_mode == "fail":
            self.options.destination.refuse_visible_data(stage)

    def claims_destination(self) -> bool:
        """Whether job commit claims the destination before its ``fail``-mode check, so
        that of jobs racing for it exactly one publishes (:mod:`magicfs.stores.claims`).
        ``fail`` mode, where the check at job commit is the destination's (not file-v2,
        whose tasks publish first, nor the partitioned staging committer, which checks
        each partition)."""
        return self.options.conflict_mode == "fail"

    def take_claim(self) -> None:
        """Claim the destination for this job, or refuse naming the job that holds it."""
        destination = self.options.destination
        holder = destination.fail_claim().take(self.job_id, self.url)
        if holder is not None:
            destination.refuse_claimed(
                self.job_id, holder, self.options.rollback_command(holder.job_id)
            )

    def release_claim(self) -> bool:
        """Release the destination's claim if this job holds it (a committed, aborted or
        rolled-back job, in any process); whether it did. Another job's is kept.

        Whatever this committer's ``conflict_mode``: the process that finishes or rolls
        back a job (``magicfs jobs``) need not know the mode it ran with (one read)."""
        return self.options.destination.fail_claim().release(self.job_id)

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

    def validate_records(self, loaded: Loaded) -> None:  # noqa: B027 (an optional hook: nothing by default)
        """Every check that can fail, before anything becomes visible."""

    def plan_replace(self, loaded: Loaded) -> list[str]:
        """``replace`` mode: the files to delete (default: all visible data)."""
        return self.options.destination.visible_files()

    @abstractmethod
    def delete_files(self, paths: list[str]) -> None:
        """Delete ``paths`` (missing ones are fine)."""

    def replaced_partitions(self, loaded: Loaded) -> list[str] | None:  # optional hook
        """``replace`` mode: the partition directories (relative to the destination) whose
        old files the job replaces, when it replaces those only (the partitioned staging
        committer); ``None``: the whole destination. What the job commit record says."""
        return None

    def removed_old_files(self) -> None:  # noqa: B027 (an optional hook: nothing by default)
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

    def report_failure(  # noqa: B027 (an optional hook: nothing by default)
        self, stage: str, failure: BaseException, start: float
    ) -> None:
        """A chance to record a failed commit (the manifest committer's report)."""

    # -- what the committers' hooks share ------------------------------------------------

    def _job_marker_document(self) -> bytes:
        """The job marker's JSON: which job is active where, since when, started by whom."""
        marker = {
            "jobId": self.job_id,
            "committer": self.name,
            "destination": self.url,
            "created": int(time.time() * 1000),
            "hostname": socket.gethostname(),
        }
        return json.dumps(marker).encode()

    def _check_messages(self, messages: Messages, records_under: str) -> list[str]:
        """The records ``messages`` name, once each is known to be this job's own
        (:func:`~.attempts.check_messages`)."""
        return check_messages(self.job_id, messages, records_under)

    def success_metrics(
        self, files: int, size: int, tasks: int, start: float, rows: int | None
    ) -> dict[str, int]:
        """``_SUCCESS`` metrics: totals, duration and (when known) rows."""
        metrics = {
            "files": files,
            "bytes": size,
            "tasks": tasks,
            "duration_ms": int(elapsed(start) * 1000),
        }
        if rows is not None:
            metrics["rows"] = rows
        return metrics

    def success_diagnostics(self, **extra: str) -> dict[str, str]:
        """``_SUCCESS`` diagnostics: how the job was configured."""
        return {
            "magicfs.destination": self.url,
            "magicfs.committer.threads": str(self.options.threads),
            "magicfs.conflict_mode": self.options.conflict_mode,
            **extra,
        }
