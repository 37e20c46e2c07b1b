"""The magic output stream: a multipart upload to the final key that ``close()`` never completes.

Life of one file (``s3://bkt/out/__magic_job-7/.../__base/a.csv`` -> ``out/a.csv``):

1. open: CreateMultipartUpload for ``out/a.csv``; in the background, PUT the zero-byte
   marker at the magic path carrying the upload id (see :mod:`.tracking`) and, for a
   job's path, check that the job is still active.
2. write: bytes fill part-sized buffers; each full part is uploaded in the background
   while the caller keeps writing. At most ``parts_in_flight`` parts are in flight, so
   memory stays near ``(parts_in_flight + 1) x part_size`` however large the file and
   however large one ``write()`` call is.
3. close: upload the last part (an empty one if nothing was written, so every upload
   has at least one part), wait for all parts, then PUT ``<path>.pending`` with the
   upload id and ordered ETags. Four requests for a small file (five with the job check).
4. failure: an exception leaving a ``with`` block, a failed request, ``discard()``, a
   ``close()`` while an exception is propagating, or garbage collection of a file never
   closed: the upload is aborted, the marker deleted, no ``.pending`` written. A
   truncated file never becomes committable.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import logging
import sys
import threading
from typing import Any

from ..errors import JobNotActiveError
from ..paths import MagicPath
from ..records import SinglePendingCommit, path_to_uri
from ..statistics import IOStatisticsSnapshot
from .store import S3Store
from .tracking import IN_MEMORY_COMMITS, marker_metadata, upload_metadata

log = logging.getLogger("magicfs.s3.writer")

MIN_PART_SIZE = 5 << 20
MAX_PART_SIZE = 5 << 30
MAX_PARTS = 10_000


class MagicS3Writer(io.BufferedIOBase):
    """Write-only binary stream for one magic path on S3. Made by ``MagicFileSystem.open``."""

    def __init__(
        self,
        store: S3Store,
        path: str,
        magic_path: MagicPath,
        *,
        mode: str = "wb",
        part_size: int = 8 << 20,
        parts_in_flight: int = 4,
        job_marker: str | None = None,
        in_memory: bool = False,
    ):
        super().__init__()
        if part_size < MIN_PART_SIZE and not _allow_small_parts():
            raise ValueError(f"part_size must be at least {MIN_PART_SIZE} bytes (S3's minimum)")
        self.fs = store.fs
        self.path = path
        self.mode = mode
        self.part_size = part_size
        self._store = store
        self._magic_path = magic_path
        self._job_id = magic_path.job_id
        self._attempt_id = magic_path.task_attempt_id
        self._in_memory = in_memory and bool(self._job_id and self._attempt_id)
        self.bucket, self.marker_key = store.split(path)
        destination_bucket, self.destination_key = store.split(magic_path.destination)
        assert destination_bucket == self.bucket

        self._lock = threading.RLock()
        self._slots = threading.BoundedSemaphore(parts_in_flight)
        self._buffer = bytearray()
        self._parts: dict[int, concurrent.futures.Future] = {}
        self._written = 0
        self._failure: BaseException | None = None
        self._state = "open"
        self._marker_written = False

        self.upload_id = store.create_upload(
            self.bucket, self.destination_key, upload_metadata(self._job_id, self._attempt_id)
        )
        self._recording: concurrent.futures.Future | None = None
        if not self._in_memory:
            job_marker_key = store.split(job_marker)[1] if job_marker else None
            self._recording = store.run_background(self._record(job_marker_key))

    # -- recording -----------------------------------------------------------------------

    async def _record(self, job_marker_key: str | None) -> None:
        """PUT the marker naming the upload, then make sure the job is still active."""
        await self._store.acall(
            "put_object",
            Bucket=self.bucket,
            Key=self.marker_key,
            Body=b"",
            Metadata=marker_metadata(self.upload_id, self._job_id, self._attempt_id),
            **({"IfNoneMatch": "*"} if "x" in self.mode else {}),
        )
        self._marker_written = True
        if job_marker_key is None:
            return
        try:
            await self._store.acall("head_object", Bucket=self.bucket, Key=job_marker_key)
        except FileNotFoundError:
            pass
        else:
            return
        # The job has ended: its sweep may have missed this upload, so abort it now,
        # whatever this writer does next (it may be a zombie that never writes again).
        with contextlib.suppress(FileNotFoundError):  # already aborted
            await self._store.acall(
                "abort_multipart_upload",
                Bucket=self.bucket,
                Key=self.destination_key,
                UploadId=self.upload_id,
            )
        await self._store.acall("delete_object", Bucket=self.bucket, Key=self.marker_key)
        self._marker_written = False
        raise JobNotActiveError(
            f"{self._display()}: job {self._job_id} is not active (never set up, or already "
            "committed or aborted); this write has been aborted"
        )

    # -- the stream ------------------------------------------------------------------------

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written

    def write(self, data: Any) -> int:
        with self._lock:
            self._check_usable()
            view = memoryview(data).cast("B")
            size = len(view)
            offset = 0
            while offset < size:
                part_size = self._next_part_size()
                if not self._buffer and size - offset >= part_size:
                    # A whole part straight from the caller's buffer: one copy, no staging.
                    self._upload_part(bytes(view[offset : offset + part_size]))
                    offset += part_size
                    continue
                take = min(part_size - len(self._buffer), size - offset)
                self._buffer += view[offset : offset + take]
                offset += take
                if len(self._buffer) == part_size:
                    self._upload_part(bytes(self._buffer))
                    self._buffer = bytearray()
            self._written += size
            return size

    def flush(self) -> None:
        """Nothing to do: parts go out as they fill (S3 parts must be >= 5 MiB)."""

    def close(self) -> None:
        """Finish the upload's parts and save the ``.pending`` record — never complete it.

        Called while an exception is propagating (``with`` blocks of wrappers such as
        ``TextIOWrapper`` or fsspec's ``OpenFile``, ``finally:`` clauses), it aborts
        instead: the data written so far may be truncated.
        """
        if sys.exc_info()[1] is not None and self._state == "open":
            log.warning(
                "%s closed while an exception is propagating: aborting its upload "
                "(a possibly truncated file is never saved as pending)",
                self._display(),
            )
            self.discard()
            return
        self._finish()

    def _finish(self) -> None:
        with self._lock:
            if self._state != "open":
                return
            try:
                self._check_usable()
                if self._buffer or not self._parts:
                    self._upload_part(bytes(self._buffer))
                    self._buffer = bytearray()
                etags = [self._parts[n].result()["ETag"] for n in sorted(self._parts)]
                if self._recording is not None:
                    self._recording.result()
                self._save_pending(etags)
            except BaseException:
                self._abort()
                raise
            self._state = "closed"
            super().close()

    def discard(self) -> None:
        """Abort the upload and forget the file; nothing of it will ever be visible."""
        with self._lock:
            if self._state != "open":
                return
            self._abort()

    def commit(self) -> None:
        """For fsspec's transaction protocol: the commit of a magic file is its ``close()``."""
        self.close()

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self._finish()
        else:
            self.discard()

    def __del__(self) -> None:
        if getattr(self, "_state", None) != "open":
            return
        log.warning("%s was never closed: aborting its upload", self._display())
        # Garbage collection may run this on s3fs's IO-loop thread, where waiting for
        # the loop would deadlock: abort from a thread of its own.
        # (At interpreter shutdown no thread can start: the lifecycle rule must do it.)
        with contextlib.suppress(RuntimeError):
            threading.Thread(target=self.discard, name="magicfs-abort", daemon=True).start()

    # -- internals ---------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._state != "open":
            raise ValueError(f"I/O operation on {self._state} file {self._display()}")
        if self._recording is not None and self._recording.done():
            error = self._recording.exception()
            if error is not None:
                self._failure = self._failure or error
        if self._failure is not None:
            failure = self._failure
            self._abort()
            raise failure

    def _next_part_size(self) -> int:
        """``part_size``, doubled after every 1,000 parts (capped at S3's 5 GiB).

        Keeps huge files within S3's 10,000-part limit (8 MiB parts would stop at
        78 GiB) while small and medium files keep small parts and little memory.
        """
        doublings = len(self._parts) // 1000
        return min(self.part_size << doublings, MAX_PART_SIZE)

    def _upload_part(self, body: bytes) -> None:
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            raise OSError(
                f"{self._display()}: more than {MAX_PARTS} parts; open with a larger part_size"
            )
        self._slots.acquire()  # back-pressure: at most parts_in_flight parts in memory
        try:
            self._check_usable()
        except BaseException:
            self._slots.release()
            raise
        future = self._store.submit_part(
            self.bucket, self.destination_key, self.upload_id, number, body
        )
        future.add_done_callback(self._part_done)
        self._parts[number] = future

    def _part_done(self, future: concurrent.futures.Future) -> None:
        self._slots.release()
        error = future.exception()
        if error is not None and self._failure is None:
            self._failure = error

    def _commit_record(self, etags: list[str]) -> SinglePendingCommit:
        stats = IOStatisticsSnapshot(
            counters={
                "stream_write_bytes": self._written,
                "stream_write_block_uploads": len(etags),
                "committer_magic_marker_put": 0 if self._in_memory else 1,
            }
        )
        return SinglePendingCommit(
            uri=path_to_uri("s3://" + self.path),
            upload_id=self.upload_id,
            bucket=self.bucket,
            destination_key=self.destination_key,
            etags=etags,
            length=self._written,
            extra_data={"magicfs.if-none-match": "*"} if "x" in self.mode else {},
            iostatistics=stats,
        )

    def _save_pending(self, etags: list[str]) -> None:
        commit = self._commit_record(etags)
        if self._in_memory:
            assert self._job_id and self._attempt_id
            IN_MEMORY_COMMITS.add(self._job_id, self._attempt_id, self.path, commit)
        else:
            self._store.put_object(self.bucket, self.marker_key + ".pending", commit.to_bytes())

    def _abort(self) -> None:
        """Abort the upload and delete the marker; the file is then gone for good."""
        if self._state == "discarded":
            return
        self._state = "discarded"
        self._buffer = bytearray()
        # Let in-flight requests finish first: an abort racing a part upload can leave
        # the part behind (S3 asks callers to repeat the abort in that case).
        pending = [*self._parts.values(), *([self._recording] if self._recording else [])]
        concurrent.futures.wait(pending)
        try:
            self._store.abort_upload(self.bucket, self.destination_key, self.upload_id)
        finally:
            if self._marker_written:
                self._store.delete_objects(self.bucket, [self.marker_key])
                self._marker_written = False
            super().close()

    def _display(self) -> str:
        return f"s3://{self.path}"


def _allow_small_parts() -> bool:
    """Tests against a server configured with S3_UPLOAD_PART_MIN_SIZE may use small parts."""
    import os

    return bool(os.environ.get("MAGICFS_ALLOW_SMALL_PARTS"))
