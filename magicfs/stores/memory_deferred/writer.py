"""The in-process store's hooks of the deferred writer (:mod:`magicfs.stores.deferred_writer`).

* **begin**: a zero-byte marker, :func:`~magicfs.paths.marker_path` (for
  ``xb``, checked and written under the filesystem's lock: a second writer of the path
  gets ``FileExistsError`` from ``open()``), then an upload against the final path.
* **job check**: does the job marker exist?
* **stage**: the part kept in process memory; its id names the upload and the number.
* **record**: :func:`~magicfs.paths.pending_path` (``extraData["magicfs.store"]``
  ``mem-deferred``; an ``xb`` file's record asks job commit not to replace a file). In
  ``in_memory`` mode the record stays in this process.
* **discard**: drop the upload, delete the marker (and the record).

Its requests are plain calls on memory; they run as coroutines on fsspec's IO loop only
so the writer's one lifecycle (background parts and close) applies unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

import fsspec.asyn

from ...errors import InvalidCommitData
from ...paths import MagicPath, marker_path, pending_path
from ...records import SinglePendingCommit, path_to_uri
from ...records.pending import STORE_KEY
from ...statistics import IOStatisticsSnapshot
from ..create_only import create_only_fields
from ..deferred_writer import (
    DeferredWritesBase,
    PartRules,
    StoreWords,
)
from .fs import MemoryDeferredFileSystem

T = TypeVar("T")

#: ``extraData["magicfs.store"]`` of this store's records.
STORE_NAME = "mem-deferred"

RULES = PartRules(
    noun="part",
    min_size=1,
    max_size=1 << 30,
    max_parts=10_000,
    grow_every=1000,
    at_least_one=True,  # a record lists at least one part (Hadoop's loader asks it)
)

WORDS = StoreWords(
    store_name="the in-process store",
    noun="upload",
    pending_bytes="parts staged in this process's memory",
    where="aimed at",
    advice="Write the file under its final name in one go",
)


def run_background(call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start ``call`` on fsspec's IO loop (shared by the writer and the adapter)."""
    return asyncio.run_coroutine_threadsafe(call, fsspec.asyn.get_loop())


def load_records(fs: MemoryDeferredFileSystem, paths: list[str]) -> list[SinglePendingCommit]:
    """The ``.pending`` records at ``paths``; missing and unreadable ones are skipped."""
    found = []
    for path in paths:
        try:
            found.append(SinglePendingCommit.from_json(fs.cat_file(path), source=path))
        except (FileNotFoundError, InvalidCommitData):
            continue
    return found


class MemoryWrites(DeferredWritesBase):
    """The write side of a ``mem-deferred`` filesystem (a ``DeferredWrites``)."""

    rules = RULES
    words = WORDS
    fs: MemoryDeferredFileSystem

    def url(self, path: str) -> str:
        return str(self.fs.unstrip_protocol(path))

    def hooks(
        self, path: str, magic_path: MagicPath, mode: str, job_marker: str | None
    ) -> MemoryFileHooks:
        return MemoryFileHooks(self.fs, path, magic_path, mode, job_marker, self.options.in_memory)

    def discard(self, commits: list[SinglePendingCommit], records: list[str]) -> int:
        known = [*commits, *load_records(self.fs, records)]
        return sum(self.fs.discard(commit.upload_id) for commit in known)

    def delete(self, paths: list[str]) -> None:
        for path in self.with_markers(paths):
            if self.fs.isfile(path):
                self.fs.rm_file(path)


class MemoryFileHooks:
    """One task file's upload in process memory (see the module docstring)."""

    part_pieces = False  # astage takes the block's bytes
    checked_by_commit = False  # its close waits for its own job check

    def __init__(
        self,
        fs: MemoryDeferredFileSystem,
        path: str,
        magic_path: MagicPath,
        mode: str,
        job_marker: str | None,
        in_memory: bool,
    ):
        self.fs = fs
        self.path = path
        self.url = str(fs.unstrip_protocol(path))
        self.mode = mode
        self.destination = magic_path.destination
        self.job_marker = job_marker
        self.in_memory = in_memory and bool(magic_path.job_id and magic_path.task_attempt_id)
        self.upload_id: str | None = None
        self.marker_written = False

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return run_background(call)

    async def abegin(self) -> None:
        try:
            self.fs.put_marker(marker_path(self.path), create_only="x" in self.mode)
        except FileExistsError:
            raise FileExistsError(
                f"{self.url}: another writer has already opened this path ('xb')"
            ) from None
        self.marker_written = True
        self.upload_id = self.fs.create_upload(self.destination)

    async def ajob_active(self) -> bool:
        return bool(self.fs.exists(self.job_marker))

    async def astage(self, number: int, body: bytes) -> str:
        assert self.upload_id is not None
        return self.fs.stage(self.upload_id, number, body)

    def record(self, part_ids: list[str], length: int) -> SinglePendingCommit:
        assert self.upload_id is not None
        bucket, _, key = self.destination.partition("/")
        extra = {STORE_KEY: STORE_NAME, **create_only_fields(self.mode)}
        return SinglePendingCommit(
            uri=path_to_uri(self.url),
            upload_id=self.upload_id,
            bucket=bucket,
            destination_key=key,
            etags=part_ids,
            length=length,
            extra_data=extra,
            iostatistics=IOStatisticsSnapshot(counters={"stream_write_bytes": length}),
            filename=None if self.in_memory else pending_path(self.url),
        )

    async def asave(self, record: SinglePendingCommit) -> None:
        if not self.in_memory:
            self.fs.pipe_file(pending_path(self.path), record.to_bytes())

    async def adiscard(self, saved: bool) -> None:
        if self.upload_id is not None:
            self.fs.discard(self.upload_id)
        doomed = [marker_path(self.path)] if self.marker_written else []
        if saved and not self.in_memory:
            doomed.append(pending_path(self.path))
        for path in doomed:
            if self.fs.isfile(path):
                self.fs.rm_file(path)
        self.marker_written = False

    async def adrop(self, commit: SinglePendingCommit) -> None:
        self.fs.discard(commit.upload_id)
        if not self.in_memory and self.fs.isfile(pending_path(self.path)):
            self.fs.rm_file(pending_path(self.path))
