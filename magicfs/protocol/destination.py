"""What the destination shows readers, and the conflict policy built on it.

**Visible data** is any entry of the destination whose name does not start with ``_``
or ``.`` (Spark, Hive and pyarrow skip ``_SUCCESS``, ``__magic_job-*`` and
``_temporary`` by that convention). ``fail`` mode refuses a destination holding some;
``replace`` mode deletes it (:meth:`DestinationView._visible_files`).
"""

from __future__ import annotations

import json

from ..errors import CommitConflictError
from ..records import SuccessData
from .options import CommitterOptions


class DestinationView(CommitterOptions):
    """Reads of the destination shared by job setup, job commit and abort."""

    def _visible_entries(self) -> list[str]:
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

    def _visible_files(self) -> list[str]:
        """Every file of the destination's visible data (what ``replace`` deletes)."""
        files: list[str] = []
        for entry in self._visible_entries():
            if self.store_fs.isdir(entry):
                files.extend(self.store_fs.find(entry))
            else:
                files.append(entry)
        return files

    def _check_no_conflict(self, stage: str) -> None:
        """``fail`` mode: refuse a destination with visible data (``stage``: when checked)."""
        if self.conflict_mode != "fail":
            return
        entries = self._visible_entries()
        if entries:
            raise CommitConflictError(
                f"{self.url}: destination already holds data ({len(entries)} entries, e.g. "
                f"{self.store_fs.unstrip_protocol(entries[0])}) and conflict_mode is 'fail' "
                f"(checked at {stage})"
            )

    def _success_names_this_job(self) -> bool:
        """Whether the destination's ``_SUCCESS`` says this job committed there."""
        try:
            data = self.store_fs.cat_file(self.success_path, start=0, end=SuccessData.MAX_BYTES)
        except (FileNotFoundError, OSError):
            return False
        try:
            job_id: object = json.loads(data).get("jobId")
            return job_id == self.job_id
        except (ValueError, AttributeError):
            return False
