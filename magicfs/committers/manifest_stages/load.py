"""Stage 1: load the task manifests, in parallel and streaming.

Each manifest is loaded and validated on a worker thread; its file entries are
appended to a local JSON-lines file (named with the process id: a killed commit's file
is deleted by the next commit, :func:`~magicfs.stores.spool.process_temp_file`) and
then dropped, so memory holds at most about
one manifest per thread however many files the job has (MAPREDUCE-7435's lesson).
Directory entries are merged in memory (first one wins): there are far fewer of them.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from ...errors import InvalidCommitData
from ...records import DirEntry, FileEntry, IOStatisticsSnapshot, TaskManifest
from ...stores.spool import process_temp_file
from .context import StageContext


@dataclass
class LoadedManifests:
    """What the job commits: counts, directories, and the file entries on local disk."""

    entries_file: str
    files: int = 0
    bytes: int = 0
    task_ids: list[str] = field(default_factory=list)
    attempt_ids: list[str] = field(default_factory=list)
    directories: dict[str, DirEntry] = field(default_factory=dict)
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)

    def entries(self) -> Iterator[FileEntry]:
        """The file entries, read back one at a time."""
        with open(self.entries_file, encoding="utf-8") as lines:
            for line in lines:
                data = json.loads(line)
                yield FileEntry(data["s"], data["d"], data["z"], data.get("e"))

    def discard(self) -> None:
        if os.path.exists(self.entries_file):
            os.unlink(self.entries_file)


def load_manifests(context: StageContext, paths: list[str]) -> LoadedManifests:
    """Load, validate and merge the manifests at ``paths``.

    Every manifest must belong to this job and put its files and directories inside
    the destination; a bad one raises :class:`InvalidCommitData` naming it.
    """
    handle, entries_file = process_temp_file("magicfs-manifest-entries-", ".jsonl")
    loaded = LoadedManifests(entries_file=entries_file)
    lock = threading.Lock()
    dest_uri = context.store.uri(context.layout.dest)

    def load(path: str) -> None:
        source = context.store.fs.unstrip_protocol(path)
        with context.stats.track("op_load_manifest"):
            data = context.store.read_bytes(path, TaskManifest.MAX_BYTES)
        manifest = TaskManifest.from_json(data, source=source)
        if manifest.job_id != context.job_id:
            raise InvalidCommitData(
                source,
                "jobId",
                f"Mismatch in Job ID: the manifest is for job {manifest.job_id}, "
                f"this is job {context.job_id}",
            )
        manifest.check_destination(dest_uri, source)
        if "/" in manifest.task_attempt_id or not manifest.task_attempt_id.strip("."):
            raise InvalidCommitData(
                source, "taskAttemptID", f"{manifest.task_attempt_id!r} is not a task attempt id"
            )
        attempt_dir = context.layout.task_attempt_dir(manifest.task_attempt_id)
        manifest.check_sources(context.store.uri(attempt_dir), source)
        lines = "".join(json.dumps(entry.to_dict()) + "\n" for entry in manifest.files)
        with lock:
            output.write(lines)
            loaded.files += len(manifest.files)
            loaded.bytes += manifest.total_bytes
            loaded.task_ids.append(manifest.task_id)
            loaded.attempt_ids.append(manifest.task_attempt_id)
            loaded.iostatistics.aggregate(manifest.iostatistics)
            for directory in manifest.directories:
                loaded.directories.setdefault(directory.dir, directory)

    try:
        with (
            os.fdopen(handle, "w", encoding="utf-8") as output,
            context.stats.track("job_stage_load_manifests"),
        ):
            for _ in context.parallel(load, paths, "loading manifests", len(paths)):
                pass
    except BaseException:
        loaded.discard()
        raise
    return loaded
