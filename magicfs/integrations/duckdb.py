"""Committed ``COPY ... TO`` from DuckDB: each ``COPY`` statement a task attempt, one job commit.

::

    import duckdb
    import magicfs.duckdb

    con = duckdb.connect()
    summary = magicfs.duckdb.copy(
        "SELECT * FROM sales", "s3://bkt/sales", connection=con,
        storage_options=opts, partition_by=["year"],
    )

    with magicfs.duckdb.copy_job("s3://bkt/sales", connection=con, storage_options=opts) as job:
        job.copy("FROM sales WHERE year = 2024", partition_by=["region"])
        job.copy("FROM sales WHERE year = 2025", partition_by=["region"], format="csv")

Why: DuckDB's own writers publish each file as they go. When a ``COPY`` fails cleanly
DuckDB (2.0) deletes what it wrote, but a process killed during a ``COPY`` (or a store
failing under that clean-up) leaves part of a dataset, on S3 with multipart uploads
parked, and ``OVERWRITE`` deletes the old data *before* writing: a ``COPY`` with it that
fails on a late row leaves neither dataset. Here nothing is visible until the job
commits, then every file of every ``COPY`` appears, whole (readers of whole jobs only:
:func:`magicfs.snapshot`); a failure leaves nothing and
``OVERWRITE`` (the job's ``replace``) deletes the old files only at job commit.

How: DuckDB's Python client writes through any fsspec filesystem registered on a
connection (``connection.register_filesystem(fs)``), keyed by the filesystem's
protocol. The job's task filesystem (``committer.fs``, a
:class:`~magicfs.MagicFileSystem`, protocol ``magic``) is registered for the job's
lifetime, behind :class:`CopyRoute`, and each ``COPY`` writes to
``magic://<task path>``: on S3 every file is a multipart upload on its final key that
only job commit completes; on rename stores (local disks, GCS) it lands in the
attempt's directory, which job commit renames from.

Decisions:

* **One registration per DuckDB database at a time.** DuckDB keys registered
  filesystems by protocol on the *database* (a ``cursor()`` shares it) and refuses a
  second one of the same name; ``MagicFileSystem`` parses ``magic://`` URLs only. So a
  second magicfs job on a database still running one is refused before it writes
  anything (run it after the first, or on a connection of its own).
* **Options are DuckDB's, as keyword arguments** (``format``, ``partition_by``,
  ``compression``, ``per_thread_output``, ``file_size_bytes``, ``row_group_size``,
  ``filename_pattern``...): this module renders them into the statement, so it can
  check them before anything is written.
* **DuckDB's options for an existing target are the job's conflict modes**:
  ``OVERWRITE`` is ``conflict_mode="replace"`` (the old files are deleted at job
  commit, not before), ``OVERWRITE_OR_IGNORE`` and ``APPEND`` are ``"append"``. A
  ``COPY`` naming one that differs from its job's mode is refused with the mode to use;
  without one it follows the job. DuckDB itself always gets ``OVERWRITE_OR_IGNORE`` for
  a directory target: the attempt's directory is new and empty (on S3 it does not even
  exist, and DuckDB's emptiness check would fail on listing it).
* **File names are unique per job and ``COPY``**: ``part-<copy>-<job id>-<i>`` in each
  directory DuckDB writes (its ``FILENAME_PATTERN``, unless given), or
  ``part-<copy>-<job id>.<format>`` for a one-file ``COPY`` without ``path``. Two
  ``COPY`` statements of one job never write the same file, and an appending job never
  replaces an earlier job's files.

DuckDB's bridge (DuckDB 2.0's Python client, ``PythonFilesystem``) calls the registered
filesystem from DuckDB's own worker threads, each call holding the GIL: ``open`` per
file, then ``write`` of DuckDB's buffer (copied into a ``bytes``) and ``close``. Each
thread writes its own files; magicfs's writers hold one lock per *file* and stage parts
on their IO loop with the GIL released, so the threads' writes do not wait for one
another beyond the copy into ``bytes`` (``benchmarks/duckdb_copy.py`` measures it).
Needs the ``duckdb`` extra (``pip install 'magicfs[duckdb]'``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

try:
    import duckdb
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"magicfs.duckdb needs DuckDB ({missing}): pip install 'magicfs[duckdb]'"
    ) from missing

import fsspec

from ..committers import JobSummary, OutputCommitter, TaskCommitMessage
from ..filesystems import MagicFileSystem
from .engines import PartNames, abort_job_quietly, job_committer

__all__ = ["FORMATS", "CopyJob", "copy", "copy_job"]

JOB_ID_SOURCE = "magicfs.duckdb"

#: The formats a ``COPY`` writes here, and the suffix DuckDB gives their files.
FORMATS = {"parquet": ".parquet", "csv": ".csv", "json": ".json"}

#: Suffixes of DuckDB's compression names for CSV and JSON files (Parquet compresses
#: inside the file and keeps ``.parquet``).
TEXT_COMPRESSION_SUFFIXES = {"gzip": ".gz", "zstd": ".zst", "none": "", "uncompressed": ""}

#: Options with which ``COPY`` writes a directory of files instead of one file.
DIRECTORY_OPTIONS = ("partition_by", "per_thread_output", "file_size_bytes", "row_groups_per_file")

#: DuckDB's options for a target that holds data: the job conflict mode each one is,
#: and what DuckDB does with it.
CONFLICT_OPTIONS = {
    "overwrite": ("replace", "deletes what the target holds before writing"),
    "overwrite_or_ignore": ("append", "keeps the target's files, replacing those of the same name"),
    "append": ("append", "adds files under new names, keeping the target's files"),
}

#: Options refused, and why.
REFUSED = {
    "use_tmp_file": "job commit makes each file appear whole and at once, no temporary "
    "file or rename is needed: leave it out",
}

_OPTION_NAME = re.compile(r"[a-z_][a-z0-9_]*")


# -- the statement ------------------------------------------------------------------------------


def sql_string(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier (a column of ``partition_by``)."""
    return '"' + name.replace('"', '""') + '"'


