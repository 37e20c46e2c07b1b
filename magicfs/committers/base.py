"""The committer protocol (Hadoop's ``OutputCommitter``, snake_case) and what committers share.

A committer is bound to one job writing to one destination. The driver calls
``setup_job()``, each task attempt ``setup_task`` / ``commit_task`` (or ``abort_task``),
and finally the driver ``commit_job(messages)`` or ``abort_job()``. Committers pickle,
so one built on the driver can travel to executors; every piece of state that must be
shared lives in the store, not in the object.

Decisions shared by all committers:

* **Job ids** are a fresh UUID unless given, never derived from a clock (two jobs
  started in the same second must not collide: SPARK-33402, HADOOP-17318).
* **Conflict modes** (``conflict_mode``): ``append`` (default) adds files, replacing
  same-named ones; ``fail`` refuses a destination that already holds visible data
  (checked at job setup and again just before anything is made visible); ``replace``
  deletes the destination's visible data at job commit, after every task's record has
  loaded and validated, just before the new files are made visible. Replace is not
  atomic: readers see an empty destination for the moment in between.
* **Visible data** is any entry of the destination whose name does not start with
  ``_`` or ``.`` — the convention by which Spark, Hive and pyarrow skip ``_SUCCESS``,
  ``__magic_job-*`` and ``_temporary``.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Self

import fsspec

from ..errors import CommitConflictError, CommitFailedError, JobNotActiveError
from ..layout import check_job_id
from ..layout import task_attempt_id as layout_attempt_id
from ..layout import task_id as layout_task_id
from ..paths import BASE, is_magic_element, join
from ..records import PendingSet, SinglePendingCommit, SuccessData
from ..statistics import IOStatisticsStore

log = logging.getLogger("magicfs.committer")

CONFLICT_MODES = ("append", "fail", "replace")
SUCCESS_FILE = "_SUCCESS"


@dataclass(frozen=True)
class TaskAttempt:
    """One attempt at one task. Picklable; build it with ``committer.task_attempt()``."""

    job_id: str
    task_index: int
    attempt_number: int
    task_id: str
    attempt_id: str
    work_path: str

    def path(self, relative: str) -> str:
        """Where to write ``relative`` (e.g. ``"year=2024/part-0.parquet"``) in this attempt.

        The file becomes ``<dest>/<relative>`` at job commit. Refuses paths that could
        land outside the destination.
        """
        if not isinstance(relative, str) or not relative.strip("/"):
            raise ValueError(f"relative output path must be a non-empty string, not {relative!r}")
        if relative.startswith("/") or "://" in relative:
            raise ValueError(f"output path {relative!r} must be relative to the destination")
        elements = relative.split("/")
        for element in elements:
            if element in ("", ".", ".."):
                raise ValueError(f"output path {relative!r} has an empty, '.' or '..' element")
            if is_magic_element(element) or element == BASE:
                raise ValueError(f"output path {relative!r} uses the reserved name {element!r}")
        return join(self.work_path, relative)


@dataclass(frozen=True)
class TaskCommitMessage:
    """What a committed task attempt tells the job (picklable and JSON-serialisable).

    ``record`` is the store path of the attempt's own commit record (a ``.pendingset``
    or manifest), so the job commits exactly this attempt without listing anything.
    ``rows`` is for writers that know how many rows they wrote (the Spark integration):
    the job reports the total in ``_SUCCESS``.
    """

    committer: str
    job_id: str
    task_id: str
    attempt_id: str
    record: str
    files: int
    bytes: int
    rows: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Self:
        data = json.loads(text)
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


def total_rows(messages: list[TaskCommitMessage] | None) -> int | None:
    """Rows written by all tasks, when every message knows its count."""
    if not messages or any(m is None or m.rows is None for m in messages):
        return None
    return sum(m.rows for m in messages)


@dataclass
class JobSummary:
    """What ``commit_job`` did."""

    job_id: str
    destination: str
    committer: str
    files: int
    bytes: int
    tasks: int
    seconds: float
    success_file: str | None
    filenames: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)


class OutputCommitter(ABC):
    """Base of all committers: configuration, lifecycle contract, conflict handling."""

    name: ClassVar[str] = "abstract"

    def __init__(
        self,
        dest: str,
        *,
        job_id: str | None = None,
        storage_options: dict[str, Any] | None = None,
        fs: fsspec.AbstractFileSystem | None = None,
        threads: int = 8,
        conflict_mode: str = "append",
        success_file: bool = True,
        app_attempt: int = 0,
        progress: bool | None = None,
        job_id_source: str | None = None,
    ):
        if conflict_mode not in CONFLICT_MODES:
            raise ValueError(
                f"unknown conflict_mode {conflict_mode!r}: use one of {', '.join(CONFLICT_MODES)}"
            )
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self.job_id = check_job_id(job_id) if job_id is not None else str(uuid.uuid4())
        # Hadoop's values: "Generated Locally", "spark.sql.sources.writeJobUUID", "JobID"...
        self.job_id_source = job_id_source or ("job_id" if job_id else "Generated Locally")
        self.storage_options = dict(storage_options or {})
        self.threads = threads
        self.conflict_mode = conflict_mode
        self.success_file = success_file
        self.app_attempt = app_attempt
        self.progress = progress
        self.store_fs = fs if fs is not None else self._make_store_fs(dest)
        self.dest = self.store_fs._strip_protocol(dest).rstrip("/")
        self.stats = IOStatisticsStore()

    # -- construction helpers --------------------------------------------------------------

    def _make_store_fs(self, dest: str) -> fsspec.AbstractFileSystem:
        protocol = fsspec.core.split_protocol(dest)[0] or "file"
        return fsspec.filesystem(protocol, **self.storage_options)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("stats", None)  # per process; holds a lock
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.stats = IOStatisticsStore()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dest={self.url!r}, job_id={self.job_id!r})"

    @property
    def url(self) -> str:
        """The destination with its protocol, for messages and ``_SUCCESS``."""
        return self.store_fs.unstrip_protocol(self.dest)

    @property
    def success_path(self) -> str:
        return join(self.dest, SUCCESS_FILE)

    # -- the protocol ----------------------------------------------------------------------

    @property
    @abstractmethod
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem tasks write their output with (``task.path(...)`` paths)."""

    @abstractmethod
    def setup_job(self) -> None: ...

    def task_attempt(self, task_id: int, attempt: int = 0) -> TaskAttempt:
        """Hadoop-style ids for attempt ``attempt`` of task ``task_id`` of this job."""
        if task_id < 0 or attempt < 0:
            raise ValueError(f"task and attempt numbers must be >= 0, not {task_id}/{attempt}")
        attempt_id = layout_attempt_id(self.job_id, task_id, attempt)
        return TaskAttempt(
            job_id=self.job_id,
            task_index=task_id,
            attempt_number=attempt,
            task_id=layout_task_id(self.job_id, task_id),
            attempt_id=attempt_id,
            work_path=self.work_path_for(attempt_id),
        )

    @abstractmethod
    def work_path_for(self, attempt_id: str) -> str:
        """Where the attempt writes (what ``task.path(...)`` builds on)."""

    @abstractmethod
    def setup_task(self, task: TaskAttempt) -> None: ...

    def needs_task_commit(self, task: TaskAttempt) -> bool:
        """Always true: even an attempt that wrote nothing commits (an empty record)."""
        return True

    @abstractmethod
    def commit_task(self, task: TaskAttempt) -> TaskCommitMessage: ...

    @abstractmethod
    def abort_task(self, task: TaskAttempt) -> None: ...

    @abstractmethod
    def commit_job(self, messages: list[TaskCommitMessage] | None = None) -> JobSummary: ...

    @abstractmethod
    def abort_job(self) -> None: ...

    @abstractmethod
    def cleanup_job(self) -> None: ...

    # -- shared parts of job setup and task commit ------------------------------------------

    def job_active(self) -> bool:
        """Whether the job marker exists (committers that keep one: magic, manifest)."""
        raise NotImplementedError(f"the {self.name} committer keeps no job marker")

    def require_active_job(self, task: TaskAttempt) -> None:
        """Refuse to start an attempt of a job that was never set up or has ended."""
        if not self.job_active():
            raise JobNotActiveError(
                f"job {self.job_id} at {self.url} is not active (never set up, or already "
                f"committed or aborted): task attempt {task.attempt_id} cannot start"
            )

    def not_started_error(self, task: TaskAttempt) -> Exception:
        """Why an attempt with no ``.started`` marker cannot commit: job ended, or never set up."""
        if not self.job_active():
            return JobNotActiveError(
                f"job {self.job_id} is not active: task attempt {task.attempt_id} cannot commit"
            )
        return FileNotFoundError(
            f"task attempt {task.attempt_id} of job {self.job_id} was never set up, or was "
            "aborted: it cannot commit"
        )

    def job_marker_document(self) -> bytes:
        """The job marker's JSON: which job is active where, since when, started by whom."""
        marker = {
            "jobId": self.job_id,
            "committer": self.name,
            "destination": self.url,
            "created": int(time.time() * 1000),
            "hostname": socket.gethostname(),
        }
        return json.dumps(marker).encode()

    def task_committed(
        self, task: TaskAttempt, record: str, files: int, size: int, start: float, verb: str
    ) -> TaskCommitMessage:
        """Log a committed task (``verb``: what its commit did) and build its message."""
        log.info(
            "task %s: %s %d files (%d bytes) in %.2fs (%s committer)",
            task.attempt_id,
            verb,
            files,
            size,
            elapsed(start),
            self.name,
        )
        return TaskCommitMessage(
            committer=self.name,
            job_id=self.job_id,
            task_id=task.task_id,
            attempt_id=task.attempt_id,
            record=record,
            files=files,
            bytes=size,
        )

    # -- shared parts of job commit ------------------------------------------------------

    def check_messages(self, messages: list[TaskCommitMessage], records_under: str) -> list[str]:
        """The records named by ``messages``, once each is known to be this job's own.

        One message per task, from this job, naming a record under ``records_under``; a
        missing message (Spark's ``None`` for a task that never reported) is an error.
        """
        tasks: dict[str, str] = {}
        for index, message in enumerate(messages):
            if message is None:
                raise CommitFailedError(
                    f"job {self.job_id}: message {index} is missing: a task did not report, "
                    "so the job cannot be committed"
                )
            if message.job_id != self.job_id:
                raise CommitFailedError(
                    f"job {self.job_id}: message for task {message.task_id} comes from job "
                    f"{message.job_id}"
                )
            if not message.record.startswith(records_under.rstrip("/") + "/"):
                raise CommitFailedError(
                    f"job {self.job_id}: message for task {message.task_id} names a record "
                    f"outside this job: {message.record}"
                )
            if message.task_id in tasks:
                raise CommitFailedError(
                    f"job {self.job_id}: two messages for task {message.task_id} (attempts "
                    f"{tasks[message.task_id]} and {message.attempt_id})"
                )
            tasks[message.task_id] = message.attempt_id
        return [message.record for message in messages]

    def success_from_pendingsets(
        self,
        pendingsets: list[tuple[str, PendingSet]],
        completed: list[SinglePendingCommit],
        total_bytes: int,
        start: float,
        rows: int | None,
        description: str,
        **diagnostics: str,
    ) -> SuccessData:
        """``_SUCCESS`` of a job that completed uploads (the magic and staging committers).

        The statistics are the job's own plus every task's, as Hadoop aggregates them.
        """
        self.stats.increment("committer_files_committed", len(completed))
        self.stats.increment("committer_tasks_completed", len(pendingsets))
        statistics = self.stats.snapshot()
        for _, pendingset in pendingsets:
            statistics.aggregate(pendingset.iostatistics)
        success = SuccessData(
            committer=self.name,
            description=description,
            job_id=self.job_id,
            job_id_source=self.job_id_source,
            metrics=self.metrics(len(completed), total_bytes, len(pendingsets), start, rows),
            diagnostics=self.diagnostics(**diagnostics),
            iostatistics=statistics,
        )
        for commit in sorted(completed, key=lambda c: c.destination_key):
            success.add_filename("/" + commit.destination_key)
        return success

    def metrics(
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

    def diagnostics(self, **extra: str) -> dict[str, str]:
        """``_SUCCESS`` diagnostics: how the job was configured."""
        return {
            "magicfs.destination": self.url,
            "magicfs.committer.threads": str(self.threads),
            "magicfs.conflict_mode": self.conflict_mode,
            **extra,
        }

    def summarise(
        self, files: int, size: int, tasks: int, start: float, filenames: list[str]
    ) -> JobSummary:
        """The :class:`JobSummary` of a committed job, logged at INFO."""
        summary = JobSummary(
            job_id=self.job_id,
            destination=self.url,
            committer=self.name,
            files=files,
            bytes=size,
            tasks=tasks,
            seconds=elapsed(start),
            success_file=self.store_fs.unstrip_protocol(self.success_path)
            if self.success_file
            else None,
            filenames=list(filenames),
            counters=dict(self.stats.counters()),
        )
        log.info(
            "job %s: committed %d files (%d bytes) from %d tasks to %s in %.2fs (%s committer)",
            self.job_id,
            files,
            size,
            tasks,
            self.url,
            summary.seconds,
            self.name,
        )
        return summary

    # -- conflict handling shared by every committer -------------------------------------

    def _delete_files(self, paths: list[str]) -> None:
        self.store_fs.rm(paths)

    def visible_entries(self) -> list[str]:
        """Top-level entries of the destination that readers would see (one listing)."""
        try:
            entries = self.store_fs.ls(self.dest, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries]
        return [
            entry
            for entry, name in zip(entries, names, strict=True)
            if name and not name.startswith(("_", ".")) and entry.rstrip("/") != self.dest
        ]

    def check_no_conflict(self, stage: str) -> None:
        """``fail`` mode: refuse a destination with visible data."""
        if self.conflict_mode != "fail":
            return
        entries = self.visible_entries()
        if entries:
            raise CommitConflictError(
                f"{self.url}: destination already holds data ({len(entries)} entries, e.g. "
                f"{self.store_fs.unstrip_protocol(entries[0])}) and conflict_mode is 'fail' "
                f"(checked at {stage})"
            )

    def delete_visible_data(self) -> int:
        """``replace`` mode: delete every visible file under the destination."""
        doomed: list[str] = []
        for entry in self.visible_entries():
            if self.store_fs.isdir(entry):
                doomed.extend(self.store_fs.find(entry))
            else:
                doomed.append(entry)
        if doomed:
            self._delete_files(doomed)
        log.info("%s: replace mode deleted %d existing files", self.url, len(doomed))
        return len(doomed)


def elapsed(start: float) -> float:
    """Seconds since ``start`` (a ``time.monotonic()`` reading)."""
    return time.monotonic() - start
