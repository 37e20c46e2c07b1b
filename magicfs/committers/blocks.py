"""The block-list committer: zero-copy job commit on Azure Blob.

S3's magic committer on Azure's primitive (:mod:`magicfs.stores.azure`): a task's files
are blocks staged on their *final* blobs, invisible until job commit publishes each
with one Put Block List. No byte is copied or renamed, so job commit costs one request
per file whatever its size (the manifest committer's Azure rename is a server-side copy
plus a delete: O(bytes)). Layout and records are the magic committer's
(:mod:`magicfs.layouts.magic`; ``.pending`` / ``.pendingset``, whose ``etags`` are the
ordered block ids and ``extraData["magicfs.store"]`` is ``azure-block-list``).

* ``setup_job``: delete an old ``_SUCCESS`` as the conflict mode says, write the job marker.
* tasks write through ``committer.fs`` under ``task.path(...)``
  (:mod:`magicfs.filesystems.deferred_view`).
* ``commit_task``: list the attempt's directory, load its ``.pending`` files (or take
  this process's), check each, save one ``.pendingset`` as ``tasks/<attempt>.pendingset``
  (the message names it) and ``<task id>.pendingset``; then check the job is still
  active, and delete the attempt's markers and ``.pending`` files (as Hadoop's magic
  committer deletes the attempt directory; a second commit of the attempt returns its
  saved record). A file opened and never closed, or written around magicfs, refuses the
  commit.
* ``commit_job``: the base class's stages, and the pendingset job commit the S3
  committers run (:mod:`.pendingsets`: streamed through a local spool, validated before
  anything is published, published ``threads`` at a time, rolled back on failure) over
  Azure's adapter (:mod:`magicfs.stores.azure.deferred`); then ``_SUCCESS`` and the
  job's tree deleted, journal last.

All of it is the magic-layout committer's flow (:mod:`.magic_layout`); this class is
its Azure configuration: attempt records dropped at task commit, the writers' block size,
``in_memory``.

**In-memory mode** (``in_memory=True``, as S3's magic committer): writers keep each
file's record in this process instead of saving a ``.pending`` — two requests fewer per
file (the Put Blob and its delete at task commit). The markers stay, so a task commit in
another process than the writers' refuses (it sees markers it has no record of) instead
of committing the attempt without those files: a task must commit where it was written,
as Spark, Dask and Ray tasks do.

**Abort.** Azure has no request that deletes staged blocks on their own (no "abort
upload"). An aborted or superseded attempt's blocks stay invisible — reads answer
``BlobNotFound``, listings skip them — until the next publish of the same name discards
them, or Azure does after 7 days. Publishing a blob discards every other attempt's
blocks staged on it, so after a commit only the blobs no attempt published keep staged
blocks. ``magicfs uploads list`` shows those (README "Azure: block lists").
"""

from __future__ import annotations

from typing import Any

from ..errors import CommitFailedError
from ..filesystems.magic import MagicOptions
from ..protocol.committer import TaskAttempt
from ..records import IOStatisticsSnapshot, SinglePendingCommit
from ..records.pending import BLOCK_LIST_STORE
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

    def _gather_task_commits(
        self, task: TaskAttempt, files: list[TaskFile]
    ) -> tuple[list[SinglePendingCommit], IOStatisticsSnapshot]:
        """The flow's gathering; in ``in_memory`` mode a refusal also says that a file
        written by another process has no record to commit."""
        try:
            return super()._gather_task_commits(task, files)
        except CommitFailedError as refused:
            if not self.in_memory:
                raise
            raise CommitFailedError(
                f"{refused}. In in_memory mode a file written by another process has no "
                "record here: a task must commit in the process that wrote its files"
            ) from refused