def sql_value(name: str, value: Any) -> str:
    """The value of COPY option ``name`` as DuckDB's SQL reads it.

    Booleans, numbers and strings are literals; a list or tuple is a list of columns
    (``partition_by=["year", "region"]`` is ``PARTITION_BY ("year", "region")``).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return "(" + ", ".join(sql_identifier(v) for v in value) + ")"
    raise TypeError(
        f"magicfs.duckdb: COPY option {name}={value!r}: give a bool, a number, a string or "
        "a non-empty list of column names"
    )


@dataclass(frozen=True)
class CopyNames:
    """The file names of one ``COPY`` (task ``task_id``) of job ``job_id``."""

    job_id: str
    task_id: int

    def template_stem(self) -> str:
        """DuckDB's ``FILENAME_PATTERN``: ``part-<copy>-<job id>-{i}`` (DuckDB adds the suffix)."""
        return PartNames(self.job_id, "")(self.task_id) + "-{i}"

    def single(self, fmt: str, compression: Any) -> str:
        """The name of a one-file ``COPY`` given no ``path``: ``part-<copy>-<job id>.<format>``."""
        suffix = FORMATS[fmt]
        if fmt != "parquet" and isinstance(compression, str):
            suffix += TEXT_COMPRESSION_SUFFIXES.get(compression.lower(), "")
        return PartNames(self.job_id, suffix)(self.task_id)


@dataclass(frozen=True)
class CopyPlan:
    """One ``COPY``, checked: what DuckDB runs, except the target (the task's path).

    ``relative`` is the file (or directory) the ``COPY`` writes, relative to the job's
    destination; ``""`` is the destination itself (a directory target only).
    """

    query: str
    relative: str
    conflict_option: str | None  # DuckDB's option for a target holding data, if given
    options: tuple[tuple[str, Any], ...]

    def statement(self, target_url: str) -> str:
        """The ``COPY`` statement writing to ``target_url``."""
        options = ", ".join(f"{name.upper()} {sql_value(name, v)}" for name, v in self.options)
        return f"COPY ({self.query}) TO {sql_string(target_url)} ({options})"


