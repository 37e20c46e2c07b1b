"""The job commit record: written once a job's files are all visible, before ``_SUCCESS``.

What readers of a destination rely on to read whole jobs only
(:mod:`magicfs.readers.snapshot`; the format: :mod:`magicfs.records.job_record`). The
job commit's ``success`` stage lists the destination's records once (for the next
sequence number), writes the file list (and a replace job's retire list), then the
head; the head's existence means the commit finished. A commit that fails after writing
it and is rolled back withdraws the head first (:meth:`CommitRecord.withdraw`), before
any of its files is deleted again, so no reader resolves a file that is about to go. A
commit that resumes from its journal writes them again under the names of its earlier
head, if it wrote one.

**Retiring a replace job's old files.** They are deleted only after the new head is
written, and only once the job's ``replace_retention`` has passed: by the job itself
when it is 0, else by the next job that commits on the destination or by
``magicfs jobs vacuum`` (:func:`vacuum`). The retire list says what is still to delete;
it is deleted last, so a committer that dies half-way leaves it for the next one. A
retire list without its head belongs to a commit that did not finish (the journal's
roll-back or recovery owns it) and is left alone. A path that a job recorded after the
replace wrote again is not deleted: it is that job's file now.

Written through the job's own record writer (its journal's, :class:`.journal.RecordIO`:
magicfs's requests, with the checksum headers a store needs and a length), each part as
one object: a list is spooled locally first (a temporary file past :data:`_IN_MEMORY`
bytes, about 30 bytes a file compressed), then uploaded whole. Listed and deleted
through the store's fsspec filesystem, the one readers use.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..names import RETIRE_LIST_SUFFIX
from ..paths import join
from ..records._base import now_millis
from ..records.job_record import (
    CommittedFile,
    JobRecord,
    file_list_name,
    head_name,
    parse_head_name,
    read_file_list,
    records_dir,
    retire_list_name,
    write_file_list,
)
from ..stores.capabilities import is_local
from ..stores.rename import RenameStore
from ..stores.spool import KeySet
from .hooks import CommitterHooks, Loaded
from .journal import RecordIO

log = logging.getLogger("magicfs.committer")

#: A list up to this size (compressed) is spooled in memory, a longer one on disk.
_IN_MEMORY = 8 << 20
#: Old files deleted at a time.
_BATCH = 1000


class CommitRecord:
    """The job commit record of ``committer``'s job at its destination."""

    def __init__(self, committer: CommitterHooks, io: RecordIO | None):
        self.committer = committer
        #: The job's record writer (``None``: a committer without a journal, whose
        #: tasks' files are not listed, writes no record).
        self.io = io
        self.directory = records_dir(committer.dest)
        #: The objects this commit wrote (head first), once written.
        self.written: list[str] = []
        #: The names listed under the records' directory when this commit wrote its own.
        self.listed: list[str] = []

    def publish(
        self, loaded: Loaded, resuming: bool, retire: Iterable[list[str]] | None = None
    ) -> JobRecord | None:
        """Write the record of ``loaded`` (all of it visible by now): lists, then head.

        ``resuming``: the commit resumes from its journal, so a head of this job found
        is its own, written before it stopped (a job id reused later at the same
        destination is another job, whose record stays). ``retire``: a replace job's old
        files (the journal's delete pages), to delete once the head is written and the
        retention has passed. ``None``: the committer lists no files (the classic
        committers) and writes none.
        """
        c = self.committer
        files = c.committed_files(loaded)
        if files is None or self.io is None:
            return None
        fs = c.store_fs
        if is_local(fs):
            fs.makedirs(self.directory, exist_ok=True)
        self.listed = _names(fs, self.directory)
        listed = [parsed for name in self.listed if (parsed := parse_head_name(name))]
        mine = [sequence for sequence, job_id in listed if job_id == c.job_id]
        if resuming and mine:
            sequence = max(mine)
        else:
            sequence = max((sequence for sequence, _ in listed), default=0) + 1
        head = join(self.directory, head_name(sequence, c.job_id))
        file_list = file_list_name(sequence, c.job_id)
        self.written = [head, join(self.directory, file_list)]
        count, size = self._write_list(file_list, files)
        retire_name = ""
        if retire is not None:
            retire_name = retire_list_name(sequence, c.job_id)
            self.written.append(join(self.directory, retire_name))
            prefix = len(c.dest) + 1
            old = (CommittedFile(path[prefix:], 0) for page in retire for path in page)
            self._write_list(retire_name, old)
        partitions = c.replaced_partitions(loaded) if c.options.conflict_mode == "replace" else None
        mode = "append"
        if c.options.conflict_mode == "replace":
            mode = "replace-partitions" if partitions else "replace"
        if partitions == []:  # a partitioned replace that wrote no partition replaced none
            mode = "append"
        committed = now_millis()
        record = JobRecord(
            job_id=c.job_id,
            mode=mode,
            files=count,
            bytes=size,
            file_list=file_list,
            committer=c.name,
            committed=committed,
            partitions=sorted(partitions or []),
            retire=retire_name,
            retire_after=committed + int(c.options.replace_retention * 1000) if retire_name else 0,
        )
        self._put(head, record.to_bytes())
        fs.invalidate_cache(self.directory)  # written past the filesystem's own listings
        return record

    def _write_list(self, name: str, entries: Iterable[CommittedFile]) -> tuple[int, int]:
        assert self.io is not None
        with tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY) as spool:
            count, size = write_file_list(spool, entries)
            spool.seek(0)
            self._put(join(self.directory, name), spool.read())
        return count, size

    def _put(self, path: str, data: bytes) -> None:
        """One object, whole: through the job's writer, but on a rename store that is not
        a local disk (GCS), whose writer adds a temporary name and a rename, one PUT."""
        assert self.io is not None
        fs = self.committer.store_fs
        if isinstance(self.io, RenameStore) and not is_local(fs):
            fs.pipe_file(path, data)
        else:
            self.io.write(path, data)

    def retire_own(self, record: JobRecord) -> int:
        """Delete the old files of this commit's own record now (its retention is 0)."""
        deleted = retire(self.committer, self.written[0], record, self.listed)
        self.committer.removed_old_files()
        return deleted

    def vacuum_others(self) -> None:
        """Finish what other replace jobs left to delete here (their retention passed, or
        they died before deleting), from the listing :meth:`publish` made. Best effort:
        this job is committed whatever happens here, so a failure is logged, not raised."""
        own = [path.rsplit("/", 1)[-1] for path in self.written]
        others = [n for n in self.listed if n.rstrip("/").rsplit("/", 1)[-1] not in own]
        try:  # this job's own head is listed too: a file it wrote again is kept
            vacuum(self.committer, names=others + own[:1])
        except Exception as e:
            log.warning(
                "%s: old files of an earlier replace job are still to delete (%s: %s); the "
                "next job here or `magicfs jobs vacuum %s` deletes them",
                self.committer.url,
                type(e).__name__,
                e,
                self.committer.url,
            )

    def withdraw(self, since: int) -> None:
        """Delete this job's record, head first (a rolled-back commit; none is fine).

        What this commit wrote, if it wrote it here; else (the roll-back of a commit
        another process started) the heads of this job id written since ``since`` (the
        journal's creation, milliseconds): an earlier job of the same id keeps its own.
        """
        fs = self.committer.store_fs
        doomed = list(self.written)
        if not doomed:
            for name in _names(fs, self.directory):
                parsed = parse_head_name(name)
                if parsed is None or parsed[1] != self.committer.job_id:
                    continue
                head = join(self.directory, name.rstrip("/").rsplit("/", 1)[-1])
                try:
                    record = JobRecord.load(fs, head)
                except FileNotFoundError:
                    continue
                if record.committed >= since:
                    doomed.append(head)
                    doomed += [join(self.directory, n) for n in (record.file_list, record.retire)]
        for path in doomed:
            if not path.endswith("/"):
                _remove(fs, path)
        self.written = []


