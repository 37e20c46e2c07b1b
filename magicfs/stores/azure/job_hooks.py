"""The block-list committer's Azure parts: its options and the hooks of the magic-layout flow.

``committer_for(..., committer="block-list")`` is the magic-layout committer
(:mod:`magicfs.committers.magic_layout`) configured with :class:`BlockListCommitOptions`
and :class:`BlockListJobHooks`: a task's files are blocks staged on their *final*
blobs (:mod:`.writer`), invisible until job commit publishes each with one Put Block
List. No byte is copied or renamed. What Azure adds to the flow:

* a task file's record is not a ``.pending`` of its own but joins its writer process's
  *writer records* of the attempt (:mod:`.records`: a few PendingSets per process and
  attempt instead of a blob per file, which Azure would delete one request at a time);
  the attempt's listing carries the markers' metadata, and a record counts only for the
  writer its file's marker names (its nonce);
* a committed attempt's markers and writer records are deleted at task commit (as
  Hadoop's magic committer deletes the attempt directory): Azure has no upload for the
  job's clean-up to find by them, so a second commit of the attempt returns its saved
  pendingset;
* ``_SUCCESS`` names the store (``magicfs.store``: ``azure-block-list``).

**In-memory mode** (``in_memory=True``): writers keep each file's record in this process
instead of saving it in writer records. The markers stay, so a task commit in another
process than the writers' refuses (it sees markers it has no record of) instead of
committing the attempt without those files. The attempt's commits stay in the process
that set it up, so, as on S3, a commit anywhere else is refused
(:meth:`~magicfs.stores.job_hooks.DeferredJobHooks.commits_stay_where_set_up`).

**Abort.** Azure has no request that deletes staged blocks on their own (no "abort
upload"). An aborted or superseded attempt's blocks stay invisible — reads answer
``BlobNotFound``, listings skip them — until the next publish of the same name discards
them, or Azure does after 7 days. ``magicfs uploads list`` shows blobs holding only
staged blocks (README "Azure: block lists").
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, cast

from ...paths import is_deferred_write, pending_records
from ...records import PendingSet, SinglePendingCommit, path_to_uri
from ..job_hooks import DeferredJobHooks, StoreOptions, unaccounted_error
from .blocks import BLOCK_LIST_STORE
from .records import WRITER_FIELD, is_writer_record
from .writer import WRITER_KEY

if TYPE_CHECKING:
    from .deferred import BlockListDeferred


@dataclasses.dataclass(frozen=True)
class BlockListCommitOptions(StoreOptions):
    """The block-list committer's options: ``block_size`` (8 MiB) and
    ``blocks_in_flight`` (4) of the task writers; ``in_memory`` (module docstring)."""

    block_size: int = 8 << 20
    blocks_in_flight: int = 4
    in_memory: bool = False

    def view_options(self) -> dict[str, Any]:
        return {
            "block_lists": True,
            "part_size": self.block_size,
            "parts_in_flight": self.blocks_in_flight,
            "in_memory": self.in_memory,
        }

    def diagnostics(self) -> dict[str, str]:
        return {"magicfs.store": BLOCK_LIST_STORE, "magicfs.in_memory": str(self.in_memory).lower()}


class BlockListJobHooks(DeferredJobHooks):
    """The block-list committer's Azure hooks (module docstring)."""

    keeps_attempt_records: ClassVar[bool] = False
    options: BlockListCommitOptions

    @property
    def commits_stay_where_set_up(self) -> bool:
        return self.options.in_memory

    async def aattempt_entries(self, prefix: str) -> dict[str, dict[str, str]]:
        """With the markers' metadata: a marker names its writer's nonce."""
        deferred = cast("BlockListDeferred", self.job.deferred)  # this store's adapter
        return dict(await deferred.alist_with_metadata(prefix))

    def find_records(
        self,
        attempt_id: str,
        known: dict[str, SinglePendingCommit],
        entries: dict[str, dict[str, str]],
    ) -> tuple[list[str], dict[str, SinglePendingCommit], dict[str, str]]:
        """The records its writer records (or older ``.pending`` files) hold for the
        writer each marker names. A marker with neither (a file still open, or killed, or
        written around magicfs) refuses the commit."""
        markers = [p for p in sorted(entries) if is_deferred_write(p)]
        elsewhere = [m for m in markers if m not in known]
        found, sources = self._recorded(entries, elsewhere) if elsewhere else ({}, {})
        unaccounted = [m for m in elsewhere if m not in found]
        if unaccounted:
            hint = (
                " In in_memory mode a file written by another process has no record here: "
                "a task must commit in the process that wrote its files."
                if self.options.in_memory
                else ""
            )
            example = self.job.display(unaccounted[0])
            raise unaccounted_error(attempt_id, example, len(unaccounted), hint)
        return markers, found, sources

    def _recorded(
        self, listing: dict[str, dict[str, str]], markers: list[str]
    ) -> tuple[dict[str, SinglePendingCommit], dict[str, str]]:
        """The commits of ``markers`` that the writer records of ``listing`` hold for the
        writer each marker names (its nonce), or a ``.pending`` next to the marker holds;
        and where each was read, for messages."""
        sets = [p for p in sorted(listing) if is_writer_record(p)]
        by_writer: dict[tuple[str, str | None], tuple[SinglePendingCommit, str]] = {}
        for path, data in zip(sets, self.job.read_records(sets), strict=True):
            source = self.job.display(path)
            for commit in PendingSet.from_json(data, source=source).commits:
                by_writer[(commit.uri, commit.extra_data.get(WRITER_FIELD))] = (commit, source)
        found, sources = {}, {}
        for marker in markers:
            uri = path_to_uri(self.job.display(marker))
            match = by_writer.get((uri, listing[marker].get(WRITER_KEY)))
            if match is not None:
                found[marker], sources[marker] = match
        records = pending_records(listing)
        found.update(
            self.load_beside([m for m in markers if m not in found and m in records], records)
        )
        return found, sources