def plan_copy(query: str, path: str, options: Mapping[str, Any], names: CopyNames) -> CopyPlan:
    """Check one ``COPY``'s query, path and options; name its files (``names``).

    Raises before anything is written: ``TypeError``/``ValueError`` naming the option.
    """
    if not isinstance(query, str) or not query.strip().rstrip(";").strip():
        raise ValueError(
            f"magicfs.duckdb: the query must be a non-empty SQL query (SELECT ..., FROM "
            f"table ...), not {query!r}"
        )
    given = _normalised(options)
    fmt = given.pop("format", "parquet")
    if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
        raise ValueError(
            f"magicfs.duckdb: format={fmt!r} is not one of {', '.join(FORMATS)} (the formats "
            "DuckDB writes without extensions)"
        )
    fmt = fmt.lower()
    conflict_option = _conflict_option(given)
    if isinstance(given.get("partition_by"), str):
        given["partition_by"] = [given["partition_by"]]
    relative = path.strip("/")
    if _writes_directory(given):
        given.setdefault("filename_pattern", names.template_stem())
        given["overwrite_or_ignore"] = True  # the attempt's directory is new and empty
    elif not relative:
        relative = names.single(fmt, given.get("compression"))
    rendered = (("format", fmt), *given.items())
    for name, value in rendered:
        sql_value(name, value)  # refuses a value it cannot render, naming the option
    query = query.strip().rstrip(";").strip()
    return CopyPlan(query, relative, conflict_option, rendered)


