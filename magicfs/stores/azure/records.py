"""A writer process's records of one task attempt: a few blobs, not one per file.

On S3 a file's ``.pending`` costs a PUT and, at task commit, a share of one DeleteObjects
(1,000 keys a request). Azure deletes one blob per request (Blob Batch is not served by
Azurite to the Python SDK: :mod:`.writer`), so a ``.pending`` per file costs two
requests. Instead,
the files this process closes in one attempt keep their records in **writer records**:
``<attempt dir>/_writer-<token>-<n>.pendingset``, Hadoop ``PendingSet`` documents that
name every file this process closed in the attempt (``<token>`` is random per process and
attempt; ``<n>`` counts segments). Task commit reads them (only for files not closed in
its own process) and deletes one blob per segment.

* **Saves are coalesced.** A file's record joins the current segment, then its close
  waits for a save (one Put Blob: atomic) that *started after* it joined, so a ``close()``
  that returned has its record on the store. At most one save of a segment runs; the
  records added meanwhile go together in the next one. Files closing while a save runs
  share it, as the job checks are shared.
* **Bounded bytes.** A segment is rewritten whole at each save, so it is closed once it
  holds :data:`SEGMENT_BYTES` of records: a task of many files writes O(files) bytes of
  records, not O(files²). A file written again, or thrown away, leaves its segment
  (rewritten without it).
* **A record keeps its ``filename``**: ``<file>.pending``, the name it would have on its
  own, because job commit checks that a commit's destination is the one its magic path
  names (:func:`~magicfs.stores.validation.check_commit`); messages name the writer record.
* **Each record names its writer.** ``extraData["magicfs.writer"]`` is the nonce of the
  writer's marker (its metadata ``magicfs_writer``): task commit takes a record only for
  the marker of the same writer, so a record left behind by a file deleted and written
  again elsewhere never stands for the newer file.
* **A failed save fails its files.** The files that joined a save that failed get its
  error from ``close()``, and their records leave the segment before the next save
  starts, so no later save writes the record of a file whose ``close()`` raised.
* **Kept in the job's context** (:mod:`magicfs.job_context`, slot :data:`RECORDS_STATE`),
  which the job's committer and writers share in this process and which every task
  file's registry entry holds (:class:`~magicfs.task_files.TaskFile`): the records of
  an attempt last while its files do here, and go with the job.
* **Bounded memory.** The records of attempts that have committed or aborted in this
  process are dropped when the next attempt's records of the job start. A forked child
  starts with none of its parent's (its own token, its own saves): it forgets its
  parent's contexts.
* **The window left open** (``FileHooks.asave`` in :mod:`.writer`): the job is checked
  before the record joins a segment, and the save may then wait behind one already
  running, so a writer-record blob can land in an attempt directory that the job's end
  deleted meanwhile. Such a blob is never committed (its job is gone) and nothing
  deletes it but a later clean-up of that tree. Re-checking the job after every save
  would cost a request per close for files closed one after another; not done.
"""

from __future__ import annotations

import asyncio
import secrets
import threading

from ...job_context import JobContext, job_context
from ...names import PENDINGSET_SUFFIX
from ...paths import split_magic_path
from ...records import PendingSet, SinglePendingCommit
from ...task_files import TaskFiles
from ..coalesce import Coalesced
from .blocks import BlockStore

#: Writer records are named ``<attempt dir>/_writer-<token>-<n>.pendingset``.
WRITER_PREFIX = "_writer-"
#: The record's field naming the writer (the nonce in its marker's metadata).
WRITER_FIELD = "magicfs.writer"
#: A segment takes new records until its records' JSON reaches this size.
SEGMENT_BYTES = 32 << 10


