"""One pendingset committer over the magic layout, on any deferred store.

The flow is written once, against the commit side of the deferred-store contract
(:class:`~magicfs.stores.deferred.DeferredStore`: every record read, write, listing and
delete is the adapter's, on the store's IO loop, retried where the store is):

* ``setup_job``: the job marker (from now on the job accepts writers) and, at once,
  the job's entry in its bucket's job index (:mod:`magicfs.layouts.job_index`: how
  ``magicfs jobs list`` finds the job from any prefix above it; a refused entry is
  logged and fails nothing); ``setup_task``: the attempt's started marker.
* ``commit_task``: one listing of every record named like the attempt (its started
  marker, its saved pendingset, its directory), the attempt's commits gathered (this
  process's, or its ``.pending`` records), the pendingset saved twice — as
  ``tasks/<attempt>.pendingset`` (the message names it) and ``<task id>.pendingset`` (the
  last committed attempt wins) — then the job checked still active. A store whose job
  clean-up finds pending writes by their markers keeps the attempt's records until the
  job ends (:attr:`MagicLayoutCommitter.keeps_attempt_records`); otherwise they are
  dropped at task commit, as Hadoop drops the attempt directory, and a second commit of
  the attempt returns its saved pendingset.
* ``commit_job``: the task records listed (or named by the messages), the nothing-to-commit
  refusals, the job commit of :mod:`.pendingsets`, ``_SUCCESS``.
* clean-up: the job's tree deleted files first, then task records, the journal last
  (a clean-up cut short never leaves a tree a retried commit reads as fewer tasks), the
  index entry in the same request as the tree's last batch (no round trip of its own;
  the entry lasts as long as anything of the tree); when, the committer's ``cleanup``
  option says (:mod:`magicfs.protocol.cleanup`).

**Requests per task, and why each stays** (issue 28). Set-up: a HEAD of the job marker
and the started marker's PUT; commit: one listing by the attempt's name (its directory,
``<attempt>.started`` and ``<attempt>.pendingset`` share the prefix ``tasks/<attempt>``,
so the started marker needs no request of its own, nor a pendingset that was never
saved; entries of attempts whose ids merely start alike are left out), the two
pendingset PUTs (at once), a HEAD of the job marker. The job checks are shared: task
set-ups and commits that ask at the same time in one process, and its writers, share one
HEAD (:meth:`MagicLayoutCommitter.job_active`).

**The listing starts early** where attempt records stay until the job ends (S3): while
the attempt's files finish closing, one round trip less after the last upload. It waits
until each file this process opened has begun (its marker saved, where it puts one), so
it holds them. It may lack their ``.pending`` records, which is harmless: this process
holds their commits. Other processes' files were closed before the commit began, as
every task commit requires. Where a commit deletes what it listed (Azure), the listing
follows the closes.

* The started marker is what refuses a commit of an attempt that was aborted — in any
  process — or never set up (it would save a record of whatever its directory holds, or
  an empty one, and the job would publish that as the task). The job marker cannot carry
  it (it is per job), nor the attempt's pendingset (it does not exist before the
  commit), nor this process's memory (set-up, abort and commit may run in different
  processes). Hadoop's magic committer pays the same (its task set-up makes the attempt
  directory).
* Two pendingsets: the attempt's own (``tasks/<attempt>.pendingset``) is what the task
  commit message names, so a job commit with messages publishes exactly the attempt the
  caller chose among speculative ones; the task's (``<task id>.pendingset``) is what a
  job commit without messages lists, where the store's own last-writer-wins order makes
  "the last committed attempt wins" exact (HADOOP-17258) — one name cannot serve both,
  and the task's is Hadoop's layout. Saved at once: one round trip.
* The job check after saving is the zombie handshake: a task commit either saved its
  record before the job's end (and is listed or named) or finds the marker gone and
  withdraws. It must follow the save, so it cannot share the listing before it.

:class:`~.magic.MagicCommitter` (S3) and :class:`~.blocks.BlockListCommitter` (Azure) are
configurations of it; any store in :mod:`magicfs.stores.registry` whose committer is one
of them gets this flow.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import CommitFailedError, InvalidCommitData, JobNotActiveError, NothingToCommitError
from ..filesystems import MagicFileSystem
from ..filesystems.magic import MagicOptions
from ..layouts import job_index
from ..layouts.magic import MagicJobLayout
from ..names import (
    JOURNAL_FILE,
    PENDING_SUFFIX,
    PENDINGSET_SUFFIX,
    STARTED_SUFFIX,
    UNMARKED_FILE,
)
from ..parallel import loop_map
from ..paths import final_destination, is_deferred_write
from ..protocol.attempts import Messages
from ..protocol.committer import (
    Loaded,
    OutputCommitter,
    Published,
    TaskAttempt,
    TaskCommitMessage,
)
from ..protocol.journal import JournalKeeper
from ..records import (
    TASK_ATTEMPT_ID_KEY,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    declared_checksums,
)
from ..statistics import IOStatisticsStore
from ..stores.deferred import DeferredStore, DeferredStoreSpec, collect, take
from ..stores.job_check import job_still_active
from ..stores.registry import committed_by, deferred_store_for
from ..stores.spool import OrderedPaths
from ..stores.validation import check_commit
from ..task_files import TASK_FILES, TaskFile
from .pendingsets import PendingsetCommitter

log = logging.getLogger("magicfs.committer.magic_layout")

#: Records deleted in one request at clean-up (S3's DeleteObjects limit).
DELETE_BATCH = 1000


class MagicLayoutCommitter(PendingsetCommitter):
    """Task output as deferred writes on the final names, committed through pendingsets.

    As itself (``committer_for(..., committer="magic-layout")``) it commits any store of
    the registry; a configuration sets :attr:`name` (its ``committer_for`` name, which
    the registry's stores name as theirs) and may override the hooks marked as such.
    """

    name = "magic-layout"

    deferred: DeferredStore
    #: Attempt records stay until the job ends (S3: its clean-up sweeps uploads by the
    #: keys the markers name); False: dropped at task commit.
    keeps_attempt_records = True

    def __init__(self, dest: str, **options: Any):
        super().__init__(dest, **options)
        spec = deferred_store_for(self.store_fs)
        if spec is None or not self._commits(spec):
            stores = ", ".join(s.name for s in committed_by(self.name)) or "a deferred store"
            raise ValueError(
                f"{dest}: the {self.name} committer needs a destination on {stores}; "
                f"committer_for({dest!r}) picks the store's own committer"
            )
        if not hasattr(self, "deferred"):  # a configuration may have made its own
            self.deferred = spec.adapter(
                self.store_fs, self.job_id, self._scratch_dir, **self._adapter_options()
            )
        self.layout = MagicJobLayout(self.dest, self.job_id, self.app_attempt)
        self._listings: dict[str, concurrent.futures.Future[dict[str, dict[str, str]]]] = {}
        self.bucket, self.dest_key = self.deferred.split(self.dest)
        #: The job's entry in its bucket's job index (:mod:`magicfs.layouts.job_index`).
        self.index_entry = job_index.entry_path(self.bucket, self.dest_key, self.job_id)
        # Writes to the destination outside task paths are refused (job_root).
        self._fs = MagicFileSystem(fs=self.store_fs, job_root=self.dest, **self._view_options(spec))

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    def _view_options(self, spec: DeferredStoreSpec) -> dict[str, Any]:
        """:class:`~magicfs.filesystems.MagicFileSystem` options of the task view (hook)."""
        return {spec.opt_in: True} if spec.opt_in else {}

    def _commits(self, spec: DeferredStoreSpec) -> bool:
        """Does this committer commit ``spec``'s jobs? Itself: any; a configuration: its own."""
        return type(self) is MagicLayoutCommitter or spec.committer == self.name

    def _adapter_options(self) -> dict[str, Any]:
        """Options for the store's adapter factory (hook)."""
        return {}

    def _scratch_dir(self) -> str:
        """Where store probes may write a throw-away record: the job's hidden tree."""
        return self.layout.magic_dir

    def _magic_options(self) -> MagicOptions:
        """The ``"magic"`` storage options of task URLs (hook)."""
        return MagicOptions(job_root=self.dest)

    @property
    def storage_options(self) -> dict[str, Any]:
        return {"magic": self._magic_options(), self.protocol: dict(self.store_options)}

    def work_url_for(self, attempt_id: str) -> str:
        url: str = self.store_fs.unstrip_protocol(self.work_path_for(attempt_id))
        return "magic::" + url

    def work_path_for(self, attempt_id: str) -> str:
        return self.layout.work_path(attempt_id)

    # -- records, through the adapter ---------------------------------------------------

    def _key(self, path: str) -> str:
        """The key (blob name) of ``bucket/key``."""
        return self.deferred.split(path)[1]

    def _put(self, path: str, data: bytes) -> None:
        self.deferred.run(self.deferred.awrite_record(path, data))

    def _pages(self, directory: str, size: int = DELETE_BATCH) -> Iterator[list[str]]:
        """The records below ``directory``, ``size`` at a time (streamed: a job's tree may
        hold millions)."""
        listing = self.deferred.alist_records(directory)
        while page := self.deferred.run(take(listing, size)):
            yield page

    def _list(self, directory: str, recursive: bool = True) -> list[str]:
        """The records below ``directory``, sorted (one paged, uncached listing)."""
        return sorted(self.deferred.run(collect(self.deferred.alist_records(directory, recursive))))

    def _delete_files(self, paths: list[str]) -> None:
        self.deferred.run(self.deferred.adelete_records(paths))

    def _read_records(self, paths: list[str]) -> Iterator[bytes]:
        """The task records, ``2 * threads`` at once (small reads while nothing else runs;
        S3's client pool holds that many), as coroutines on the store's IO loop."""
        reads = 2 * self.threads
        return loop_map(self.deferred.run_background, self._aread_pendingset, paths, reads)

    def _read_record(self, path: str) -> bytes:
        return self.deferred.run(self._aread_pendingset(path))

    async def _aread_pendingset(self, path: str) -> bytes:
        """Read through the adapter: under the store's retry policy and rate control."""
        data = await self.deferred.aread_record(path, PendingSet.MAX_BYTES)
        if data is None:
            raise FileNotFoundError(path)
        return data

    def _saved(self, path: str) -> PendingSet | None:
        """The pendingset saved at ``path``; ``None`` if absent or unreadable."""
        data = self.deferred.run(self.deferred.aread_record(path, PendingSet.MAX_BYTES))
        try:
            return None if data is None else PendingSet.from_json(data, source=self._display(path))
        except InvalidCommitData:
            return None

    def _load_pendings(self, paths: list[str]) -> list[SinglePendingCommit]:
        """The ``.pending`` records at ``paths``, read in parallel."""
        return load_pendings(self.deferred, paths, self.stats, self._display)

    # -- job ------------------------------------------------------------------------------

    def _setup_job(self, resume: bool) -> None:
        """The job marker; with it, at once (one round trip), the job's index entry (the
        same JSON). A resumed job has both already."""
        if resume:
            return
        document = self._job_marker_document()
        saving = self.deferred.awrite_record(self.index_entry, document)
        entry = self.deferred.run_background(saving)
        try:
            self._put(self.layout.job_marker, document)
        finally:
            concurrent.futures.wait([entry])
        if (error := entry.exception()) is not None:
            job_index.index_failed("saved", self.index_entry, self.job_id, self.url, error)

    def job_active(self) -> bool:
        """Whether the job marker exists, by a shared check started after this call
        (:func:`shared_check`)."""
        return self.deferred.run(shared_check(self.deferred, self.layout.job_marker))

    def _end_job(self, check: bool = True) -> bool:
        """Delete the job marker: from now on writers and task commits of this job fail."""
        was_active = self.job_active() if check else False
        self.deferred.run(self.deferred.adelete_record(self.layout.job_marker))
        return was_active

    def _journal(self) -> JournalKeeper:
        return JournalKeeper(self.deferred, self.layout.magic_dir, self.dest, self.job_id)

    # -- tasks ----------------------------------------------------------------------------

    def _setup_task(self, task: TaskAttempt) -> None:
        started, data = self.layout.started_marker(task.attempt_id), task.attempt_id.encode()
        save_checked(self.deferred, started, data, lambda: self._require_active_job(task))

    def commit_task(self, task: TaskAttempt) -> TaskCommitMessage:
        """As every committer's; where attempt records stay until the job ends, the
        attempt's listing starts while its files finish closing (module docstring)."""
        if self.keeps_attempt_records:
            self._check_task(task)
            TASK_FILES.begun(self.job_id, task.attempt_id)
            listing = self.deferred.run_background(self._aattempt_entries(task))
            self._listings[task.attempt_id] = listing
        try:
            return super().commit_task(task)
        finally:
            self._listings.pop(task.attempt_id, None)

    def _commit_task(self, task: TaskAttempt, files: list[TaskFile]) -> TaskCommitMessage:
        start = time.monotonic()
        attempt_record = self.layout.attempt_pendingset(task.attempt_id)
        try:
            early = self._listings.pop(task.attempt_id, None)  # started by commit_task
            listing = early or self.deferred.run_background(self._aattempt_entries(task))
            found = self.layout.attempt_records(task.attempt_id, listing.result())
            if not found.started:
                raise self._not_started_error(task)
            saved = None
            if found.saved and not self.keeps_attempt_records:
                saved = self._saved(attempt_record)
            if saved is None:
                commits, stats = self._gather_task_commits(task, files, found.files)
        except BaseException:
            self.abort_task(task)
            raise
        if saved is not None:  # committed before: its files' records are gone
            return self._task_committed(
                task, attempt_record, len(saved.commits), saved.total_bytes, start, "kept"
            )
        pendingset = PendingSet(
            job_id=self.job_id,
            commits=commits,
            iostatistics=stats,
            extra_data={TASK_ATTEMPT_ID_KEY: task.attempt_id, **declared_checksums(commits)},
        )
        self._save_task_record(task, pendingset)
        if not self.keeps_attempt_records:
            self._drop_attempt_records(task, sorted(found.files))
        return self._task_committed(
            task, attempt_record, len(commits), pendingset.total_bytes, start, "committed"
        )

    def _save_task_record(self, task: TaskAttempt, pendingset: PendingSet) -> None:
        """Save the attempt's pendingset (both names, at once), then check the job is
        still active; on any failure withdraw the commits and abort the attempt."""
        try:
            data = pendingset.to_bytes()
            paths = (
                self.layout.attempt_pendingset(task.attempt_id),
                self.layout.pendingset(task.task_id),
            )
            saves = [
                self.deferred.run_background(self.deferred.awrite_record(p, data)) for p in paths
            ]
            for save in saves:
                save.result()
            if not self.job_active():
                withdrawn = (
                    "its uploads have been aborted"
                    if self.deferred.capabilities.discards_pending
                    else "its files will never be published"
                )
                raise JobNotActiveError(
                    f"job {self.job_id} ended before task attempt {task.attempt_id} "
                    f"committed; {withdrawn}"
                )
        except BaseException:
            self._operations().abort(pendingset.commits)
            self.abort_task(task)
            raise

    async def _aattempt_entries(self, task: TaskAttempt) -> dict[str, dict[str, str]]:
        """The records named like the attempt, one listing (``attempt_records``), with
        their metadata where the store's listing gives it (hook: Azure's does)."""
        prefix = self.layout.task_attempt_dir(task.attempt_id)
        return {p: {} for p in await collect(self.deferred.alist_prefixed(prefix))}

    def _gather_task_commits(
        self, task: TaskAttempt, files: list[TaskFile], entries: dict[str, dict[str, str]]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """The attempt's commits: this process's, or loaded from its ``.pending`` files
        (``entries``: the attempt directory's files; hook: S3 tells files written around
        magicfs from unclosed ones)."""
        listing = sorted(entries)
        markers = [p for p in listing if is_deferred_write(p)]
        pendings = {p.removesuffix(PENDING_SUFFIX) for p in listing if p.endswith(PENDING_SUFFIX)}
        known = {f.path: f.commit for f in files if f.commit is not None}
        unaccounted = [m for m in markers if m not in pendings and m not in known]
        if unaccounted:
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(unaccounted)} files were opened but not "
                f"closed successfully, or written around magicfs, e.g. "
                f"{self._display(unaccounted[0])}: they would never be committed. Write task "
                "files with committer.fs (job.fs) and close each before committing the task "
                "(the attempt has been aborted)"
            )
        orphans = sorted(pendings - set(markers))  # records of deleted or replaced files
        if orphans:
            self._discard_records([p + PENDING_SUFFIX for p in orphans])
        elsewhere = [m for m in markers if m not in known]
        loaded = dict(
            zip(
                elsewhere, self._load_pendings([m + PENDING_SUFFIX for m in elsewhere]), strict=True
            )
        )
        commits = [known.get(m) or loaded[m] for m in markers]
        sources = [
            c.filename or self._display(m + PENDING_SUFFIX)
            for m, c in zip(markers, commits, strict=True)
        ]
        return commits, self._checked_task_commits(task, commits, sources)

    def _discard_records(self, paths: list[str]) -> None:
        """Discard what the ``.pending`` records at ``paths`` stage, and delete them."""
        if self.deferred.capabilities.discards_pending:
            self.deferred.discard(self._load_pendings(paths))
        self._delete_files(paths)

    def _drop_attempt_records(self, task: TaskAttempt, listed: list[str]) -> None:
        """Delete the committed attempt's markers and records (``listed`` by its commit),
        as Hadoop's magic committer deletes the attempt directory at task commit: the
        pendingset now holds every commit. Failures, and anything written into the
        directory after the listing, are left for the job's clean-up."""
        try:
            self._delete_files(listed)
        except Exception as error:
            log.warning(
                "task %s: its file records stay until job clean-up: %s", task.attempt_id, error
            )

    def _abort_task(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Discard what the attempt's records name (where the store can) and delete them.

        Where the job's clean-up finds pending writes by their markers
        (:attr:`~magicfs.stores.deferred.DeferredCapabilities.lists_pending`), a marker no
        record names (its writer was killed) is kept for it; aborting by key now could hit
        a speculative twin writing the same keys (hook: S3 also names the release command).
        """
        listing = self._list(self.layout.task_attempt_dir(task.attempt_id))
        commits = [f.commit for f in files if f.commit is not None]
        kept: list[str] = []
        if self.deferred.capabilities.discards_pending:
            records = [p for p in listing if p.endswith(PENDING_SUFFIX)]
            commits += load_trusted(self, records)
            self.deferred.discard(commits)
        if self.deferred.capabilities.lists_pending:
            named = {f.path for f in files if f.commit is not None}
            named |= {c.filename.removesuffix(PENDING_SUFFIX) for c in commits if c.filename}
            kept = [p for p in listing if is_deferred_write(p) and p not in named]
        records = [p for p in listing if p not in kept]
        records += [
            self.layout.attempt_pendingset(task.attempt_id),
            self.layout.started_marker(task.attempt_id),
        ]
        task_record = self.layout.pendingset(task.task_id)
        if self._recorded_attempt(task_record) == task.attempt_id:
            records.append(task_record)
        self._delete_files(records)
        log.info(
            "task %s: aborted; %d markers kept for the job's sweep", task.attempt_id, len(kept)
        )

    # -- job commit -----------------------------------------------------------------------

    def _records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if messages is not None:
            return self._check_messages(messages, self.layout.tasks_dir)
        # The job has ended before this listing: a task commit either saved its record
        # before (and is listed) or finds the job gone and withdraws. Paged and uncached.
        listing = self._list(self.layout.job_attempt_dir, recursive=False)
        records = [p for p in listing if p.endswith(PENDINGSET_SUFFIX)]
        if not was_active and (not records or self._success_names_this_job()):
            raise self._nothing_to_commit(bool(records) or bool(self._list(self.layout.magic_dir)))
        return records

    def _nothing_to_commit(self, tree_left: bool) -> NothingToCommitError:
        if self._success_names_this_job():
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

    def _store_diagnostics(self) -> dict[str, str]:
        """What ``_SUCCESS``'s diagnostics add for this store (hook)."""
        return {}

    def _save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        success = self._success_data(
            loaded,
            published,
            start,
            rows,
            f"magicfs {type(self).__name__} for job {self.job_id}",
            **self._store_diagnostics(),
        )
        if self.success_file:
            self._put(self.success_path, success.to_bytes())
        return success.filenames

    # -- clean-up -------------------------------------------------------------------------

    def _clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        with self.stats.track("committer_cleanup"):
            self._discard_left(published)
            last = functools.partial(delete_last_batch, self._delete_files, self.index_entry, self)
            delete_tree(self._tree_pages(), self._delete_files, last)
            self.store_fs.invalidate_cache(self.layout.magic_dir)

    def _discard_left(self, published: Published | None) -> None:
        """Discard the pending writes on the keys the job's markers name, but those it
        published (hook: S3's sweep also leaves keys another active job writes). A store
        that cannot list pending writes leaves them to expire (Azure)."""
        capabilities = self.deferred.capabilities
        if not (capabilities.lists_pending and capabilities.discards_pending):
            return
        keys = _marked_destinations(self._list(self.layout.magic_dir))
        keep = self.kept_uploads(published)
        prefix = self.dest + "/"
        listed = self.deferred.run(collect(self.deferred.alist_pending(prefix)))
        left = [w for w in listed if w.path in keys and w.upload_id not in keep]
        aborted = self.deferred.run(self.deferred.adiscard(left)) if left else 0
        self.stats.increment("committer_commits_aborted", aborted)

    def _tree_pages(self) -> Iterable[list[str]]:
        """The job's tree, page by page."""
        return self._pages(self.layout.magic_dir)


def delete_last_batch(
    delete: Callable[[list[str]], None], entry: str, job: OutputCommitter, paths: list[str]
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


def save_checked(
    deferred: DeferredStore, path: str, data: bytes, check: Callable[[], None]
) -> None:
    """Save the record ``path`` while ``check`` runs: one round trip, not two (task set-up:
    the started marker and the job check). A check that raises has the record deleted
    again, so an ended job's tree never keeps one (the check is no guarantee by itself:
    a job may end right after it, and the task's commit checks again after its save)."""
    save = deferred.run_background(deferred.awrite_record(path, data))
    try:
        check()
    except BaseException:
        concurrent.futures.wait([save])  # the delete must follow the save
        try:
            deferred.run(deferred.adelete_record(path))
        except Exception as error:  # the refusal is what the caller must see
            log.warning("%s stays (its job's clean-up deletes it): %s", path, error)
        raise
    save.result()


async def shared_check(deferred: DeferredStore, marker: str) -> bool:
    """Whether ``marker`` exists, by a check that starts after this call, shared
    (:mod:`magicfs.stores.job_check`) with the task set-ups and commits and the
    writers of this process that ask meanwhile: tasks committing at once send one HEAD,
    not one each. Any check that starts after the caller's last write answers it (the
    zombie handshake needs no more)."""
    bucket, key = deferred.split(marker)

    async def head() -> bool:
        return await deferred.arecord_info(marker) is not None

    return await job_still_active(bucket, key, head)


def load_pendings(
    deferred: DeferredStore,
    paths: list[str],
    stats: IOStatisticsStore,
    display: Callable[[str], str],
) -> list[SinglePendingCommit]:
    """The ``.pending`` records at ``paths``, read at once on the store's IO loop, in
    order; a missing one raises ``FileNotFoundError`` naming it (``display``)."""
    reads = [
        (p, deferred.run_background(deferred.aread_record(p, SinglePendingCommit.MAX_BYTES)))
        for p in paths
    ]
    commits = []
    for path, read in reads:
        with stats.track("committer_load_single_pending_file"):
            data = read.result()
        if data is None:
            raise FileNotFoundError(f"{display(path)} does not exist")
        commits.append(SinglePendingCommit.from_json(data, source=display(path)))
    return commits


def load_trusted(committer: MagicLayoutCommitter, paths: list[str]) -> list[SinglePendingCommit]:
    """The ``.pending`` records at ``paths`` that load and name the file they lie next to
    (an abort skips the others: it must not discard on a forged record's word)."""
    loaded = []
    for path in paths:
        try:
            (commit,) = committer._load_pendings([path])
            check_commit(commit, committer.bucket, committer.dest_key, committer._display(path))
        except (FileNotFoundError, InvalidCommitData):
            continue
        commit.filename = commit.filename or path
        loaded.append(commit)
    return loaded


def delete_tree(
    pages: Iterable[list[str]],
    delete: Callable[[list[str]], None],
    delete_last: Callable[[list[str]], None] | None = None,
) -> None:
    """Delete a job's tree, listed in ``pages``: files and markers first, then task
    records, then the journal's pages, the journal last — a clean-up cut short must not
    leave a tree that a retried commit would read as a job with fewer tasks. The later
    ranks wait on local disk (:class:`~magicfs.stores.spool.OrderedPaths`).

    ``delete_last`` (default ``delete``) deletes the last batch, called exactly once even
    when the tree is empty (with ``[]``): the clean-up adds the job's index entry to it.
    Each batch is sent when the next one is known, so the last is known as the last."""
    records = OrderedPaths()
    held: list[str] = []

    def send(batch: list[str]) -> None:
        nonlocal held
        if batch:
            if held:
                delete(held)
            held = batch

    try:
        for page in pages:
            ranked = [_deletion_order(p) for p in page]
            records.add(r for r in ranked if r[0] > 0)
            send([p for rank, p in ranked if rank == 0])
        for batch in records.batches(DELETE_BATCH):
            send(list(batch))
        if delete_last is not None:
            delete_last(held)
        elif held:
            delete(held)
    finally:
        records.discard()


def _marked_destinations(listing: Iterable[str]) -> set[str]:
    """The destinations named by the markers and ``.pending`` records among ``listing``."""
    found = set()
    for path in listing:
        file = path.removesuffix(PENDING_SUFFIX)
        if path.endswith(PENDINGSET_SUFFIX) or not is_deferred_write(file):
            continue
        try:
            found.add(final_destination(file))
        except ValueError:  # not a file path (a directory marker, say)
            continue
    return found


def _deletion_order(path: str) -> tuple[int, str]:
    """Files and markers first, then task records, then the journal's pages, the journal last."""
    name = path.rsplit("/", 1)[-1]
    if name == JOURNAL_FILE:
        return (3, path)
    if name.startswith("_magicfs_commit.") or name == UNMARKED_FILE:  # the job's mode, kept
        return (2, path)
    if name.endswith(PENDINGSET_SUFFIX) or name.endswith(STARTED_SUFFIX):
        return (1, path)
    return (0, path)
