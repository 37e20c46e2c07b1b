"""Task paths on a store with deferred writes: files invisible until job commit.

One view for every such store (S3 multipart uploads, Azure block lists, the in-process
store); what differs per store is its write side (:class:`~magicfs.stores.deferred_writer.
DeferredWrites`, declared once in :mod:`magicfs.stores.registry`). A file written under a
task path exists, until job commit, only as data staged against its final name (an
unfinished multipart upload on S3, uncommitted blocks on Azure), recorded by a
zero-byte marker (:func:`~magicfs.paths.marker_path`: each element of the path below
``__base`` staged, ``__base/_year=1.magicfs-task/_p.csv.magicfs-task.magicfs-marker``,
names no glob of data or of partition directories matches; 0.1.0's markers at the path
itself are still read) and, once closed, a ``.pending`` record named likewise
(:func:`~magicfs.paths.pending_path`)
(:mod:`magicfs.stores.deferred_writer`; an unmarked S3 job's files have no marker, only
the record: :mod:`magicfs.stores.s3.tracking`). What each filesystem operation does with such a
file follows from that:

* **writes** (``open`` ``wb``/``xb``, ``pipe_file``, ``put_file``, ``touch``, ``copy``
  into the task) stream into a new deferred file; writing a path again replaces it (what
  the earlier file staged is thrown away at once when this process wrote it, else by
  the job's clean-up). ``xb`` and ``mode="create"`` make the file create-only;
* **reads** (``open`` ``rb``, ``cat``, ``get``, ``copy``/``mv`` *from* the task file)
  raise :class:`~magicfs.errors.DeferredFileError`: there are no bytes to read yet, and
  returning the marker's empty bytes would silently lose data;
* **deletes** (``rm``) throw away what the file staged (where the store can: S3 aborts
  the upload; Azure cannot delete staged blocks alone) and delete the marker and the
  record: the file is gone, and task commit will not see it;
* **info and listings** show the task's files as files under their own names (markers
  shown as the files they stand for, records hidden), with
  the bytes written as their size where known: always in ``info()`` (from this
  process's registry or the ``.pending``), in listings for files this process wrote
  (other files list with the marker's size, 0, as Hadoop's do).

Paths under a magic element that are records (``*.pending``, ``*.pendingset``) are
ordinary files, read and written normally.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from glob import has_magic
from typing import Any, cast

from ..errors import DeferredFileError
from ..layouts.magic import job_marker_for
from ..names import MARKER_SUFFIX, PENDING_SUFFIX
from ..paths import (
    MagicPath,
    final_destination,
    is_deferred_write,
    marked_file,
    marker_path,
    parse_magic_path,
    pending_file,
    pending_path,
    stored_dir,
    stored_pattern,
    task_path,
)
from ..records import SinglePendingCommit
from ..stores.deferred_writer import DeferredWriter, DeferredWrites
from .patterns import known_matches

_COPY_CHUNK = 8 << 20

#: The store's methods that :meth:`DeferredTaskView.call` asks of a task file's marker.
_MARKER_METHODS = frozenset({"created", "modified", "checksum", "ukey"})


def _named(entry: dict[str, Any]) -> dict[str, Any]:
    """A listing entry under the task's name: a marker under its file's
    (:func:`~magicfs.paths.marked_file`), a directory of them under the task directory's
    (:func:`~magicfs.paths.task_path`); records and other entries as they are."""
    name = entry["name"]
    if entry.get("type") == "file":
        file = marked_file(name.rstrip("/"))
    else:
        file = task_path(name.rstrip("/"))
    return _renamed(entry, file) if file is not None and file != name else entry


def _renamed(entry: dict[str, Any], name: str) -> dict[str, Any]:
    return {**entry, "name": name, **({"Key": name} if "Key" in entry else {})}


def _task_name(path: str) -> str:
    """A path a store's expansion found, as :meth:`DeferredTaskView.rm_files` takes it: a
    marker or a directory of markers under the task's name, records as they are."""
    if path.endswith(PENDING_SUFFIX):
        return path
    return marked_file(path) or task_path(path)


