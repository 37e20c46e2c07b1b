"""The manifest committer: Hadoop's protocol for rename stores (Azure, GCS, local disks, memory).

Tasks write the same magic paths as on S3 (``task.path(...)`` through
``committer.fs``); the filesystem sends them into the attempt's working directory
(:mod:`magicfs.filesystems.routed_view`). Task commit saves a manifest of the files
(:mod:`magicfs.committers.manifest_tasks`); job commit runs the protocol's stages
(:mod:`magicfs.protocol.job_commit`), whose hooks this committer fills with the manifest
stages (:mod:`magicfs.committers.manifest_stages`): load the manifests,
create directories and rename every file into place (publish), optionally validate,
save ``_SUCCESS``, clean up.

Decisions (Hadoop's choices in parentheses):

* The job is active while ``_temporary/<job>/_magicfs_job.json`` exists; a task commit
  that finds it gone after saving withdraws its manifest — the same handshake as the
  magic committer (Hadoop has none).
* A failed commit moves nothing back but deletes every file it had renamed into the
  destination (:func:`~magicfs.committers.manifest_stages.unrename`), so a failed job leaves
  nothing visible; a commit whose driver died is finished by ``commit_job()`` or rolled
  back by ``abort_job()`` (Hadoop leaves renamed files in place and cannot resume).
* Output validation, when enabled, runs *before* ``_SUCCESS`` is written (after).
* Clean-up deletes ``_temporary/<job id>`` only (all of ``_temporary``), so jobs with
  different ids may write to one destination.
* On a store with buckets (GCS; Azure with this committer), set-up also writes the job's
  entry in the bucket's job index, alongside the job marker, and clean-up deletes it
  once the job's directory is gone (:mod:`magicfs.layouts.job_index`): ``magicfs jobs
  list`` finds the job from any prefix above it. A local disk or memory has no index.
* Manifest sources must lie in their own attempt's working directory; a tampered
  manifest naming any other file is refused before anything moves.
* Two tasks writing the same destination file: the later rename wins, as in Hadoop.
  Checking would need every destination in memory; use unique file names.
"""

from __future__ import annotations

import concurrent.futures
import getpass
import logging
import time
import traceback
from collections.abc import Iterator
from typing import Any, cast

from ..errors import CommitFailedError, JobNotActiveError, NothingToCommitError
from ..filesystems import MagicFileSystem
from ..filesystems.magic import MagicOptions
from ..layouts import job_index
from ..layouts.manifest import ManifestJobLayout
from ..names import MANIFEST_SUFFIX
from ..protocol.attempts import Messages
from ..protocol.committer import (
    Loaded,
    OutputCommitter,
    Published,
    TaskAttempt,
    TaskCommitMessage,
    elapsed,
)
from ..protocol.hooks import CommitterHooks, TaskCommit
from ..protocol.journal import JournalKeeper
from ..protocol.tasks import TaskLifecycle, not_started_error, require_active_job, task_committed
from ..records import MANIFEST_COMMITTER_CLASS, ManifestSuccessData, TaskManifest
from ..records.job_record import CommittedFile
from ..stores.capabilities import speaks_s3
from ..stores.rename import RenameStore
from ..task_files import TaskFile
from .manifest_stages import (
    LoadedManifests,
    StageContext,
    cleanup,
    create_directories,
    load_manifests,
    rename_files,
    save_report,
    save_success,
    unrename,
    validate_output,
)
from .manifest_stages.cleanup import Outcome
from .manifest_tasks import build_manifest, save_manifest

log = logging.getLogger("magicfs.committer.manifest")


