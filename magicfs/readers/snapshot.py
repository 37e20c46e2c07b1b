"""A destination's snapshot: the files of exactly the jobs whose commit finished.

A reader that lists a destination sees what is there now: during a job commit, some of
the job's files; after a killed commit, the files it completed. A reader of a
snapshot sees whole jobs only. Every job commit writes a *job commit record* under
``<dest>/_magicfs/jobs/`` once its last file is visible (:mod:`magicfs.records.job_record`:
a small head, written last, and a streamed file list), so :func:`snapshot` resolves:

1. one listing of ``_magicfs/jobs/`` (one request per 1,000 jobs on object stores);
2. the heads, newest first, until the newest ``replace`` job (one GET each): that job
   and every later job are the snapshot (``append`` and ``fail`` jobs add to it);
3. the jobs' file lists, streamed while the caller iterates (one GET each, and a few
   more for a list past the store's read block).

Requests grow with jobs, never with files, and memory stays flat: the files are yielded
one at a time; a path that two jobs of the snapshot both wrote (the later job replaced
the object in place) is yielded once, which needs a set of the paths seen, kept in a
local SQLite spool that moves to disk once large (:class:`~magicfs.stores.spool.KeySet`).

**The order of jobs** is the one every reader sees alike without asking anyone: the
sequence number in each head's name, then the store's modification time of the head
as the listing reports it, then the job id. A job writes its record after all its
files are visible, numbered one more than the highest it lists there at that moment.
The order matters only between a ``replace`` job and another job, and the number is
exact for every job that began its record after the other's head existed: a job that
finished before a replace began committing has a lower number (its files are the old
data the replace deletes), one that started after it a higher one. Only two jobs that
write their records at the same moment can draw the same number; they are ordered by
the store's clock (S3: to the second), then by job id. Such jobs committed at the same
time, and which came first is not defined for a plain listing either (nor whether a
``replace`` deleted the files of an ``append`` running beside it).

A commit that is running, was killed before its head, failed or was aborted has no
head, so nothing of it is in a snapshot; a rolled-back commit withdraws its head before
deleting a file again (:mod:`magicfs.protocol.commit_record`).
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import fsspec

from ..errors import InvalidCommitData, NoSnapshotError
from ..filesystems.originals import store_filesystem, unwrapped
from ..paths import join
from ..records.job_record import (
    CommittedFile,
    JobRecord,
    parse_head_name,
    read_file_list,
    records_dir,
)
from ..stores.spool import KeySet

#: Paths checked against the set of those already yielded at a time.
_BATCH = 1000


@dataclass
class Snapshot:
    """The committed jobs of a destination, as resolved once (see the module docstring).

    ``jobs``: their heads, oldest first (the newest ``replace`` first of all, if any).
    Iterating yields each file's path as ``fs`` names it; :meth:`paths` and :meth:`urls`
    are the list forms engines take.
    """

    fs: fsspec.AbstractFileSystem
    path: str
    jobs: list[JobRecord]
    storage_options: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return cast(str, self.fs.unstrip_protocol(self.path))

    @property
    def files(self) -> int:
        """Files the jobs published (a path two jobs wrote counts twice)."""
        return sum(job.files for job in self.jobs)

    @property
    def bytes(self) -> int:
        return sum(job.bytes for job in self.jobs)

    def committed_files(self) -> Iterator[CommittedFile]:
        """Each file once, relative to the destination, with the size its job wrote;
        streamed (one file list at a time). A file under a partition that a later
        ``replace-partitions`` job replaced is left out."""
        directory = records_dir(self.path)
        lists = (
            _outside(read_file_list(self.fs, join(directory, job.file_list)), replaced)
            for job, replaced in zip(self.jobs, _replaced_later(self.jobs), strict=True)
        )
        if len(self.jobs) < 2:  # one job never names a file twice (checked at its commit)
            yield from itertools.chain.from_iterable(lists)
            return
        seen = KeySet()
        try:
            entries = itertools.chain.from_iterable(lists)
            while batch := list(itertools.islice(entries, _BATCH)):
                new = seen.add_new([entry.path for entry in batch])
                for entry in batch:
                    if entry.path in new:
                        new.discard(entry.path)  # a second time in the batch: not new
                        yield entry
        finally:
            seen.discard()

    def __iter__(self) -> Iterator[str]:
        for entry in self.committed_files():
            yield join(self.path, entry.path)

    def paths(self) -> list[str]:
        """Every file's path as :attr:`fs` names it (for ``filesystem=fs`` readers)."""
        return list(self)

    def urls(self) -> list[str]:
        """Every file's URL (for readers given a URL list and ``storage_options``)."""
        return [cast(str, self.fs.unstrip_protocol(path)) for path in self]

    def dataset(self, format: str = "parquet", **options: Any) -> Any:
        """A ``pyarrow.dataset.Dataset`` of exactly these files, Hive-style partition
        columns (``year=2024/``) read from their paths below the destination; ``options``
        go to ``pyarrow.dataset.dataset`` (needs pyarrow). What polars
        (``pl.scan_pyarrow_dataset``) and DuckDB (``con.from_arrow``) read too."""
        import pyarrow.dataset

        options.setdefault("partitioning", "hive")
        return pyarrow.dataset.dataset(
            self.paths(),
            filesystem=self.fs,
            format=format,
            partition_base_dir=self.path,
            **options,
        )


