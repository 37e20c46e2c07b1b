"""What a deferred store adds to the magic-layout job flow: its options and its hooks.

The magic-layout committer (:mod:`magicfs.committers.magic_layout`) runs one flow on
every deferred store: job and attempt markers, pendingsets, the job commit over the
adapter. Where a store's jobs need more — S3's unmarked jobs and uploads sweep, Azure's
writer records — the store says so here, in its own folder, and the committer passes
everything through unread:

* its **options** (:class:`StoreOptions`): the committer options its jobs take
  (``in_memory``, ``checksum``, ``block_size``...), typed and checked once, and what
  follows from them: the task view's :class:`~magicfs.filesystems.MagicFileSystem`
  keywords (task URLs carry those that differ from their defaults), the adapter's
  options, the store filesystem's client settings and ``_SUCCESS`` diagnostics;
* its **hooks** (:class:`DeferredJobHooks`, which a store subclasses): how an attempt's
  entries are listed, how its commits are gathered at task commit, what a task abort
  discards, what a job's clean-up sweeps.

A store declares both on its :class:`~.deferred.DeferredStoreSpec` (``options``,
``job_hooks``). The hooks see the job through :class:`LayoutJob`, an interface the
committer implements: paths as strings, record I/O through the adapter. This module
is the generic behaviour, the in-process store's and every store's default.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Protocol

from ..errors import CommitFailedError, InvalidCommitData
from ..names import PENDING_SUFFIX
from ..paths import (
    is_deferred_write,
    marked_destinations,
    pending_file,
    pending_path,
    pending_records,
)
from ..records import IOStatisticsSnapshot, SinglePendingCommit
from ..statistics import IOStatisticsStore
from ..task_files import TaskFile
from .commit_ops import CommitOperations
from .deferred import DeferredStore, collect
from .validation import check_commit

#: The pending writes a job's clean-up sweeps, being listed (``DeferredJobHooks.list_left``).
PendingListing = concurrent.futures.Future[list[Any]]


@dataclasses.dataclass(frozen=True)
class StoreOptions:
    """A store's committer options, typed (none here: the generic flow takes none).

    A store's subclass declares each option as a field with its default and checks it
    in ``__post_init__``; :func:`magicfs.committers.accepted_options` reads the fields.
    """

    def view_options(self) -> dict[str, Any]:
        """:class:`~magicfs.filesystems.MagicFileSystem` keywords of the job's task view."""
        return {}

    def adapter_options(self) -> dict[str, Any]:
        """Keywords of the store's adapter factory (:class:`~.deferred.AdapterFactory`)."""
        return {}

    def filesystem_options(self, options: dict[str, Any], threads: int) -> dict[str, Any]:
        """The store filesystem's options when the committer builds it (``fs`` not given):
        the caller's, with the client settings the job needs (S3: timeouts, retries, a
        pool for ``threads``)."""
        return options

    def diagnostics(self) -> dict[str, str]:
        """What ``_SUCCESS``'s diagnostics add for this store."""
        return {}


def option_names(options: type[StoreOptions]) -> list[str]:
    """The committer options a store's options class declares."""
    return [f.name for f in dataclasses.fields(options)]


class LayoutJob(Protocol):
    """The job, as a store's hooks see it (the magic-layout committer implements it)."""

    job_id: str
    dest: str
    bucket: str
    dest_key: str
    threads: int
    progress: bool | None
    stats: IOStatisticsStore
    deferred: DeferredStore

    @property
    def url(self) -> str:
        """The destination's URL, for messages."""

    @property
    def magic_dir(self) -> str:
        """The job's hidden tree (its markers, records and journal)."""

    def attempt_dir(self, attempt_id: str) -> str:
        """The attempt's directory in the job's tree (its markers and records)."""

    def list_records(self, directory: str) -> list[str]:
        """Every record below ``directory``, sorted (one paged, uncached listing)."""

    def read_records(self, paths: list[str]) -> Iterator[bytes]:
        """The bytes of the records at ``paths``, in order, read in parallel."""

    def load_pendings(self, paths: list[str]) -> list[SinglePendingCommit]:
        """The ``.pending`` records at ``paths``, read in parallel."""

    def put(self, path: str, data: bytes) -> None:
        """Save a record."""

    def delete_files(self, paths: list[str]) -> None:
        """Delete records (absent ones are fine)."""

    def display(self, path: str) -> str:
        """``path`` as messages name it."""

    def operations(self) -> CommitOperations:
        """The job's commit operations (publish, abort, roll back)."""

    def checked_task_commits(
        self, attempt_id: str, commits: list[SinglePendingCommit], sources: list[str]
    ) -> IOStatisticsSnapshot:
        """Check an attempt's commits before its pendingset is saved (and stamp them)."""


