"""Text views of commit records for operators: what a record says, not its raw JSON.

``magicfs inspect`` and ``magicfs success`` share these; ``--json`` prints the records'
own Hadoop JSON (``to_dict()``) instead. Long lists are cut at ``limit`` entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...records import (
    EntryStatus,
    IOStatisticsSnapshot,
    PendingSet,
    SinglePendingCommit,
    SuccessData,
    TaskManifest,
)
from ...records._base import iso_millis
from .common import fields, first, human_bytes, plural


def statistics(snapshot: IOStatisticsSnapshot) -> list[str]:
    """Hadoop's pretty IOStatistics under a ``Statistics:`` heading (nothing if empty)."""
    text = snapshot.pretty()
    return ["Statistics:", text] if text else ["Statistics: none"]


def extra(data: dict[str, str], title: str) -> list[str]:
    if not data:
        return []
    return [f"{title}:"] + [f"  {key} = {data[key]}" for key in sorted(data)]


def pending(commit: SinglePendingCommit, limit: int) -> list[str]:
    lines = fields(
        [
            ("destination", f"s3://{commit.destination}"),
            ("upload id", commit.upload_id),
            ("length", f"{human_bytes(commit.length)} in {plural(commit.part_count, 'part')}"),
            ("written as", commit.uri),
            ("job id", commit.job_id),
            ("task", commit.task_id),
            ("created", commit.date or iso_millis(commit.created)),
            ("text", commit.text),
        ],
        indent="  ",
    )
    shown, suffix = first(commit.etags, limit)
    lines.append(f"Part ETags {suffix}:")
    lines += [f"  {number:>5}  {etag}" for number, etag in enumerate(shown, 1)]
    return lines + extra(commit.extra_data, "Extra data") + statistics(commit.iostatistics)


def pendingset(record: PendingSet, limit: int) -> list[str]:
    lines = fields(
        [
            ("job id", record.job_id),
            ("task attempt", record.task_attempt_id),
            ("uploads", plural(len(record.commits), "upload")),
            ("bytes", human_bytes(record.total_bytes)),
        ],
        indent="  ",
    )
    shown, suffix = first(record.commits, limit)
    lines.append(f"Uploads {suffix}:")
    lines += [
        f"  s3://{c.destination}  {human_bytes(c.length)}  "
        f"{plural(c.part_count, 'part')}  upload {c.upload_id}"
        for c in shown
    ]
    return lines + extra(record.extra_data, "Extra data") + statistics(record.iostatistics)


def manifest(record: TaskManifest, limit: int) -> list[str]:
    lines = fields(
        [
            ("job id", record.job_id),
            ("job attempt", record.job_attempt_number),
            ("task", record.task_id),
            ("task attempt", record.task_attempt_id),
            ("attempt dir", record.task_attempt_dir),
            ("files", plural(len(record.files), "file")),
            ("bytes", human_bytes(record.total_bytes)),
            ("directories", plural(len(record.directories), "directory")),
        ],
        indent="  ",
    )
    shown, suffix = first(record.files, limit)
    lines.append(f"Files {suffix}:")
    lines += [f"  {f.source} -> {f.dest}  {human_bytes(f.size)}" for f in shown]
    dirs, suffix = first(record.directories, limit)
    lines.append(f"Directories {suffix}:")
    lines += [f"  {d.dir}  ({_status(d.status)}, level {d.level})" for d in dirs]
    return lines + extra(record.extra_data, "Extra data") + statistics(record.iostatistics)


def _status(code: int) -> str:
    try:
        return EntryStatus(code).name.lower().replace("_", " ")
    except ValueError:
        return f"status {code}"


@dataclass(frozen=True)
class JobTotals:
    """What a ``_SUCCESS`` says the job committed, whichever committer wrote it.

    magicfs writes ``metrics`` files/bytes/tasks/duration_ms; Hadoop's committers only
    count in their IOStatistics (S3A: ``committer_commits_completed``, manifest:
    ``committer_files_committed``; both ``committer_bytes_committed``). ``None``: unknown.
    """

    files: int | None
    bytes: int | None
    tasks: int | None
    duration_ms: int | None

    @classmethod
    def of(cls, success: SuccessData) -> JobTotals:
        metrics = success.metrics
        counters = success.iostatistics.counters
        commit_job = success.iostatistics.meanstatistics.get("committer_commit_job.mean")
        return cls(
            files=_first_known(
                metrics.get("files"),
                counters.get("committer_files_committed"),
                counters.get("committer_commits_completed"),
            ),
            bytes=_first_known(metrics.get("bytes"), counters.get("committer_bytes_committed")),
            tasks=_first_known(metrics.get("tasks"), counters.get("committer_tasks_completed")),
            duration_ms=_first_known(
                metrics.get("duration_ms"),
                commit_job.sum if commit_job and commit_job.samples == 1 else None,
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "tasks": self.tasks,
            "duration_ms": self.duration_ms,
        }


#: The ``metrics`` magicfs writes, shown above as files/bytes/tasks/duration.
_TOTALS = {"files", "bytes", "tasks", "duration_ms"}


def _first_known(*values: int | None) -> int | None:
    return next((value for value in values if value is not None), None)


def success(record: SuccessData, limit: int) -> list[str]:
    totals = JobTotals.of(record)
    lines = fields(
        [
            ("succeeded", str(record.success).lower()),
            ("committer", record.committer),
            ("description", record.description),
            ("job id", record.job_id),
            ("job id source", record.job_id_source),
            ("host", record.hostname),
            ("date", record.date or iso_millis(record.timestamp)),
            ("files", _known(totals.files, lambda n: f"{n:,}")),
            ("bytes", _known(totals.bytes, human_bytes)),
            ("tasks", _known(totals.tasks, lambda n: f"{n:,}")),
            ("duration", _known(totals.duration_ms, lambda ms: f"{ms / 1000:.3f} s")),
            ("stage", record.stage),
            ("state", record.state),
        ],
        indent="  ",
    )
    shown, suffix = first(record.filenames, limit)
    if totals.files is not None and totals.files > len(record.filenames):
        suffix = f"{suffix[:-1]}; the record keeps the first {len(record.filenames):,})"
    lines.append(f"Files {suffix}:")
    lines += [f"  {name}" for name in shown]
    lines += extra(record.diagnostics, "Diagnostics")
    others = sorted(set(record.metrics) - _TOTALS)  # e.g. Hadoop's S3A instrumentation
    if others:
        lines += ["Metrics:"] + [f"  {k} = {record.metrics[k]}" for k in others]
    return lines + statistics(record.iostatistics)


def _known(value: int | None, show: Any) -> str:
    return "unknown" if value is None else show(value)
