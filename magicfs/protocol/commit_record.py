"""The job commit record: written once a job's files are all visible, before ``_SUCCESS``.

What readers of a destination rely on to read whole jobs only
(:mod:`magicfs.readers.snapshot`; the format: :mod:`magicfs.records.job_record`). The
job commit's ``success`` stage lists the destination's records once (for the next
sequence number), writes the file list, then the head; the head's existence means the
commit finished. A commit that fails after writing it and is rolled back withdraws
the head first (:meth:`CommitRecord.withdraw`), before any of its files is deleted
again, so no reader resolves a file that is about to go. A commit that resumes from
its journal writes both again under the names of its earlier head, if it wrote one.

Written through the store's own fsspec filesystem, the one readers use (as the
destination's reader view is read, :mod:`.destination`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from ..paths import join
from ..records.job_record import (
    JobRecord,
    file_list_name,
    head_name,
    parse_head_name,
    records_dir,
    write_file_list,
)
from ..stores.capabilities import is_local
from .hooks import CommitterHooks, Loaded

log = logging.getLogger("magicfs.committer")


class CommitRecord:
    """The job commit record of ``committer``'s job at its destination."""

    def __init__(self, committer: CommitterHooks):
        self.committer = committer
        self.directory = records_dir(committer.dest)
        #: The (head, file list) this commit wrote, once written.
        self.written: tuple[str, str] | None = None

    def publish(self, loaded: Loaded, resuming: bool) -> JobRecord | None:
        """Write the record of ``loaded`` (all of it visible by now): list, then head.

        ``resuming``: the commit resumes from its journal, so a head of this job found
        is its own, written before it stopped (a job id reused later at the same
        destination is another job, whose record stays). ``None``: the committer lists
        no files (the classic committers) and writes none.
        """
        c = self.committer
        files = c.committed_files(loaded)
        if files is None:
            return None
        fs = c.store_fs
        if is_local(fs):
            fs.makedirs(self.directory, exist_ok=True)
        listed = self._heads()
        mine = [sequence for sequence, job_id in listed if job_id == c.job_id]
        if resuming and mine:
            sequence = max(mine)
        else:
            sequence = max((sequence for sequence, _ in listed), default=0) + 1
        head = join(self.directory, head_name(sequence, c.job_id))
        file_list = file_list_name(sequence, c.job_id)
        count, size = write_file_list(fs, join(self.directory, file_list), files)
        record = JobRecord(
            job_id=c.job_id,
            mode="replace" if c.conflict_mode == "replace" else "append",
            files=count,
            bytes=size,
            file_list=file_list,
            committer=c.name,
        )
        self.written = (head, join(self.directory, file_list))
        record.save(fs, head)
        return record

    def withdraw(self, since: int) -> None:
        """Delete this job's record, head first (a rolled-back commit; none is fine).

        What this commit wrote, if it wrote it here; else (the roll-back of a commit
        another process started) the heads of this job id written since ``since`` (the
        journal's creation, milliseconds): an earlier job of the same id keeps its own.
        """
        fs = self.committer.store_fs
        if self.written is not None:
            doomed = [self.written]
        else:
            doomed = []
            for sequence, job_id in self._heads():
                if job_id != self.committer.job_id:
                    continue
                head = join(self.directory, head_name(sequence, job_id))
                try:
                    record = JobRecord.load(fs, head)
                except FileNotFoundError:
                    continue
                if record.committed >= since:
                    doomed.append((head, join(self.directory, record.file_list)))
        for paths in doomed:
            for path in paths:
                _remove(fs, path)
        self.written = None

    def _heads(self) -> list[tuple[int, str]]:
        """(sequence, job id) of every head listed (one listing)."""
        try:
            names = self.committer.store_fs.ls(self.directory, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return [parsed for name in names if (parsed := parse_head_name(name)) is not None]


def _remove(fs: Any, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)
