"""``MagicFileSystem``: any fsspec filesystem, with writes under magic paths deferred.

The whole idea fits in two rules:

* a path with no magic element goes straight to the wrapped filesystem, unchanged;
* a *write* to a magic path (``open(..., "wb")``, ``pipe``, ``put``, ``touch``, ``cp``
  into it) becomes a deferred write: on S3 a multipart upload aimed at the path's final
  destination that only job commit completes (:mod:`magicfs.s3.writer`).

Reads, listings and deletes of magic paths also go to the wrapped filesystem, with
two touches: ``info()`` of a magic file reports the bytes written (its marker is
empty, HADOOP-17414), and ``rm`` of magic files aborts their uploads first so that
nothing is left parked and billed.

Decision: instances are not cached (``cachable = False``). A wrapper holds no state of
its own worth sharing and the wrapped filesystem has its own cache; this way no two
jobs or threads ever share a wrapper by accident (fsspec#180). Instances pickle by
their constructor arguments, so they travel to Spark executors.
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

import fsspec
from fsspec.implementations.chained import ChainedFileSystem

from . import paths as magic_paths
from .layout import job_marker_for
from .records import SinglePendingCommit
from .s3.store import S3Store
from .s3.sweep import abort_uploads, recorded_uploads
from .s3.tracking import IN_MEMORY_COMMITS
from .s3.writer import MagicS3Writer

log = logging.getLogger("magicfs.filesystem")

_COPY_CHUNK = 8 << 20


def is_s3(fs: fsspec.AbstractFileSystem) -> bool:
    """Capability probe: does ``fs`` speak S3 multipart uploads (an s3fs filesystem)?"""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return bool({"s3", "s3a"} & set(protocols)) and hasattr(fs, "call_s3")


class MagicFileSystem(ChainedFileSystem):
    """Wrap ``fs`` (or build one from ``target_protocol`` / ``target_options``).

    Options:

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
        self.s3 = S3Store(fs) if is_s3(fs) else None

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
        return magic_paths.is_deferred_write(self._inner(path))

    def _any_deferred(self, path: Any) -> bool:
        return any(self._deferred(p) for p in (path if isinstance(path, list) else [path]))

    def unstrip_protocol(self, name: str) -> str:
        return self.fs.unstrip_protocol(name)

    # -- deferred writes --------------------------------------------------------------------

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "r" in mode or not self._deferred(path):
            return self.fs.open(path, mode, **kwargs)
        # The base class adds text and compression layers around our _open.
        return super().open(path, mode, **kwargs)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        inner = self._inner(path)
        if "a" in mode:
            raise ValueError(
                f"{self.unstrip_protocol(inner)}: append ('ab') is not supported under a magic "
                "path: a deferred upload can only be written from the start"
            )
        magic_path = magic_paths.parse_magic_path(inner)
        assert magic_path is not None
        if self.s3 is None:
            raise NotImplementedError(
                f"{self.unstrip_protocol(inner)}: deferred writes on "
                f"{self.fs.protocol!r} stores come with the manifest committer"
            )
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
        if not self._deferred(path):
            return self.fs.pipe_file(path, value, mode=mode, **kwargs)
        with self.open(path, "xb" if mode == "create" else "wb") as f:
            f.write(value)

    def pipe(self, path: Any, value: Any = None, **kwargs: Any) -> Any:
        targets = path if isinstance(path, dict) else {path: value}
        if not any(self._deferred(p) for p in targets):
            return self.fs.pipe(path, value, **kwargs)
        for target, data in targets.items():
            self.pipe_file(target, data, **kwargs)

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        if not self._deferred(rpath):
            return self.fs.put_file(lpath, rpath, **kwargs)
        with open(lpath, "rb") as source, self.open(rpath, "wb") as target:
            shutil.copyfileobj(source, target, _COPY_CHUNK)

    def put(self, lpath: Any, rpath: Any, recursive: bool = False, **kwargs: Any) -> Any:
        if not self._any_deferred(rpath):
            return self.fs.put(lpath, rpath, recursive=recursive, **kwargs)
        return super().put(lpath, rpath, recursive=recursive, **kwargs)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        if not self._deferred(path):
            return self.fs.touch(path, truncate=truncate, **kwargs)
        with self.open(path, "wb"):
            pass

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        if not self._deferred(path2):
            return self.fs.cp_file(path1, path2, **kwargs)
        with self.fs.open(path1, "rb") as source, self.open(path2, "wb") as target:
            shutil.copyfileobj(source, target, _COPY_CHUNK)

    def copy(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> Any:
        if not self._any_deferred(path2):
            return self.fs.copy(path1, path2, recursive=recursive, **kwargs)
        return super().copy(path1, path2, recursive=recursive, **kwargs)

    cp = copy

    def mv(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> Any:
        if not self._any_deferred(path2):
            return self.fs.mv(path1, path2, recursive=recursive, **kwargs)
        self.copy(path1, path2, recursive=recursive, **kwargs)
        self.rm(path1, recursive=recursive)

    rename = move = mv

    # -- reads and listings: the wrapped filesystem's answers ---------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        try:
            info = self.fs.info(path, **kwargs)
        except FileNotFoundError:
            # In-memory writers leave no marker; this process still knows the file.
            length = IN_MEMORY_COMMITS.length_of(self._inner(path))
            if length is None:
                raise
            return {"name": self._inner(path), "size": length, "type": "file"}
        if info.get("type") == "file" and not info.get("size") and self._deferred(path):
            length = self._written_length(self._inner(path))
            if length is not None:
                info = {**info, "size": length}
        return info

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

    # -- deletes: magic files give up their uploads first -------------------------------

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> Any:
        path = self._strip_protocol(path)
        if self.s3 is not None and (recursive or self._any_deferred(path)):
            # One extra listing for recursive deletes: the price of never orphaning an
            # upload whose marker or .pending is deleted (they are billed until aborted).
            expanded = self.fs.expand_path(path, recursive=recursive, maxdepth=maxdepth)
            magic = [p for p in map(self._inner, expanded) if magic_paths.is_magic_path(p)]
            if magic:
                abort_uploads(self.s3, recorded_uploads(self.s3, magic))
        return self.fs.rm(path, recursive=recursive, maxdepth=maxdepth)

    def rm_file(self, path: str) -> None:
        self.rm(path)

    delete = rm


def _delegate(name: str) -> Any:
    def method(self: MagicFileSystem, path: Any = None, *args: Any, **kwargs: Any) -> Any:
        if path is not None:
            path = self._strip_protocol(path)
            return getattr(self.fs, name)(path, *args, **kwargs)
        return getattr(self.fs, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the wrapped filesystem."
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