@dataclass
class Retired:
    """What :func:`vacuum` did with one replace job's retire list."""

    job_id: str
    deleted: int  # old files deleted (or already gone)
    waiting_ms: int  # > 0: not yet, its retention has this long to run


def vacuum(
    committer: CommitterHooks, *, names: list[str] | None = None, now: int | None = None
) -> list[Retired]:
    """Finish the replace jobs' unfinished deletions at ``committer``'s destination.

    ``names``: the records' directory as listed (``None``: list it, one request). A
    retire list whose head is there and whose ``retireAfter`` has passed (``now``,
    milliseconds; default the clock) is carried out; others are reported waiting.
    """
    fs = committer.store_fs
    directory = records_dir(committer.dest)
    if names is None:
        names = _names(fs, directory)
    leaves = [name.rstrip("/").rsplit("/", 1)[-1] for name in names]
    heads = set(leaves)
    now = now_millis() if now is None else now
    done: list[Retired] = []
    for leaf in sorted(leaves):
        if not leaf.endswith(RETIRE_LIST_SUFFIX):
            continue
        head = leaf[: -len(RETIRE_LIST_SUFFIX)] + ".json"
        if head not in heads or parse_head_name(head) is None:
            continue  # no head: that commit did not finish, its journal owns it
        try:
            record = JobRecord.load(fs, join(directory, head))
        except FileNotFoundError:
            continue
        if record.retire != leaf:
            continue
        if record.retire_after > now:
            done.append(Retired(record.job_id, 0, record.retire_after - now))
            continue
        deleted = retire(committer, join(directory, head), record, leaves)
        done.append(Retired(record.job_id, deleted, 0))
    return done