def is_writer_record(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith(WRITER_PREFIX) and name.endswith(PENDINGSET_SUFFIX)


class _Segment:
    """One writer-record blob and its coalesced saves (:class:`~..coalesce.Coalesced`)."""

    def __init__(self, blocks: BlockStore, container: str, blob: str, job_id: str):
        self.blocks, self.container, self.blob, self.job_id = blocks, container, blob, job_id
        self.records: dict[str, SinglePendingCommit] = {}
        #: Paths added since the last save started: the waiters of the next save.
        self.joined: set[str] = set()
        self.size = 0  # the records' JSON, as added (a close enough measure)
        self.saves: Coalesced[None] = Coalesced(self._start_save)

    async def saved(self) -> None:
        """Return once a save that started after this call has finished."""
        await self.saves.fresh()

    def _start_save(self) -> asyncio.Future[None]:
        """One save of the records as they are now, started at once (so that a record
        added after this call waits for the next save, never rides on this one)."""
        joined, self.joined = self.joined, set()
        saving = dict(self.records)
        save = asyncio.ensure_future(self._save(saving))

        def failed(save: asyncio.Future[None]) -> None:
            # Its waiters' closes fail: their records must not ride on the next save.
            # (Run before the waiters hear of it, and before the next save starts.)
            if save.cancelled() or save.exception() is not None:
                self._drop(joined, saving)

        save.add_done_callback(failed)
        return save

    def _drop(self, paths: set[str], saving: dict[str, SinglePendingCommit]) -> None:
        """Take out the records of ``paths`` a failed save held (not newer ones of them)."""
        for path in paths:
            if path in saving and self.records.get(path) is saving[path]:
                del self.records[path]
        self.size = sum(len(r.to_bytes()) for r in self.records.values())

    async def _save(self, records: dict[str, SinglePendingCommit]) -> None:
        document = PendingSet(job_id=self.job_id, commits=list(records.values()))
        await self.blocks.put(self.container, self.blob, document.to_bytes())


class WriterRecords:
    """This process's records of one attempt's files (see the module docstring)."""

    def __init__(
        self, blocks: BlockStore, attempt_dir: str, job_id: str, context: JobContext | None = None
    ):
        self.blocks = blocks
        #: The job's context, which holds these records: kept alive while they are held.
        self.context = context
        self.container, self.dir_blob = blocks.split(attempt_dir)
        self.job_id = job_id
        self.token = secrets.token_hex(8)
        self.segments: list[_Segment] = []
        self.where: dict[str, _Segment] = {}

    def _segment(self, size: int) -> _Segment:
        last = self.segments[-1] if self.segments else None
        if last is None or (last.records and last.size + size > SEGMENT_BYTES):
            blob = f"{self.dir_blob}/{WRITER_PREFIX}{self.token}-{len(self.segments)}"
            last = _Segment(self.blocks, self.container, blob + PENDINGSET_SUFFIX, self.job_id)
            self.segments.append(last)
        return last

    async def add(self, path: str, record: SinglePendingCommit) -> None:
        """Save ``record`` for task file ``path`` (replacing an earlier one of it)."""
        self.forget(path)
        segment = self._segment(len(record.to_bytes()))
        segment.records[path] = record
        segment.joined.add(path)
        segment.size += len(record.to_bytes())
        self.where[path] = segment
        try:
            await segment.saved()
        except BaseException:
            self.forget(path)  # not saved: a later save must not bring it back
            raise

    async def remove(self, path: str) -> None:
        """Take ``path``'s record out of the store's copy (if it has one)."""
        segment = self.where.get(path)
        if segment is not None:
            self.forget(path)
            await segment.saved()

    def forget(self, path: str) -> None:
        segment = self.where.pop(path, None)
        if segment is not None and segment.records.pop(path, None) is not None:
            segment.size = sum(len(r.to_bytes()) for r in segment.records.values())


#: The job context's slot of its writer records in this process
#: (:meth:`~magicfs.job_context.JobContext.store_state`).
RECORDS_STATE = "azure.writer_records"


class JobRecords:
    """A job's writer records in this process, by (endpoint, attempt directory). Threads
    opening files share it (hence the lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[tuple[str, str], tuple[str, WriterRecords]] = {}


def writer_records(
    blocks: BlockStore,
    attempt_dir: str,
    job_id: str,
    attempt_id: str,
    registry: TaskFiles,
    context: JobContext | None = None,
) -> WriterRecords:
    """This process's :class:`WriterRecords` of an attempt of job ``job_id`` (made on
    first use; those of the job's attempts finished in this process, as ``registry``
    knows, are dropped then). ``context``: the job's (by default, the one its attempt
    directory names; a directory outside any magic tree is its own destination)."""
    if context is None:
        magic_path = split_magic_path(attempt_dir)
        context = job_context(job_id, magic_path.destination_dir if magic_path else attempt_dir)
    job = context.store_state(RECORDS_STATE, JobRecords)
    key = (str(blocks.fs.service_client.url), attempt_dir)
    with job.lock:
        found = job.open.get(key)
        if found is None:
            for other, (attempt, _) in list(job.open.items()):
                if registry.finished(job_id, attempt):
                    job.open.pop(other, None)
            made = WriterRecords(blocks, attempt_dir, job_id, context)
            found = job.open[key] = (attempt_id, made)
        return found[1]
