"""Azure's hooks of the deferred writer: blocks staged on the final blob, never published.

The life of a task file is :mod:`magicfs.stores.deferred_writer`'s (the process-wide
buffer budget, background close and supersede included); on Azure Blob
(``abfs://c/out/__magic_job-7/.../__base/a.csv`` -> ``c/out/a.csv``) its steps are:

* **begin**: PUT a zero-byte marker at the task path, so listings of the attempt show
  the file while it is written (as on S3). Nothing else needs creating: blocks are
  staged against a name.
* **job check** (after the begin): is the job marker still there? One Get Blob
  Properties, shared by the writers of the process whose checks overlap (S3's
  :mod:`~magicfs.stores.job_check`: a writer takes the answer of a check that started
  after it asked, never an older one).
* **stage**: Put Block against the *final* blob ``out/a.csv``; the part id is the block
  id (:mod:`.blocks`). Staged blocks are invisible: the destination, if it exists, keeps
  its old bytes. The first block settles the ids' length (a blob holding another
  writer's ids of another length makes this writer use that length); the others wait
  for it. Up to 50,000 blocks of at most 4,000 MiB; the size does not grow.
* **record**: the job checked again (shared, as above), then the record, a Hadoop
  ``SinglePendingCommit`` whose ``etags`` are the ordered block ids, ``uploadId`` the
  writer's id prefix, ``extraData["magicfs.store"]`` ``azure-block-list`` and
  ``extraData["magicfs.writer"]`` the marker's nonce; job commit publishes the blob with
  one Put Block List of exactly those ids. An empty file stages nothing: its record
  lists no block, which publishes a zero-byte blob. A task file's record joins this
  process's writer records of its attempt (:mod:`.records`: saves coalesced, a few blobs
  per attempt); a file outside any attempt saves ``<path>.pending``. In ``in_memory``
  mode the record stays in this process (the task must commit here).
* **discard**: delete the marker (and take the record out, if saved). Azure has no request that
  drops staged blocks alone: they stay invisible until the name's next publish discards
  them, or Azure does after 7 days (docs/stores/azure.md).

Requests for a small task file over a whole job: the marker and a Put Block while
writing, the record's share of a writer-record save (at most one, fewer when closes
overlap), the marker's delete at task commit, one Put Block List at job commit — four
and a fraction; four in ``in_memory`` mode. The two job checks are shared (a few per
hundred files when closes overlap; two per file only when none do). What each pays for:
the marker, that a file opened and never closed refuses its task's commit even from
another process (and ``xb``, and listings of the attempt); the record on the store,
that a task can commit in another process than its writers'; the checks, that a writer
of an ended job leaves nothing in its tree; the delete, that the tree goes (one request
per blob: Blob Batch would make it one per 256, but Azurite does not serve the SDK's
batch requests, so it is left out rather than shipped untested).

Decision, ``xb``: what Azure can guarantee is the marker's. It is PUT with
``If-None-Match: *`` (Put Blob without overwrite), so a second writer of the task path,
in this process or any other, gets ``FileExistsError`` from ``open()``; a conflict on a
marker carrying this writer's nonce was our own request, repeated by the SDK after a
lost reply. Whether the *destination* blob may be replaced is job commit's to decide
(the record is the same as for ``wb``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from ...errors import JobNotActiveError
from ...job_context import JobContext, job_context
from ...paths import MagicPath, marker_path, pending_path
from ...records import SinglePendingCommit, path_to_uri
from ...records.pending import STORE_KEY
from ...statistics import IOStatisticsSnapshot
from ..deferred_writer import (
    DeferredWritesBase,
    PartRules,
    StoreWords,
    WriterOptions,
)
from ..job_check import job_still_active
from .blocks import (
    BLOCK_LIST_STORE,
    ID_LENGTH,
    MAX_BLOCK_SIZE,
    MAX_COMMITTED_BLOCKS,
    BlockStore,
    block_id,
    is_id_length_error,
    new_token,
)
from .records import WRITER_FIELD, WriterRecords, writer_records

log = logging.getLogger("magicfs.azure.writer")

T = TypeVar("T")

#: The marker's metadata naming its writer (Azure metadata names are C# identifiers).
WRITER_KEY = "magicfs_writer"

RULES = PartRules(
    noun="block",
    min_size=1,
    max_size=MAX_BLOCK_SIZE,
    max_parts=MAX_COMMITTED_BLOCKS,
    grow_every=None,
    at_least_one=False,  # an empty list publishes a zero-byte blob
)

WORDS = StoreWords(
    store_name="Azure",
    noun="blob",
    pending_bytes="uncommitted blocks",
    where="staged on",
    advice=(
        "Write the file under its final name in one go; where a writer must read back, copy "
        "or rename its own output, use the manifest committer (committer='manifest': task "
        "files are ordinary blobs in the attempt's directory, copied into place at job commit)"
    ),
)


class BlockListWrites(DeferredWritesBase):
    """The write side of an adlfs filesystem ``fs`` (:class:`~..deferred_writer.DeferredWrites`)."""

    rules = RULES
    words = WORDS

    def __init__(self, fs: Any, options: WriterOptions):
        super().__init__(fs, options)
        self.blocks = BlockStore(fs)

    def url(self, path: str) -> str:
        return self.blocks.url(path)

    def hooks(
        self, path: str, magic_path: MagicPath, mode: str, job_marker: str | None
    ) -> BlockFileHooks:
        job_id, attempt_id = magic_path.job_id, magic_path.task_attempt_id
        in_memory = self.options.in_memory and bool(job_id and attempt_id)
        context = job_context(job_id, magic_path.destination_dir) if job_id else None
        records = None
        if context is not None and job_id and attempt_id and not in_memory:
            attempt_dir = "/".join([magic_path.magic_dir, *magic_path.children[:4]])
            registry = self.options.registry
            records = writer_records(
                self.blocks, attempt_dir, job_id, attempt_id, registry, context
            )
        return BlockFileHooks(
            self.blocks, path, magic_path, mode, job_marker, in_memory, records, context
        )

    def discard(self, commits: list[SinglePendingCommit], records: list[str]) -> int:
        """Nothing possible: staged blocks cannot be deleted alone (so no record is read)."""
        return 0

    def delete(self, paths: list[str]) -> None:
        doomed = [p for p in self.with_markers(paths) if self.blocks.split(p)[1]]
        self.blocks.run(self.blocks.delete_many(doomed))


class BlockFileHooks:
    """One task file's blocks (see the module docstring)."""

    part_pieces = False  # astage takes the block's bytes
    checked_by_commit = False  # its close waits for its own job check

    def __init__(
        self,
        blocks: BlockStore,
        path: str,
        magic_path: MagicPath,
        mode: str,
        job_marker: str | None,
        in_memory: bool = False,
        records: WriterRecords | None = None,
        context: JobContext | None = None,
    ):
        self.blocks = blocks
        #: The job's context (:mod:`magicfs.job_context`): where its shared checks are.
        self.context = context
        self.url = blocks.url(path)
        self.mode = mode
        self.path = path
        self.container, self.file_blob = blocks.split(path)
        #: The marker's blob, beside the file's (:func:`~magicfs.paths.marker_path`).
        self.marker_blob = blocks.split(marker_path(path))[1]
        destination_container, self.blob = blocks.split(magic_path.destination)
        assert destination_container == self.container
        self.job_marker = job_marker
        #: Keep the record in this process (nothing saved): a task file's, on request.
        self.in_memory = in_memory
        #: Where the record goes: this process's records of the attempt (a task file's),
        #: else (a file outside any attempt) ``<path>.pending``.
        self.records = records
        self.token = new_token(ID_LENGTH)
        self.nonce = uuid.uuid4().hex
        self.marker_written = False
        #: Block 0's staging: the others wait for it (it settles the ids' length).
        self.first: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run_background(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.blocks.submit(call)

    async def abegin(self) -> None:
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

        create_only = "x" in self.mode
        client = self.blocks.fs.service_client.get_blob_client(self.container, self.marker_blob)
        async with client:
            try:
                await client.upload_blob(
                    b"", overwrite=not create_only, metadata={WRITER_KEY: self.nonce}
                )
            except ResourceExistsError:
                try:
                    properties = await client.get_blob_properties()
                except ResourceNotFoundError:  # the other writer's marker went meanwhile
                    properties = None
                metadata = (properties.metadata if properties is not None else None) or {}
                if metadata.get(WRITER_KEY) != self.nonce:
                    raise FileExistsError(
                        f"{self.url}: another writer has already opened this path ('xb')"
                    ) from None
        self.marker_written = True
        self.blocks.fs.invalidate_cache(marker_path(self.path))

    async def ajob_active(self) -> bool:
        """One Get Blob Properties of the job marker, shared by overlapping writers."""
        assert self.job_marker is not None
        container, marker = self.blocks.split(self.job_marker)

        async def check() -> bool:
            return await self.blocks.exists(container, marker)

        # Shared with the committer's checks of this marker (the adapter's key is this).
        return await job_still_active(
            *self.blocks.check_key(self.job_marker), check, context=self.context
        )

    async def astage(self, number: int, body: bytes) -> str:
        """Put Block; the first block settles the ids' length first."""
        if number > 1:
            await asyncio.wrap_future(self.first)
            return await self._astage(number - 1, body)
        try:
            block = await self._astage_first(body)
        except BaseException as error:
            self.first.set_exception(error)
            raise
        self.first.set_result(None)
        return block

    async def _astage(self, index: int, body: bytes) -> str:
        block = block_id(self.token, index)
        await self.blocks.stage(self.container, self.blob, block, body)
        return block

    async def _astage_first(self, body: bytes) -> str:
        try:
            return await self._astage(0, body)
        except Exception as error:
            if not is_id_length_error(error):
                raise
            # The blob holds another writer's ids of another length: use that length.
            length = await self.blocks.id_length(self.container, self.blob)
            if length is None or length == len(block_id(self.token, 0)):
                raise
            log.info("%s: the blob's block ids have %d characters", self.url, length)
            self.token = new_token(length)
            return await self._astage(0, body)

    def record(self, part_ids: list[str], length: int) -> SinglePendingCommit:
        stats = IOStatisticsSnapshot(
            counters={"stream_write_bytes": length, "stream_write_blocks": len(part_ids)}
        )
        return SinglePendingCommit(
            uri=path_to_uri(self.url),
            upload_id=self.token,
            bucket=self.container,
            destination_key=self.blob,
            etags=part_ids,
            length=length,
            extra_data={STORE_KEY: BLOCK_LIST_STORE, WRITER_FIELD: self.nonce},
            iostatistics=stats,
            filename=None if self.in_memory else self.blocks.url(pending_path(self.path)),
        )

    async def asave(self, record: SinglePendingCommit) -> None:
        """Check the job again, then save the record (writer records, or ``<path>.pending``).

        S3 checks the job once, after the upload exists, because the job's sweep aborts
        any upload created before it listed them. Azure has no such sweep: a file closed
        after its job ended would leave a record in the dead job's tree that nothing
        deletes. So the job is checked again just before the record is written (shared
        with the other writers' checks). In ``in_memory`` mode nothing is written, but the
        check stays: a file that finds its job gone deletes its marker, which the ended
        job's clean-up may have missed.
        """
        if self.job_marker is not None and not await self.ajob_active():
            raise JobNotActiveError(
                f"{self.url}: its job is not active any more (committed or aborted while "
                "the file was written); this file has been discarded"
            )
        if self.in_memory:
            return
        if self.records is not None:
            await self.records.add(self.path, record)
            return
        await self.blocks.put(self.container, pending_path(self.file_blob), record.to_bytes())

    async def adiscard(self, saved: bool) -> None:
        """Delete the marker (and the record); staged blocks stay invisible until they expire."""
        doomed = [self.marker_blob] if self.marker_written else []
        if saved and self.records is not None:
            await self._aunrecord()
        elif saved and not self.in_memory:
            doomed.append(pending_path(self.file_blob))
        await self.blocks.delete_many([f"{self.container}/{blob}" for blob in doomed])
        self.marker_written = False

    async def _aunrecord(self) -> None:
        """Take this file's record out of the writer records — but save them only while
        the job is active: an ended job's tree is gone (or going), and a save would put
        a blob back into it that nothing deletes (a record left behind is harmless then:
        no task of the job commits any more)."""
        assert self.records is not None
        if self.job_marker is not None and not await self.ajob_active():
            self.records.forget(self.path)
            return
        await self.records.remove(self.path)

    async def adrop(self, commit: SinglePendingCommit) -> None:
        """An earlier file of this path closed here: delete its record (so it never commits)."""
        if self.in_memory:
            return  # its record is only in this process's registry, which forgets it
        if self.records is not None:
            await self._aunrecord()
            return
        await self.blocks.delete(self.container, pending_path(self.file_blob))
        self.blocks.fs.invalidate_cache(pending_path(self.path))
