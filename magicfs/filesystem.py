"""``MagicFileSystem``: any fsspec filesystem, with writes under magic paths deferred.

The whole idea fits in two rules:

* a path with no magic element goes straight to the wrapped filesystem, unchanged;
* a magic path is the task's view of its output, and what happens to it depends on
  one capability of the store:

  - **S3 (multipart uploads)**: a *write* becomes a deferred write, a multipart upload
    aimed at the path's final destination that only job commit completes
    (:mod:`magicfs.s3.writer`). Reads and listings see the magic tree as it is stored
    (empty markers and ``.pending`` records), with two touches: ``info()`` of a magic
    file reports the bytes written (HADOOP-17414), and ``rm`` of magic files aborts
    their uploads first so that nothing is left parked and billed.
  - **rename stores (local, memory, Azure, GCS)**: every operation on a magic path is
    *routed* to the task attempt's working directory of the manifest committer, and
    paths in results are mapped back (:mod:`magicfs.manifest.layout`). Writes are
    ordinary writes there; job commit renames them into place.

So ``task.path(...)`` with pandas or pyarrow behaves the same on every store.

Decision: instances are not cached (``cachable = False``). A wrapper holds no state of
its own worth sharing and the wrapped filesystem has its own cache; this way no two
jobs or threads ever share a wrapper by accident (fsspec#180). Instances pickle by
their constructor arguments, so they travel to Spark executors.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import fsspec
from fsspec.implementations.chained import ChainedFileSystem

from . import paths as magic_paths
from .layout import job_marker_for
from .manifest.layout import retarget, unretarget, work_path_of
from .records import SinglePendingCommit
from .s3.store import S3Store
from .s3.sweep import abort_uploads, recorded_uploads
from .s3.tracking import IN_MEMORY_COMMITS
from .s3.writer import MagicS3Writer

log = logging.getLogger("magicfs.filesystem")

_COPY_CHUNK = 8 << 20
_PARENT_DIRECTORY_PROTOCOLS = {"file", "local"}


def _protocols(fs: fsspec.AbstractFileSystem) -> set[str]:
    return set(fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,))


def is_s3(fs: fsspec.AbstractFileSystem) -> bool:
    """Capability probe: does ``fs`` speak S3 multipart uploads (an s3fs filesystem)?"""
    return bool({"s3", "s3a"} & _protocols(fs)) and hasattr(fs, "call_s3")


class MagicFileSystem(ChainedFileSystem):
    """Wrap ``fs`` (or build one from ``target_protocol`` / ``target_options``).

    Options (S3 only):

    * ``part_size`` (8 MiB): size of each uploaded part (>= 5 MiB); doubles after
      every 1,000 parts so huge files stay within S3's 10,000 parts.
    * ``parts_in_flight`` (4): parts uploading at once per file; memory per open
      file is about ``(parts_in_flight + 1) * part_size``.
    * ``in_memory`` (False): keep commit data in this process instead of writing a
      marker and a ``.pending`` per file (HADOOP-19047; see :mod:`magicfs.s3.tracking`).
    * ``check_job_active`` (True): writers in a ``__magic_job-<id>`` directory check
      that the job is still active after recording each upload.
    """

    protocol = "magic"
    cachable = False

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem | None = None,
        target_protocol: str | None = None,
        target_options: dict[str, Any] | None = None,
        fo: str | None = None,
        *,
        part_size: int = 8 << 20,
        parts_in_flight: int = 4,
        in_memory: bool = False,
        check_job_active: bool = True,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if fs is None:
            if target_protocol is None:
                raise ValueError("MagicFileSystem needs fs= or target_protocol=")
            fs = fsspec.filesystem(target_protocol, **(target_options or {}))
        self.fs = fs
        self.part_size = part_size
        self.parts_in_flight = parts_in_flight
        self.in_memory = in_memory
        self.check_job_active = check_job_active
        #: Capability: deferred writes through S3 multipart uploads (else: routing).
        self.s3 = S3Store(fs) if is_s3(fs) else None
        self._makes_parents = bool(_protocols(fs) & _PARENT_DIRECTORY_PROTOCOLS)

    # -- paths ---------------------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for prefix in ("magic::", "magic://"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
        return path

    def _inner(self, path: str) -> str:
        """``path`` as the wrapped filesystem writes it (``bkt/key`` for S3)."""
        return self.fs._strip_protocol(self._strip_protocol(path))

    def _deferred(self, path: str) -> bool:
        """True for a write that must become a deferred upload (S3, magic, not a record)."""
        return self.s3 is not None and magic_paths.is_deferred_write(self._inner(path))

    def _any_deferred(self, path: Any) -> bool:
        return any(self._deferred(p) for p in (path if isinstance(path, list) else [path]))

    def _route(self, path: Any) -> tuple[Any, Callable[[Any], Any]]:
        """On rename stores, send magic paths to their attempt's working directory.

        Returns the routed path(s) and a function that maps paths found in results back
        to the magic paths the caller used. Identity on S3 and for plain paths.
        """
        if self.s3 is not None or path is None:
            return path, _same
        many = isinstance(path, (list, tuple))
        routed, pairs = [], []
        for one in path if many else [path]:
            inner = self._inner(one)
            target = retarget(inner)
            if target is None:
                routed.append(one)
                continue
            routed.append(target)
            pairs.append(work_path_of(inner))
        if not pairs:
            return path, _same

        def back(result: Any) -> Any:
            def one(p: str) -> str:
                for attempt_dir, work_path in pairs:
                    mapped = unretarget(p, attempt_dir, work_path)
                    if mapped is not p:
                        return mapped
                return p

            return _map_paths(result, one)

        return (routed if many else routed[0]), back

    def unstrip_protocol(self, name: str) -> str:
        return self.fs.unstrip_protocol(name)

    # -- writes -----------------------------------------------------------------------------

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if self._deferred(path) and "r" not in mode:
            # The base class adds text and compression layers around our _open.
            return super().open(path, mode, **kwargs)
        routed, _ = self._route(path)
        if routed is not path and "r" not in mode:
            self._make_parent(routed)
        return self.fs.open(routed, mode, **kwargs)

    def _make_parent(self, path: str) -> None:
        """Local disks need the directories a file goes into; object stores do not."""
        if self._makes_parents:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        """Only reached for deferred writes on S3 (see :meth:`open`)."""
        inner = self._inner(path)
        if "a" in mode:
            raise ValueError(
                f"{self.unstrip_protocol(inner)}: append ('ab') is not supported under a magic "
                "path: a deferred upload can only be written from the start"
            )
        magic_path = magic_paths.parse_magic_path(inner)
        assert magic_path is not None and self.s3 is not None
        return MagicS3Writer(
            self.s3,
            inner,
            magic_path,
            mode="xb" if "x" in mode else "wb",
            part_size=block_size or self.part_size,
            parts_in_flight=self.parts_in_flight,
            job_marker=job_marker_for(magic_path) if self.check_job_active else None,
            in_memory=self.in_memory,
        )

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        if self._deferred(path):
            with self.open(path, "xb" if mode == "create" else "wb") as f:
                f.write(value)
            return
        routed, _ = self._route(self._strip_protocol(path))
        if routed is not path:
            self._make_parent(routed)
        self.fs.pipe_file(routed, value, mode=mode, **kwargs)

    def pipe(self, path: Any, value: Any = None, **kwargs: Any) -> Any:
        targets = path if isinstance(path, dict) else {path: value}
        if self.s3 is not None and not any(self._deferred(p) for p in targets):
            return self.fs.pipe(path, value, **kwargs)
        for target, data in targets.items():
            self.pipe_file(target, data, **kwargs)

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        if self._deferred(rpath):
            with open(lpath, "rb") as source, self.open(rpath, "wb") as target:
                shutil.copyfileobj(source, target, _COPY_CHUNK)
            return
        routed, _ = self._route(self._strip_protocol(rpath))
        if routed is not rpath:
            self._make_parent(routed)
        self.fs.put_file(lpath, routed, **kwargs)

    def put(self, lpath: Any, rpath: Any, recursive: bool = False, **kwargs: Any) -> Any:
        if self._any_deferred(rpath) or self._route(rpath)[0] is not rpath:
            return super().put(lpath, rpath, recursive=recursive, **kwargs)
        return self.fs.put(lpath, rpath, recursive=recursive, **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        if self._deferred(path):
            with self.open(path, "wb"):
                pass
            return
        routed, _ = self._route(self._strip_protocol(path))
        if routed is not path:
            self._make_parent(routed)
        self.fs.touch(routed, truncate=truncate, **kwargs)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        if self._deferred(path2):
            with self.fs.open(path1, "rb") as source, self.open(path2, "wb") as target:
                shutil.copyfileobj(source, target, _COPY_CHUNK)
            return
        source, _ = self._route(self._strip_protocol(path1))
        target, _ = self._route(self._strip_protocol(path2))
        if target is not path2:
            self._make_parent(target)
        self.fs.cp_file(source, target, **kwargs)

    def copy(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> Any:
        routed = self._route(path1)[0] is not path1 or self._route(path2)[0] is not path2
        if self._any_deferred(path2) or routed:
            return super().copy(path1, path2, recursive=recursive, **kwargs)
        return self.fs.copy(path1, path2, recursive=recursive, **kwargs)

    cp = copy

    def mv(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> Any:
        routed = self._route(path1)[0] is not path1 or self._route(path2)[0] is not path2
        if not self._any_deferred(path2) and not routed:
            return self.fs.mv(path1, path2, recursive=recursive, **kwargs)
        self.copy(path1, path2, recursive=recursive, **kwargs)
        self.rm(path1, recursive=recursive)

    rename = move = mv

    # -- reads and listings -------------------------------------------------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        routed, back = self._route(path)
        try:
            info = self.fs.info(routed, **kwargs)
        except FileNotFoundError:
            # In-memory writers leave no marker; this process still knows the file.
            length = IN_MEMORY_COMMITS.length_of(self._inner(path)) if self.s3 else None
            if length is None:
                raise
            return {"name": self._inner(path), "size": length, "type": "file"}
        if info.get("type") == "file" and not info.get("size") and self._deferred(path):
            length = self._written_length(self._inner(path))
            if length is not None:
                info = {**info, "size": length}
        return back(info)

    def _written_length(self, inner: str) -> int | None:
        """Bytes written to a magic file, from this process's memory or its ``.pending``."""
        length = IN_MEMORY_COMMITS.length_of(inner)
        if length is not None:
            return length
        try:
            return SinglePendingCommit.load(self.fs, magic_paths.pending_path(inner)).length
        except FileNotFoundError:
            return None  # still being written, or abandoned

    def size(self, path: str) -> int | None:
        return self.info(path).get("size")

    # -- deletes: magic files on S3 give up their uploads first ------------------------------

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> Any:
        path = self._strip_protocol(path)
        if self.s3 is not None and (recursive or self._any_deferred(path)):
            # One extra listing for recursive deletes: the price of never orphaning an
            # upload whose marker or .pending is deleted (they are billed until aborted).
            expanded = self.fs.expand_path(path, recursive=recursive, maxdepth=maxdepth)
            magic = [p for p in map(self._inner, expanded) if magic_paths.is_magic_path(p)]
            if magic:
                abort_uploads(self.s3, recorded_uploads(self.s3, magic))
        routed, _ = self._route(path)
        return self.fs.rm(routed, recursive=recursive, maxdepth=maxdepth)

    def rm_file(self, path: str) -> None:
        self.rm(path)

    delete = rm


