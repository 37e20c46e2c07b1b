"""Stage 3: rename every file into the destination, in parallel.

Reads the entries the load stage streamed to local disk, so memory stays bounded.
Each rename can first delete an existing target (``delete_targets``: needed on stores
whose rename does not overwrite). Every completed rename is appended to a local log
(:func:`new_rename_log`) so that a failed job can be undone: :func:`delete_renamed`
deletes those files, and nothing of the failed job stays visible (Hadoop leaves them).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass

from ...records import FileEntry
from .context import StageContext
from .load import LoadedManifests


@dataclass
class RenameOutcome:
    files: int
    bytes: int
    recovered: int
    renamed_log: str
    first_destinations: list[str]


def new_rename_log() -> str:
    """A fresh local file for :func:`rename_files` to log its renames to."""
    handle, path = tempfile.mkstemp(prefix="magicfs-renamed-", suffix=".jsonl")
    os.close(handle)
    return path


def rename_files(
    context: StageContext,
    loaded: LoadedManifests,
    renamed_log: str,
    delete_targets: bool = False,
) -> RenameOutcome:
    """Rename every file of ``loaded``, logging each to ``renamed_log`` as it is done."""
    outcome = RenameOutcome(0, 0, 0, renamed_log, [])
    lock = threading.Lock()

    def rename(entry: FileEntry) -> None:
        source, dest = context.store.path(entry.source), context.store.path(entry.dest)
        if delete_targets:
            context.store.delete_file(dest)
        with context.stats.track("commit_file_rename"):
            recovered = context.store.rename_with_recovery(source, dest, entry.size, entry.etag)
        with lock:
            log.write(json.dumps(entry.to_dict()) + "\n")
            log.flush()
            outcome.files += 1
            outcome.bytes += entry.size
            outcome.recovered += recovered
            if len(outcome.first_destinations) < 100:
                outcome.first_destinations.append(entry.dest)

    with (
        open(renamed_log, "a", encoding="utf-8") as log,
        context.stats.track("job_stage_rename_files"),
    ):
        for _ in context.parallel(rename, loaded.entries(), "renaming files", loaded.files):
            pass
    context.stats.increment("committer_files_committed", outcome.files)
    context.stats.increment("committer_bytes_committed", outcome.bytes)
    context.stats.increment("commit_file_rename_recovered", outcome.recovered)
    return outcome


def delete_renamed(context: StageContext, renamed_log: str) -> int:
    """Delete every file listed in ``renamed_log`` from the destination (a failed job)."""

    def entries():
        with open(renamed_log, encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)["d"]

    def delete(dest: str) -> bool:
        return context.store.delete_file(context.store.path(dest))

    with context.stats.track("job_stage_revert_renames"):
        reverted = sum(context.parallel(delete, entries(), "reverting renames"))  # (no total known)
    context.stats.increment("committer_files_reverted", reverted)
    return reverted