def retire(committer: CommitterHooks, head: str, record: JobRecord, listed: list[str]) -> int:
    """Delete the old files ``record``'s retire list names, then the list; returns how many.

    A path that a job recorded at or after this one (``listed``: the records' directory)
    wrote again is kept: it is that job's file now.
    """
    fs = committer.store_fs
    directory = records_dir(committer.dest)
    fs.invalidate_cache(directory)
    sequence = parse_head_name(head)
    assert sequence is not None
    keep = KeySet()
    try:
        for name in listed:
            later = parse_head_name(name)
            if later is None or later[0] < sequence[0] or later[1] == record.job_id:
                continue
            other = JobRecord.load(fs, join(directory, name.rstrip("/").rsplit("/", 1)[-1]))
            keep.update(e.path for e in read_file_list(fs, join(directory, other.file_list)))
        retire_path = join(directory, record.retire)
        try:
            entries: Iterator[CommittedFile] = read_file_list(fs, retire_path)
            deleted = 0
            emptied: set[str] = set()
            while batch := list(itertools.islice(entries, _BATCH)):
                paths = [join(committer.dest, e.path) for e in batch if e.path not in keep]
                committer.delete_files(paths)
                deleted += len(paths)
                emptied.update(path.rsplit("/", 1)[0] for path in paths)
        except FileNotFoundError:  # finished already (by another job or the operator)
            return 0
    finally:
        keep.discard()
    if is_local(fs):
        _remove_empty_directories(fs, committer.dest, emptied)
    _remove(fs, retire_path)
    log.info("%s: deleted %d old files of replace job %s", committer.url, deleted, record.job_id)
    return deleted


def _remove_empty_directories(fs: Any, dest: str, directories: set[str]) -> None:
    """A local disk: the old files' directories left empty go (deepest first), so no
    reader sees an empty partition; anything holding a file stays."""
    parents: set[str] = set()
    for directory in directories:
        while directory.startswith(dest + "/") and directory not in parents:
            parents.add(directory)
            directory = directory.rsplit("/", 1)[0]
    for directory in sorted(parents, key=lambda p: (-p.count("/"), p)):
        with contextlib.suppress(OSError):
            fs.rmdir(directory)


def _names(fs: Any, directory: str) -> list[str]:
    """Every name under the records' directory (one listing)."""
    try:
        return [str(name) for name in fs.ls(directory, detail=False, refresh=True)]
    except FileNotFoundError:
        return []


def _remove(fs: Any, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(path)