class DeferredJobHooks:
    """The generic flow's store hooks: any deferred store, with no extra requests.

    A store's subclass overrides what its jobs need; every hook is called by the
    magic-layout committer at the point its docstring names.
    """

    #: Attempt records stay until the job ends (its clean-up finds pending writes by the
    #: keys the markers name); False: dropped at task commit, as Hadoop drops the
    #: attempt directory, and a second commit of the attempt returns its saved pendingset.
    keeps_attempt_records: ClassVar[bool] = True

    def __init__(self, job: LayoutJob, options: StoreOptions):
        self.job = job
        self.options = options

    # -- what the job's writers are told -------------------------------------------------

    def view_options(self) -> dict[str, Any]:
        """The task view's keywords (the options', plus what set-up decided)."""
        return self.options.view_options()

    def diagnostics(self) -> dict[str, str]:
        return self.options.diagnostics()

    # -- job set-up ------------------------------------------------------------------------

    def after_setup(self, resume: bool) -> bool:
        """After the job marker's save: anything the store decides at set-up. Returns
        whether :meth:`view_options` changed (the committer then rebuilds its ``fs``)."""
        return False

    # -- task commit and abort -------------------------------------------------------------

    @property
    def commits_stay_where_set_up(self) -> bool:
        """The attempt's commits stay in the process that set it up (S3's and Azure's
        ``in_memory``): a commit anywhere else could publish none of them, so it is
        refused, naming the option (:mod:`magicfs.committers.magic_layout`, "Who may
        commit an attempt"). False: another process may commit an attempt whose files
        left their records on the store."""
        return False

    async def aattempt_entries(self, prefix: str) -> dict[str, dict[str, str]]:
        """The records named like the attempt (one listing of ``prefix``), with their
        metadata where the store's listing gives it."""
        return {p: {} for p in await collect(self.job.deferred.alist_prefixed(prefix))}

    def gather(
        self, attempt_id: str, files: list[TaskFile], entries: dict[str, dict[str, str]]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """The attempt's commits, checked: this process's, or those its records hold
        (``entries``: the attempt directory's files, as listed). Written once; which
        files the attempt has and where their records are is :meth:`find_records`."""
        known = {f.path: f.commit for f in files if f.commit is not None}
        files_found, records, sources = self.find_records(attempt_id, known, entries)
        commits = [known.get(m) or records[m] for m in files_found]
        named = [
            sources.get(m) or c.filename or self.job.display(pending_path(m))
            for m, c in zip(files_found, commits, strict=True)
        ]
        return commits, self.job.checked_task_commits(attempt_id, commits, named)

    def gather_known(
        self, attempt_id: str, files: list[TaskFile]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """The attempt's commits as this process knows them, checked: for a commit that
        trusts its memory (:mod:`magicfs.committers.memory_commits`), no listing."""
        known = sorted(((f.path, f.commit) for f in files if f.commit), key=lambda k: k[0])
        # Copies: the check stamps what it checks, and a task found touched afterwards is
        # gathered again from the same entries, whose writers' statistics :meth:`gather`
        # still reads (S3: which files put an intent marker).
        commits = [copy.copy(commit) for _, commit in known]
        named = [c.filename or self.job.display(pending_path(p)) for p, c in known]
        return commits, self.job.checked_task_commits(attempt_id, commits, named)

    def find_records(
        self,
        attempt_id: str,
        known: dict[str, SinglePendingCommit],
        entries: dict[str, dict[str, str]],
    ) -> tuple[list[str], dict[str, SinglePendingCommit], dict[str, str]]:
        """The attempt's files (their paths, sorted), the records of those this process
        does not know (``known``), and where each was read when not next to its file.

        Generic: a file is a marker; its record, the ``.pending`` beside it. A marker
        with neither record nor commit here refuses the commit; a record with no marker
        (its file deleted or replaced) has what it staged discarded."""
        listing = sorted(entries)
        markers = [p for p in listing if is_deferred_write(p)]
        pendings = pending_records(listing)
        unaccounted = [m for m in markers if m not in pendings and m not in known]
        if unaccounted:
            raise unaccounted_error(attempt_id, self.job.display(unaccounted[0]), len(unaccounted))
        orphans = sorted(pendings.keys() - set(markers))  # records of deleted or replaced files
        if orphans:
            self.discard_records([pendings[p] for p in orphans])
        unknown = [m for m in markers if m not in known]
        return markers, self.load_beside(unknown, pendings), {}

    def load_beside(
        self, files: list[str], records: Mapping[str, str]
    ) -> dict[str, SinglePendingCommit]:
        """The ``.pending`` records of ``files`` (``records``: those listed, by file;
        :func:`~magicfs.paths.pending_path` for the others), read in parallel, by file."""
        loaded = self.job.load_pendings([records.get(m) or pending_path(m) for m in files])
        return dict(zip(files, loaded, strict=True))

    def discard_records(self, paths: list[str]) -> None:
        """Discard what the ``.pending`` records at ``paths`` stage, and delete them."""
        if self.job.deferred.capabilities.discards_pending:
            self.job.deferred.discard(self.job.load_pendings(paths))
        self.job.delete_files(paths)

    def discard_attempt(
        self, attempt_id: str, files: list[TaskFile], listing: list[str]
    ) -> list[str]:
        """Task abort: discard what the attempt's records name (where the store can).
        Returns the markers to keep for the job's clean-up: where it finds pending writes
        by their markers (``lists_pending``), a marker no record names (its writer was
        killed) is kept; aborting by key now could hit a speculative twin writing the
        same keys."""
        deferred = self.job.deferred
        commits = [f.commit for f in files if f.commit is not None]
        if deferred.capabilities.discards_pending:
            records = [p for p in listing if p.endswith(PENDING_SUFFIX)]
            commits += load_trusted(self.job, records)
            deferred.discard(commits)
        if not deferred.capabilities.lists_pending:
            return []
        named = {f.path for f in files if f.commit is not None}
        named |= {pending_file(c.filename) for c in commits if c.filename}
        return [p for p in listing if is_deferred_write(p) and p not in named]

    # -- job clean-up ------------------------------------------------------------------------

    def list_left(self) -> PendingListing | None:
        """Start listing the pending writes under the destination that the clean-up's
        :meth:`discard_left` sweeps (``None``: the store cannot list them). A committed
        job starts it while its journal is saved as ``committed``: one round trip less."""
        deferred = self.job.deferred
        capabilities = deferred.capabilities
        if not (capabilities.lists_pending and capabilities.discards_pending):
            return None
        return deferred.run_background(collect(deferred.alist_pending(self.job.dest + "/")))

    def discard_left(
        self, keep: Container[str], tree: Iterable[list[str]], listed: PendingListing | None = None
    ) -> list[Any]:
        """Before the tree is deleted: discard the pending writes on the keys the job's
        markers name, but those in ``keep`` (published). ``tree``: the job's tree, a page
        at a time, listed once for this and the deletes after it; ``listed``: what
        :meth:`list_left` started, if the caller did (else it starts here). A store that
        cannot list pending writes leaves them to expire. Returns what was left to other
        jobs, for :meth:`after_tree_deleted`."""
        listing = listed if listed is not None else self.list_left()
        if listing is None:
            return []
        keys = marked_destinations(path for page in tree for path in page)
        left = [w for w in listing.result() if w.path in keys and w.upload_id not in keep]
        aborted = self.job.deferred.run(self.job.deferred.adiscard(left)) if left else 0
        self.job.stats.increment("committer_commits_aborted", aborted)
        return []

    def after_tree_deleted(self, left: list[Any]) -> None:
        """After the tree is deleted: what :meth:`discard_left` left to other jobs."""


def unaccounted_error(attempt_id: str, example: str, count: int, hint: str = "") -> Exception:
    """Task commit's refusal of files opened and never closed, or written around magicfs
    (``example``: one of them, as messages name it)."""
    return CommitFailedError(
        f"task attempt {attempt_id}: {count} files were opened but not closed "
        f"successfully, or written around magicfs, e.g. {example}: they would never be "
        "committed. Write task files with committer.fs (job.fs) and close each before "
        f"committing the task (the attempt has been aborted).{hint}"
    )


def load_trusted(job: LayoutJob, paths: list[str]) -> list[SinglePendingCommit]:
    """The ``.pending`` records at ``paths`` that load and name the file they lie next to
    (an abort skips the others: it must not discard on a forged record's word)."""
    loaded = []
    for path in paths:
        try:
            (commit,) = job.load_pendings([path])
            check_commit(commit, job.bucket, job.dest_key, job.display(path))
        except (FileNotFoundError, InvalidCommitData):
            continue
        commit.filename = commit.filename or path
        loaded.append(commit)
    return loaded


#: How a store's spec makes its hooks for one job.
JobHooksFactory = Callable[[LayoutJob, StoreOptions], DeferredJobHooks]
