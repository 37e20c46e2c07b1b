"""Stage 4 (optional, ``validate_output=True``): check every renamed file.

Each destination must be a file of the size its task recorded, and, where the store
keeps etags through a rename, carry the same etag. One ``info()`` per file: a
diagnostic for tests and suspicious stores, off by default (as in Hadoop).
"""

from __future__ import annotations

from ...errors import CommitFailedError
from ...records import FileEntry
from .context import StageContext
from .load import LoadedManifests


class OutputValidationError(CommitFailedError):
    """A committed file is missing or not what its task wrote."""


def validate_output(context: StageContext, loaded: LoadedManifests) -> int:
    """Raise :class:`OutputValidationError` naming the first file that does not match."""
    store = context.store

    def check(entry: FileEntry) -> None:
        path = store.path(entry.dest)
        info = store.info(path)
        if info is None or info.get("type") != "file":
            raise OutputValidationError(f"{entry.dest}: committed file is missing")
        if info.get("size") != entry.size:
            raise OutputValidationError(
                f"{entry.dest}: size {info.get('size')} but the task wrote {entry.size} bytes"
            )
        if entry.etag and store.etags_preserved_in_rename and store.etag(info) != entry.etag:
            raise OutputValidationError(
                f"{entry.dest}: etag {store.etag(info)} but the task wrote {entry.etag}"
            )

    with context.stats.track("job_stage_optional_validate_output"):
        return sum(1 for _ in context.parallel(check, loaded.entries(), "validating", loaded.files))