def _same(result: Any) -> Any:
    return result


def _map_paths(result: Any, one: Callable[[str], str]) -> Any:
    """Apply ``one`` to every path in a filesystem method's result."""
    if isinstance(result, str):
        return one(result)
    if isinstance(result, list):
        return [_map_paths(item, one) for item in result]
    if isinstance(result, tuple):
        return tuple(_map_paths(item, one) for item in result)
    if isinstance(result, dict):
        if isinstance(result.get("name"), str):  # an info dict
            return {**result, "name": one(result["name"])}
        return {one(k) if isinstance(k, str) else k: _map_paths(v, one) for k, v in result.items()}
    if isinstance(result, Iterator):
        return (_map_paths(item, one) for item in result)
    return result


def _delegate(name: str) -> Any:
    def method(self: MagicFileSystem, path: Any = None, *args: Any, **kwargs: Any) -> Any:
        if path is None:
            return getattr(self.fs, name)(*args, **kwargs)
        routed, back = self._route(self._strip_protocol(path))
        return back(getattr(self.fs, name)(routed, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the wrapped filesystem (magic paths routed on rename stores)."
    return method


# Everything that neither writes nor deletes is the wrapped filesystem's own behaviour.
for _name in (
    "ls",
    "exists",
    "lexists",
    "isfile",
    "isdir",
    "find",
    "glob",
    "walk",
    "du",
    "cat_file",
    "cat",
    "cat_ranges",
    "head",
    "tail",
    "read_block",
    "checksum",
    "ukey",
    "created",
    "modified",
    "sign",
    "get_file",
    "get",
    "expand_path",
    "invalidate_cache",
    "mkdir",
    "makedirs",
    "rmdir",
):
    setattr(MagicFileSystem, _name, _delegate(_name))
