"""Stage 2: create the destination directories the files need.

Only *leaves* are created (a directory with a child entry is made by its child's
``makedirs``). A file standing where a directory must go is deleted first (Hadoop's
"dirty tree"). Directories that already exist cost nothing beyond the probe the task
made when it built its manifest. On object stores directories are implicit, so this
stage mostly finds nothing to do.
"""

from __future__ import annotations

from ...records import DirEntry, EntryStatus
from .context import StageContext


def create_directories(context: StageContext, directories: dict[str, DirEntry]) -> int:
    """Make every leaf directory; returns how many were created."""
    with context.stats.track("job_stage_create_target_dirs"):
        entries = sorted(directories.values(), key=lambda e: (e.level, e.dir))
        parents = {e.dir.rsplit("/", 1)[0] for e in entries}
        leaves = [e for e in entries if e.dir not in parents]
        for entry in entries:  # files in the way of any directory, top down
            if entry.status == EntryStatus.FILE:
                context.store.delete_file(context.store.path(entry.dir))
                context.stats.increment("op_delete_file_in_the_way")

        def create(entry: DirEntry) -> bool:
            if entry.status in (EntryStatus.DIR, EntryStatus.CREATED_DIR):
                return False
            path = context.store.path(entry.dir)
            with context.stats.track("op_mkdirs"):
                try:
                    context.store.mkdirs(path)
                except (FileExistsError, NotADirectoryError):
                    _clear_ancestors(context, path)
                    context.store.mkdirs(path)
            return True

        created = sum(context.parallel(create, leaves, "creating directories", len(leaves)))
    return created


def remove_created_directories(context: StageContext, directories: dict[str, DirEntry]) -> int:
    """Roll back :func:`create_directories`: remove the directories it made, if empty again.

    A directory the tasks found missing (or a file standing in its place) was made by
    this commit; once its files are deleted again it would stay behind, empty, where
    readers — and a later ``conflict_mode="fail"`` job — see it as data. Deepest first;
    one that holds anything (another job's file) stays. Local disks only (see
    :meth:`RenameStore.remove_empty_directory`). Returns how many were removed.
    """
    made = [
        e for e in directories.values() if e.status in (EntryStatus.NOT_FOUND, EntryStatus.FILE)
    ]
    removed = 0
    for entry in sorted(made, key=lambda e: (-e.level, e.dir)):
        removed += context.store.remove_empty_directory(context.store.path(entry.dir))
    return removed


def _clear_ancestors(context: StageContext, path: str) -> None:
    """Delete files standing at ``path`` or any of its ancestors below the destination."""
    dest = context.layout.dest
    current = path
    while current.startswith(dest + "/"):
        info = context.store.info(current)
        if info is not None and info.get("type") == "file":
            context.store.delete_file(current)
            context.stats.increment("op_delete_file_in_the_way")
        current = current.rsplit("/", 1)[0]
