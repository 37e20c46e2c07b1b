"""A job's pending commits and keys on local disk, so job commit runs in flat memory.

A job commit must see every commit of the job before it completes the first one
(validation, duplicate destinations, the conflict decision), and its clean-up must know
every key the job's writers wrote to. Held in Python, that is about 5 KB per file: 5 GB
for a job of 1,000,000 files, the failure Hadoop had in production (HADOOP-16570). So
they go to SQLite instead, written once while the records stream in and read back in
batches: in memory while a spool is small (a job of a few thousand files pays for no
file), in a file in the temporary directory once it passes :data:`SPILL_BYTES`
(:class:`_SqliteFile`):

* :class:`CommitSpool`: the commits of every task record loaded (one row each, about
  1.2 KB on disk per file with its index on the destination, measured by
  ``benchmarks/spool_disk.py``), with the record each
  came from, so a refusal still names the record and the field. Duplicate destinations
  are found by one indexed query, not by a dict in memory.
* :class:`KeySet`: a set of strings (the destination keys a job's markers name).
* :class:`OrderedPaths`: paths to delete in an order (a job's task records after its
  files, its journal last), however many tasks the job had.
* :class:`ListedOnce`: the pages of one listing, kept as they are read, so a second pass
  (a job's clean-up: the sweep, then the deletes) reads them back instead of listing again.

Memory: :data:`SPILL_BYTES` while in memory, then SQLite's page cache (capped at
:data:`CACHE_KIB`), plus one batch of rows. The file is deleted by :meth:`discard`; the
file of a process that was killed (its name carries the process id) is deleted by the
next spool that moves to disk on that machine (a process looks once a minute at most). Set
``TMPDIR`` where the temporary directory is small: about 1.2 KB per file of the job.
Only the thread that created a spool may use it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import glob
import itertools
import json
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import LocalSpoolError
from ..parallel import in_background
from ..records import PendingSet, SinglePendingCommit
from ..statistics import IOStatisticsSnapshot

#: SQLite page cache per spool, in KiB: the memory a spool may use however large the job.
CACHE_KIB = 8192
#: Rows read back per query batch, and written per insert.
BATCH = 1000
#: A spool's size in memory before it moves to a file (:class:`_SqliteFile`).
SPILL_BYTES = CACHE_KIB * 1024


class _SqliteFile:
    """A private SQLite database: in memory while small, then a file in the temporary
    directory, deleted by :meth:`discard`.

    A job of a few files must not pay for files on disk (creating the file, its schema,
    its commits, four times on its commit's critical path), and a job of a million must
    not hold its rows in memory. So a spool
    starts in memory and moves to its file (SQLite's online backup, then the file's own
    connection) once its pages pass :data:`SPILL_BYTES`, the same bound as the page cache
    a spool on disk keeps. Rows go in :data:`BATCH` at a time, so no insert takes the
    spool far past it.

    Used by one thread at a time, not always the one that made it: a job commit hands
    its spool to the clean-up thread that runs after it (``cleanup="background"``).
    """

    def __init__(self, prefix: str, schema: str):
        self._prefix = prefix
        #: The file, once the spool has moved to disk; ``None`` while in memory.
        self.path: str | None = None
        self.db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.db.executescript(schema)
        self._page_size: int = self.db.execute("PRAGMA page_size").fetchone()[0]
        self.db.execute("BEGIN")

    def _insert(self, statement: str, rows: Iterable[tuple[Any, ...]]) -> int:
        """Run ``statement`` for each of ``rows``, :data:`BATCH` at a time, the spool
        moving to disk once past :data:`SPILL_BYTES`; returns the rows changed."""
        changed = 0
        remaining = iter(rows)
        while batch := list(itertools.islice(remaining, BATCH)):
            with self._writing():
                changed += self.db.executemany(statement, batch).rowcount
            self._grew()
        return changed

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A write to the spool: once it is a file, SQLite's failures to write it (a full,
        too small or unwritable temporary directory) are :class:`LocalSpoolError`."""
        try:
            yield
        except sqlite3.OperationalError as error:
            if self.path is None:
                raise
            raise spool_error(self.path, error) from error

    def _grew(self) -> None:
        """After rows or an index were added: move to disk if past :data:`SPILL_BYTES`."""
        if self.path is None:
            (pages,) = self.db.execute("PRAGMA page_count").fetchone()
            if pages * self._page_size > SPILL_BYTES:
                self._spill()

    def _spill(self) -> None:
        """Copy the database to a new file and go on there (the memory is freed). A copy
        that fails removes its file and leaves the spool in memory, as it was."""
        try:
            handle, path = process_temp_file(self._prefix, ".sqlite")
        except OSError as error:
            raise spool_error(os.path.join(tempfile.gettempdir(), self._prefix), error) from error
        os.close(handle)
        disk = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            for pragma in (
                "journal_mode = OFF",  # a spool that dies with its process is simply rebuilt
                "synchronous = OFF",
                f"cache_size = -{CACHE_KIB}",
                "temp_store = FILE",
            ):
                disk.execute(f"PRAGMA {pragma}")
            self._commit()
            self.db.backup(disk)
            disk.execute("BEGIN")
        except BaseException as failure:
            disk.close()
            for made in (path, f"{path}-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(made)
            if not self.db.in_transaction:
                self.db.execute("BEGIN")
            if isinstance(failure, sqlite3.OperationalError):
                raise spool_error(path, failure) from failure
            raise
        self.db.close()
        self.db, self.path = disk, path

    def discard(self) -> None:
        """Close the database and delete its file, if it has one (idempotent)."""
        try:
            self.db.close()
        finally:
            if self.path is not None and os.path.exists(self.path):
                os.unlink(self.path)

    def _commit(self) -> None:
        if self.db.in_transaction:
            with self._writing():  # a file's pages are written by then at the latest
                self.db.execute("COMMIT")


class KeySet(_SqliteFile):
    """A set of strings (on disk once large): ``add`` many, then ask ``key in keys``."""

    def __init__(self) -> None:
        super().__init__("magicfs-keys-", "CREATE TABLE keys (key TEXT PRIMARY KEY)")
        self.size = 0

    def update(self, keys: Iterable[str]) -> None:
        self.size += self._insert("INSERT OR IGNORE INTO keys VALUES (?)", ((k,) for k in keys))

    def add_new(self, keys: list[str]) -> set[str]:
        """Add a batch of ``keys``; those that were not in the set before (a snapshot
        yields each path once). Asked inside the spool's open transaction, which sees
        its own rows: no commit per batch."""
        new = set(keys)
        for start in range(0, len(keys), 500):  # within SQLite's limit of parameters
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT key FROM keys WHERE key IN ({marks})"
            new.difference_update(row[0] for row in self.db.execute(query, chunk))
        self.update(new)
        return new

    def __contains__(self, key: object) -> bool:
        self._commit()
        found = self.db.execute("SELECT 1 FROM keys WHERE key = ?", (key,)).fetchone()
        return found is not None

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0


class OrderedPaths(_SqliteFile):
    """Paths (on disk once many), each with a rank: ``add`` many, then read back lowest
    rank first."""

    def __init__(self) -> None:
        super().__init__(
            "magicfs-paths-", "CREATE TABLE paths (rank INTEGER NOT NULL, path TEXT NOT NULL)"
        )

    def add(self, ranked: Iterable[tuple[int, str]]) -> None:
        self._insert("INSERT INTO paths VALUES (?, ?)", ranked)

    def batches(self, size: int, shared_from: int | None = None) -> Iterator[list[str]]:
        """Every path, by rank then name, at most ``size`` at a time; a batch never holds
        two ranks (so all of one rank is gone before the first of the next goes), but
        ranks from ``shared_from`` on, which follow each other in the same batches (the
        highest rank still in the last one)."""
        self._commit()
        ranks = sorted(rank for (rank,) in self.db.execute("SELECT DISTINCT rank FROM paths"))
        shared = [rank for rank in ranks if shared_from is not None and rank >= shared_from]
        groups = [[rank] for rank in ranks if rank not in shared] + ([shared] if shared else [])
        for group in groups:
            rows = self.db.execute(
                f"SELECT path FROM paths WHERE rank IN ({', '.join('?' * len(group))}) "
                "ORDER BY rank, path",
                group,
            )
            while batch := rows.fetchmany(size):
                yield [path for (path,) in batch]


class ListedOnce(_SqliteFile):
    """The pages of a listing, read from the store once however often they are iterated.

    The first pass takes each page from ``source`` and keeps it; a later pass reads the
    kept pages back, then goes on with ``source`` where an earlier pass stopped. A job's
    clean-up lists its tree once for both its sweep and its deletes (one round trip
    less, on a job of any size: the pages wait on disk).

    :meth:`read_ahead` takes the whole listing at once on a thread of its own, while the
    caller does something else (a job saves its journal as ``committed`` meanwhile); a
    pass, or :meth:`discard`, waits for it first.
    """

    def __init__(self, source: Iterable[list[str]]):
        super().__init__("magicfs-pages-", "CREATE TABLE paths (path TEXT NOT NULL)")
        self._source = iter(source)
        self._pages: list[tuple[int, int]] = []  # each kept page's first and last rowid
        self._rows = 0  # rows kept so far (rowids run 1, 2, ...: nothing is ever deleted)
        self._ahead: concurrent.futures.Future[None] | None = None

    def read_ahead(self) -> ListedOnce:
        """Take every page from the source now, on a new thread; returns at once. The
        next pass raises what the listing raised."""
        if self._ahead is None:
            self._ahead = in_background(self._keep_all, name="magicfs-listing")
        return self

    def _keep_all(self) -> None:
        for page in self._source:
            self._keep(page)

    def _wait_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.result()

    def discard(self) -> None:
        try:
            with contextlib.suppress(Exception):  # a failed listing: the pass's to raise
                self._wait_ahead()
        finally:
            super().discard()

    def __iter__(self) -> Iterator[list[str]]:
        self._wait_ahead()
        kept = 0
        while True:
            if kept < len(self._pages):
                self._commit()
                rows = self.db.execute(
                    "SELECT path FROM paths WHERE rowid BETWEEN ? AND ? ORDER BY rowid",
                    self._pages[kept],
                )
                page = [path for (path,) in rows]
            else:
                try:
                    page = next(self._source)
                except StopIteration:
                    return
                self._keep(page)
            kept += 1
            yield page

    def _keep(self, page: list[str]) -> None:
        self._insert("INSERT INTO paths VALUES (?)", ((p,) for p in page))
        self._pages.append((self._rows + 1, self._rows + len(page)))
        self._rows += len(page)


class CommitSpool(_SqliteFile):
    """The commits of a job's task records, in the order they were added.

    ``records`` are the task records in the order added (a row's ``record`` is an index
    into it). ``files``, ``bytes`` and ``iostatistics`` (every record's statistics,
    aggregated) are kept as records are added.
    """

    def __init__(self) -> None:
        super().__init__(
            "magicfs-commits-",
            """
            CREATE TABLE commits (
                record INTEGER NOT NULL,   -- index into self.records
                position INTEGER NOT NULL, -- index in that record's commits
                destination TEXT NOT NULL, -- bucket/key
                upload TEXT NOT NULL,      -- upload id
                data TEXT NOT NULL         -- the commit, see _encode
            );
            """,
        )
        self.records: list[str] = []
        self.job_ids: list[str] = []
        self.attempt_ids: list[str] = []
        self.files = 0
        self.bytes = 0
        self.iostatistics = IOStatisticsSnapshot()
        self._indexed = False
        self._uploads_indexed = False
        #: Set by the committer once every commit passed validation.
        self.validated = False

    def add(self, source: str, pendingset: PendingSet) -> None:
        """Spool every commit of ``pendingset``, loaded from ``source``."""
        record = len(self.records)
        self.records.append(source)
        self.job_ids.append(pendingset.job_id)
        self.attempt_ids.append(pendingset.task_attempt_id)
        self._insert(
            "INSERT INTO commits VALUES (?, ?, ?, ?, ?)",
            (
                (record, position, commit.destination, commit.upload_id, _encode(commit))
                for position, commit in enumerate(pendingset.commits)
            ),
        )
        self.files += len(pendingset.commits)
        self.bytes += pendingset.total_bytes
        self.iostatistics.aggregate(pendingset.iostatistics)

    def _index(self) -> None:
        """Index destinations once every record is in (one sort, on disk)."""
        if not self._indexed:
            with self._writing():
                self.db.execute("CREATE INDEX commits_destination ON commits (destination)")
            self._commit()
            self._indexed = True
            self._grew()

    def rows(self) -> Iterator[tuple[str, int, SinglePendingCommit]]:
        """``(record, position, commit)`` for every commit, in the order added."""
        self._commit()
        last = 0
        while True:
            batch = self.db.execute(
                "SELECT rowid, record, position, data FROM commits WHERE rowid > ? "
                "ORDER BY rowid LIMIT ?",
                (last, BATCH),
            ).fetchall()
            if not batch:
                return
            for _, record, position, data in batch:
                yield self.records[record], position, _decode(data)
            last = batch[-1][0]

    def commits(self) -> Iterator[SinglePendingCommit]:
        """Every commit, in the order added, read back one batch at a time."""
        return (commit for _, _, commit in self.rows())

    def first_duplicate(self) -> tuple[str, tuple[str, int], tuple[str, int]] | None:
        """A destination written twice: ``(destination, (record, position) twice)``."""
        self._index()
        found = self.db.execute(
            "SELECT destination FROM commits GROUP BY destination HAVING COUNT(*) > 1 LIMIT 1"
        ).fetchone()
        if found is None:
            return None
        first, second = self.db.execute(
            "SELECT record, position FROM commits WHERE destination = ? ORDER BY rowid LIMIT 2",
            found,
        ).fetchall()
        return (
            found[0],
            (self.records[first[0]], first[1]),
            (self.records[second[0]], second[1]),
        )

    def first_destinations(self, count: int) -> list[str]:
        """The ``count`` first destinations in sorted order (``_SUCCESS`` lists a few)."""
        self._index()
        rows = self.db.execute(
            "SELECT destination FROM commits ORDER BY destination LIMIT ?", (count,)
        )
        return [row[0] for row in rows]

    def __contains__(self, upload_id: object) -> bool:
        """Does a spooled commit name this upload id? (The clean-up keeps those uploads.)"""
        if not self._uploads_indexed:
            with self._writing():
                self.db.execute("CREATE INDEX commits_upload ON commits (upload)")
            self._commit()
            self._uploads_indexed = True
            self._grew()
        found = self.db.execute("SELECT 1 FROM commits WHERE upload = ?", (upload_id,))
        return found.fetchone() is not None


#: Seconds between two looks of one process for the orphans of one kind of file.
ORPHANS_EVERY = 60.0
_LOOKED: dict[tuple[int, str, str, str], float] = {}
_LOOKED_LOCK = threading.Lock()
_now = time.monotonic


def process_temp_file(prefix: str, suffix: str) -> tuple[int, str]:
    """A new file in the temporary directory whose name carries this process's id (an
    open handle and its path), after deleting the ``prefix``/``suffix`` files of
    processes that no longer run: a commit killed mid-way leaves its local files behind
    (SIGKILL runs no clean-up), and the next one on the machine deletes them.

    A process looks for them at most once every :data:`ORPHANS_EVERY` seconds per kind:
    a job commit makes four spools, and each look lists the whole temporary directory
    (0.5 ms at 500 files, ten times that at 5,000), on the commit's critical path."""
    directory = tempfile.gettempdir()
    key = (os.getpid(), directory, prefix, suffix)
    now = _now()
    with _LOOKED_LOCK:
        due = now - _LOOKED.get(key, -ORPHANS_EVERY) >= ORPHANS_EVERY
        if due:
            _LOOKED[key] = now
    if due:
        _remove_orphans(directory, prefix, suffix)
    return tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=suffix)


def spool_error(path: str, error: BaseException) -> LocalSpoolError:
    """What a spool that cannot be written says: its file, why, and how to give it room."""
    return LocalSpoolError(
        f"cannot write {path}, a local spool of a job's commit or clean-up "
        f"({type(error).__name__}: {error}): its temporary directory "
        f"{os.path.dirname(path)} is full, too small for this job or not writable; set TMPDIR "
        "to a directory with room (about 1.2 KB per file of the job) and run it again"
    )


def _remove_orphans(directory: str, prefix: str, suffix: str) -> None:
    """Delete the files of processes that no longer run."""
    for path in glob.glob(os.path.join(directory, f"{prefix}*-*{suffix}")):
        pid = os.path.basename(path)[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or _running(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _encode(commit: SinglePendingCommit) -> str:
    """What completing, rolling back and naming a commit need (not its statistics)."""
    return json.dumps(
        [
            commit.uri,
            commit.upload_id,
            commit.bucket,
            commit.destination_key,
            commit.etags,
            commit.length,
            commit.filename,
            commit.extra_data,
        ],
        separators=(",", ":"),
    )


def _decode(data: str) -> SinglePendingCommit:
    fields: list[Any] = json.loads(data)
    uri, upload_id, bucket, key, etags, length, filename, extra = fields
    return SinglePendingCommit(
        uri=uri,
        upload_id=upload_id,
        bucket=bucket,
        destination_key=key,
        etags=etags,
        length=length,
        created=1,  # not kept: job commit does not use it
        filename=filename,
        extra_data=extra,
    )