def _replaced_later(jobs: list[JobRecord]) -> list[frozenset[str]]:
    """For each job, the partitions that later jobs of the snapshot replaced."""
    later: list[frozenset[str]] = []
    replaced: frozenset[str] = frozenset()
    for job in reversed(jobs):
        later.append(replaced)
        replaced = replaced | frozenset(job.partitions)
    later.reverse()
    return later


def _outside(
    entries: Iterator[CommittedFile], partitions: frozenset[str]
) -> Iterator[CommittedFile]:
    """``entries`` but those under one of ``partitions`` (a directory or below it)."""
    if not partitions:
        yield from entries
        return
    for entry in entries:
        parts = entry.path.split("/")[:-1]
        if not any("/".join(parts[:n]) in partitions for n in range(1, len(parts) + 1)):
            yield entry


def snapshot(
    dest: str,
    *,
    storage_options: dict[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
) -> Snapshot:
    """Resolve ``dest`` to the files of the jobs whose commit finished.

    ``append`` (and ``fail``) jobs add their files; a ``replace`` job starts again: the
    snapshot is the newest replace job's files and every later job's. A
    ``replace-partitions`` job (the partitioned staging committer's ``replace``) adds
    its files and takes out the older files of the partitions it wrote only. Never a file of
    a job that is committing, was killed mid-commit, failed, aborted or was rolled back.

    Read it in one line with any engine (``docs/readers.md``), e.g.
    ``pyarrow.dataset.dataset(snap.paths(), filesystem=snap.fs, format="parquet")`` or
    ``pandas.read_parquet(snap.urls(), storage_options=snap.storage_options)``.

    Raises :class:`~magicfs.errors.NoSnapshotError` (a ``FileNotFoundError``) naming
    the destination when it holds no job commit record, and
    :class:`~magicfs.errors.InvalidCommitData` naming the object and field of a bad one.
    """
    options = dict(storage_options or {})
    if fs is None:
        protocol = fsspec.core.split_protocol(dest)[0] or "file"
        fs = store_filesystem(protocol, **options)
    else:
        fs = unwrapped(fs)
        options = options or dict(getattr(fs, "storage_options", {}) or {})
    path = fs._strip_protocol(dest).rstrip("/")
    heads = _listed_heads(fs, path)
    jobs: list[JobRecord] = []
    for head in reversed(heads):
        record = _load_head(fs, head)
        jobs.append(record)
        if record.mode == "replace":
            break
    jobs.reverse()
    return Snapshot(fs, path, jobs, options)


def _listed_heads(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    """The heads of ``path``'s records, oldest first (one listing)."""
    directory = records_dir(path)
    try:
        entries = fs.ls(directory, detail=True, refresh=True)
    except FileNotFoundError:
        entries = []
    heads = [
        (parsed, entry)
        for entry in entries
        if entry.get("type") != "directory"
        and (parsed := parse_head_name(str(entry["name"]))) is not None
    ]
    if not heads:
        url = fs.unstrip_protocol(path)
        raise NoSnapshotError(
            f"{url}: no job commit record under {fs.unstrip_protocol(directory)}/, so no "
            "snapshot of committed jobs: no job has committed there since magicfs began "
            "writing them (every job commit does, but the classic committers'). Commit a job "
            "there (a conflict_mode='replace' job makes the snapshot exact from then on), "
            "or read it with a plain listing, which may show a commit half done"
        )
    keyed = [
        ((sequence, _modified(fs, entry), job_id), str(entry["name"]))
        for (sequence, job_id), entry in heads
    ]
    keyed.sort()
    return [name for _, name in keyed]


def _load_head(fs: fsspec.AbstractFileSystem, head: str) -> JobRecord:
    record = JobRecord.load(fs, head)
    parsed = parse_head_name(head)
    expected = parsed[1] if parsed is not None else ""
    if record.job_id != expected:
        raise InvalidCommitData(
            fs.unstrip_protocol(head),
            "jobId",
            f"names job {record.job_id!r}, but the record is named for job {expected!r}",
        )
    return record


def _modified(fs: fsspec.AbstractFileSystem, entry: dict[str, Any]) -> float:
    """The store's modification time of a listed object, in seconds since the epoch.

    Each fsspec store names it its own way in a listing; one without it asks the store.
    """
    for key in ("LastModified", "last_modified", "mtime", "updated", "created"):
        value = entry.get(key)
        if value is not None:
            return _seconds(value)
    return _seconds(fs.modified(str(entry["name"])))


def _seconds(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        moment: datetime.datetime = value
        if moment.tzinfo is None:  # a local disk's or memory's naive times are UTC
            moment = moment.replace(tzinfo=datetime.UTC)
        return moment.timestamp()
    if isinstance(value, str):
        return _seconds(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))
    return float(cast(float, value))
