"""Task commit: scan the attempt's working directory into a manifest and save it.

One listing finds every file (source, destination, size, etag if the store has one) and
directory; a file's destination is its path below the attempt's directory with the
staged names' suffix dropped (:func:`magicfs.layouts.manifest.unstaged`). Each
destination directory's current state is probed — only where its parent exists, as in
Hadoop — so job commit knows what to create. The manifest is saved twice, each time to a
temporary name renamed into place (Hadoop's protocol): as
``tasks/<attempt>-manifest.json`` (this exact attempt, named by the task commit message)
and as ``manifests/<task id>-manifest.json`` (the last committed attempt of the task
wins). Saving is retried ``save_attempts`` times (MAPREDUCE-7474).
"""

from __future__ import annotations

import logging
import time

from ..layouts.manifest import ManifestJobLayout, unstaged
from ..paths import join
from ..protocol.attempts import TaskAttempt
from ..records import DirEntry, EntryStatus, FileEntry, IOStatisticsSnapshot, TaskManifest
from ..statistics import IOStatisticsStore
from ..stores.rename import RenameStore

log = logging.getLogger("magicfs.manifest.task")


def build_manifest(
    store: RenameStore, layout: ManifestJobLayout, task: TaskAttempt, stats: IOStatisticsStore
) -> TaskManifest:
    """The manifest of everything the attempt wrote."""
    attempt_dir = layout.task_attempt_dir(task.attempt_id)
    with stats.track("task_stage_scan_directory"):
        found = store.scan(attempt_dir)
    files: list[FileEntry] = []
    directories: set[str] = set()
    for path, info in sorted(found.items()):
        relative = unstaged(path[len(attempt_dir) + 1 :])
        if info.get("type") == "directory":
            directories.add(relative)
            continue
        files.append(
            FileEntry(
                source=store.uri(path),
                dest=store.uri(join(layout.dest, relative)),
                size=int(info.get("size") or 0),
                etag=store.etag(info),
            )
        )
        parent = relative.rsplit("/", 1)[0] if "/" in relative else ""
        while parent:  # object stores list no directories: derive them from the files
            directories.add(parent)
            parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    entries = _directory_entries(store, layout.dest, sorted(directories))
    statistics = IOStatisticsSnapshot(
        counters={
            "committer_task_file_count": len(files),
            "committer_task_directory_count": len(entries),
            "committer_task_file_size": sum(f.size for f in files),
        }
    )
    return TaskManifest(
        job_id=layout.job_id,
        job_attempt_number=layout.app_attempt,
        task_id=task.task_id,
        task_attempt_id=task.attempt_id,
        task_attempt_dir=store.uri(attempt_dir),
        files=files,
        directories=entries,
        iostatistics=statistics,
    )


def _directory_entries(store: RenameStore, dest: str, relatives: list[str]) -> list[DirEntry]:
    """A DirEntry per destination directory, with its current state (parents first)."""
    status: dict[str, EntryStatus] = {"": EntryStatus.DIR}
    entries = []
    for relative in sorted(relatives, key=lambda r: (r.count("/"), r)):
        parent = relative.rsplit("/", 1)[0] if "/" in relative else ""
        path = join(dest, relative)
        if status.get(parent) == EntryStatus.DIR:
            info = store.info(path)
            if info is None:
                state = EntryStatus.NOT_FOUND
            elif info.get("type") == "directory":
                state = EntryStatus.DIR
            else:
                state = EntryStatus.FILE
        else:
            state = EntryStatus.NOT_FOUND
        status[relative] = state
        entries.append(DirEntry(store.uri(path), state, relative.count("/") + 1))
    return entries


def save_manifest(
    store: RenameStore,
    layout: ManifestJobLayout,
    task: TaskAttempt,
    manifest: TaskManifest,
    stats: IOStatisticsStore,
    attempts: int = 5,
) -> None:
    """Save the attempt's manifest and the task's; retry failed saves."""
    data = manifest.to_bytes()
    targets = [
        (
            layout.attempt_manifest(task.attempt_id),
            layout.attempt_manifest(task.attempt_id) + ".tmp",
        ),
        (layout.manifest(task.task_id), layout.temp_manifest(task.attempt_id)),
    ]
    for path, temp in targets:
        for attempt in range(1, max(1, attempts) + 1):
            try:
                with stats.track("task_stage_save_task_manifest"):
                    store.save_atomically(path, data, temp)
                break
            except OSError as e:
                if attempt >= attempts:
                    raise
                log.warning("saving %s failed (%s); attempt %d of %d", path, e, attempt, attempts)
                time.sleep(0.5 * attempt)
