"""The store operations the manifest committer needs, over any fsspec filesystem.

Every stage goes through :class:`RenameStore`, so what differs between stores lives
here and nowhere else:

* **rename**: local disks rename atomically (``os.rename`` through fsspec's ``mv``).
  GCS moves an object within a bucket atomically, copying nothing (``objects.move``),
  where the bucket has it: probed once per bucket, without gcsfs's half-minute retries
  on the emulators that lack it (:mod:`.gcs_moves`). Other object stores have no rename:
  a file is copied server-side, then the source deleted. We do that ourselves per file
  (``cp_file`` + ``rm_file``): fsspec's recursive ``mv`` is broken on s3fs and adlfs.
* **etags**: the store's version tag of a file, where it has one (``etag`` in
  gcsfs's and adlfs's ``info()``); used for rename recovery and output validation.
* **rename recovery**: a rename that raised may still have happened (a lost
  response, a timeout): it counts as done when the destination holds the source's
  bytes — same etag where renames preserve etags, otherwise the source gone and the
  size right — and a half-done copy-then-delete is finished by deleting the source.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, cast

import fsspec

from ..records import path_to_uri, uri_to_path
from .capabilities import capabilities
from .gcs_moves import object_moves

log = logging.getLogger("magicfs.manifest.store")


class RenameStore:
    """Store operations of the manifest committer, over ``fs``."""

    def __init__(self, fs: fsspec.AbstractFileSystem, threads: int = 8):
        self.fs = fs
        #: Files copied at once when a directory is "renamed" on an object store.
        self.threads = threads
        found = capabilities(fs)  # probed in one place for every store
        #: Capability: a rename is one atomic operation (else copy, then delete).
        self.supports_atomic_rename = found.atomic_rename
        #: Capability: files need their parent directories to exist (a real filesystem).
        self.needs_parent_directories = found.needs_directories
        #: Capability: a renamed file keeps its etag (true where rename is a real rename).
        self.etags_preserved_in_rename = found.etag_preserved_in_rename
        #: The store's atomic move of one object (GCS's ``objects.move``, probed on first
        #: use); ``None``: the store has none, a rename copies then deletes.
        self.moves = object_moves(fs)

    # -- paths and URIs -------------------------------------------------------------------

    def uri(self, path: str) -> str:
        """The URI Hadoop's manifests use for ``path`` (protocol, ``%20`` for spaces)."""
        return path_to_uri(self.fs.unstrip_protocol(path))

    def path(self, uri: str) -> str:
        """The fsspec path of a manifest URI."""
        return cast(str, self.fs._strip_protocol(uri_to_path(uri)))

    # -- reading ----------------------------------------------------------------------------

    def info(self, path: str) -> dict[str, Any] | None:
        """``info(path)``, or ``None`` when nothing is there."""
        try:
            return cast(dict[str, Any], self.fs.info(path))
        except (FileNotFoundError, NotADirectoryError):  # a file stands where a parent should
            return None

    @staticmethod
    def etag(info: dict[str, Any] | None) -> str | None:
        if not info:
            return None
        etag = info.get("etag") or info.get("ETag")
        return str(etag) if etag else None

    def scan(self, directory: str) -> dict[str, dict[str, Any]]:
        """Every file and directory below ``directory`` with its info (one listing)."""
        self.fs.invalidate_cache(directory)
        try:
            found = self.fs.find(directory, withdirs=True, detail=True)
        except FileNotFoundError:
            return {}
        return {path: info for path, info in found.items() if path.rstrip("/") != directory}

    def list_names(self, directory: str) -> list[str]:
        """Paths of the files directly in ``directory`` (none if it is missing)."""
        self.fs.invalidate_cache(directory)
        try:
            entries = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"] for e in entries if e.get("type") == "file")

    def read_bytes(self, path: str, limit: int) -> bytes:
        return cast(bytes, self.fs.cat_file(path, start=0, end=limit + 1))

    # -- small records (the RecordIO of magicfs.protocol.journal) -------------------------

    def read(self, path: str, limit: int) -> bytes | None:
        """At most ``limit + 1`` bytes of ``path``; ``None`` if there is no such file."""
        try:
            return self.read_bytes(path, limit)
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        """Written to a temporary name and renamed: readers never see half of it."""
        self.save_atomically(path, data, path + ".tmp")

    def display(self, path: str) -> str:
        return cast(str, self.fs.unstrip_protocol(path))

    # -- writing ------------------------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes) -> None:
        self._make_parent(path)
        self.fs.pipe_file(path, data)

    def save_atomically(self, path: str, data: bytes, temp: str) -> None:
        """Write ``temp``, then rename it over ``path``: readers never see a partial file."""
        self.delete_file(temp)
        self.write_bytes(temp, data)
        self._make_parent(path)
        self.delete_file(path)
        self.rename(temp, path)

    def mkdirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)

    def _make_parent(self, path: str) -> None:
        if self.needs_parent_directories:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)

    def delete_file(self, path: str) -> bool:
        """Delete one file; ``False`` if there was none."""
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        return True

    def remove_empty_directory(self, path: str) -> bool:
        """Remove ``path`` if it is an empty directory of a real filesystem (local disks).

        ``False`` when it holds anything, is gone, or the store's directories are
        implicit (object stores: a "directory" goes with its last file).
        """
        if not self.needs_parent_directories:
            return False
        try:
            self.fs.rmdir(path)
        except OSError:  # not empty, or not there
            return False
        return True

    def delete_tree(self, path: str) -> bool:
        """Delete a directory tree; ``False`` if there was nothing."""
        if not self.fs.exists(path):
            return False
        self.fs.rm(path, recursive=True)
        return True

    # -- rename ---------------------------------------------------------------------------------

    def rename(self, source: str, dest: str) -> None:
        """Move one file: a rename, or an atomic move (GCS, where the bucket has it); on
        stores without either, copy then delete the source."""
        if self.supports_atomic_rename:
            self.fs.mv(source, dest)
        elif self.moves is None or not self.moves.move(source, dest):
            self.fs.cp_file(source, dest)
            self.fs.rm_file(source)

    def rename_dir(self, source: str, dest: str) -> int:
        """Move a directory tree; O(1) on a local disk, a rename per file elsewhere.

        Returns the number of files moved (counted, on a local disk, by one listing).
        """
        files = [p for p, i in self.scan(source).items() if i.get("type") != "directory"]
        if self.supports_atomic_rename:
            self._make_parent(dest)
            self.fs.mv(source, dest, recursive=True)
        else:  # as S3A renames a directory: each file (a move, or copy and delete), in parallel
            with concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-rename") as pool:
                list(pool.map(lambda path: self.rename(path, dest + path[len(source) :]), files))
        return len(files)

    def children(self, directory: str) -> list[dict[str, Any]]:
        """``ls(directory, detail=True)``, or ``[]`` when it is missing."""
        self.fs.invalidate_cache(directory)
        try:
            return [
                e for e in self.fs.ls(directory, detail=True) if e["name"].rstrip("/") != directory
            ]
        except FileNotFoundError:
            return []

    def rename_with_recovery(self, source: str, dest: str, size: int, etag: str | None) -> bool:
        """Rename ``source`` to ``dest``; returns ``True`` if a failure was recovered from.

        Raises the rename's own error when the destination does not hold the file.
        """
        try:
            self.rename(source, dest)
            return False
        except OSError as failure:
            found = self.info(dest)
            if found is None or found.get("type") != "file" or found.get("size") != size:
                raise
            source_left = self.info(source)
            if etag and self.etags_preserved_in_rename and self.etag(found) == etag:
                log.info("rename %s -> %s failed (%s) but had happened", source, dest, failure)
                return True
            if source_left is None:
                log.info("rename %s -> %s failed (%s), source gone: done", source, dest, failure)
                return True
            if not self.supports_atomic_rename and source_left.get("size") == size:
                # copied, but the delete failed: finish it
                self.fs.rm_file(source)
                log.info("rename %s -> %s: finished the delete of the source", source, dest)
                return True
            raise