def _normalised(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with lower-case names, each a plain identifier and not refused."""
    given: dict[str, Any] = {}
    for name, value in options.items():
        lowered = name.lower()
        if not _OPTION_NAME.fullmatch(lowered):
            raise ValueError(f"magicfs.duckdb: {name!r} is not a COPY option name")
        if lowered in REFUSED:
            raise ValueError(
                f"magicfs.duckdb: COPY option {lowered}= is refused: {REFUSED[lowered]}"
            )
        if lowered in given:
            raise ValueError(f"magicfs.duckdb: COPY option {lowered}= given twice")
        given[lowered] = value
    return given


def _writes_directory(given: Mapping[str, Any]) -> bool:
    """Do these options make ``COPY`` write a directory of files (not one file)?"""
    return any(given.get(name) not in (None, False) for name in DIRECTORY_OPTIONS)


def _conflict_option(given: dict[str, Any]) -> str | None:
    """Take DuckDB's options for a target holding data out of ``given``; the one set."""
    chosen = [name for name in CONFLICT_OPTIONS if given.pop(name, False)]
    if len(chosen) > 1:
        raise ValueError(
            f"magicfs.duckdb: COPY options {' and '.join(n.upper() for n in chosen)} exclude "
            "each other: give one (or none, and the job's conflict_mode decides)"
        )
    return chosen[0] if chosen else None


def check_conflict_mode(plan: CopyPlan, job_mode: str) -> None:
    """Refuse a ``COPY`` whose DuckDB option for a target holding data is not its job's
    conflict mode, naming the mode to use."""
    option = plan.conflict_option
    if option is None or CONFLICT_OPTIONS[option][0] == job_mode:
        return
    wanted, meaning = CONFLICT_OPTIONS[option]
    raise ValueError(
        f"magicfs.duckdb: COPY option {option.upper()} {meaning}; in a magicfs job that is "
        f"conflict_mode={wanted!r} (applied when the job commits, never before), but this "
        f"job's conflict_mode is {job_mode!r}: build the job with conflict_mode={wanted!r}, "
        f"or leave {option.upper()} out and the job's mode applies"
    )


# -- what DuckDB is given ------------------------------------------------------------------------


class CopyRoute(fsspec.AbstractFileSystem):
    """The filesystem registered on the connection: the job's task filesystem, with
    DuckDB's existence probes inside the running ``COPY`` statements' own directories
    answered from memory.

    Why: before writing, DuckDB asks about every directory and file it is about to make
    (``isfile``, ``isdir``, ``info``: four to five calls per file). On a task path each
    such question costs the store up to three requests (the marker, a listing, the
    ``.pending``), all to learn that nothing is there. Inside a running attempt's work
    path the answer is known: the attempt is new, and only its ``COPY`` writes there,
    through this object. So a path there that this route has not opened or made is
    answered "not found" at once; every other call, and every path this route opened
    or made, goes to the task filesystem unchanged.
    """

    protocol = MagicFileSystem.protocol
    cachable = False

    def __init__(self, fs: MagicFileSystem):
        super().__init__()
        self.fs = fs
        self._lock = threading.Lock()
        self._roots: set[str] = set()  # work paths of the attempts running here
        self._made: set[str] = set()  # paths opened or made in them, and their parents

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        return MagicFileSystem._strip_protocol(path)

    def unstrip_protocol(self, name: str) -> str:
        return self.fs.unstrip_protocol(name)

    # -- the attempts running through this route --

    def begin(self, work_path: str) -> None:
        """An attempt starts writing at ``work_path``. On a rename store its directory
        exists (task setup made it); on a deferred store there are no directories."""
        root = work_path.rstrip("/")
        with self._lock:
            self._roots.add(root)
            if not self.fs.deferred_writes:
                self._made.add(root)

    def end(self, work_path: str) -> None:
        root = work_path.rstrip("/")
        with self._lock:
            self._roots.discard(root)
            self._made = {p for p in self._made if not (p == root or p.startswith(root + "/"))}

    def _root_of(self, path: str) -> str | None:
        return next((r for r in self._roots if path == r or path.startswith(r + "/")), None)

    def _note(self, path: str) -> None:
        """``path`` was opened or made: it and its parents inside its attempt exist now."""
        name = self._strip_protocol(path).rstrip("/")
        with self._lock:
            root = self._root_of(name)
            while root is not None and len(name) >= len(root):
                self._made.add(name)
                name = name.rpartition("/")[0]

    def _outside(self, path: str) -> bool:
        """Is ``path`` outside every running attempt?"""
        name = self._strip_protocol(path).rstrip("/")
        with self._lock:
            return self._root_of(name) is None

    def _unmade(self, path: str) -> bool:
        """Is ``path`` inside a running attempt, and neither opened nor made there?"""
        name = self._strip_protocol(path).rstrip("/")
        with self._lock:
            return self._root_of(name) is not None and name not in self._made

    # -- the calls DuckDB makes --

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if self._unmade(path):
            raise FileNotFoundError(path)
        return self.fs.info(path, **kwargs)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" not in mode:
            self._note(path)
        return self.fs.open(path, mode, **kwargs)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """On a deferred store (S3, Azure block lists) a directory inside an attempt is
        nothing to make: its files are staged on their final names."""
        inside = not self._outside(path)
        self._note(path)
        if inside and self.fs.deferred_writes:
            return
        self.fs.mkdir(path, create_parents=create_parents, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self._note(path)
        self.fs.makedirs(path, exist_ok=exist_ok)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        return self.fs.ls(path, detail=detail, **kwargs)

    def glob(self, path: str, maxdepth: int | None = None, **kwargs: Any) -> Any:
        return self.fs.glob(path, maxdepth=maxdepth, **kwargs)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        self.fs.rm(path, recursive=recursive, maxdepth=maxdepth)

    def rm_file(self, path: str) -> None:
        self.fs.rm_file(path)

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        self.fs.mv(path1, path2, **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        self._note(path)
        self.fs.touch(path, truncate=truncate, **kwargs)

    def modified(self, path: str) -> Any:
        return self.fs.modified(path)

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kw: Any
    ) -> Any:
        return self.fs.cat_file(path, start=start, end=end, **kw)


# -- the job ------------------------------------------------------------------------------------


class CopyJob:
    """One magicfs job whose tasks are DuckDB ``COPY`` statements (made by :func:`copy_job`).

    Entering sets the job up and registers its task filesystem on the connection;
    :meth:`copy` runs one ``COPY`` as one task attempt; leaving unregisters the
    filesystem and commits every ``COPY`` that succeeded (or, on an exception, aborts
    the job: nothing visible, nothing parked). ``summary`` is the
    :class:`~magicfs.JobSummary` once committed.
    """

    def __init__(self, connection: duckdb.DuckDBPyConnection, committer: OutputCommitter):
        if not isinstance(committer.fs, MagicFileSystem):
            raise ValueError(
                f"magicfs.duckdb: the {committer.name} committer writes task files with "
                f"{type(committer.fs).__name__}, not a task filesystem DuckDB can write "
                "through: use the store's default committer (magic on S3, manifest "
                "elsewhere) or magic, block-list, manifest, directory, partitioned"
            )
        self.connection = connection
        self.committer = committer
        self.route: CopyRoute | None = None
        self.messages: list[TaskCommitMessage] = []
        self.summary: JobSummary | None = None
        self._lock = threading.Lock()
        self._copies = 0

    @property
    def job_id(self) -> str:
        """The job's id (recorded in ``_SUCCESS``; ``abort_job()`` needs it after a crash)."""
        return self.committer.job_id

    @property
    def protocol(self) -> str:
        """The name DuckDB knows the task filesystem by (``magic``)."""
        return MagicFileSystem.protocol

    def copy(self, query: str, path: str = "", **options: Any) -> TaskCommitMessage:
        """Run ``COPY (query) TO <path under the destination> (options)`` as one task attempt.

        Args:
            query: a SQL query on this job's connection (``SELECT ...``, ``FROM t ...``).
            path: where the output goes, relative to the job's destination: a directory
                for a ``COPY`` writing several files (``partition_by``,
                ``per_thread_output``, ``file_size_bytes``, ``row_groups_per_file``;
                ``""``: the destination itself), else the file's name (default
                ``part-<copy>-<job id>.<format>``).
            **options: DuckDB's COPY options, lower case: ``format`` (``parquet``,
                ``csv``, ``json``), ``partition_by`` (a column or a list),
                ``compression``, ``per_thread_output``, ``filename_pattern``,
                ``overwrite`` / ``overwrite_or_ignore`` / ``append`` (checked against
                the job's ``conflict_mode``)...

        Returns the attempt's :class:`~magicfs.TaskCommitMessage`. A failing ``COPY``
        aborts its attempt (nothing of it is ever visible) and raises DuckDB's error.
        """
        self._running_route()
        with self._lock:
            task_id = self._copies
            self._copies += 1
        plan = self.plan(query, path, options, task_id)
        context = f"magicfs.duckdb: COPY #{task_id}"
        with self.committer.attempt(task_id, context=context) as run:
            route = self._running_route()
            route.begin(run.task.work_path)
            try:
                target = run.task.path(plan.relative) if plan.relative else run.task.work_path
                result = self.connection.execute(plan.statement(f"{self.protocol}://{target}"))
                row = result.fetchone()
            finally:
                route.end(run.task.work_path)
            run.rows = int(row[0]) if row else None
        message = run.message
        assert message is not None
        with self._lock:
            self.messages.append(message)
        return message

    def _running_route(self) -> CopyRoute:
        if self.route is None:
            raise RuntimeError(
                "magicfs.duckdb: the job is not running: call copy() inside "
                "`with magicfs.duckdb.copy_job(...) as job:`"
            )
        return self.route

    def plan(self, query: str, path: str, options: Mapping[str, Any], task_id: int) -> CopyPlan:
        """Check one ``COPY`` of this job (its options, and its conflict option against the
        job's mode) without running it: raises ``ValueError``/``TypeError`` naming the option."""
        plan = plan_copy(query, path, options, CopyNames(self.job_id, task_id))
        check_conflict_mode(plan, self.committer.options.conflict_mode)
        return plan

    def __enter__(self) -> CopyJob:
        if self.connection.filesystem_is_registered(self.protocol):
            raise RuntimeError(
                f"magicfs.duckdb: this DuckDB database already has a filesystem "
                f"{self.protocol!r} registered (another magicfs job running on it?); a "
                "database serves one magicfs job at a time: finish that job first, or run "
                "this one on a connection of its own (duckdb.connect())"
            )
        self.committer.setup_job()
        # After setup_job: the magic committer builds its final filesystem there.
        route = CopyRoute(cast(MagicFileSystem, self.committer.fs))
        try:
            self.connection.register_filesystem(route)
        except BaseException as failure:
            abort_job_quietly(self.committer, failure)
            raise
        self.route = route
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self.route = None
        try:
            self.connection.unregister_filesystem(self.protocol)
        except BaseException as failure:
            if exc is None:
                abort_job_quietly(self.committer, failure)
                raise
        if exc is not None:
            if abort_job_quietly(self.committer, exc):
                exc.add_note(
                    f"magicfs.duckdb: job {self.job_id} writing to {self.committer.url} was "
                    "aborted: nothing of it is visible and no upload is left"
                )
            return
        self.summary = self.committer.commit_job(self.messages)


def copy_job(
    dest: str,
    *,
    connection: duckdb.DuckDBPyConnection | None = None,
    storage_options: dict[str, Any] | None = None,
    committer: str | OutputCommitter | None = None,
    conflict_mode: str | None = None,
    **committer_options: Any,
) -> CopyJob:
    """A job whose ``COPY`` statements all appear in ``dest`` when it commits.

    Use it as a ``with`` block and call ``job.copy(query, ...)`` for each ``COPY``.

    Args:
        dest: any fsspec URL (``s3://``, ``abfs://``, ``gs://``, ``file://``, a path).
        connection: the DuckDB connection the queries run on (its tables, views and
            registered data frames); DuckDB's default connection by default.
        storage_options: the store's fsspec options (as given to pandas).
        committer: a committer name for :func:`magicfs.committer_for`, or an
            ``OutputCommitter`` you built (its job not yet set up; then leave
            ``storage_options`` and the committer options out).
        conflict_mode: ``append`` (the default: add files), ``fail`` (refuse a
            destination holding data), ``replace`` (delete its old data at job commit).
            DuckDB's ``OVERWRITE`` is ``replace``, ``OVERWRITE_OR_IGNORE`` and ``APPEND``
            are ``append``.
        **committer_options: other :func:`magicfs.committer_for` options (``job_id``,
            ``threads``, ``in_memory``...).
    """
    built = job_committer(
        JOB_ID_SOURCE,
        dest,
        committer,
        storage_options,
        conflict_mode,
        committer_options,
        conflict_mode_given=conflict_mode is not None,
    )
    return CopyJob(connection if connection is not None else duckdb.default_connection(), built)


def copy(
    query: str,
    dest: str,
    *,
    path: str = "",
    connection: duckdb.DuckDBPyConnection | None = None,
    storage_options: dict[str, Any] | None = None,
    committer: str | OutputCommitter | None = None,
    conflict_mode: str | None = None,
    committer_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> JobSummary:
    """``COPY (query) TO dest (options)`` as one committed job: all of it appears, or nothing.

    Args:
        query: a SQL query on ``connection`` (``SELECT ...``, ``FROM table ...``).
        dest: the destination, any fsspec URL: the directory the files go to.
        path: as for :meth:`CopyJob.copy` (a subdirectory, or a file's name).
        connection: the DuckDB connection; DuckDB's default connection by default.
        storage_options: the store's fsspec options.
        committer: as for :func:`copy_job`.
        conflict_mode: by default the one DuckDB's option names (``OVERWRITE``:
            ``replace``; ``OVERWRITE_OR_IGNORE``, ``APPEND``: ``append``), else what
            DuckDB does without one: ``fail`` for a directory (it refuses a non-empty
            one), ``append`` for one file (it replaces a file of the same name).
        committer_options: other :func:`magicfs.committer_for` options.
        **options: DuckDB's COPY options, as for :meth:`CopyJob.copy`.

    Returns the :class:`~magicfs.JobSummary`. On any failure the job is aborted (nothing
    visible, no upload left) and the error raised.
    """
    if conflict_mode is None and (committer is None or isinstance(committer, str)):
        conflict_mode = default_conflict_mode(options)
    job = copy_job(
        dest,
        connection=connection,
        storage_options=storage_options,
        committer=committer,
        conflict_mode=conflict_mode,
        **dict(committer_options or {}),
    )
    job.plan(query, path, options, 0)  # bad input is refused before the job is set up
    with job:
        job.copy(query, path, **options)
    assert job.summary is not None
    return job.summary


def default_conflict_mode(options: Mapping[str, Any]) -> str:
    """The conflict mode that does what DuckDB would do with ``options`` (see :func:`copy`)."""
    given = _normalised(options)
    option = _conflict_option(given)
    if option is not None:
        return CONFLICT_OPTIONS[option][0]
    return "fail" if _writes_directory(given) else "append"