class ManifestFlow(CommitterHooks):
    """The protocol's hooks of :class:`ManifestCommitter` (its ``flow``), built from that
    committer's keywords (its docstring says what they are)."""

    name = "manifest"

    def __init__(
        self,
        dest: str,
        *,
        validate_output: bool = False,
        delete_target_files: bool = False,
        report_dir: str | None = None,
        save_attempts: int = 5,
        cleanup: bool | str = "inline",
        **options: Any,
    ):
        if isinstance(cleanup, bool):  # this committer's option before every committer had it
            cleanup = "inline" if cleanup else "off"
        super().__init__(dest, cleanup=cleanup, **options)
        if speaks_s3(self.store_fs):
            raise ValueError(
                f"{dest}: the manifest committer needs a store with rename; S3 has none "
                "(use the magic committer)"
            )
        self.validate = validate_output
        self.delete_target_files = delete_target_files
        self.report_dir = report_dir
        self.save_attempts = save_attempts
        self.layout = ManifestJobLayout(self.dest, self.job_id, self.options.app_attempt)
        self.store = RenameStore(self.store_fs, self.options.threads)
        #: The job's entry in its bucket's job index; ``None`` where the store has no
        #: buckets (local disks, memory: :mod:`magicfs.layouts.job_index`).
        self.index_entry: str | None = None
        if (where := job_index.bucket_and_key(self.store_fs, self.dest)) is not None:
            self.index_entry = job_index.entry_path(*where, self.job_id)
        # job_root: writes to the destination outside task paths are refused.
        self._fs = MagicFileSystem(fs=self.store_fs, job_root=self.dest)

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    @property
    def storage_options(self) -> dict[str, Any]:
        magic = MagicOptions(job_root=self.dest)
        return {"magic": magic, self.options.protocol: dict(self.options.store_options)}

    def work_url_for(self, attempt_id: str) -> str:
        return "magic::" + cast(str, self.store_fs.unstrip_protocol(self.work_path_for(attempt_id)))

    def _context(self) -> StageContext:
        return StageContext(
            self.store, self.layout, self.stats, self.options.threads, self.options.progress
        )

    # -- job setup ----------------------------------------------------------------------------

    def prepare_job(self, resume: bool) -> None:
        """The job's directories and marker; with them, at once, its index entry (the
        marker's JSON), where the store has an index."""
        document = self._job_marker_document()
        entry = None if resume else self.index_entry
        # (A pool of this call: one thread, once per job; the manifest flow has no context.)
        with self.stats.track("job_stage_setup"), concurrent.futures.ThreadPoolExecutor(1) as pool:
            saving = pool.submit(self.store.write_bytes, entry, document) if entry else None
            try:
                for directory in (self.layout.manifests_dir, self.layout.tasks_dir):
                    self.store.mkdirs(directory)
                if not resume:
                    self.store.write_bytes(self.layout.job_marker, document)
            finally:
                if saving is not None:
                    concurrent.futures.wait([saving])
        if entry and saving is not None and (error := saving.exception()) is not None:
            job_index.index_failed("saved", entry, self.job_id, self.url, error)

    def job_active(self) -> bool:
        return self.store.info(self.layout.job_marker) is not None

    def end_job(self, check: bool = True) -> bool:
        was_active = self.job_active() if check else False
        self.store.delete_file(self.layout.job_marker)
        return was_active

    def journal_keeper(self) -> JournalKeeper:
        return JournalKeeper(self.store, self.layout.job_dir, self.dest, self.job_id)

    # -- tasks ------------------------------------------------------------------------------------

    def work_path_for(self, attempt_id: str) -> str:
        """The magic path tasks write to; ``committer.fs`` routes it to the attempt's directory."""
        return self.layout.magic_work_path(attempt_id)

    def prepare_task(self, task: TaskAttempt) -> None:
        require_active_job(self, task)
        with self.stats.track("task_stage_setup"):
            self.store.mkdirs(self.layout.task_attempt_dir(task.attempt_id))
            self.store.write_bytes(
                self.layout.started_marker(task.attempt_id), task.attempt_id.encode()
            )

    def commit_task_files(self, commit: TaskCommit, files: list[TaskFile]) -> TaskCommitMessage:
        task = commit.task
        start = time.monotonic()
        if self.store.info(self.layout.started_marker(task.attempt_id)) is None:
            raise not_started_error(self, task)
        self._refuse_writes_around(task)
        with self.stats.track("task_stage_commit"):
            manifest = build_manifest(self.store, self.layout, task, self.stats)
            save_manifest(self.store, self.layout, task, manifest, self.stats, self.save_attempts)
        if not self.job_active():
            self._withdraw(task)
            raise JobNotActiveError(
                f"job {self.job_id} ended before task attempt {task.attempt_id} committed; "
                "its manifest has been withdrawn"
            )
        return task_committed(
            self,
            task,
            self.layout.attempt_manifest(task.attempt_id),
            len(manifest.files),
            manifest.total_bytes,
            start,
            "committed",
        )

    def _refuse_writes_around(self, task: TaskAttempt) -> None:
        """Files at the task's magic paths in the store itself were written around magicfs."""
        magic_root = self.work_path_for(task.attempt_id).rsplit("/", 1)[0]
        found = [p for p, i in self.store.scan(magic_root).items() if i.get("type") != "directory"]
        if found:
            TaskLifecycle(self).abort_task(task)
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(found)} files were written directly to "
                f"the store, around magicfs, e.g. {self.store_fs.unstrip_protocol(found[0])}: "
                "they would never be committed. Write task files with committer.fs (job.fs), "
                "or open task.url(...) with committer.storage_options (the attempt has been "
                "aborted)"
            )

    def abort_task_files(self, task: TaskAttempt, files: list[TaskFile]) -> None:
        """Delete the attempt's work and records; an aborted attempt cannot commit."""
        with self.stats.track("task_stage_abort_task"):
            self._withdraw(task)
            self.store.delete_tree(self.layout.task_attempt_dir(task.attempt_id))
            self.store.delete_file(self.layout.started_marker(task.attempt_id))
            self.store.delete_tree(self.work_path_for(task.attempt_id).rsplit("/", 1)[0])
        log.info("task %s: aborted", task.attempt_id)

    def _withdraw(self, task: TaskAttempt) -> None:
        """Delete the attempt's manifests (the task's only if this attempt saved it)."""
        self.store.delete_file(self.layout.attempt_manifest(task.attempt_id))
        task_manifest = self.layout.manifest(task.task_id)
        if self._manifest_attempt(task_manifest) == task.attempt_id:
            self.store.delete_file(task_manifest)

    def _manifest_attempt(self, path: str) -> str | None:
        try:
            data = self.store.read_bytes(path, TaskManifest.MAX_BYTES)
            return TaskManifest.from_json(data, source=path).task_attempt_id
        except (FileNotFoundError, ValueError):
            return None

    # -- job commit: the hooks its stages call (magicfs.protocol.job_commit) -----------------------

    def records_to_commit(self, messages: Messages | None, was_active: bool) -> list[str]:
        if messages is not None:
            return self._check_messages(messages, self.layout.tasks_dir)
        paths = [
            p
            for p in self.store.list_names(self.layout.manifests_dir)
            if p.endswith(MANIFEST_SUFFIX)
        ]
        if not was_active and not paths:
            tree = self.store.fs.exists(self.layout.job_dir)
            if self.success_names_this_job():
                state = "it has already been committed (its _SUCCESS names it)"
            else:
                state = "it was never set up, or has already been committed or aborted"
            left = (
                f"; its directory {self.store_fs.unstrip_protocol(self.layout.job_dir)} "
                f"remains: cleanup_job() deletes it (magicfs jobs cleanup --job {self.job_id} "
                f"{self.url})"
                if tree
                else ""
            )
            raise NothingToCommitError(
                f"job {self.job_id}: nothing to commit at {self.url}: {state}{left}"
            )
        return paths

    def load_records(self, records: list[str], messages: Messages | None = None) -> Loaded:
        manifests = load_manifests(self._context(), records)
        return Loaded(
            list(records),
            len(manifests.task_ids),
            manifests.files,
            manifests.bytes,
            manifests,
            manifests.iostatistics,
        )

    def delete_files(self, paths: list[str]) -> None:
        for _ in self._context().parallel(self.store.delete_file, paths, "deleting", len(paths)):
            pass

    def publish(self, loaded: Loaded) -> Published:
        context = self._context()
        manifests: LoadedManifests = loaded.payload
        create_directories(context, manifests.directories)
        renamed = rename_files(context, manifests, self.delete_target_files)
        if self.options.conflict_mode == "replace":
            self._remove_emptied_directories()
        if self.validate:
            validate_output(context, manifests)
        return Published(renamed.files, renamed.bytes, list(renamed.first_destinations))

    def removed_old_files(self) -> None:
        self._remove_emptied_directories()

    def _remove_emptied_directories(self) -> int:
        """``replace`` on a local disk: remove the old data's directories left empty.

        Replace deletes the old *files* (the journal's delete pages list them); on a disk
        their directories would stay, empty, where readers see partitions and a later
        ``conflict_mode="fail"`` job sees data. Done after the new files are in place
        (a directory they need must exist for their renames), deepest first; directories
        holding anything stay. Idempotent, so a retried commit does it again.
        """
        keeper = self.journal_keeper()
        journal = keeper.read()
        if journal is None or not journal.deletes or not self.store.needs_parent_directories:
            return 0
        emptied: set[str] = set()
        for page in keeper.pages(journal):
            for path in page:
                parent = path.rsplit("/", 1)[0]
                while parent.startswith(self.dest + "/") and parent not in emptied:
                    emptied.add(parent)
                    parent = parent.rsplit("/", 1)[0]
        ordered = sorted(emptied, key=lambda p: (-p.count("/"), p))
        return sum(self.store.remove_empty_directory(path) for path in ordered)

    def committed_files(self, loaded: Loaded) -> Iterator[CommittedFile]:
        manifests: LoadedManifests = loaded.payload
        prefix = len(self.dest) + 1
        for entry in manifests.entries():
            yield CommittedFile(self.store.path(entry.dest)[prefix:], entry.size)

    def unpublish(self, loaded: Loaded) -> int:
        journal = self.journal_keeper().read()
        since = journal.created / 1000 if journal is not None else time.time()
        return unrename(self._context(), loaded.payload, since)

    def save_success(
        self, loaded: Loaded, published: Published, start: float, rows: int | None
    ) -> list[str]:
        statistics = self.stats.snapshot().aggregate(loaded.iostatistics)
        success = ManifestSuccessData(
            committer=MANIFEST_COMMITTER_CLASS,
            job_id=self.job_id,
            job_id_source=self.options.job_id_source,
            diagnostics={**self._diagnostics("committer_commit_job"), **loaded.diagnostics},
            filenames=list(published.filenames),
            iostatistics=statistics,
            metrics=self.success_metrics(
                published.files, published.bytes, loaded.tasks, start, rows
            ),
        )
        if self.options.success_file:
            save_success(self._context(), success)
        if self.report_dir:
            save_report(self._context(), self.report_dir, success)
        return success.filenames

    def report_failure(self, stage: str, failure: BaseException, start: float) -> None:
        if not self.report_dir:
            return
        diagnostics = self._diagnostics(stage)
        diagnostics["exception"] = f"{type(failure).__name__}: {failure}"
        diagnostics["stacktrace"] = "".join(traceback.format_exception(failure))[-16000:]
        report = ManifestSuccessData(
            success=False,
            committer=MANIFEST_COMMITTER_CLASS,
            job_id=self.job_id,
            job_id_source=self.options.job_id_source,
            diagnostics=diagnostics,
            iostatistics=self.stats.snapshot(),
            metrics={"duration_ms": int(elapsed(start) * 1000)},
        )
        save_report(self._context(), self.report_dir, report)

    def _diagnostics(self, stage: str) -> dict[str, str]:
        return self.success_diagnostics(principal=_principal(), stage=stage)

    # -- clean-up ----------------------------------------------------------------------------------

    def clean_up(self, loaded: Loaded | None, published: Published | None) -> None:
        """Delete the job's temporary tree (after a commit, when the ``cleanup`` option
        says: :func:`magicfs.protocol.job_commit.clean_up_committed`)."""
        outcome = cleanup(self._context())
        if outcome.outcome is Outcome.FAILURE:
            job_dir = self.store_fs.unstrip_protocol(self.layout.job_dir)
            raise CommitFailedError(
                f"job {self.job_id}: clean-up of {job_dir} failed: {outcome.error}"
            )
        self._delete_index_entry()

    def _delete_index_entry(self) -> None:
        """Delete the job's index entry, once its directory is gone (a rename store deletes
        a tree by itself: the entry costs a request of its own, after it)."""
        if self.index_entry is None:
            return
        try:
            self.store.delete_file(self.index_entry)
        except Exception as error:
            job_index.index_failed("deleted", self.index_entry, self.job_id, self.url, error)


class ManifestCommitter(OutputCommitter):
    """Hadoop's manifest committer for any fsspec filesystem with rename (not S3).

    Options beyond :class:`OutputCommitter`'s: ``validate_output`` (False): check every
    committed file's size (and etag where renames keep it) before ``_SUCCESS``;
    ``delete_target_files`` (False): delete an existing destination file before
    renaming onto it (for stores whose rename does not overwrite); ``report_dir``: also
    write the job summary (even for a failed job) to ``<report_dir>/summary-<job>.json``;
    ``save_attempts`` (5): tries to save a task manifest. ``cleanup`` takes every
    committer's values (``"inline"``, ``"background"``, ``"off"``: when the job's
    ``_temporary/<job>`` tree is deleted after a commit, :mod:`magicfs.protocol.cleanup`);
    its older booleans stay accepted: ``True`` is ``"inline"``, ``False`` is ``"off"``.
    """

    name = "manifest"
    flow_class = ManifestFlow
    flow: ManifestFlow


def _principal() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers
        return "unknown"
