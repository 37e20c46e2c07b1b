"""The magic output stream: a multipart upload to the final key that ``close()`` never completes.

Life of one file (``s3://bkt/out/__magic_job-7/.../__base/a.csv`` -> ``out/a.csv``):

1. open: register the file in this process (:mod:`magicfs.task_files`): a file of the
   same path written earlier by this process is replaced at once (its upload aborted,
   its record deleted); a task attempt that has already committed or aborted here is
   refused. Then, in the background: PUT the zero-byte **intent marker** at the magic
   path (job, attempt, writer nonce; see :mod:`.tracking`), *then* CreateMultipartUpload
   for ``out/a.csv``, then — for a job's path — check that the job is still active.
   ``open()`` returns at once (``xb`` waits for the marker, so that a second writer
   gets ``FileExistsError`` from ``open()`` itself: the marker is PUT with
   ``If-None-Match: *``, or after a HEAD on a store that does not honour it, see
   :mod:`.conditional`).
2. write: bytes fill part-sized buffers; each full part is uploaded in the background
   (after the upload exists) while the caller keeps writing. At most
   ``parts_in_flight`` parts are in flight, so memory stays near
   ``(parts_in_flight + 1) x part_size`` however large the file and however large one
   ``write()`` call is.
3. close: upload the last part (an empty one if nothing was written, so every upload
   has at least one part), wait for all parts and the job check, then PUT
   ``<path>.pending`` with the upload id and ordered ETags (in ``in_memory`` mode the
   commit stays in this process instead). Five requests for a small file: marker,
   create, job check, part, ``.pending``. For a task attempt's file ``close()`` returns
   as soon as the last part is handed over (``background_close``): the rest finishes in
   the background, and the task's commit waits for it (:meth:`TaskFiles.settle
   <magicfs.task_files.TaskFiles.settle>`) and fails if it failed — so a task writing
   files one after another keeps S3's round trips overlapped instead of waiting for each.
4. failure: an exception leaving a ``with`` block, a failed request, ``discard()``, a
   ``close()`` while an exception is propagating, or garbage collection of a file never
   closed: the upload is aborted, the marker deleted, no ``.pending`` written. A
   truncated file never becomes committable.

**Memory.** Every part handed to an upload takes bytes from a process-wide budget
(:data:`BUFFER_BUDGET`, ``MAGICFS_MAX_BUFFERED_BYTES``, 256 MiB by default) until S3 has
it; a writer that would exceed it waits. With background closes many files can be in
flight at once, so this is what keeps memory flat however many files a task writes.

Why the marker comes first: an upload must never exist without a record naming its
key, or a writer killed between the create and its first record (or a create whose
reply was lost and retried) would leave an upload nobody can find. Why the job check
comes after the create: a job ends by deleting its job marker and then sweeping the
uploads on its markers' keys; a writer whose check finds the marker still there
created its upload before the sweep listed uploads, and a writer whose check finds it
gone aborts its own upload — either way nothing is left parked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import logging
import os
import sys
import threading
import uuid
from typing import Any

from ...errors import JobNotActiveError, TaskNotActiveError
from ...paths import MagicPath, pending_path
from ...records import SinglePendingCommit, path_to_uri
from ...statistics import IOStatisticsSnapshot
from ...task_files import TASK_FILES, TaskFile, TaskFiles
from . import checksums
from .conditional import IF_NONE_MATCH_KEY, aconditional_support
from .job_check import job_still_active
from .store import S3Store, error_code
from .tracking import META_WRITER, marker_metadata, upload_metadata

log = logging.getLogger("magicfs.s3.writer")

MIN_PART_SIZE = 5 << 20
MAX_PART_SIZE = 5 << 30
MAX_PARTS = 10_000


class ByteBudget:
    """Bytes held by parts not yet uploaded, across every writer of the process."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._changed = threading.Condition()

    def take(self, size: int) -> None:
        """Wait until ``size`` more bytes fit (a bigger part waits for an empty budget)."""
        with self._changed:
            while self.used and self.used + size > self.limit:
                self._changed.wait()
            self.used += size

    def give(self, size: int) -> None:
        with self._changed:
            self.used -= size
            self._changed.notify_all()


#: The process's budget for parts in flight (see the module docstring).
BUFFER_BUDGET = ByteBudget(int(os.environ.get("MAGICFS_MAX_BUFFERED_BYTES", 256 << 20)))


