"""The block-list committer: zero-copy job commit on Azure Blob.

S3's magic committer on Azure's primitive (:mod:`magicfs.stores.azure`): a task's files
are blocks staged on their *final* blobs, invisible until job commit publishes each
with one Put Block List. No byte is copied or renamed, so job commit costs one request
per file whatever its size (the manifest committer's Azure rename is a server-side copy
plus a delete: O(bytes)). Layout and records are the magic committer's
(:mod:`magicfs.layouts.magic`; ``.pendingset``, whose ``etags`` are the ordered block ids
and ``extraData["magicfs.store"]`` is ``azure-block-list``). One difference: a task
file's record is not a ``.pending`` of its own but joins its writer process's *writer
records* of the attempt (:mod:`magicfs.stores.azure.records`: a few PendingSets per
process and attempt instead of a blob per file, which Azure would delete one request
at a time).

* ``setup_job``: delete an old ``_SUCCESS`` as the conflict mode says, write the job marker
  and, alongside it, the job's entry in the container's job index (how ``magicfs jobs
  list`` finds the job from a prefix above it: :mod:`magicfs.layouts.job_index`).
* tasks write through ``committer.fs`` under ``task.path(...)``
  (:mod:`magicfs.filesystems.deferred_view`).
* ``commit_task``: list the attempt's directory (with the markers' metadata), take this
  process's commits, or read the writer records for the others (a record counts only
  for the writer its file's marker names), check each, save one ``.pendingset`` as
  ``tasks/<attempt>.pendingset`` (the message names it) and ``<task id>.pendingset``;
  then check the job is still active, and delete the attempt's markers and writer
  records (as Hadoop's magic committer deletes the attempt directory; a second commit of
  the attempt returns its saved record). A file opened and never closed, or written
  around magicfs, refuses the commit.
* ``commit_job``: the base class's stages, and the pendingset job commit the S3
  committers run (:mod:`.pendingsets`: streamed through a local spool, validated before
  anything is published, published ``threads`` at a time, rolled back on failure) over
  Azure's adapter (:mod:`magicfs.stores.azure.deferred`); then ``_SUCCESS`` and the
  job's tree deleted, journal last.

All of it is the magic-layout committer's flow (:mod:`.magic_layout`); this class is
its Azure configuration: attempt records dropped at task commit, the writers' block size,
``in_memory``.

**In-memory mode** (``in_memory=True``, as S3's magic committer): writers keep each
file's record in this process instead of saving it in writer records. The markers stay,
so a task commit in another process than the writers' refuses (it sees markers it has no
record of) instead of committing the attempt without those files: a task must commit
where it was written, as Spark, Dask and Ray tasks do.

**Abort.** Azure has no request that deletes staged blocks on their own (no "abort
upload"). An aborted or superseded attempt's blocks stay invisible — reads answer
``BlobNotFound``, listings skip them — until the next publish of the same name discards
them, or Azure does after 7 days. Publishing a blob discards every other attempt's
blocks staged on it, so after a commit only the blobs no attempt published keep staged
blocks. ``magicfs uploads list`` shows those (README "Azure: block lists").
"""

from __future__ import annotations

from typing import Any, cast

from ..errors import CommitFailedError
from ..filesystems.magic import MagicOptions
from ..names import PENDING_SUFFIX
from ..paths import is_deferred_write
from ..protocol.committer import TaskAttempt
from ..records import IOStatisticsSnapshot, PendingSet, SinglePendingCommit, path_to_uri
from ..records.pending import BLOCK_LIST_STORE
from ..stores.azure.deferred import BlockListDeferred
from ..stores.azure.records import WRITER_FIELD, is_writer_record
from ..stores.azure.writer import WRITER_KEY
from ..stores.deferred import DeferredStoreSpec
from ..task_files import TaskFile
from .magic_layout import MagicLayoutCommitter


