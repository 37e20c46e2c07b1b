"""One pendingset committer over the magic layout, on any deferred store.

The flow is written once, against the commit side of the deferred-store contract
(:class:`~magicfs.stores.deferred.DeferredStore`: every record read, write, listing and
delete is the adapter's, on the store's IO loop, retried where the store is):

* ``setup_job``: the job marker (from now on the job accepts writers) and, at once,
  the job's entry in its bucket's job index (:mod:`magicfs.layouts.job_index`: how
  ``magicfs jobs list`` finds the job from any prefix above it; a refused entry is
  logged and fails nothing); ``setup_task``: nothing on the store (below).
* ``commit_task``: one listing of every record of the task's attempts (the attempt's
  aborted marker, its saved pendingset, its directory, and the other attempts'
  records), the attempt's commits gathered (this process's, or its ``.pending``
  records), the pendingset saved as ``tasks/<attempt>.pendingset`` (the
  message names it, and carries it where it is small) and, only where another attempt
  of the task has committed, also as ``<task id>.pendingset`` (the last committed
  attempt wins: :mod:`magicfs.layouts.magic`) — then the job checked still active
  (``in_memory``: a task's first attempt, in its own process, lists nothing unless its
  task was marked touched: :mod:`.memory_commits`). A
  store whose job clean-up finds pending writes by their markers keeps the attempt's
  records until the job ends (its hooks' ``keeps_attempt_records``:
  :class:`~magicfs.stores.job_hooks.DeferredJobHooks`); otherwise they are dropped at
  task commit, as Hadoop drops the attempt directory. A second commit of an attempt
  (after a lost reply) returns its saved pendingset wherever its first commit ran here,
  or its records are gone; elsewhere it gathers the attempt's records again.
* ``commit_job``: the task records listed (or named by the messages, or carried by
  them), the nothing-to-commit refusals, the job commit of :mod:`.pendingsets`,
  ``_SUCCESS``.
* clean-up: the job's tree deleted files first, then task records, the journal last
  (a clean-up cut short never leaves a tree a retried commit reads as fewer tasks), the
  index entry in the same request as the tree's last batch (no round trip of its own;
  the entry lasts as long as anything of the tree); when, the committer's ``cleanup``
  option says (:mod:`magicfs.protocol.cleanup`).

**Requests per task, and why each stays** (issues 28 and 39). Set-up: none. Commit:
one listing by the task's attempts' shared name (the attempt's directory, its
``.aborted`` marker and ``<attempt>.pendingset`` share the prefix
``tasks/attempt_<job>_0000_m_<task>_`` with the task's other attempts, so none needs a
request of its own, and the listing says whether another attempt has committed), the
pendingset PUT (two at once where another attempt has committed), a HEAD of the job
marker. Job commit reads no record a message carries
(:attr:`~magicfs.protocol.attempts.TaskCommitMessage.record_json`). The job checks are
shared: task commits that ask at the same time in one process, and its writers, share
one HEAD (:meth:`MagicLayoutCommitter.job_active`). So a task costs 3 requests (one of
them a share of a HEAD) beyond its files' own (each file's ``.pending`` in file mode).
In ``in_memory`` mode a task's first attempt, committed in its own process, lists
nothing: its pendingset PUT, then a share of one listing that is both the job check and
the question "did another process or attempt touch this task?" (2 requests;
:mod:`.memory_commits`, which says what marks a task touched and why the order is
sound).

**The listing starts early** where attempt records stay until the job ends (S3): while
the attempt's files finish closing, one round trip less after the last upload. It waits
until each file this process opened has begun (its marker saved, where it puts one), so
it holds them. It may lack their ``.pending`` records, which is harmless: this process
holds their commits. Other processes' files were closed before the commit began, as
every task commit requires. Where a commit deletes what it listed (Azure), the listing
follows the closes.

* **Who may commit an attempt.** An attempt that was aborted — in any process — or
  never set up must not commit (it would save a record of whatever its directory holds,
  or an empty one, and a job without messages would publish that as the task). Earlier
  versions wrote a ``.started`` marker at set-up for this (one PUT and one HEAD per
  task); now the store is asked only where a process's own memory cannot answer. The
  process that set the attempt up knows it did, and whether it aborted or committed
  it since (:data:`~magicfs.task_files.TASK_FILES`): its commit needs nothing more. A
  commit in another process (file mode lets one commit an attempt whose writer died)
  needs the attempt's own records on the store as the proof it was set up: its files'
  ``.pending`` or markers, or its saved pendingset; with none it is refused (and
  aborts nothing). Where the attempt's commits stay in the process that set it up
  (``in_memory``: the store's hooks say so, ``commits_stay_where_set_up``), a commit
  anywhere else could publish none of its files and is refused. An abort in a process
  that did not set the attempt up leaves ``<attempt>.aborted``, which every later
  commit's listing finds: the rare cross-process abort pays the request, not every
  set-up. An attempt aborted that way stays aborted (engines never set up an attempt
  id twice). A set-up no longer refuses an ended job; the attempt's first file or its
  commit does (the writers' and the commit's job checks). A ``.started`` marker that
  an earlier version left still counts as the proof.
* The attempt's own pendingset (``tasks/<attempt>.pendingset``) is what the task commit
  message names, so a job commit with messages publishes exactly the attempt the caller
  chose among speculative ones. The task's (``<task id>.pendingset``, Hadoop's layout)
  is needed only once two attempts of a task have committed: a job commit without
  messages then takes it, and the store's own last-writer-wins order makes "the last
  committed attempt wins" exact (HADOOP-17258). A task that committed once is its
  attempt's record (one PUT, not two).
* The job check after saving is the zombie handshake: a task commit either saved its
  record before the job's end (and is listed or named) or finds the marker gone and
  withdraws. It must follow the save, so it cannot share the listing before it.

**Configurations, not subclasses.** ``magic`` (S3), ``block-list`` (Azure) and
``magic-layout`` are one class, :class:`MagicLayoutCommitter`, configured by a store's
spec (:mod:`magicfs.stores.registry`): its typed committer options and its hooks
(:mod:`magicfs.stores.job_hooks`; S3's in :mod:`magicfs.stores.s3.job_hooks`, Azure's in
:mod:`magicfs.stores.azure.job_hooks`), which this class passes through unread. A
store's own configuration is named by its spec's ``committer``; ``magic-layout`` is the
generic flow with the generic hooks on any deferred store.
:func:`MagicCommitter` and :func:`BlockListCommitter` are the two named ones.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import fsspec

from ..errors import InvalidCommitData, NothingToCommitError
from ..filesystems import MagicFileSystem
from ..filesystems.magic import MagicOptions
from ..filesystems.originals import store_of
from ..job_context import JobContext, job_context, job_context_of
from ..layouts import job_index
from ..layouts.magic import MagicJobLayout
from ..names import (
    ABORTED_SUFFIX,
    JOURNAL_FILE,
    MAGIC_JOB_PREFIX,
    PENDINGSET_SUFFIX,
    STARTED_SUFFIX,
    UNMARKED_FILE,
)
from ..paths import marked_file
from ..protocol.attempts import Messages, carried_records
from ..protocol.committer import Loaded, OutputCommitter, Published, TaskAttempt, TaskCommitMessage
from ..protocol.hooks import CommitterHooks, TaskCommit
from ..protocol.journal import JournalKeeper
from ..protocol.tasks import TaskLifecycle, not_started_error, task_committed
from ..records import (
    PendingSet,
)
from ..records.job_record import CommittedFile
from ..stores.binding import DeferredStoreSpec
from ..stores.deferred import DeferredStore, collect
from ..stores.job_check import job_still_active
from ..stores.job_hooks import DeferredJobHooks, PendingListing, StoreOptions, option_names
from ..stores.registry import committed_by, deferred_store_for
from ..stores.spool import ListedOnce, OrderedPaths
from ..stores.validation import check_commit
from ..task_files import TASK_FILES, TaskFile
from .attempt_records import (
    drop_attempt_records,
    leave_aborted_marker,
    new_pendingset,
    save_task_record,
)
from .layout_job import DELETE_BATCH, MagicLayoutJob
from .memory_commits import (
    ajob_signals,
    commit_from_memory,
    touches_task,
    trusting_job,
    trusts_memory,
)
from .pendingsets import PendingsetRecords, kept_uploads

log = logging.getLogger("magicfs.committer.magic_layout")

#: Why a commit of an attempt whose commits stay where it was set up is refused elsewhere.
NOT_HERE = (
    " here (its files' commits stay in the process that set the attempt up: with "
    "in_memory=True a task commits in that process, after its setup_task there)"
)


class MagicLayoutFlow(CommitterHooks):
    """The protocol's hooks of :class:`MagicLayoutCommitter` (its ``flow``), built from that
    committer's keywords (its docstring says what they are)."""

    name = "magic-layout"

    def __init__(self, dest: str, *, configuration: str = "magic-layout", **options: Any):
        spec = _deferred_spec(dest, options.get("fs"), configuration)
        own = spec.committer == configuration
        options_class = (spec.options if own else None) or StoreOptions
        store_keywords = {n: options.pop(n) for n in option_names(options_class) if n in options}
        self.name = configuration
        #: The store's committer options, typed and checked (passed through unread).
        self.store_config = options_class(**store_keywords)
        super().__init__(dest, **options)
        #: The job's state in this process, shared with its writers (:mod:`magicfs.job_context`).
        self.context = job_context(self.job_id, self.dest)
        self.deferred = spec.adapter(
            self.store_fs,
            self.job_id,
            self._scratch_dir,
            context=self.context,
            **self.store_config.adapter_options(),
        )
        self._opt_in = {spec.opt_in: True} if spec.opt_in else {}
        self.layout = MagicJobLayout(self.dest, self.job_id, self.options.app_attempt)
        self.bucket, self.dest_key = self.deferred.split(self.dest)
        #: The job's entry in its bucket's job index (:mod:`magicfs.layouts.job_index`).
        self.index_entry = job_index.entry_path(self.bucket, self.dest_key, self.job_id)
        #: The job as the store's hooks see it (:mod:`.layout_job`): never the committer.
        self.job = MagicLayoutJob(self.options, self.deferred, self.layout, self.stats)
        self.records = PendingsetRecords(
            self, self.deferred, self.job.read_record, self.job.read_records
        )
        self.job.records = self.records
        make_hooks = (spec.job_hooks if own else None) or DeferredJobHooks
        #: What the store adds to the flow (:mod:`magicfs.stores.job_hooks`).
        self.store_hooks = make_hooks(self.job, self.store_config)
        self._fs = self._task_view()

    def _store_filesystem(
        self, protocol: str, options: dict[str, Any], threads: int
    ) -> fsspec.AbstractFileSystem:
        options = self.store_config.filesystem_options(options, threads)
        return super()._store_filesystem(protocol, options, threads)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.job.stats = self.stats  # this process's, the store hooks' too

    def _task_view(self) -> MagicFileSystem:
        """The task view; writes to the destination outside task paths are refused."""
        view = {**self._opt_in, **self.store_hooks.view_options()}
        return MagicFileSystem(fs=self.store_fs, job_root=self.dest, **view)

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    def _scratch_dir(self) -> str:
        """Where store probes may write a throw-away record: the job's hidden tree."""
        return self.layout.magic_dir

    @property
    def storage_options(self) -> dict[str, Any]:
        # A URL-based writer builds its own view: it needs what differs from the defaults.
        view = {**self._opt_in, **self.store_hooks.view_options()}
        changed = {k: v for k, v in view.items() if v != MagicFileSystem.default(k)}
        magic = MagicOptions(job_root=self.dest, **changed)
        return {"magic": magic, self.options.protocol: dict(self.options.store_options)}

    def work_url_for(self, attempt_id: str) -> str:
        url: str = self.store_fs.unstrip_protocol(self.work_path_for(attempt_id))
        return "magic::" + url

    def work_path_for(self, attempt_id: str) -> str:
        return self.layout.work_path(attempt_id)

    # -- the job as the store's hooks see it (magicfs.committers.layout_job) -------------

    def display(self, path: str) -> str:
        return self.job.display(path)

    def put(self, path: str, data: bytes) -> None:
        self.job.put(path, data)

    def delete_files(self, paths: list[str]) -> None:
        self.job.delete_files(paths)

    def _saved(self, path: str) -> PendingSet | None:
        """The pendingset saved at ``path``; ``None`` if absent or unreadable."""
        data = self.deferred.run(self.deferred.aread_record(path, PendingSet.MAX_BYTES))
        try:
            return None if data is None else PendingSet.from_json(data, source=self.display(path))
        except InvalidCommitData:
            return None

    # -- job ------------------------------------------------------------------------------

    def prepare_job(self, resume: bool) -> None:
        """The job marker; with it, at once (one round trip), the job's index entry (the
        same JSON). A resumed job has both already. Then what the store decides at
        set-up (S3: whether the job is unmarked), which may change the task view."""
        if not resume:
            document = self._job_marker_document()
            saving = self.deferred.awrite_record(self.index_entry, document)
            entry = self.deferred.run_background(saving)
            try:
                self.put(self.layout.job_marker, document)
            finally:
                concurrent.futures.wait([entry])
            if (error := entry.exception()) is not None:
                job_index.index_failed("saved", self.index_entry, self.job_id, self.url, error)
        if self.store_hooks.after_setup(resume):
            self._fs = self._task_view()

    def job_active(self) -> bool:
        """Whether the job marker exists, by a shared check started after this call
        (:func:`shared_check`)."""
        return self.deferred.run(shared_check(self.deferred, self.layout.job_marker, self.context))

    def job_signals(self) -> frozenset[str] | None:
        """The job check of a commit that trusts its memory: ``None`` once the job has
        ended, else the tasks marked touched (:func:`.memory_commits.ajob_signals`)."""
        return self.deferred.run(ajob_signals(self.deferred, self.layout, self.context))

    def end_job(self, check: bool = True) -> bool:
        """Delete the job marker: from now on writers and task commits of this job fail."""
        was_active = self.job_active() if check else False
        self.deferred.run(self.deferred.adelete_record(self.layout.job_marker))
        return was_active

    def journal_keeper(self) -> JournalKeeper:
        return JournalKeeper(self.deferred, self.layout.magic_dir, self.dest, self.job_id)

    # -- tasks ----------------------------------------------------------------------------

    def abort_task(self, task: TaskAttempt) -> None:
        """Abort the attempt (as the committer's ``abort_task``): a task commit that
        fails aborts its attempt."""
        TaskLifecycle(self).abort_task(task)

    def prepare_task(self, task: TaskAttempt) -> None:
        """Nothing on the store: this process's memory knows the attempt was set up here
        (module docstring, "Who may commit an attempt")."""

    def begin_task_commit(self, commit: TaskCommit) -> None:
        """Where attempt records stay until the job ends, the attempt's listing starts
        while its files finish closing (module docstring), once each file this process
        opened has begun."""
        if self.store_hooks.keeps_attempt_records and not trusts_memory(self, commit.task):
            TASK_FILES.begun(self.job_id, commit.task.attempt_id)
            commit.early = self.deferred.run_background(self._aattempt_entries(commit.task, True))

    async def _aattempt_entries(
        self, task: TaskAttempt, commit: bool = False
    ) -> dict[str, dict[str, str]]:
        """One listing of every attempt of the task: directories, markers and records
        (for a ``commit`` of a later attempt, after its task's touched marker:
        :mod:`.memory_commits`)."""
        if commit and touches_task(self, task):
            await self.deferred.awrite_record(self.layout.touched_marker(task.attempt_id), b"")
        prefix = self.layout.task_attempts_prefix(task.attempt_id)
        return await self.store_hooks.aattempt_entries(prefix)

    def commit_task_files(self, commit: TaskCommit, files: list[TaskFile]) -> TaskCommitMessage:
        if trusts_memory(self, commit.task):
            trusted = commit_from_memory(self, commit, files)
            if trusted is not None:
                return trusted
        task = commit.task
        attempt_record = self.layout.attempt_pendingset(task.attempt_id)
        keeps_records = self.store_hooks.keeps_attempt_records
        finished = TASK_FILES.finished(self.job_id, task.attempt_id)
        committed_here = finished == "committed"
        here = committed_here or TASK_FILES.set_up_here(self.job_id, task.attempt_id)
        local = self.store_hooks.commits_stay_where_set_up
        if finished == "aborted" or (local and not here):
            # Refused, not aborted (again): nothing of it is here to abort, and where it was
            # set up it may still commit.
            raise not_started_error(self, task, NOT_HERE if local and not finished else "")
        try:
            listing = commit.early or self.deferred.run_background(
                self._aattempt_entries(task, True)
            )
            found = self.layout.attempt_records(task.attempt_id, listing.result())
        except BaseException:
            self.abort_task(task)
            raise
        if not (here or found.started or found.saved or found.files):
            # Elsewhere its records are the proof it was set up; with none, there is
            # nothing to abort either (an abort would leave a marker refusing its own
            # process's commit).
            raise not_started_error(self, task)
        try:
            if found.aborted:
                raise not_started_error(self, task)
            saved = None
            if found.saved and (committed_here or not keeps_records):
                saved = self._saved(attempt_record)
            if saved is None and committed_here and local:
                raise not_started_error(self, task)  # its commits were in its files' entries
            if saved is None:
                commits, stats = self.store_hooks.gather(task.attempt_id, files, found.files)
        except BaseException:
            self.abort_task(task)
            raise
        if saved is not None:  # committed before (here, or its files' records are gone)
            size = saved.total_bytes
            return task_committed(
                self, task, attempt_record, len(saved.commits), size, commit.start, "kept"
            )
        pendingset = new_pendingset(self, task, commits, stats)
        data = pendingset.to_bytes()
        save_task_record(self, task, pendingset, data, task_record=found.others_committed)
        if not keeps_records:
            drop_attempt_records(self, task, found.stored)
        size = pendingset.total_bytes
        return task_committed(
            self, task, attempt_record, len(commits), size, commit.start, "committed", data
        )

    def abort_task_files(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Discard what the attempt's records name (the store's hooks say how and which
        markers to keep for the job's clean-up) and delete the attempt's records."""
        if not TASK_FILES.ended_where_set_up(self.job_id, task.attempt_id):
            leave_aborted_marker(self, task, touched=trusting_job(self))
        entries = self.deferred.run(self._aattempt_entries(task))
        found = self.layout.attempt_records(task.attempt_id, entries)
        listing = sorted(found.files)
        if found.saved:  # an abort after its commit
            discard_committed(self, self._saved(self.layout.attempt_pendingset(task.attempt_id)))
        kept = set(self.store_hooks.discard_attempt(task.attempt_id, files, listing))
        records = [p for p in found.stored if (marked_file(p) or p) not in kept]
        records += [
            self.layout.attempt_pendingset(task.attempt_id),
            self.layout.started_marker(task.attempt_id),
        ]
        task_record = self.layout.pendingset(task.task_id)
        if self.records.recorded_attempt(task_record) == task.attempt_id:
            records.append(task_record)
        self.delete_files(records)
        log.info(
            "task %s: aborted; %d markers kept for the job's sweep", task.attempt_id, len(kept)
        )

    # -- job commit -----------------------------------------------------------------------

    def records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if messages is not None:
            return self._check_messages(messages, self.layout.tasks_dir)
        # The job has ended before these listings: a task commit either saved its record
        # before (and is listed) or finds the job gone and withdraws. Paged and uncached;
        # the tasks' records and the attempts' at once.
        layout = self.layout
        listings = [
            self.deferred.run_background(collect(self.deferred.alist_records(d, False)))
            for d in (layout.job_attempt_dir, layout.tasks_dir)
        ]
        task_records, attempt_records = (
            [p for p in listing.result() if p.endswith(PENDINGSET_SUFFIX)] for listing in listings
        )
        records = layout.chosen_records(task_records, attempt_records)
        if not was_active and (not records or self.success_names_this_job()):
            raise self._nothing_to_commit(
                bool(records) or bool(self.job.list_records(self.layout.magic_dir))
            )
        return records

    def _nothing_to_commit(self, tree_left: bool) -> NothingToCommitError:
        if self.success_names_this_job():
            state = "it has already been committed (its _SUCCESS names it)"
        else:
            state = "it was never set up, or has already been committed or aborted"
        left = (
            f"; its tree {self.store_fs.unstrip_protocol(self.layout.magic_dir)} remains: "
            f"cleanup_job() deletes it (magicfs jobs cleanup --job {self.job_id} {self.url})"
            if tree_left
            else ""
        )
        return NothingToCommitError(
            f"job {self.job_id}: nothing to commit at {self.url}: {state}{left}"
        )

    def load_records(self, records: list[str], messages: Messages | None = None) -> Loaded:
        return self.records.load(records, carried_records(messages))

    def validate_records(self, loaded: Loaded) -> None:
        self.records.validate(loaded)

    def publish(self, loaded: Loaded) -> Published:
        return self.records.publish(loaded)

    def unpublish(self, loaded: Loaded) -> int:
        return self.records.unpublish(loaded)

    def committed_files(self, loaded: Loaded) -> Iterator[CommittedFile] | None:
        return self.records.committed_files(loaded)

    def save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        success = self.records.success_data(
            loaded,
            published,
            start,
            rows,
            f"magicfs {self.name} committer for job {self.job_id}",
            **self.store_hooks.diagnostics(),
        )
        if self.options.success_file:
            self.put(self.options.success_path, success.to_bytes())
        return success.filenames

    # -- clean-up -------------------------------------------------------------------------

    def list_for_clean_up(self) -> TreeListing:
        """The tree's listing, on a thread of its own, and the store's listing of what
        its sweep may discard (S3: the uploads), both started now."""
        return TreeListing(
            ListedOnce(self.job.tree_pages()).read_ahead(), self.store_hooks.list_left()
        )

    def clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """What the store discards first (its hooks), the job's tree (journal last, the
        index entry with the last batch), then what the store does once the tree is gone.

        The tree is listed once for both (:class:`~magicfs.stores.spool.ListedOnce`),
        here or, after a commit, already (``published.listed``: :meth:`list_for_clean_up`).
        ``published`` is given only for a committed job, whose journal says so: its
        files and task records then go in the same batches (:func:`delete_tree`)."""
        with self.stats.track("committer_cleanup"):
            left = sweep_and_delete(self, published)
            self.store_fs.invalidate_cache(self.layout.magic_dir)
            self.store_hooks.after_tree_deleted(left)


class MagicLayoutCommitter(OutputCommitter):
    """Task output as deferred writes on the final names, committed through pendingsets.

    ``configuration`` (``committer_for``'s name): a store's own (``"magic"`` on S3,
    ``"block-list"`` on Azure: its spec's ``committer``), with the store's typed options
    and hooks; or ``"magic-layout"``, the generic flow on any deferred store. The
    store's options arrive as keywords among the others and are handed to its options
    class (:class:`~magicfs.stores.job_hooks.StoreOptions`), unread here.
    """

    name = "magic-layout"
    flow_class = MagicLayoutFlow
    flow: MagicLayoutFlow


def MagicCommitter(dest: str, **options: Any) -> MagicLayoutCommitter:
    """Hadoop's S3A magic committer for fsspec: zero-rename commit on S3.

    The magic-layout committer in its S3 configuration (``committer_for(...,
    committer="magic")``): options beyond :class:`OutputCommitter`'s are S3's
    (:class:`~magicfs.stores.s3.job_hooks.S3CommitOptions`: ``in_memory``, ``checksum``,
    ``intent_markers``, ``retry_policy``, ``max_request_rate``); what S3 adds to the flow
    is :mod:`magicfs.stores.s3.job_hooks`.
    """
    return MagicLayoutCommitter(dest, configuration="magic", **options)


def BlockListCommitter(dest: str, **options: Any) -> MagicLayoutCommitter:
    """Zero-copy commit on Azure Blob (adlfs ``abfs://``/``az://``) through block lists.

    The magic-layout committer in its Azure configuration (``committer_for(...,
    committer="block-list")``): options beyond :class:`OutputCommitter`'s are Azure's
    (:class:`~magicfs.stores.azure.job_hooks.BlockListCommitOptions`: ``block_size``,
    ``blocks_in_flight``, ``in_memory``); what Azure adds is
    :mod:`magicfs.stores.azure.job_hooks`.
    """
    return MagicLayoutCommitter(dest, configuration="block-list", **options)


def _deferred_spec(dest: str, fs: Any, configuration: str) -> DeferredStoreSpec:
    """The deferred store of ``dest`` (or ``fs``), refused unless ``configuration``
    commits it (a store's own, or ``magic-layout``: any)."""
    spec = deferred_store_for(store_of(dest, fs))
    if spec is None or (configuration != "magic-layout" and spec.committer != configuration):
        stores = ", ".join(s.name for s in committed_by(configuration)) or "a deferred store"
        raise ValueError(
            f"{dest}: the {configuration} committer needs a destination on {stores}; "
            f"committer_for({dest!r}) picks the store's own committer"
        )
    if configuration != spec.committer and not spec.generic_hooks_commit:
        raise ValueError(
            f"{dest}: committer={configuration!r} cannot commit {spec.name} jobs: its "
            f"writers' records are read by the {spec.committer} committer only, so a task "
            f"committed in another process would commit without its files. Use "
            f"committer={spec.committer!r} (committer_for({dest!r}) picks it)"
        )
    return spec


def sweep_and_delete(job: MagicLayoutFlow, published: Published | None) -> list[Any]:
    """The store's sweep of what the job left, then the tree's deletes in order, over one
    listing of the tree (``published.listed``, if the commit started it); returns what
    the sweep left to other jobs."""
    listed = published.listed if published is not None else None
    if not isinstance(listed, TreeListing):
        listed = TreeListing(ListedOnce(job.job.tree_pages()), None)
    try:
        left = job.store_hooks.discard_left(kept_uploads(published), listed.tree, listed.left)
        last = functools.partial(delete_last_batch, job.delete_files, job.index_entry, job)
        delete_tree(
            listed.tree,
            job.delete_files,
            last,
            committed=published is not None,
            at_once=job.deferred.capabilities.deletes_batch_at_once,
        )
        return left
    finally:
        listed.discard()


@dataclasses.dataclass
class TreeListing:
    """A job's tree as its clean-up reads it (twice, listed once) and the store's own
    listing for its sweep (``None``: the sweep starts it)."""

    tree: ListedOnce
    left: PendingListing | None

    def discard(self) -> None:
        self.tree.discard()


def delete_last_batch(
    delete: Callable[[list[str]], None], entry: str, job: CommitterHooks, paths: list[str]
) -> None:
    """Delete a job tree's last batch (the journal, if any) and, in the same request
    where the store deletes in batches, the job's index ``entry``: it goes with the last
    of the tree, not before. A refused entry (permissions that stop at the destination)
    fails nothing: the batch is sent again without it."""
    try:
        delete([*paths, entry])
    except Exception as error:
        if paths:
            delete(paths)  # the tree's own failure, if that is what it was
        job_index.index_failed("deleted", entry, job.job_id, job.url, error)


def discard_committed(job: MagicLayoutFlow, saved: PendingSet | None) -> None:
    """An attempt aborted after its commit: discard what its pendingset names, where the
    store discards pending writes. Its files' ``.pending`` may be gone or never saved (a
    file whose close its commit waited for: :meth:`TaskFiles.awaited
    <magicfs.task_files.TaskFiles.awaited>`), and an in-memory attempt has none. Only
    this job's records within its destination count: an abort must not discard on a
    forged record's word."""
    if saved is None or saved.job_id != job.job_id:
        return
    if not job.deferred.capabilities.discards_pending:
        return
    commits = []
    for commit in saved.commits:
        try:
            check_commit(commit, job.bucket, job.dest_key, commit.uri)
        except InvalidCommitData:
            continue
        commits.append(commit)
    job.deferred.discard(commits)


async def shared_check(
    deferred: DeferredStore, marker: str, context: JobContext | None = None
) -> bool:
    """Whether ``marker`` exists, by a check that starts after this call, shared
    (:mod:`magicfs.stores.job_check`) with the task commits and the
    writers of this process that ask meanwhile: tasks committing at once send one HEAD,
    not one each. Any check that starts after the caller's last write answers it (the
    zombie handshake needs no more)."""

    async def head() -> bool:
        return await deferred.arecord_info(marker) is not None

    context = context or job_context_of(marker)  # (shared with the job's writers)
    return await job_still_active(*deferred.check_key(marker), head, context=context)


def delete_tree(
    pages: Iterable[list[str]],
    delete: Callable[[list[str]], None],
    delete_last: Callable[[list[str]], None] | None = None,
    committed: bool = False,
    at_once: bool = False,
) -> None:
    """Delete a job's tree, listed in ``pages``: files and markers first, then task
    records, then the job's mode and the journal's pages, the journal last — a clean-up
    cut short must not leave a tree that a retried commit would read as a job with fewer
    tasks, nor one whose retried sweep forgot the job's mode. The later ranks wait on
    local disk (:class:`~magicfs.stores.spool.OrderedPaths`).

    A ``committed`` job's journal says so until it goes, last: a retried commit or
    clean-up reads only the journal, never the task records, so those go with the files,
    and the job's mode and the journal's pages go in the journal's own request (two
    batches less in all). The mode and the journal then go at once: a clean-up retried after the
    files' batch still finds both. Where the store deletes a batch ``at_once`` (one
    request, or in order: ``DeferredCapabilities.deletes_batch_at_once``) the journal's
    request also takes the last files that fit in it: a small job's tree goes in one
    request, which a crash leaves whole or gone; one that fails on some keys after
    deleting the journal leaves the rest to ``cleanup_job()``, which a retried commit
    names. (A request that deleted the mode and failed on the journal would have a
    retried sweep read the job as marked; the first sweep had run to its end before any
    delete, so all that could stay is an upload it had left to another job's sweep.)

    ``delete_last`` (default ``delete``) deletes the last batch, called exactly once even
    when the tree is empty (with ``[]``): the clean-up adds the job's index entry to it.
    Each batch is sent when the next one is known, so the last is known as the last.

    A tree that goes in that one request takes its directories with it, deepest first,
    after its files: on stores without directories (AWS, RGW, moto) those keys name
    nothing and cost nothing; SeaweedFS keeps a directory its last object left, and an
    empty ``__magic_job-<id>/`` would read to the next job's set-up as another job's tree
    (:func:`tree_directories`). A larger tree's directories stay there."""
    records = OrderedPaths()
    held: list[str] = []
    sent = False

    def send(batch: list[str], join: bool = False) -> None:
        nonlocal held, sent
        if join and len(held) + len(batch) <= DELETE_BATCH:
            held = [*held, *batch]
        elif batch:
            if held:
                delete(held)
                sent = True
            held = batch

    try:
        for page in pages:
            ranked = [_deletion_order(p, committed) for p in page]
            records.add(r for r in ranked if r[0] > 0)
            send([p for rank, p in ranked if rank == 0])
        for batch in records.batches(DELETE_BATCH, shared_from=2 if committed else None):
            send(list(batch), join=committed and at_once)
        if committed and at_once and not sent:
            directories = tree_directories(held)
            if len(held) + len(directories) < DELETE_BATCH:  # (and the index entry)
                held = [*held, *directories]
        if delete_last is not None:
            delete_last(held)
        elif held:
            delete(held)
    finally:
        records.discard()


def tree_directories(paths: Iterable[str]) -> list[str]:
    """The directories of a job's tree that ``paths`` (in it) lie in (``dir/``; the
    stores' keys drop the ``/``, which SeaweedFS reads the same), from the magic
    directory down, deepest first: where a store keeps directories, what is left of
    the tree once its files are gone (:func:`delete_tree`)."""
    found: set[str] = set()
    for path in paths:
        start = path.find("/" + MAGIC_JOB_PREFIX)
        if start < 0:
            continue
        end = path.find("/", start + 1)
        while end >= 0:
            found.add(path[: end + 1])
            end = path.find("/", end + 1)
    return sorted(found, key=lambda d: (-d.count("/"), d))


def _deletion_order(path: str, committed: bool = False) -> tuple[int, str]:
    """Files and markers first, then task records (with the files once ``committed``),
    then the job's mode and the journal's pages (with the journal once ``committed``:
    :func:`delete_tree`), the journal last."""
    name = path.rsplit("/", 1)[-1]
    if name == JOURNAL_FILE:
        return (3, path)
    if name.startswith("_magicfs_commit.") or name == UNMARKED_FILE:  # the job's mode, kept
        return (2, path)
    if name.endswith((PENDINGSET_SUFFIX, STARTED_SUFFIX, ABORTED_SUFFIX)) and not committed:
        return (1, path)
    return (0, path)