class MagicS3Writer(io.BufferedIOBase):
    """Write-only binary stream for one magic path on S3. Made by the magic filesystem."""

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
        background_close: bool = True,
        registry: TaskFiles = TASK_FILES,
        checksum: str | None = checksums.DEFAULT_ALGORITHM,
    ):
        super().__init__()
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size must be at least {MIN_PART_SIZE} bytes (S3's minimum)")
        self.fs = store.fs
        self.path = path
        self.mode = mode
        self.part_size = part_size
        #: The parts' checksum algorithm (:mod:`.checksums`), or ``None``.
        self.checksum = checksums.checked_algorithm(checksum)
        self._part_checksums: dict[int, str] = {}
        self._store = store
        self._registry = registry
        self._job_id = magic_path.job_id
        self._attempt_id = magic_path.task_attempt_id
        self._in_memory = in_memory and bool(self._job_id and self._attempt_id)
        # Only a task attempt's file has a commit to wait for it.
        self._background_close = background_close and bool(self._job_id and self._attempt_id)
        self._closing: concurrent.futures.Future[None] | None = None
        self.bucket, self.marker_key = store.split(path)
        destination_bucket, self.destination_key = store.split(magic_path.destination)
        assert destination_bucket == self.bucket
        self._job_marker_key = store.split(job_marker)[1] if job_marker else None
        self._magic_dir = magic_path.magic_dir
        self._nonce = uuid.uuid4().hex

        self._lock = threading.RLock()
        self._slots = threading.BoundedSemaphore(parts_in_flight)
        self._buffer = bytearray()
        self._parts: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self._written = 0
        self._failure: BaseException | None = None
        self._state = "open"
        self._marker_written = False
        self._superseded: str | None = None
        self.upload_id: str | None = None

        finished = registry.finished(self._job_id, self._attempt_id)
        if finished:
            self._state = "refused"
            raise TaskNotActiveError(
                f"{self._display()}: task attempt {self._attempt_id} has already {finished}: "
                "a file written now would never be published (write before commit_task)"
            )
        self._register()
        self._start = store.run_background(self._begin())
        self._checking = store.run_background(self._check_job())
        if "x" in mode:
            self._wait_for_start_or_abort()

    # -- opening ---------------------------------------------------------------------------

    def _register(self) -> None:
        """Enter this file in the registry, replacing an earlier file of the same path."""
        entry = TaskFile(self.path, self._job_id or "", self._attempt_id or "", writer=self)
        if "x" in self.mode:
            existing = self._registry.get(self.path)
            if existing is not None:
                self._state = "refused"
                raise FileExistsError(f"{self._display()}: already written by this process ('xb')")
        previous = self._registry.opened(entry)
        if previous is None:
            return
        if previous.writer is not None:
            log.info("%s: opened again; the earlier writer is discarded", self._display())
            previous.writer.supersede("the file was opened again")
        elif previous.commit is not None:
            commit = previous.commit
            log.info("%s: written again; aborting the earlier upload", self._display())
            self._store.run(
                self._store.aabort_upload(commit.bucket, commit.destination_key, commit.upload_id)
            )
            if not self._in_memory:
                self._store.run(
                    self._store.adelete_objects(self.bucket, [pending_path(self.marker_key)])
                )

    def _wait_for_start_or_abort(self) -> None:
        try:
            self._start.result()
        except BaseException:
            self._abort()
            raise

    async def _begin(self) -> str:
        """Intent marker, then the upload: see the module docstring for the order."""
        await self._put_marker()
        params: dict[str, Any] = {}
        if self.checksum:
            params["ChecksumAlgorithm"] = self.checksum
        response = await self._store.acall(
            "create_multipart_upload",
            Bucket=self.bucket,
            Key=self.destination_key,
            Metadata=upload_metadata(self._job_id, self._attempt_id),
            **params,
        )
        self.upload_id = response["UploadId"]
        return self.upload_id

    async def _put_marker(self) -> None:
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self.marker_key,
            "Body": b"",
            "Metadata": marker_metadata(self._job_id, self._attempt_id, self._nonce),
            **await checksums.aheader(self.fs, b""),
        }
        if "x" in self.mode:
            support = await aconditional_support(self._store, self.bucket, self._magic_dir)
            if support.put:
                params["IfNoneMatch"] = "*"
            elif await self._marker_exists():
                raise FileExistsError(
                    f"{self._display()}: another writer has already opened this path ('xb'); "
                    f"{support.limitation('PutObject')}"
                )
        try:
            await self._store.acall("put_object", **params)
        except OSError as e:
            if "IfNoneMatch" not in params or error_code(e) != "PreconditionFailed":
                raise
            if not await self._marker_is_mine():
                raise FileExistsError(
                    f"{self._display()}: another writer has already opened this path ('xb')"
                ) from None
            # A lost reply: our own conditional PUT had succeeded, botocore repeated it.
        self._marker_written = True
        self.fs.invalidate_cache(f"{self.bucket}/{self.marker_key}")

    async def _marker_exists(self) -> bool:
        """The fallback for stores that ignore ``If-None-Match`` on PutObject: one HEAD
        (a marker PUT by another writer after it is still replaced: :mod:`.conditional`)."""
        return await self._store.ahead_object(self.bucket, self.marker_key) is not None

    async def _marker_is_mine(self) -> bool:
        try:
            head = await self._store.acall("head_object", Bucket=self.bucket, Key=self.marker_key)
        except FileNotFoundError:
            return False
        return (head.get("Metadata") or {}).get(META_WRITER) == self._nonce

    async def _check_job(self) -> None:
        """After the upload exists, make sure the job is still active (the zombie check)."""
        upload_id = await asyncio.wrap_future(self._start)
        job_marker = self._job_marker_key
        if job_marker is None:
            return

        async def head() -> bool:
            try:
                await self._store.acall("head_object", Bucket=self.bucket, Key=job_marker)
            except FileNotFoundError:
                return False
            return True

        if await job_still_active(self.bucket, job_marker, head):  # shared by writers
            return
        # The job has ended: its sweep may have missed this upload, so abort it now,
        # whatever this writer does next (it may be a zombie that never writes again).
        await self._store.aabort_upload(self.bucket, self.destination_key, upload_id)
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
            self._registry.wrote(self.path, self, self._written)
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
                if self._superseded:
                    raise OSError(
                        f"{self._display()}: {self._superseded} before this writer closed; "
                        "its data has been discarded"
                    )
                return
            try:
                self._check_usable()
                if self._buffer or not self._parts:
                    self._upload_part(bytes(self._buffer))
                    self._buffer = bytearray()
            except BaseException:
                self._abort()
                raise
            if self._background_close:
                self._state = "closing"
                self._closing = self._store.run_background(self._close_in_background())
                self._registry.closing(self.path, self, self._closing)
                super().close()
                return
            try:
                calls: list[concurrent.futures.Future[Any]] = [
                    *self._parts.values(),
                    self._checking,
                ]
                concurrent.futures.wait(calls)
                # The job check first: when it found the job gone it aborted the upload,
                # and the parts' failures are only the consequence.
                self._checking.result()
                etags = [self._parts[n].result()["ETag"] for n in sorted(self._parts)]
                commit = self._save_pending(etags)
            except BaseException:
                self._abort()
                raise
            self._state = "closed"
            self._registry.closed(self.path, self, self._written, commit)
            super().close()

    async def _close_in_background(self) -> None:
        """The end of :meth:`close` for a task attempt's file, on the IO loop."""
        parts = [asyncio.wrap_future(self._parts[n]) for n in sorted(self._parts)]
        checked = await asyncio.gather(asyncio.wrap_future(self._checking), return_exceptions=True)
        if isinstance(checked[0], BaseException):  # the job is gone: stop retrying parts
            for future in self._parts.values():
                future.cancel()
        results = await asyncio.gather(*parts, return_exceptions=True)
        failure = next((r for r in [*checked, *results] if isinstance(r, BaseException)), None)
        try:
            if failure is not None:
                raise failure
            parts_done = [r for r in results if not isinstance(r, BaseException)]
            commit = self._commit_record([result["ETag"] for result in parts_done])
            if not self._in_memory:
                record = commit.to_bytes()
                await self._store.acall(
                    "put_object",
                    Bucket=self.bucket,
                    Key=pending_path(self.marker_key),
                    Body=record,
                    **await checksums.aheader(self.fs, record),
                )
                self.fs.invalidate_cache(f"{self.bucket}/{pending_path(self.marker_key)}")
        except BaseException as error:
            log.error("%s: could not be saved: %s; aborting its upload", self._display(), error)
            await self._abort_async()
            self._state = "discarded"
            self._registry.failed(self.path, self, error)
            raise
        self._state = "closed"
        self._registry.closed(self.path, self, self._written, commit)

    async def _abort_async(self) -> None:
        """:meth:`_abort` on the IO loop (the parts have all finished)."""
        if self.upload_id is not None:
            await self._store.aabort_upload(self.bucket, self.destination_key, self.upload_id)
        if self._marker_written:
            await self._store.acall("delete_object", Bucket=self.bucket, Key=self.marker_key)
            self._marker_written = False

    def discard(self) -> None:
        """Abort the upload and forget the file; nothing of it will ever be visible."""
        with self._lock:
            if self._state != "open":
                return
            self._abort()

    def supersede(self, reason: str) -> None:
        """Discard this writer because the file was opened again or deleted (``reason``).

        Its later ``write()``/``close()`` raise, naming the reason: the caller must not
        believe the data was saved. A file still closing in the background is waited
        for, then thrown away (its upload aborted, its records deleted).
        """
        with self._lock:
            if self._state == "open":
                self._superseded = reason
                self._abort()
                return
            closing = self._closing
        if closing is None:
            return
        concurrent.futures.wait([closing])
        if self._state == "closed":
            assert self.upload_id is not None
            self._store.run(
                self._store.aabort_upload(self.bucket, self.destination_key, self.upload_id)
            )
            doomed = [self.marker_key] + (
                [] if self._in_memory else [pending_path(self.marker_key)]
            )
            self._store.run(self._store.adelete_objects(self.bucket, doomed))
            self._state = "discarded"

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
        # (At interpreter shutdown no thread can start: the job's sweep must do it.)
        with contextlib.suppress(RuntimeError):
            threading.Thread(target=self.discard, name="magicfs-abort", daemon=True).start()

    # -- internals ---------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._state != "open":
            reason = f" ({self._superseded})" if self._superseded else ""
            raise ValueError(f"I/O operation on {self._state} file {self._display()}{reason}")
        for background in (self._start, self._checking):
            if background.done() and background.exception() is not None:
                self._failure = self._failure or background.exception()
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
        BUFFER_BUDGET.take(len(body))  # and at most BUFFER_BUDGET across the process
        future = self._store.run_background(self._part(number, body))
        size = len(body)
        future.add_done_callback(lambda done: self._part_done(done, size))
        self._parts[number] = future

    async def _part(self, number: int, body: bytes) -> dict[str, Any]:
        """Upload one part, with its checksum as a header (the store checks the bytes).

        The checksum is computed on a worker thread (zlib releases the GIL), neither on
        the IO loop, which serves every writer, nor in the writing thread, which is busy
        producing the next part.
        """
        upload_id = await asyncio.wrap_future(self._start)
        if self.checksum:
            loop = asyncio.get_running_loop()
            value = await loop.run_in_executor(None, checksums.compute, self.checksum, body)
            self._part_checksums[number] = value
            checksum = {checksums.parameter(self.checksum): value}
        else:
            checksum = await checksums.aheader(self.fs, body)
        return await self._store.acall(
            "upload_part",
            Bucket=self.bucket,
            Key=self.destination_key,
            UploadId=upload_id,
            PartNumber=number,
            Body=body,
            **checksum,
        )

    def _part_done(self, future: concurrent.futures.Future[dict[str, Any]], size: int) -> None:
        BUFFER_BUDGET.give(size)
        self._slots.release()
        error = future.exception()
        if error is not None and self._failure is None:
            self._failure = error

    def _commit_record(self, etags: list[str]) -> SinglePendingCommit:
        assert self.upload_id is not None
        stats = IOStatisticsSnapshot(
            counters={
                "stream_write_bytes": self._written,
                "stream_write_block_uploads": len(etags),
                "committer_magic_marker_put": 1,
            }
        )
        return SinglePendingCommit(
            uri=path_to_uri("s3://" + self.path),
            upload_id=self.upload_id,
            bucket=self.bucket,
            destination_key=self.destination_key,
            etags=etags,
            length=self._written,
            extra_data=self._extra_data(len(etags)),
            iostatistics=stats,
            # Where the record is saved, as Hadoop's loader fills it in (none in memory).
            filename=None if self._in_memory else "s3://" + pending_path(self.path),
        )

    def _extra_data(self, parts: int) -> dict[str, str]:
        """What the record says beyond Hadoop's fields: create-only, the checksums."""
        extra = {IF_NONE_MATCH_KEY: "*"} if "x" in self.mode else {}
        if self.checksum:
            ordered = [self._part_checksums[n] for n in range(1, parts + 1)]
            extra.update(checksums.record_fields(self.checksum, ordered))
        return extra

    def _save_pending(self, etags: list[str]) -> SinglePendingCommit:
        commit = self._commit_record(etags)
        if not self._in_memory:
            self._store.run(
                self._store.aput_object(
                    self.bucket, pending_path(self.marker_key), commit.to_bytes()
                )
            )
        return commit

    def _abort(self) -> None:
        """Abort the upload and delete the marker; the file is then gone for good."""
        if self._state == "discarded":
            return
        self._state = "discarded"
        self._buffer = bytearray()
        self._registry.discarded(self.path, self)
        # Let in-flight requests finish first: an abort racing a part upload can leave
        # the part behind (S3 asks callers to repeat the abort in that case).
        calls: list[concurrent.futures.Future[Any]] = [
            *self._parts.values(),
            self._start,
            self._checking,
        ]
        concurrent.futures.wait(calls)
        try:
            if self.upload_id is not None:
                self._store.run(
                    self._store.aabort_upload(self.bucket, self.destination_key, self.upload_id)
                )
        finally:
            if self._marker_written:
                self._store.run(self._store.adelete_objects(self.bucket, [self.marker_key]))
                self._marker_written = False
            super().close()

    def _display(self) -> str:
        return f"s3://{self.path}"