class BlockListCommitter(MagicLayoutCommitter):
    """Zero-copy commit on Azure Blob (adlfs ``abfs://``/``az://``) through block lists.

    Options beyond :class:`OutputCommitter`'s: ``block_size`` (8 MiB) and
    ``blocks_in_flight`` (4) of the task writers; ``in_memory`` (False: writers keep
    their records in this process, no ``.pending``; see the module docstring).
    """

    name = "block-list"
    #: On Azure no upload is left to sweep by the markers: a committed attempt's records go.
    keeps_attempt_records = False

    def __init__(
        self,
        dest: str,
        *,
        block_size: int = 8 << 20,
        blocks_in_flight: int = 4,
        in_memory: bool = False,
        **options: Any,
    ):
        self.block_size = block_size
        self.blocks_in_flight = blocks_in_flight
        self.in_memory = in_memory
        super().__init__(dest, **options)

    def _view_options(self, spec: DeferredStoreSpec) -> dict[str, Any]:
        return {
            "block_lists": True,
            "part_size": self.block_size,
            "parts_in_flight": self.blocks_in_flight,
            "in_memory": self.in_memory,
        }

    def _magic_options(self) -> MagicOptions:
        magic = MagicOptions(
            {
                "block_lists": True,
                "part_size": self.block_size,
                "parts_in_flight": self.blocks_in_flight,
                "job_root": self.dest,
            }
        )
        if self.in_memory:
            magic["in_memory"] = True
        return magic

    def _store_diagnostics(self) -> dict[str, str]:
        return {"magicfs.store": BLOCK_LIST_STORE, "magicfs.in_memory": str(self.in_memory).lower()}

    async def _aattempt_entries(self, task: TaskAttempt) -> dict[str, dict[str, str]]:
        """With the markers' metadata: a marker names its writer's nonce."""
        adapter = cast(BlockListDeferred, self.deferred)
        prefix = self.layout.task_attempt_dir(task.attempt_id)
        return dict(await adapter.alist_with_metadata(prefix))

    def _gather_task_commits(
        self, task: TaskAttempt, files: list[TaskFile], entries: dict[str, dict[str, str]]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """The attempt's commits: this process's, or those its writer records (or older
        ``.pending`` files) hold for the writer each marker names. A marker with neither
        (a file still open, or killed, or written around magicfs) refuses the commit."""
        listing = entries
        markers = [p for p in sorted(listing) if is_deferred_write(p)]
        known = {f.path: f.commit for f in files if f.commit is not None}
        elsewhere = [m for m in markers if m not in known]
        found, sources = self._recorded(listing, elsewhere) if elsewhere else ({}, {})
        unaccounted = [m for m in elsewhere if m not in found]
        if unaccounted:
            hint = (
                " In in_memory mode a file written by another process has no record here: "
                "a task must commit in the process that wrote its files."
                if self.in_memory
                else ""
            )
            raise CommitFailedError(
                f"task attempt {task.attempt_id}: {len(unaccounted)} files were opened but not "
                f"closed successfully, or written around magicfs, e.g. "
                f"{self._display(unaccounted[0])}: they would never be committed. Write task "
                "files with committer.fs (job.fs) and close each before committing the task "
                f"(the attempt has been aborted).{hint}"
            )
        commits = [known.get(m) or found[m] for m in markers]
        named = [
            sources.get(m) or c.filename or self._display(m + PENDING_SUFFIX)
            for m, c in zip(markers, commits, strict=True)
        ]
        return commits, self._checked_task_commits(task, commits, named)

    def _recorded(
        self, listing: dict[str, dict[str, str]], markers: list[str]
    ) -> tuple[dict[str, SinglePendingCommit], dict[str, str]]:
        """The commits of ``markers`` that the writer records of ``listing`` hold for the
        writer each marker names (its nonce), or a ``.pending`` next to the marker holds;
        and where each was read, for messages."""
        sets = [p for p in sorted(listing) if is_writer_record(p)]
        by_writer: dict[tuple[str, str | None], tuple[SinglePendingCommit, str]] = {}
        for path, data in zip(sets, self._read_records(sets), strict=True):
            source = self._display(path)
            for commit in PendingSet.from_json(data, source=source).commits:
                by_writer[(commit.uri, commit.extra_data.get(WRITER_FIELD))] = (commit, source)
        found, sources = {}, {}
        for marker in markers:
            uri = path_to_uri(self.store_fs.unstrip_protocol(marker))
            match = by_writer.get((uri, listing[marker].get(WRITER_KEY)))
            if match is not None:
                found[marker], sources[marker] = match
        pendings = [m for m in markers if m not in found and m + PENDING_SUFFIX in listing]
        loaded = self._load_pendings([m + PENDING_SUFFIX for m in pendings])
        found.update(zip(pendings, loaded, strict=True))
        return found, sources
