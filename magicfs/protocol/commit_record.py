"""The job commit record: written once a job's files are all visible, before ``_SUCCESS``.

What readers of a destination rely on to read whole jobs only
(:mod:`magicfs.readers.snapshot`; the format: :mod:`magicfs.records.job_record`). The
job commit's ``success`` stage lists the destination's records once (for the next
sequence number), writes the file list, then the head; the head's existence means the
commit finished. A commit that fails after writing it and is rolled back withdraws
the head first (:meth:`CommitRecord.withdraw`), before any of its files is deleted
again, so no reader resolves a file that is about to go. A commit that resumes from
its journal writes both again under the names of its earlier head, if it wrote one.

Written through the job's own record writer (its journal's, :class:`.journal.RecordIO`:
magicfs's requests, with the checksum headers a store needs and a length), each part as
one object: the file list is spooled locally first (a temporary file past
:data:`_IN_MEMORY` bytes, about 30 bytes a file compressed), then uploaded whole. Listed
and deleted through the store's fsspec filesystem, the one readers use.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
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
from ..stores.rename import RenameStore
from .hooks import CommitterHooks, Loaded
from .journal import RecordIO

log = logging.getLogger("magicfs.committer")

#: A file list up to this size (compressed) is spooled in memory, a longer one on disk.
_IN_MEMORY = 8 << 20


class CommitRecord:
    """The job commit record of ``committer``'s job at its destination."""

    def __init__(self, committer: CommitterHooks, io: RecordIO | None):
        self.committer = committer
        #: The job's record writer (``None``: a committer without a journal, whose
        #: tasks' files are not listed, writes no record).
        self.io = io
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
        if files is None or self.io is None:
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
        with tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY) as spool:
            count, size = write_file_list(spool, files)
            spool.seek(0)
            self._put(join(self.directory, file_list), spool.read())
        record = JobRecord(
            job_id=c.job_id,
            mode="replace" if c.conflict_mode == "replace" else "append",
            files=count,
            bytes=size,
            file_list=file_list,
            committer=c.name,
        )
        self.written = (head, join(self.directory, file_list))
        self._put(head, record.to_bytes())
        fs.invalidate_cache(self.directory)  # written past the filesystem's own listings
        return record

    def _put(self, path: str, data: bytes) -> None:
        """One object, whole: through the job's writer, but on a rename store that is not
        a local disk (GCS), whose writer adds a temporary name and a rename, one PUT."""
        assert self.io is not None
        fs = self.committer.store_fs
        if isinstance(self.io, RenameStore) and not is_local(fs):
            fs.pipe_file(path, data)
        else:
            self.io.write(path, data)

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
