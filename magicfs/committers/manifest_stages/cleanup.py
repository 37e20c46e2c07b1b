"""Stage 6: delete the job's temporary tree: task attempt directories in parallel, then the rest.

Deleting a directory is ``O(files)`` on object stores, so the attempt directories go
in parallel first (Hadoop's PARALLEL_DELETE). Only this job's ``_temporary/<job id>``
is deleted — not all of ``_temporary`` as in Hadoop — so jobs with other ids can share
a destination; an empty ``_temporary`` left behind is removed. The commit journal is
deleted last; a ``<dest>/__magic_job-<job>`` tree (files a task wrote around magicfs,
which its task commit refused) goes too.
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass
from typing import Any

from ...names import JOURNAL_FILE
from .context import StageContext


class Outcome(enum.Enum):
    NOTHING_TO_CLEAN_UP = "nothing to clean up"
    PARALLEL_DELETE = "parallel delete"
    DELETED = "deleted"
    FAILURE = "failure"


@dataclass
class CleanupOutcome:
    outcome: Outcome
    directories_deleted: int = 0
    error: BaseException | None = None


def cleanup(context: StageContext) -> CleanupOutcome:
    """Delete the job directory; errors are returned in the outcome, not raised. (When it
    runs after a commit, the committers' ``cleanup`` option says.)"""
    store, layout = context.store, context.layout
    with context.stats.track("job_stage_cleanup"):
        if not store.fs.exists(layout.job_dir):
            return CleanupOutcome(Outcome.NOTHING_TO_CLEAN_UP)
        try:
            attempt_dirs = [
                path
                for path, info in _children(context, layout.tasks_dir)
                if info.get("type") == "directory"
            ]
            deleted = sum(
                context.parallel(
                    store.delete_tree, attempt_dirs, "deleting task attempts", len(attempt_dirs)
                )
            )
            # The commit journal goes last: a clean-up cut short leaves a job whose retried
            # commit still knows what it committed.
            rest = _children(context, layout.job_dir)
            for path, info in sorted(rest, key=lambda item: item[0].endswith(JOURNAL_FILE)):
                if info.get("type") == "directory":
                    store.delete_tree(path)
                else:
                    store.delete_file(path)
            store.delete_tree(layout.job_dir)
            # Files written to the task's magic paths *around* magicfs (not routed).
            store.delete_tree(layout.magic_dir)
            if not any(True for _ in _children(context, layout.temp_root)):
                # Another job's clean-up at the same destination may delete it first.
                with contextlib.suppress(FileNotFoundError):
                    store.delete_tree(layout.temp_root)
        except OSError as e:
            return CleanupOutcome(Outcome.FAILURE, error=e)
    outcome = Outcome.PARALLEL_DELETE if attempt_dirs else Outcome.DELETED
    return CleanupOutcome(outcome, deleted + 1)


def _children(context: StageContext, directory: str) -> list[tuple[str, dict[str, Any]]]:
    fs = context.store.fs
    fs.invalidate_cache(directory)
    try:
        return [(entry["name"], entry) for entry in fs.ls(directory, detail=True)]
    except FileNotFoundError:
        return []
