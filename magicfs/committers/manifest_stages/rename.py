"""Stage 3: rename every file into the destination, in parallel — and, to roll back, out again.

Reads the entries the load stage streamed to local disk, so memory stays bounded.
Each rename can first delete an existing target (``delete_targets``: needed on stores
whose rename does not overwrite) — only while the source is still in the attempt's
directory, so a retried commit never deletes a file it had already renamed.

**Rolling back** (:func:`unrename`) needs no log of what was renamed, so it works the
same after an in-process failure and after a driver died mid-commit: only job commit
moves files out of an attempt's directory, so a destination whose source has left it
was published by this commit and is deleted again; so are the (then empty) directories
the commit created for them, on local disks. On stores where a rename is a copy
then a delete, a commit stopped between the two leaves the source *and* its copy: a
destination of the recorded size modified since the commit started is that copy, and is
deleted too (the source stays, nothing is lost). Nothing of the failed job stays
visible (Hadoop leaves its renamed files in place).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...records import FileEntry
from .context import StageContext
from .directories import remove_created_directories
from .load import LoadedManifests


@dataclass
class RenameOutcome:
    files: int = 0
    bytes: int = 0
    recovered: int = 0
    first_destinations: list[str] = field(default_factory=list)


def rename_files(
    context: StageContext, loaded: LoadedManifests, delete_targets: bool = False
) -> RenameOutcome:
    """Rename every file of ``loaded`` into place (files already renamed count as done)."""
    outcome = RenameOutcome()
    lock = threading.Lock()

    def rename(entry: FileEntry) -> None:
        source, dest = context.store.path(entry.source), context.store.path(entry.dest)
        if delete_targets and context.store.info(source) is not None:
            # Only while the source is still there: a retried commit must never delete
            # a file that an earlier attempt of this commit already renamed into place.
            context.store.delete_file(dest)
        with context.stats.track("commit_file_rename"):
            recovered = context.store.rename_with_recovery(source, dest, entry.size, entry.etag)
        with lock:
            outcome.files += 1
            outcome.bytes += entry.size
            outcome.recovered += recovered
            if len(outcome.first_destinations) < 100:
                outcome.first_destinations.append(entry.dest)

    with context.stats.track("job_stage_rename_files"):
        for _ in context.parallel(rename, loaded.entries(), "renaming files", loaded.files):
            pass
    context.stats.increment("committer_files_committed", outcome.files)
    context.stats.increment("committer_bytes_committed", outcome.bytes)
    context.stats.increment("commit_file_rename_recovered", outcome.recovered)
    return outcome


def unrename(context: StageContext, loaded: LoadedManifests, since: float) -> int:
    """Delete every destination this commit published (see the module docstring).

    ``since`` is when the commit started (seconds since the epoch, the journal's
    creation): only copies made after it can be this commit's.
    """
    store = context.store
    remaining = {
        path
        for path, info in store.scan(context.layout.tasks_dir).items()
        if info.get("type") != "directory"
    }

    def undo(entry: FileEntry) -> bool:
        source, dest = store.path(entry.source), store.path(entry.dest)
        if source not in remaining:
            return store.delete_file(dest)
        if store.supports_atomic_rename:
            return False  # not renamed yet: the destination holds what it held before
        found = store.info(dest)
        if found is None or found.get("size") != entry.size:
            return False
        modified = _modified(found)
        if modified is None or modified < since - 5:  # an older file of the same name
            return False
        return store.delete_file(dest)  # copied, source not yet deleted: undo the copy

    with context.stats.track("job_stage_revert_renames"):
        reverted = sum(context.parallel(undo, loaded.entries(), "reverting renames", loaded.files))
        remove_created_directories(context, loaded.directories)
    context.stats.increment("committer_files_reverted", reverted)
    return reverted


def _modified(info: dict[str, Any]) -> float | None:
    """A listing entry's modification time, as seconds since the epoch (stores differ)."""
    for key in ("mtime", "last_modified", "LastModified", "updated", "modified"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None