class DeferredTaskView:
    """Task paths on ``writes.fs``; paths carry no protocol (``bucket/key``)."""

    def __init__(self, writes: DeferredWrites):
        self.writes = writes
        self.fs = writes.fs
        self.registry = writes.options.registry
        self.check_job_active = writes.options.check_job_active

    def url(self, path: str) -> str:
        """``path`` with the store's protocol, for messages."""
        return self.writes.url(path)

    # -- writes -------------------------------------------------------------------------------

    def open(self, path: str, mode: str, block_size: int | None = None, **kwargs: Any) -> Any:
        if not is_deferred_write(path):
            return self.fs.open(path, mode, block_size=block_size, **kwargs)
        if "r" in mode or "+" in mode:
            raise self.no_bytes(path, "read")
        if "a" in mode:
            raise DeferredFileError(
                f"{self.url(path)}: append ('ab') is not supported under a magic path: a "
                f"deferred {self.writes.words.noun} can only be written from the start"
            )
        magic_path = parse_magic_path(path)
        assert magic_path is not None
        return self.writer(path, magic_path, "xb" if "x" in mode else "wb", block_size)

    def writer(
        self, path: str, magic_path: MagicPath, mode: str, block_size: int | None
    ) -> DeferredWriter:
        """The store's deferred writer for task file ``path`` (``mode`` ``wb``/``xb``)."""
        if path.endswith(MARKER_SUFFIX):
            raise ValueError(
                f"{self.url(path)}: names ending in {MARKER_SUFFIX!r} are reserved under a "
                "magic path for the intent markers of task files: give the file another name"
            )
        job_marker = job_marker_for(magic_path) if self.check_job_active else None
        part_size = block_size or self.writes.options.part_size
        return self.writes.writer(path, magic_path, mode, part_size, job_marker)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        if not is_deferred_write(path):
            self.fs.pipe_file(path, value, mode=mode, **kwargs)
            return
        with self.open(path, "xb" if mode == "create" else "wb") as f:
            f.write(value)

    def put_file(self, lpath: str, path: str, mode: str = "overwrite", **kwargs: Any) -> None:
        if not is_deferred_write(path):
            self.fs.put_file(lpath, path, mode=mode, **kwargs)
            return
        if os.path.isdir(lpath):
            return  # object stores have no directories: the files below make one appear
        with open(lpath, "rb") as source, self.open(path, "xb" if mode == "create" else "wb") as f:
            shutil.copyfileobj(source, f, _COPY_CHUNK)

    def cp_file(self, source: str, target: str, **kwargs: Any) -> None:
        if is_deferred_write(source):
            raise self.no_bytes(source, "copy")
        if not is_deferred_write(target):
            self.fs.cp_file(source, target, **kwargs)
            return
        # fsspec's generic copy() hands directories over too; s3fs would "read" one as
        # empty bytes, and a zero-byte file named like the directory would be published.
        if self.fs.isdir(source):
            return  # object stores have no directories: the files copied below make one
        with self.fs.open(source, "rb") as data, self.open(target, "wb") as f:
            shutil.copyfileobj(data, f, _COPY_CHUNK)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        if not is_deferred_write(path):
            self.fs.touch(path, truncate=truncate, **kwargs)
            return
        if not truncate and self.exists(path):
            return  # nothing to update: a task file has no timestamp of its own yet
        with self.open(path, "wb"):
            pass

    # -- reads: a deferred file has no bytes before job commit --------------------------------

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kw: Any
    ) -> bytes:
        if is_deferred_write(path):
            raise self.no_bytes(path, "read")
        return cast(bytes, self.fs.cat_file(path, start=start, end=end, **kw))

    def get_file(self, path: str, lpath: str, **kwargs: Any) -> None:
        if is_deferred_write(path) and self._is_file(path):
            raise self.no_bytes(path, "download")
        if self.fs.isdir(path):  # fsspec's generic get() hands directories over too
            os.makedirs(lpath, exist_ok=True)
            return
        self.fs.get_file(path, lpath, **kwargs)

    def check_sources(self, paths: Iterable[str], operation: str) -> None:
        """Raise before anything is done if one of ``paths`` is a deferred task file."""
        for path in paths:
            if is_deferred_write(path) and self._is_file(path):
                raise self.no_bytes(path, operation)

    def no_bytes(self, path: str, operation: str) -> DeferredFileError:
        words = self.writes.words
        try:
            destination = f" {words.where} {self.url(final_destination(path))}"
        except ValueError:
            destination = ""
        return DeferredFileError(
            f"{self.url(path)}: cannot {operation} a task file before job commit: on "
            f"{words.store_name} its bytes are {words.pending_bytes}{destination}, which "
            f"nothing can read, copy or move until the job commits. {words.advice}"
        )

    # -- deletes --------------------------------------------------------------------------------

    def rm(self, paths: list[str], recursive: bool = False, maxdepth: int | None = None) -> None:
        """``rm``: every file below ``paths`` (records included) goes, staged data first.

        Files this process has just written count even if their marker is still on its
        way (:meth:`task_view`): a recursive ``rm`` must not miss one and let it commit.

        A path with glob characters is a pattern, as for every fsspec ``rm``; it names
        the task files the task sees (:meth:`ls`): their markers, the records standing
        for files with no marker, and this process's files, matched by fsspec's own
        translation of the pattern (:mod:`.patterns`). A name without them is taken as
        it is.
        """
        stored = sorted({*paths, *(stored_dir(p) for p in paths if not has_magic(p))})
        try:
            found = self.fs.expand_path(stored, recursive=recursive, maxdepth=maxdepth)
        except FileNotFoundError:
            found = []
        # A marker stands for its file (its directories for the task's): the file goes.
        expanded = {_task_name(p) for p in found}
        for path in paths:
            if has_magic(path):
                expanded |= self._suffixed_matches(path)
                expanded |= {f.path for f in known_matches(self.registry, path, recursive)}
                continue
            if self.registry.get(path.rstrip("/")) is not None:
                expanded.add(path.rstrip("/"))
            if recursive:
                expanded |= {f.path for f in self.registry.under(path.rstrip("/") + "/")}
        if not expanded:
            raise FileNotFoundError(paths[0] if len(paths) == 1 else paths)
        self.rm_files(sorted(expanded))

    def _suffixed_matches(self, pattern: str) -> set[str]:
        """The task files ``pattern`` names through what stands for them on the store:
        a marker (:func:`~magicfs.paths.marker_path`), or, for a file with no marker (an
        unmarked job's closed file), its record (:func:`~magicfs.paths.pending_path`).
        Neither name matches a pattern of the file's own name (their elements are
        staged), so the pattern is staged likewise and globbed with each suffix; 0.1.0's
        records (``<file>.pending``) with the pattern as it is."""
        if pattern.rstrip("/").endswith("**") or pattern.endswith("/"):
            return set()  # "**" already matched them; "x/" names directories only
        files: set[str] = set()
        staged = stored_pattern(pattern)
        for glob in (staged + MARKER_SUFFIX, staged + PENDING_SUFFIX, pattern + PENDING_SUFFIX):
            found = self.fs.glob(glob)
            files |= {
                task_path(p.removesuffix(MARKER_SUFFIX).removesuffix(PENDING_SUFFIX)) for p in found
            }
        return {f for f in files if is_deferred_write(f)}

    def rm_file(self, path: str) -> None:
        """Delete the one task file named ``path`` (its name taken literally): what it
        staged, its marker and its record, and nothing else.

        Not through :meth:`rm`, which expands glob characters in names. A name that is
        no task file raises ``FileNotFoundError`` (as :meth:`rm` did for it), a task
        directory ``IsADirectoryError``: ``rm(path, recursive=True)`` deletes those.
        """
        if not is_deferred_write(path):  # a record, or no file of a task
            self.fs.rm_file(path)
            return
        if self.info(path).get("type") != "file":
            raise IsADirectoryError(
                f"{self.url(path)}: not deleted: it is a directory of task files, and "
                "rm_file deletes one file; rm(path, recursive=True) deletes it and every "
                "file below it"
            )
        self.rm_files([path])

    def rm_files(self, paths: list[str]) -> None:
        """Delete task files: throw away what they staged, delete their markers and records."""
        deferred = [p for p in paths if is_deferred_write(p)]
        # Records of files deleted along with them are not read again below: the file's
        # own entry (registry or its .pending) names what it staged once; a recursive rm
        # lists both, and reading both threw every file away twice.
        doomed_files = set(deferred)
        records = [
            p for p in paths if p.endswith(PENDING_SUFFIX) and pending_file(p) not in doomed_files
        ]
        known, elsewhere = [], []
        for path in deferred:
            entry = self.registry.discarded(path)
            if entry is not None and entry.writer is not None:
                entry.writer.supersede("the file was deleted")
            elif entry is not None and entry.commit is not None:
                known.append(entry.commit)
            else:
                records += [pending_path(path), path + PENDING_SUFFIX]  # and 0.1.0's
                elsewhere.append(path)
        # Files written by another process (or whose record is all that is left): the
        # .pending names what was staged. A marker without one is a writer still running
        # or killed elsewhere: what it staged is the job's clean-up's once the job ends.
        # Their tasks are marked touched first (in_memory: the commit in the attempt's own
        # process then lists it and leaves them out).
        self.writes.touch_tasks(elsewhere)
        self.writes.discard(known, records)
        doomed = {*paths, *map(pending_path, deferred), *(p + PENDING_SUFFIX for p in deferred)}
        self.writes.delete(sorted(doomed))

    # -- everything else ---------------------------------------------------------------------

    @staticmethod
    def into(path: str) -> str:
        """Where the store keeps what stands for task path ``path`` (its listings are what
        a cache holds): the path with its elements below ``__base`` staged
        (:func:`~magicfs.paths.stored_dir`), whose parents are the path's own."""
        return stored_dir(path)

    def call(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        """Any other single-path method: the store's own, on the marker or record (a
        task file's dates and keys are its marker's, where it has one)."""
        if method in _MARKER_METHODS and is_deferred_write(path):
            try:
                return getattr(self.fs, method)(marker_path(path), *args, **kwargs)
            except FileNotFoundError:
                pass  # no marker: a directory, an unmarked job's file, an earlier version's
        return getattr(self.fs, method)(path, *args, **kwargs)

    # -- info and listings ----------------------------------------------------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if not is_deferred_write(path):
            return cast(dict[str, Any], self.fs.info(path, **kwargs))
        entry = self.registry.get(path)
        if entry is not None:
            return {"name": path, "size": entry.length, "type": "file"}
        if self.registry.under(path.rstrip("/") + "/"):  # files just written here
            return {"name": path.rstrip("/"), "size": 0, "type": "directory"}
        try:
            found = self._stored_info(path, **kwargs)  # a marker, or a directory
        except FileNotFoundError:
            length = self._recorded_length(path)  # no marker: an unmarked job's closed file
            if length is None:
                raise
            return {"name": path, "size": length, "type": "file"}
        if found.get("type") != "file":
            return _renamed(found, path.rstrip("/"))
        size = self._recorded_length(path) or 0
        named = _named({**found, "name": path, **({"Key": path} if "Key" in found else {})})
        return {**named, "size": size, **({"Size": size} if "Size" in found else {})}

    def _stored_info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """What the store has at task path ``path``: its marker (this version's name), a
        directory of markers (this version's name), or 0.1.0's marker or directory (at the
        path itself)."""
        for stored in (marker_path(path), stored_dir(path)):
            try:
                return cast(dict[str, Any], self.fs.info(stored, **kwargs))
            except FileNotFoundError:
                continue
        return cast(dict[str, Any], self.fs.info(path, **kwargs))

    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except FileNotFoundError:
            return False
        return True

    def _is_file(self, path: str) -> bool:
        try:
            return self.info(path).get("type") == "file"
        except FileNotFoundError:
            return False

    def _recorded_length(self, path: str) -> int | None:
        for record in (pending_path(path), path + PENDING_SUFFIX):  # this version's, 0.1.0's
            try:
                return SinglePendingCommit.load(self.fs, record).length
            except FileNotFoundError:
                continue
        return None  # still being written (elsewhere), or abandoned

    def _stored_ls(self, path: str, **kwargs: Any) -> list[dict[str, Any]]:
        """The store's listing of task directory ``path``: this version's staged
        directory (:func:`~magicfs.paths.stored_dir`), else 0.1.0's at the path itself."""
        stored = stored_dir(path)
        try:
            return cast(list[dict[str, Any]], self.fs.ls(stored, detail=True, **kwargs))
        except FileNotFoundError:
            if stored == path:
                raise
        return cast(list[dict[str, Any]], self.fs.ls(path, detail=True, **kwargs))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        try:
            found = self._stored_ls(path, **kwargs)
        except FileNotFoundError:
            if not self.registry.under(path.rstrip("/") + "/"):
                raise
            found = []  # only files just opened here, whose markers are on their way
        entries = self.task_view(found, under=path)
        return entries if detail else [e["name"] for e in entries]

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        options = {"maxdepth": maxdepth, "withdirs": withdirs, "detail": True, **kwargs}
        found = self.fs.find(stored_dir(path), **options)
        if not found and stored_dir(path) != path:  # a directory of 0.1.0's tree
            found = self.fs.find(path, **options)
        # (s3fs's find can answer the directory itself when a file appears in it between
        # its listing and its fallback info(): directories only where asked for.)
        entries = {
            e["name"]: e
            for e in self.task_view(found.values())
            if withdirs or e.get("type") != "directory"
        }
        base = path.rstrip("/")
        for known in self.registry.under(base + "/"):  # markers still on their way
            below = known.path[len(base) + 1 :].split("/")
            if known.path in entries or (maxdepth is not None and len(below) > maxdepth):
                continue
            entries[known.path] = {"name": known.path, "size": known.length, "type": "file"}
            for depth in range(1, len(below)) if withdirs else ():
                directory = "/".join([base, *below[:depth]])
                entries.setdefault(directory, {"name": directory, "size": 0, "type": "directory"})
        if detail:
            return dict(sorted(entries.items()))
        return sorted(entries)

    def task_view(self, entries: Iterable[dict[str, Any]], under: str | None = None) -> list[Any]:
        """Listing entries as the task sees them: each marker under its file's name
        (:func:`~magicfs.paths.marked_file`), records hidden, sizes of files written here."""
        entries = list({e["name"]: e for e in map(_named, entries)}.values())
        names = {e["name"] for e in entries}
        shown = []
        for entry in entries:
            name = entry["name"]
            if name.endswith(PENDING_SUFFIX) and pending_file(name) in names:
                continue  # the record of a listed file
            if name.endswith(PENDING_SUFFIX) and is_deferred_write(pending_file(name)):
                # A file with no marker (an unmarked job's writer): its record stands for it.
                name = pending_file(name)
                entry = {
                    **entry,
                    "name": name,
                    "size": 0,
                    **({"Size": 0} if "Size" in entry else {}),
                }
                names.add(name)
            if entry.get("type") == "file" and is_deferred_write(name):
                known = self.registry.get(name)
                if known is not None:
                    entry = {**entry, "size": known.length, "Size": known.length}
            shown.append(entry)
        if under is not None:  # files just opened here whose marker is still on its way
            parent = under.rstrip("/") + "/"
            names |= {e["name"].rstrip("/") for e in entries}
            for known in self.registry.under(parent):
                child, below, _ = known.path[len(parent) :].partition("/")
                name = parent + child
                if name not in names:  # the file, or the directory it implies
                    kind, size = ("directory", 0) if below else ("file", known.length)
                    shown.append({"name": name, "size": size, "type": kind})
                    names.add(name)
        return shown
