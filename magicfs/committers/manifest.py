"""The manifest committer: Hadoop's protocol for rename stores (Azure, GCS, local disks, memory).

Tasks write the same magic paths as on S3 (``task.path(...)`` through
``committer.fs``); the filesystem sends them into the attempt's working directory
(:mod:`magicfs.manifest.layout`). Task commit saves a manifest of the files
(:mod:`magicfs.manifest.task_commit`); job commit runs the stages of
:mod:`magicfs.manifest.stages`: load the manifests, create directories, rename every
file into place, optionally validate, save ``_SUCCESS``, clean up.

Decisions (Hadoop's choices in parentheses):

* The job is active while ``_temporary/<job>/_magicfs_job.json`` exists; a task commit
  that finds it gone after saving withdraws its manifest — the same handshake as the
  magic committer (Hadoop has none).
* A failed rename stage moves the files already renamed back, so a failed job leaves
  nothing visible and can be committed again (Hadoop leaves them in place).
* Output validation, when enabled, runs *before* ``_SUCCESS`` is written (after).
* Clean-up deletes ``_temporary/<job id>`` only (all of ``_temporary``), so jobs with
  different ids may write to one destination.
* Two tasks writing the same destination file: the later rename wins, as in Hadoop.
  Checking would need every destination in memory; use unique file names.
"""

from __future__ import annotations

import getpass
import logging
import os
import time
import traceback
from typing import Any

from ..errors import CommitFailedError, JobNotActiveError, NothingToCommitError
from ..filesystem import MagicFileSystem, is_s3
from ..manifest.layout import MANIFEST_SUFFIX, ManifestJobLayout
from ..manifest.stages import (
    LoadedManifests,
    RenameOutcome,
    StageContext,
    cleanup,
    create_directories,
    delete_renamed,
    load_manifests,
    new_rename_log,
    rename_files,
    save_report,
    save_success,
    validate_output,
)
from ..manifest.stages.cleanup import Outcome
from ..manifest.store import RenameStore
from ..manifest.task_commit import build_manifest, save_manifest
from ..records import MANIFEST_COMMITTER_CLASS, ManifestSuccessData, TaskManifest
from .base import (
    JobSummary,
    OutputCommitter,
    TaskAttempt,
    TaskCommitMessage,
    elapsed,
    total_rows,
)

log = logging.getLogger("magicfs.committer.manifest")


