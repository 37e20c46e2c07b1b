"""S3's hooks of the deferred writer: a multipart upload to the final key, never completed.

The life of a task file is :mod:`magicfs.stores.deferred_writer`'s; on S3
(``s3://bkt/out/__magic_job-7/.../__base/a.csv`` -> ``out/a.csv``) its steps are:

* **begin**: PUT the zero-byte **intent marker** of the magic path,
  :func:`~magicfs.paths.marker_path` (job, attempt, writer nonce; see :mod:`.tracking`),
  *then* CreateMultipartUpload for ``out/a.csv``. In an *unmarked* job
  (``intent_markers=False``: the committer found no other job covering the
  destination, :mod:`.tracking`) only ``xb`` files, files under a hidden name
  (``_x/``, ``.x``) and writers in a process that did not set up their task attempt
  (:func:`magicfs.task_files.attempt_set_up_here`: a task commit must see a file another
  process opened and never closed) put a marker; the others go straight to the create,
  and the job's sweep finds their uploads by its snapshot. For
  ``xb`` the marker is PUT with ``If-None-Match: *``, or after a HEAD on a store that
  does not honour it (:mod:`.conditional`), so a second writer of the path gets
  ``FileExistsError`` from ``open()``; a ``PreconditionFailed`` answering a PUT whose
  marker carries this writer's nonce was our own request, repeated after a lost reply.
* **job check** (after the create): one shared HEAD of the job marker
  (:mod:`magicfs.stores.job_check`). An ``in_memory`` file of an attempt set up in this
  process (:attr:`S3FileHooks.checked_by_commit`) does not wait for it at close: its task
  commit, which only this process can make, checks the job after it, and the writer's
  check waits (:data:`~..deferred_writer.CHECK_DELAY`) to take that answer.
* **stage**: UploadPart, with the part's checksum as a header (computed on a worker
  thread: zlib releases the GIL); the part id is its ETag. Parts are at least 5 MiB
  but the last, and double after every 1,000 parts (S3 allows 10,000).
* **record**: ``<path>.pending`` with the upload id, ordered ETags and checksums (in
  ``in_memory`` mode the record stays in this process). Five requests for a small file:
  marker, create, job check, part, ``.pending`` (an empty file still sends one part);
  four in an unmarked job (the job check is shared by the writers of a process whose
  closes overlap: :mod:`magicfs.stores.job_check`), two in an unmarked in-memory one
  whose task commits soon after (create and part; its check is the commit's).
* **discard**: AbortMultipartUpload and delete the marker (and the record, if saved).

Why the marker comes first: an upload must never exist without a record naming its
key, or a writer killed between the create and its first record (or a create whose
reply was lost and retried) would leave an upload nobody can find. (An unmarked job's
sweep takes every upload under the destination that was not pending before the job
began, so such an upload is found without a marker: :mod:`.sweep`.) Why the job check
comes after the create: a job ends by deleting its job marker and then sweeping the
uploads on its markers' keys; a writer whose check finds the marker still there
created its upload before the sweep listed uploads, and a writer whose check finds it
gone aborts its own upload — either way nothing is left parked.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from ...job_context import destination_key, job_context
from ...paths import MagicPath, marker_path, pending_path, split_magic_path
from ...records import SinglePendingCommit, path_to_uri
from ...statistics import IOStatisticsSnapshot
from ...task_files import attempt_set_up_here
from ..create_only import create_only_fields
from ..deferred_writer import (
    CHECK_DELAY,
    DeferredWritesBase,
    PartRules,
    StoreWords,
    WriterOptions,
)
from ..job_check import job_still_active
from . import checksums
from .body import PartBody, digest, hashed_when_signed
from .conditional import aconditional_support
from .retry import DEFAULT_POLICY, RetryPolicy
from .store import S3Store, error_code
from .sweep import abort_uploads, load_pending, uploads_of
from .tracking import META_WRITER, marker_metadata, upload_metadata

T = TypeVar("T")

#: The job context's slot of the touched markers the job's writers in this process have
#: saved (keys; :meth:`~magicfs.job_context.JobContext.store_state`).
TOUCHED_STATE = "s3.touched"
#: A task view keeps the stores of this many jobs it wrote for (most recent first).
JOB_STORES = 8

MIN_PART_SIZE = 5 << 20
MAX_PART_SIZE = 5 << 30
MAX_PARTS = 10_000

RULES = PartRules(
    noun="part",
    min_size=MIN_PART_SIZE,
    max_size=MAX_PART_SIZE,
    max_parts=MAX_PARTS,
    grow_every=1000,  # 8 MiB parts would stop at 78 GiB; doubling keeps huge files going
    at_least_one=True,  # an upload needs one part to be completed
)

WORDS = StoreWords(
    store_name="S3",
    noun="upload",
    pending_bytes="an unfinished multipart upload",
    where="aimed at",
    advice=(
        "Write the file under its final name in one go; where a writer must read back, "
        "copy or rename its own output, use the staging committer (committer='directory': "
        "tasks write local files, uploaded at task commit)"
    ),
)


#: The ``.pending`` record's counter that says whether its writer put an intent marker
#: (Hadoop's statistic name; 0 for an unmarked job's ``wb`` file).
MARKER_PUT_COUNTER = "committer_magic_marker_put"


@dataclasses.dataclass(frozen=True)
class S3WriterOptions:
    """S3's own keywords of the task view (:class:`~magicfs.filesystems.MagicFileSystem`
    passes them through unread; its docstring says what each does): ``retry_policy``,
    ``checksum`` (checked here), ``intent_markers`` and ``max_request_rate`` (the
    committer's, carried by task URLs: a cap on the job's calls in a writer's process
    that has no committer of the job; :mod:`.rate`)."""

    retry_policy: RetryPolicy = DEFAULT_POLICY
    checksum: str | None = checksums.DEFAULT_ALGORITHM
    intent_markers: bool = True
    max_request_rate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "checksum", checksums.checked_algorithm(self.checksum))


class S3Writes(DeferredWritesBase):
    """The write side of an s3fs filesystem ``fs`` (:class:`~..deferred_writer.DeferredWrites`)."""

    rules = RULES
    words = WORDS
    touches_tasks = True

    def __init__(self, fs: Any, options: WriterOptions):
        super().__init__(fs, options)
        self.s3_options: S3WriterOptions = options.store or S3WriterOptions()
        #: The store of calls that name no job (none of a task file's: :meth:`job_store`).
        self.store = S3Store(fs, self.s3_options.retry_policy, self.s3_options.max_request_rate)
        self._job_stores: collections.OrderedDict[tuple[str, str], S3Store] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self.checksum = self.s3_options.checksum

    def job_store(self, magic_path: MagicPath | None) -> S3Store:
        """The store of the job ``magic_path`` names: its calls share the job's rate control
        and retry budget in this process with its committer and its other writers
        (:mod:`magicfs.job_context`); :attr:`store` for a path that names no job."""
        job_id = magic_path.job_id if magic_path is not None else None
        if magic_path is None or not job_id:
            return self.store
        key = (job_id, destination_key(magic_path.destination_dir))
        with self._lock:
            store = self._job_stores.get(key)
            if store is None or (store.context is not None and store.context.closed):
                # (a job that ended in this process, written again: a fresh context)
                context = job_context(*key)
                options = self.s3_options
                store = S3Store(self.fs, options.retry_policy, options.max_request_rate, context)
                self._job_stores[key] = store
            self._job_stores.move_to_end(key)
            while len(self._job_stores) > JOB_STORES:
                self._job_stores.popitem(last=False)
            return store

    def _store_of(self, path: str) -> S3Store:
        try:
            return self.job_store(split_magic_path(path))
        except ValueError:  # not a magic path a job could name
            return self.store

    def url(self, path: str) -> str:
        return f"s3://{path}"

    def hooks(
        self, path: str, magic_path: MagicPath, mode: str, job_marker: str | None
    ) -> S3FileHooks:
        return S3FileHooks(
            self.job_store(magic_path),
            path,
            magic_path,
            mode,
            job_marker,
            in_memory=self.options.in_memory,
            checksum=self.checksum,
            intent_marker=self.s3_options.intent_markers
            or "x" in mode
            or _hidden(magic_path)
            or not attempt_set_up_here(magic_path.job_id, magic_path.task_attempt_id),
            unmarked_job=not self.s3_options.intent_markers,
            touched=self._touched_marker(magic_path) if job_marker else None,
        )

    def _touched_marker(self, magic_path: MagicPath) -> str | None:
        """The key of the touched marker a writer of a job (one that checks its marker)
        saves first (:meth:`~..deferred_writer.DeferredWritesBase.touched_marker`): the
        commit in the attempt's own process trusts its memory otherwise, and would never
        see this file (``magicfs.committers.memory_commits``)."""
        marker = self.touched_marker(magic_path)
        return self.store.split(marker)[1] if marker is not None else None

    def put_marker(self, path: str) -> None:
        self._store_of(path).write(path, b"")

    def discard(self, commits: list[SinglePendingCommit], records: list[str]) -> int:
        """Abort the uploads of ``commits`` and of the ``.pending`` records at ``records``
        (through the store of the records' job, if they name one)."""
        store = self._store_of(records[0]) if records else self.store
        return abort_uploads(store, uploads_of([*commits, *load_pending(store, records)]))

    def delete(self, paths: list[str]) -> None:
        by_bucket: dict[tuple[S3Store, str], list[str]] = {}
        for path in self.with_markers(paths):
            store = self._store_of(path)
            bucket, key = store.split(path)
            if key:
                by_bucket.setdefault((store, bucket), []).append(key)
        for (store, bucket), keys in by_bucket.items():
            store.run(store.adelete_objects(bucket, keys))


def _hidden(magic_path: MagicPath) -> bool:
    """A file under a hidden name below the destination (``_x/``, ``.x``) keeps its marker
    in an unmarked job: its sweep by snapshot never takes such uploads
    (:func:`.sweep.hidden_below`)."""
    return any(e.startswith(("_", ".")) for e in magic_path.relative_destination)


class S3FileHooks:
    """One task file's multipart upload (see the module docstring)."""

    part_pieces = True  # sent as they are: :mod:`.body`

    def __init__(
        self,
        store: S3Store,
        path: str,
        magic_path: MagicPath,
        mode: str,
        job_marker: str | None,
        *,
        in_memory: bool,
        checksum: str | None,
        intent_marker: bool = True,
        unmarked_job: bool = False,
        touched: str | None = None,
    ):
        self.store = store
        self.url = f"s3://{path}"
        self.mode = mode
        self.bucket, self.file_key = store.split(path)
        #: The intent marker's key, beside the file's (:func:`~magicfs.paths.marker_path`).
        self.marker_key = store.split(marker_path(path))[1]
        destination_bucket, self.destination_key = store.split(magic_path.destination)
        assert destination_bucket == self.bucket
        self.job_id, self.attempt_id = magic_path.job_id, magic_path.task_attempt_id
        self.in_memory = in_memory and bool(self.job_id and self.attempt_id)
        self.job_marker_key = store.split(job_marker)[1] if job_marker else None
        self.magic_dir = magic_path.magic_dir
        self.nonce = uuid.uuid4().hex
        #: The parts' checksum algorithm (:mod:`.checksums`), or ``None``.
        self.checksum = checksum
        self.part_checksums: dict[int, str] = {}
        #: Does the client's signer hash each part (plain HTTP)? Then the part's hash is
        #: computed with its checksum, off the IO loop (:mod:`.body`); ``None``: not known yet.
        self.hash_parts: bool | None = None
        self.upload_id: str | None = None
        #: PUT the intent marker before the create (False: an unmarked job's ``wb`` file).
        self.intent_marker = intent_marker
        #: The job writes no markers (``wb`` files of its set-up processes): ``xb`` also
        #: looks for a closed file's ``.pending`` (:meth:`_arefuse_closed_file`).
        self.unmarked_job = unmarked_job
        #: The key of its task's touched marker, saved before anything else (once per
        #: process and task), or ``None``: see :meth:`S3Writes._touched_marker`.
        self.touched = touched
        #: The touched markers the job's writers in this process have saved.
        self.touched_saved: set[str] = (
            store.context.store_state(TOUCHED_STATE, set) if store.context else set()
        )
        self.marker_written = False
        #: An ``in_memory`` file of an attempt set up here: its task commit, which only
        #: this process can make, checks the job after it (:class:`FileHooks`).
        self.checked_by_commit = (
            self.in_memory
            and self.job_marker_key is not None
            and attempt_set_up_here(self.job_id, self.attempt_id)
        )

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.store.run_background(call)

    async def abegin(self) -> None:
        """Intent marker, then the upload: see the module docstring for the order (an
        ``in_memory`` writer of another process's attempt marks its task touched first)."""
        if self.touched is not None and self.touched not in self.touched_saved:
            await self.store.aput_object(self.bucket, self.touched, b"")
            self.touched_saved.add(self.touched)
        if self.intent_marker:
            await self._aput_marker()
        if "x" in self.mode and self.unmarked_job:
            await self._arefuse_closed_file()
        self.upload_id = await self.store.acreate_upload(
            self.bucket,
            self.destination_key,
            upload_metadata(self.job_id, self.attempt_id),
            checksum_algorithm=self.checksum,
        )

    async def _aput_marker(self) -> None:
        conditional = False
        if "x" in self.mode:
            support = await aconditional_support(self.store, self.bucket, self.magic_dir)
            conditional = support.put
            # The fallback for stores that ignore If-None-Match on PutObject: one HEAD (a
            # marker PUT by another writer after it is still replaced: :mod:`.conditional`).
            if not conditional and await self.store.ahead_object(self.bucket, self.marker_key):
                raise FileExistsError(
                    f"{self.url}: another writer has already opened this path ('xb'); "
                    f"{support.limitation('PutObject')}"
                )
        metadata = marker_metadata(self.job_id, self.attempt_id, self.nonce)
        try:
            await self.store.aput_object(
                self.bucket, self.marker_key, b"", metadata, if_none_match=conditional
            )
        except OSError as e:
            if not conditional or error_code(e) != "PreconditionFailed":
                raise
            head = await self.store.ahead_object(self.bucket, self.marker_key)
            if head is None or (head.get("Metadata") or {}).get(META_WRITER) != self.nonce:
                raise FileExistsError(
                    f"{self.url}: another writer has already opened this path ('xb')"
                ) from None
            # A lost reply: our own conditional PUT had succeeded, botocore repeated it.
        self.marker_written = True

    async def _arefuse_closed_file(self) -> None:
        """``xb`` in an unmarked job: a ``wb`` file of the set-up process has no marker for
        the conditional PUT to meet, but once closed it has its ``.pending`` (one HEAD; a
        ``wb`` file still open, or closed in ``in_memory`` mode, is caught at task commit:
        the path then has a marker of another process, :mod:`.job_hooks`)."""
        record = pending_path(self.file_key)
        if await self.store.ahead_object(self.bucket, record) is None:
            return
        if self.marker_written:
            await self.store.adelete_objects(self.bucket, [self.marker_key])
            self.marker_written = False
        raise FileExistsError(
            f"{self.url}: another writer has already written this path ('xb'): "
            f"its record s3://{self.bucket}/{record} exists"
        )

    async def ajob_active(self) -> bool:
        marker = self.job_marker_key
        assert marker is not None

        async def head() -> bool:
            return await self.store.ahead_object(self.bucket, marker) is not None

        delay = CHECK_DELAY if self.checked_by_commit else 0.0
        active = await job_still_active(
            self.bucket, marker, head, delay, context=self.store.context
        )
        if not active and self.touched is not None:  # an ended job's tree keeps none
            self.touched_saved.discard(self.touched)
            await self.store.adelete_objects(self.bucket, [self.touched])
        return active

    async def astage(self, number: int, body: list[bytes | bytearray]) -> str:
        """Upload one part (its pieces, sent without a copy: :mod:`.body`), with its
        checksum as a header (the store checks the bytes).

        The checksum, and the payload hash where the client's signer would hash the part
        (plain HTTP: :mod:`.body`), are computed on a worker thread (zlib and hashlib
        release the GIL), neither on the IO loop, which serves every writer, nor in the
        writing thread, which is busy producing the next part.
        """
        assert self.upload_id is not None
        part = PartBody(body)
        sent = None
        if self.hash_parts is None:
            self.hash_parts = hashed_when_signed(await self.store.fs.get_s3(self.bucket))
        if self.checksum or self.hash_parts:
            loop = asyncio.get_running_loop()
            value, part.sha256 = await loop.run_in_executor(
                None, _sums, self.checksum, part, self.hash_parts
            )
            if self.checksum and value is not None:
                self.part_checksums[number] = value
                sent = (self.checksum, value)
        reply = await self.store.aupload_part(
            self.bucket, self.destination_key, self.upload_id, number, part, sent
        )
        return str(reply["ETag"])

    def record(self, part_ids: list[str], length: int) -> SinglePendingCommit:
        assert self.upload_id is not None
        stats = IOStatisticsSnapshot(
            counters={
                "stream_write_bytes": length,
                "stream_write_block_uploads": len(part_ids),
                MARKER_PUT_COUNTER: int(self.intent_marker),
            }
        )
        return SinglePendingCommit(
            uri=path_to_uri(self.url),
            upload_id=self.upload_id,
            bucket=self.bucket,
            destination_key=self.destination_key,
            etags=part_ids,
            length=length,
            extra_data=self._extra_data(len(part_ids)),
            iostatistics=stats,
            # Where the record is saved, as Hadoop's loader fills it in (none in memory).
            filename=None if self.in_memory else pending_path(self.url),
        )

    def _extra_data(self, parts: int) -> dict[str, str]:
        """What the record says beyond Hadoop's fields: create-only, the checksums."""
        extra = create_only_fields(self.mode)
        if self.checksum:
            ordered = [self.part_checksums[n] for n in range(1, parts + 1)]
            extra.update(checksums.record_fields(self.checksum, ordered))
        return extra

    async def asave(self, record: SinglePendingCommit) -> None:
        if not self.in_memory:
            key = pending_path(self.file_key)
            await self.store.aput_object(self.bucket, key, record.to_bytes())

    async def adiscard(self, saved: bool) -> None:
        """Abort the upload, delete the marker (and the record): the file is gone for good."""
        try:
            if self.upload_id is not None:
                await self.store.aabort_upload(self.bucket, self.destination_key, self.upload_id)
        finally:
            doomed = [self.marker_key] if self.marker_written else []
            if saved and not self.in_memory:
                doomed.append(pending_path(self.file_key))
            if doomed:
                await self.store.adelete_objects(self.bucket, doomed)
            self.marker_written = False

    async def adrop(self, commit: SinglePendingCommit) -> None:
        """An earlier file of this path closed here: abort its upload, delete its record."""
        await self.store.aabort_upload(commit.bucket, commit.destination_key, commit.upload_id)
        doomed = [] if self.in_memory else [pending_path(self.file_key)]
        if not self.intent_marker:  # the earlier file's marker (xb, say) is not this file's
            doomed.append(self.marker_key)
        if doomed:
            await self.store.adelete_objects(self.bucket, doomed)


def _sums(algorithm: str | None, part: PartBody, hashed: bool) -> tuple[str | None, str | None]:
    """On a worker thread: ``part``'s checksum (``algorithm``) and, if ``hashed``, the
    SHA-256 its signature needs (:mod:`.body`)."""
    value = checksums.compute(algorithm, part) if algorithm else None
    return value, digest(part) if hashed else None
