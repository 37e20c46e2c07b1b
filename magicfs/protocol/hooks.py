"""The hooks each committer fills in, and the two values job commit passes between them.

Job commit (:mod:`magicfs.protocol.job_commit`) asks ``_journal`` where the journal
lives, then calls::

    _end_job -> _records_to_commit -> _load -> _validate -> [_plan_replace]
             -> [_delete_files] -> _publish -> _save_success -> _clean_up

and on failure ``_failure_report``, then ``_unpublish`` and ``_clean_up`` to roll back.
Task commit calls ``_setup_task``, ``_commit_task`` and ``_abort_task``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import fsspec

from ..statistics import IOStatisticsSnapshot
from ..stores.capabilities import is_local
from ..task_files import TaskFile
from .attempts import Messages, TaskAttempt, TaskCommitMessage
from .destination import DestinationView
from .journal import JournalKeeper


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


@dataclass
class Published:
    """What the publish stage made visible."""

    files: int
    bytes: int
    filenames: list[str] = field(default_factory=list)
    payload: Any = None


class CommitterHooks(DestinationView, ABC):
    """Every hook of the protocol in one place: 14 to fill in, the rest optional."""

    #: Whether a failed commit can take back what it made visible (not the classic ones).
    can_roll_back: ClassVar[bool] = True
    #: Whether a job commit may load the records its messages name while the job ends
    #: (one round trip less): true where :meth:`_records_to_commit` takes named records
    #: whether or not the job was still active (not the classic ones).
    loads_named_while_ending: ClassVar[bool] = True

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

    @abstractmethod
    def _setup_job(self, resume: bool) -> None:
        """Create what the job needs in the store (a resumed job keeps what it has)."""

    @abstractmethod
    def _setup_task(self, task: TaskAttempt) -> None: ...

    @abstractmethod
    def _commit_task(self, task: TaskAttempt, files: list[TaskFile]) -> TaskCommitMessage:
        """Commit the attempt; ``files``: what this process knows it wrote."""

    @abstractmethod
    def _abort_task(self, task: TaskAttempt, files: list[TaskFile]) -> None: ...

    def job_active(self) -> bool:
        """Whether the job has been set up and has not ended (its marker, where it keeps one)."""
        return False

    def _end_job(self, check: bool = True) -> bool:
        """End the job (no writer or task may join it any more).

        Returns whether it was active (looked up only if ``check``: one request less when
        the caller's messages say what to commit).
        """
        return self.job_active() if check else False

    @abstractmethod
    def _journal(self) -> JournalKeeper | None:
        """Where this job's commit journal lives (``None``: the committer keeps none)."""

    @abstractmethod
    def _records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        """The task records to publish: those the messages name, or the listed ones.

        Raises :class:`NothingToCommitError` when the job has nothing (left) to commit.
        """

    @abstractmethod
    def _load(self, records: list[str], messages: Messages | None = None) -> Loaded:
        """Load (and check the form of) the task records; ``messages`` when the caller gave them."""

    def _validate(self, loaded: Loaded) -> None:  # optional hook
        """Every check that can fail, before anything becomes visible."""

    def _plan_replace(self, loaded: Loaded) -> list[str]:
        """``replace`` mode: the files to delete (default: all visible data)."""
        return self._visible_files()

    @abstractmethod
    def _delete_files(self, paths: list[str]) -> None:
        """Delete ``paths`` (missing ones are fine)."""

    @abstractmethod
    def _publish(self, loaded: Loaded) -> Published:
        """Make every file visible; idempotent (files already visible count as done)."""

    @abstractmethod
    def _unpublish(self, loaded: Loaded) -> int:
        """Roll back: delete every file of ``loaded`` that was made visible; returns how many."""

    @abstractmethod
    def _save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        """Write ``_SUCCESS`` (if enabled); returns the file names it lists."""

    @abstractmethod
    def _clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """Delete the job's tree (journal last) and abort what is left; ``published`` is
        ``None`` for an aborted job."""

    def _failure_report(  # optional hook
        self, stage: str, failure: BaseException, start: float
    ) -> None:
        """A chance to record a failed commit (the manifest committer's report)."""