class ManifestCommitter(OutputCommitter):
    """Hadoop's manifest committer for any fsspec filesystem with rename (not S3).

    Options beyond :class:`OutputCommitter`'s: ``validate_output`` (False): check every
    committed file's size (and etag where renames keep it) before ``_SUCCESS``;
    ``delete_target_files`` (False): delete an existing destination file before
    renaming onto it (for stores whose rename does not overwrite); ``report_dir``: also
    write the job summary (even for a failed job) to ``<report_dir>/summary-<job>.json``;
    ``save_attempts`` (5): tries to save a task manifest; ``cleanup`` (True).
    """

    name = "manifest"

    def __init__(
        self,
        dest: str,
        *,
        validate_output: bool = False,
        delete_target_files: bool = False,
        report_dir: str | None = None,
        save_attempts: int = 5,
        cleanup: bool = True,
        **options: Any,
    ):
        super().__init__(dest, **options)
        if is_s3(self.store_fs):
            raise ValueError(
                f"{dest}: the manifest committer needs a store with rename; S3 has none "
                "(use the magic committer)"
            )
        self.validate = validate_output
        self.delete_target_files = delete_target_files
        self.report_dir = report_dir
        self.save_attempts = save_attempts
        self.cleanup_enabled = cleanup
        self.layout = ManifestJobLayout(self.dest, self.job_id, self.app_attempt)
        self.store = RenameStore(self.store_fs, self.threads)
        self._fs = MagicFileSystem(fs=self.store_fs)

    @property
    def fs(self) -> MagicFileSystem:
        return self._fs

    def _context(self) -> StageContext:
        return StageContext(self.store, self.layout, self.stats, self.threads, self.progress)

    # -- job setup ----------------------------------------------------------------------------

    def setup_job(self) -> None:
        start = time.monotonic()
        with self.stats.track("job_stage_setup"):
            self.check_no_conflict("job setup")
            if self.success_file:
                self.store.delete_file(self.success_path)
            for directory in (self.layout.manifests_dir, self.layout.tasks_dir):
                self.store.mkdirs(directory)
            self.store.write_bytes(self.layout.job_marker, self.job_marker_document())
        log.info(
            "job %s: set up for %s (manifest committer, conflict mode %s) in %.2fs",
            self.job_id,
            self.url,
            self.conflict_mode,
            elapsed(start),
        )

    def job_active(self) -> bool:
        return self.store.info(self.layout.job_marker) is not None

    # -- tasks ------------------------------------------------------------------------------------

    def work_path_for(self, attempt_id: str) -> str:
        """The magic path tasks write to; ``committer.fs`` routes it to the attempt's directory."""
        return self.layout.magic_work_path(attempt_id)

    def setup_task(self, task: TaskAttempt) -> None:
        self._check_task(task)
        self.require_active_job(task)
        with self.stats.track("task_stage_setup"):
            self.store.mkdirs(self.layout.task_attempt_dir(task.attempt_id))
            self.store.write_bytes(
                self.layout.started_marker(task.attempt_id), task.attempt_id.encode()
            )

    def commit_task(self, task: TaskAttempt) -> TaskCommitMessage:
        self._check_task(task)
        start = time.monotonic()
        if self.store.info(self.layout.started_marker(task.attempt_id)) is None:
            raise self.not_started_error(task)
        with self.stats.track("task_stage_commit"):
            manifest = build_manifest(self.store, self.layout, task, self.stats)
            save_manifest(self.store, self.layout, task, manifest, self.stats, self.save_attempts)
        if not self.job_active():
            self._withdraw(task)
            raise JobNotActiveError(
                f"job {self.job_id} ended before task attempt {task.attempt_id} committed; "
                "its manifest has been withdrawn"
            )
        return self.task_committed(
            task,
            self.layout.attempt_manifest(task.attempt_id),
            len(manifest.files),
            manifest.total_bytes,
            start,
            "committed",
        )

    def abort_task(self, task: TaskAttempt) -> None:
        """Delete the attempt's work and records; an aborted attempt cannot commit."""
        self._check_task(task)
        with self.stats.track("task_stage_abort_task"):
            self._withdraw(task)
            self.store.delete_tree(self.layout.task_attempt_dir(task.attempt_id))
            self.store.delete_file(self.layout.started_marker(task.attempt_id))
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

    # -- job commit --------------------------------------------------------------------------------

    def commit_job(self, messages: list[TaskCommitMessage] | None = None) -> JobSummary:
        start = time.monotonic()
        context = self._context()
        stage = "committer_commit_job"
        loaded: LoadedManifests | None = None
        renamed_log = new_rename_log()
        try:
            with self.stats.track("committer_commit_job"):
                was_active = self._end_job()
                stage = "job_stage_load_manifests"
                loaded = load_manifests(context, self._manifest_paths(messages, was_active))
                self.check_no_conflict("job commit")
                if self.conflict_mode == "replace":
                    self.delete_visible_data()
                stage = "job_stage_create_target_dirs"
                create_directories(context, loaded.directories)
                stage = "job_stage_rename_files"
                renamed = rename_files(context, loaded, renamed_log, self.delete_target_files)
                if self.validate:
                    stage = "job_stage_optional_validate_output"
                    validate_output(context, loaded)
                stage = "job_stage_save_success_marker"
                success = self._success_data(loaded, renamed, start, total_rows(messages))
                if self.success_file:
                    save_success(context, success)
        except NothingToCommitError:
            raise
        except BaseException as failure:
            self.stats.increment("committer_jobs_failed")
            reverted = delete_renamed(context, renamed_log)
            self._report(self._failure_data(stage, failure, start))
            self._abort_quietly(context)
            raise CommitFailedError(
                f"job {self.job_id}: commit to {self.url} failed in stage {stage}: "
                f"{type(failure).__name__}: {failure}. The job was aborted; {reverted} files "
                "already renamed into the destination were deleted again"
            ) from failure
        finally:
            if loaded is not None:
                loaded.discard()
            os.unlink(renamed_log)
        self.stats.increment("committer_jobs_completed")
        self._report(success)
        outcome = cleanup(context, self.cleanup_enabled)
        if outcome.outcome is Outcome.FAILURE:
            log.warning("job %s: clean-up failed: %s", self.job_id, outcome.error)
        summary = self.summarise(
            renamed.files, renamed.bytes, len(loaded.task_ids), start, success.filenames
        )
        return summary

    def _end_job(self) -> bool:
        was_active = self.job_active()
        self.store.delete_file(self.layout.job_marker)
        return was_active

    def _manifest_paths(
        self, messages: list[TaskCommitMessage] | None, was_active: bool
    ) -> list[str]:
        if messages is None:
            paths = [
                p
                for p in self.store.list_names(self.layout.manifests_dir)
                if p.endswith(MANIFEST_SUFFIX)
            ]
            if not was_active and not paths and not self.store.fs.exists(self.layout.job_dir):
                raise NothingToCommitError(
                    f"job {self.job_id}: nothing to commit at {self.url}: the job was never set "
                    "up, or has already been committed or aborted"
                )
            return paths
        return self.check_messages(messages, self.layout.tasks_dir)

    # -- _SUCCESS and reports ----------------------------------------------------------------------

    def _success_data(
        self, loaded: LoadedManifests, renamed: RenameOutcome, start: float, rows: int | None
    ) -> ManifestSuccessData:
        statistics = self.stats.snapshot().aggregate(loaded.iostatistics)
        success = ManifestSuccessData(
            committer=MANIFEST_COMMITTER_CLASS,
            job_id=self.job_id,
            job_id_source=self.job_id_source,
            diagnostics=self._diagnostics("committer_commit_job"),
            filenames=list(renamed.first_destinations),
            iostatistics=statistics,
            metrics=self.metrics(renamed.files, renamed.bytes, len(loaded.task_ids), start, rows),
        )
        return success

    def _failure_data(self, stage: str, failure: BaseException, start: float):
        diagnostics = self._diagnostics(stage)
        diagnostics["exception"] = f"{type(failure).__name__}: {failure}"
        diagnostics["stacktrace"] = "".join(traceback.format_exception(failure))[-16000:]
        return ManifestSuccessData(
            success=False,
            committer=MANIFEST_COMMITTER_CLASS,
            job_id=self.job_id,
            job_id_source=self.job_id_source,
            diagnostics=diagnostics,
            iostatistics=self.stats.snapshot(),
            metrics={"duration_ms": int(elapsed(start) * 1000)},
        )

    def _diagnostics(self, stage: str) -> dict[str, str]:
        return self.diagnostics(principal=_principal(), stage=stage)

    def _report(self, data: ManifestSuccessData) -> None:
        if self.report_dir:
            save_report(self._context(), self.report_dir, data)

    # -- abort and clean-up ----------------------------------------------------------------------

    def abort_job(self) -> None:
        """Delete the job's temporary tree; the destination is untouched. Idempotent."""
        start = time.monotonic()
        with self.stats.track("job_stage_abort"):
            self._end_job()
            outcome = cleanup(self._context(), enabled=True)
        if outcome.outcome is Outcome.FAILURE:
            raise CommitFailedError(f"job {self.job_id}: abort could not clean up: {outcome.error}")
        log.info(
            "job %s: aborted (%s) in %.2fs", self.job_id, outcome.outcome.value, elapsed(start)
        )

    def cleanup_job(self) -> None:
        self._end_job()
        outcome = cleanup(self._context(), self.cleanup_enabled)
        if outcome.outcome is Outcome.FAILURE:
            raise CommitFailedError(f"job {self.job_id}: clean-up failed: {outcome.error}")

    def _abort_quietly(self, context: StageContext) -> None:
        outcome = cleanup(context, enabled=True)
        if outcome.outcome is Outcome.FAILURE:
            log.warning("job %s: clean-up after failure failed: %s", self.job_id, outcome.error)

    # -- helpers -----------------------------------------------------------------------------------

    def _check_task(self, task: TaskAttempt) -> None:
        if task.job_id != self.job_id:
            raise ValueError(f"task attempt {task.attempt_id} belongs to job {task.job_id}")


def _principal() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers
        return "unknown"
