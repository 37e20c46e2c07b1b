"""The block-list output stream: blocks staged on the final blob that ``close()`` never publishes.

Life of one file (``abfs://c/out/__magic_job-7/.../__base/a.csv`` -> ``c/out/a.csv``):

1. open: register the file in this process (:mod:`magicfs.task_files`; an earlier
   writer of the same path is superseded, an attempt already committed or aborted here
   is refused), and PUT a zero-byte marker at the task path in the background, so
   listings of the attempt show the file while it is written (as on S3).
2. write: bytes fill blocks of ``block_size``; each full block is staged (Put Block)
   against the *final* blob ``out/a.csv`` in the background, at most ``blocks_in_flight``
   at once. Staged blocks are invisible: the destination, if it exists, keeps its old
   bytes; if not, nothing is there.
3. close: stage the last block, wait for all, check the job is still active (one HEAD
   of its marker), then PUT ``<path>.pending``: a Hadoop ``SinglePendingCommit`` whose
   ``etags`` are the ordered block ids, ``uploadId`` the writer's id prefix and
   ``extraData["magicfs.store"]`` ``azure-block-list``. Job commit publishes the blob
   with one Put Block List of exactly those ids.
4. failure (an exception leaving a ``with`` block, a failed request, ``discard()``, a
   ``close()`` while an exception propagates, garbage collection unclosed): no
   ``.pending`` is written and the marker is deleted. Azure has no request that drops
   staged blocks alone: they stay invisible until the name's next publish discards them,
   or Azure does after 7 days (docs/stores/azure.md).

An empty file stages nothing: its record lists no block, and job commit publishes an
empty list, which makes a zero-byte blob.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import logging
import sys
import threading
from typing import Any

from ...errors import JobNotActiveError, TaskNotActiveError
from ...paths import MagicPath, pending_path
from ...records import SinglePendingCommit, path_to_uri
from ...records.pending import BLOCK_LIST_STORE, STORE_KEY
from ...statistics import IOStatisticsSnapshot
from ...task_files import TASK_FILES, TaskFile, TaskFiles
from .blocks import (
    ID_LENGTH,
    MAX_BLOCK_SIZE,
    BlockStore,
    block_id,
    is_id_length_error,
    new_token,
)

log = logging.getLogger("magicfs.azure.writer")


class BlockListWriter(io.BufferedIOBase):
    """Write-only binary stream for one magic path on Azure Blob. Made by the magic filesystem."""

    def __init__(
        self,
        store: BlockStore,
        path: str,
        magic_path: MagicPath,
        *,
        mode: str = "wb",
        block_size: int = 8 << 20,
        blocks_in_flight: int = 4,
        job_marker: str | None = None,
        registry: TaskFiles = TASK_FILES,
    ):
        super().__init__()
        if not 0 < block_size <= MAX_BLOCK_SIZE:
            raise ValueError(f"block_size must be within 1 byte and {MAX_BLOCK_SIZE} bytes")
        self.store = store
        self.path = path
        self.mode = mode
        self.block_size = block_size
        self._registry = registry
        self._job_id = magic_path.job_id
        self._attempt_id = magic_path.task_attempt_id
        self._job_marker = job_marker
        self.container, self.marker_blob = store.split(path)
        destination_container, self.blob = store.split(magic_path.destination)
        assert destination_container == self.container
        self.token = new_token(ID_LENGTH)
        self._lock = threading.RLock()
        self._slots = threading.BoundedSemaphore(blocks_in_flight)
        self._buffer = bytearray()
        self._blocks: list[concurrent.futures.Future[None]] = []
        self._first: concurrent.futures.Future[None] | None = None
        self._written = 0
        self._failure: BaseException | None = None
        self._state = "open"
        self._superseded: str | None = None

        finished = registry.finished(self._job_id, self._attempt_id)
        if finished:
            self._state = "refused"
            raise TaskNotActiveError(
                f"{self._display()}: task attempt {self._attempt_id} has already {finished}: "
                "a file written now would never be published (write before commit_task)"
            )
        if "x" in mode and (registry.get(path) is not None or store.fs.exists(path)):
            self._state = "refused"
            raise FileExistsError(f"{self._display()}: already written ('xb')")
        self._register()
        self._marker = store.submit(store.put(self.container, self.marker_blob, b""))

    def _register(self) -> None:
        """Enter this file in the registry, replacing an earlier file of the same path."""
        entry = TaskFile(self.path, self._job_id or "", self._attempt_id or "", writer=self)
        previous = self._registry.opened(entry)
        if previous is not None and previous.writer is not None:
            log.info("%s: opened again; the earlier writer is discarded", self._display())
            previous.writer.supersede("the file was opened again")
        elif previous is not None:  # closed here before: its record must not commit it
            self.store.fs.rm_file(pending_path(self.path))

    # -- the stream ------------------------------------------------------------------------

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, data: Any) -> int:
        with self._lock:
            self._check_usable()
            view = memoryview(data).cast("B")
            offset = 0
            while offset < len(view):
                take = min(self.block_size - len(self._buffer), len(view) - offset)
                self._buffer += view[offset : offset + take]
                offset += take
                if len(self._buffer) == self.block_size:
                    self._stage(bytes(self._buffer))
                    self._buffer = bytearray()
            self._written += len(view)
            self._registry.wrote(self.path, self, self._written)
            return len(view)

    def flush(self) -> None:
        """Nothing to do: blocks are staged as they fill."""

    def close(self) -> None:
        """Stage the last block and save the ``.pending`` record — never publish.

        Called while an exception is propagating it discards instead: the data written
        so far may be truncated.
        """
        if sys.exc_info()[1] is not None and self._state == "open":
            log.warning(
                "%s closed while an exception is propagating: discarding it (a possibly "
                "truncated file is never saved as pending)",
                self._display(),
            )
            self.discard()
            return
        with self._lock:
            if self._state != "open":
                if self._superseded:
                    raise OSError(
                        f"{self._display()}: {self._superseded} before this writer closed; "
                        "its data has been discarded"
                    )
                return
            try:
                self._check_usable()
                if self._buffer:
                    self._stage(bytes(self._buffer))
                    self._buffer = bytearray()
                concurrent.futures.wait([*self._blocks, self._marker])
                for call in [self._marker, *self._blocks]:
                    call.result()
                self._check_job_active()
                commit = self._commit_record()
                self.store.run(
                    self.store.put(
                        self.container, pending_path(self.marker_blob), commit.to_bytes()
                    )
                )
            except BaseException:
                self._discard()
                raise
            self._state = "closed"
            self._registry.closed(self.path, self, self._written, commit)
            super().close()

    def discard(self) -> None:
        """Forget the file: no record, no marker; its staged blocks are never published."""
        with self._lock:
            if self._state == "open":
                self._discard()

    def supersede(self, reason: str) -> None:
        """The path was opened again or deleted: stop this writer; its close raises."""
        with self._lock:
            if self._state == "open":
                self._discard(keep_marker=True)
                self._state = "superseded"
                self._superseded = reason

    def commit(self) -> None:
        """For fsspec's transaction protocol: the commit of a magic file is its ``close()``."""
        self.close()

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()

    def __del__(self) -> None:
        if getattr(self, "_state", None) != "open":
            return
        log.warning("%s was never closed: discarding it", self._display())
        with contextlib.suppress(RuntimeError):  # no thread at interpreter shutdown
            threading.Thread(target=self.discard, name="magicfs-discard", daemon=True).start()

    # -- internals ---------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._state != "open":
            reason = f" ({self._superseded})" if self._superseded else ""
            raise ValueError(f"I/O operation on {self._state} file {self._display()}{reason}")
        if self._failure is not None:
            failure = self._failure
            self._discard()
            raise failure

    def _stage(self, data: bytes) -> None:
        """Put Block in the background; the first block settles the ids' length first."""
        if len(self._blocks) >= 50_000:
            raise OSError(f"{self._display()}: more than 50,000 blocks (raise block_size)")
        self._slots.acquire()
        index = len(self._blocks)
        future = self.store.submit(self._stage_async(index, data))
        if self._first is None:
            self._first = future
        future.add_done_callback(self._staged)
        self._blocks.append(future)

    async def _stage_async(self, index: int, data: bytes) -> None:
        if index > 0:
            assert self._first is not None
            await asyncio.wrap_future(self._first)
        try:
            await self.store.stage(self.container, self.blob, block_id(self.token, index), data)
        except Exception as error:
            if index > 0 or not is_id_length_error(error):
                raise
            # The blob holds another writer's ids of another length: use that length.
            length = await self.store.id_length(self.container, self.blob)
            if length is None or length == len(block_id(self.token, 0)):
                raise
            log.info("%s: the blob's block ids have %d characters", self._display(), length)
            self.token = new_token(length)
            await self.store.stage(self.container, self.blob, block_id(self.token, 0), data)

    def _staged(self, future: concurrent.futures.Future[None]) -> None:
        self._slots.release()
        error = None if future.cancelled() else future.exception()
        if error is not None and self._failure is None:
            self._failure = error

    def _check_job_active(self) -> None:
        if self._job_marker is None:
            return
        if not self.store.fs.exists(self._job_marker):
            raise JobNotActiveError(
                f"{self._display()}: job {self._job_id} is not active (never set up, or "
                "already committed or aborted); this file has been discarded"
            )

    def _commit_record(self) -> SinglePendingCommit:
        blocks = [block_id(self.token, n) for n in range(len(self._blocks))]
        stats = IOStatisticsSnapshot(
            counters={"stream_write_bytes": self._written, "stream_write_blocks": len(blocks)}
        )
        return SinglePendingCommit(
            uri=path_to_uri(self.store.url(self.path)),
            upload_id=self.token,
            bucket=self.container,
            destination_key=self.blob,
            etags=blocks,
            length=self._written,
            extra_data={STORE_KEY: BLOCK_LIST_STORE},
            iostatistics=stats,
            filename=self.store.url(pending_path(self.path)),
        )

    def _discard(self, keep_marker: bool = False) -> None:
        self._state = "discarded"
        self._buffer = bytearray()
        self._registry.discarded(self.path, self)
        concurrent.futures.wait([*self._blocks, self._marker])
        if not keep_marker:
            with contextlib.suppress(Exception):
                self.store.run(self.store.delete(self.container, self.marker_blob))
        super().close()

    def _display(self) -> str:
        return self.store.url(self.path)
