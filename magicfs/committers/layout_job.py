"""The job as a magic-layout store's hooks see it: :class:`MagicLayoutJob`.

A store's hooks (:class:`~magicfs.stores.job_hooks.DeferredJobHooks`) are given this
object, not the committer: what they may read and call of the job is exactly what
:class:`~magicfs.stores.job_hooks.LayoutJob` names (the job's id, destination and
tree, record I/O through the store's adapter, the job's commit operations and
statistics), so a hook cannot reach the committer's verbs or its other hooks. The
committer's own task and job commits use it for the same record I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..layouts.magic import MagicJobLayout
from ..parallel import loop_map
from ..protocol.options import CommitterOptions
from ..records import IOStatisticsSnapshot, PendingSet, SinglePendingCommit
from ..statistics import IOStatisticsStore
from ..stores.commit_ops import CommitOperations
from ..stores.deferred import DeferredStore, collect, take
from .pendingsets import PendingsetRecords

#: Records deleted in one request at clean-up (S3's DeleteObjects limit).
DELETE_BATCH = 1000


class MagicLayoutJob:
    """One magic-layout job's identity, tree and record I/O over the store's adapter.

    Implements :class:`~magicfs.stores.job_hooks.LayoutJob`. ``stats`` is the
    committer's own (rebuilt per process: the committer sets it again when it unpickles).
    """

    def __init__(
        self,
        options: CommitterOptions,
        deferred: DeferredStore,
        layout: MagicJobLayout,
        stats: IOStatisticsStore,
    ):
        self.job_id = options.job_id
        self.dest = options.dest
        self.url = options.url
        self.threads = options.threads
        self.progress = options.progress
        self.deferred = deferred
        self.layout = layout
        self.bucket, self.dest_key = deferred.split(options.dest)
        self.stats = stats
        #: Set by the committer once its records exist (they need this job's reads).
        self.records: PendingsetRecords | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("stats", None)  # per process; the committer sets it again
        return state

    def _records(self) -> PendingsetRecords:
        assert self.records is not None, "the committer sets records when it is built"
        return self.records

    @property
    def magic_dir(self) -> str:
        return self.layout.magic_dir

    def attempt_dir(self, attempt_id: str) -> str:
        return self.layout.task_attempt_dir(attempt_id)

    def display(self, path: str) -> str:
        return self._records().display(path)

    def operations(self) -> CommitOperations:
        return self._records().operations()

    def checked_task_commits(
        self, attempt_id: str, commits: list[SinglePendingCommit], sources: list[str]
    ) -> IOStatisticsSnapshot:
        return self._records().checked_task_commits(attempt_id, commits, sources)

    def put(self, path: str, data: bytes) -> None:
        self.deferred.run(self.deferred.awrite_record(path, data))

    def tree_pages(self, size: int = DELETE_BATCH) -> Iterator[list[str]]:
        """The job's tree, ``size`` records at a time (streamed: it may hold millions)."""
        listing = self.deferred.alist_records(self.layout.magic_dir)
        while page := self.deferred.run(take(listing, size)):
            yield page

    def list_records(self, directory: str, recursive: bool = True) -> list[str]:
        """The records below ``directory``, sorted (one paged, uncached listing)."""
        return sorted(self.deferred.run(collect(self.deferred.alist_records(directory, recursive))))

    def delete_files(self, paths: list[str]) -> None:
        self.deferred.run(self.deferred.adelete_records(paths))

    def read_records(self, paths: list[str]) -> Iterator[bytes]:
        """The task records, ``2 * threads`` at once (small reads while nothing else runs;
        S3's client pool holds that many), as coroutines on the store's IO loop."""
        reads = 2 * self.threads
        return loop_map(self.deferred.run_background, self._aread_pendingset, paths, reads)

    def read_record(self, path: str) -> bytes:
        return self.deferred.run(self._aread_pendingset(path))

    async def _aread_pendingset(self, path: str) -> bytes:
        """Read through the adapter: under the store's retry policy and rate control."""
        data = await self.deferred.aread_record(path, PendingSet.MAX_BYTES)
        if data is None:
            raise FileNotFoundError(path)
        return data

    def load_pendings(self, paths: list[str]) -> list[SinglePendingCommit]:
        """The ``.pending`` records at ``paths``, read in parallel."""
        return load_pendings(self.deferred, paths, self.stats, self.display)


def load_pendings(
    deferred: DeferredStore,
    paths: list[str],
    stats: IOStatisticsStore,
    display: Callable[[str], str],
) -> list[SinglePendingCommit]:
    """The ``.pending`` records at ``paths``, read at once on the store's IO loop, in
    order; a missing one raises ``FileNotFoundError`` naming it (``display``)."""
    reads = [
        (p, deferred.run_background(deferred.aread_record(p, SinglePendingCommit.MAX_BYTES)))
        for p in paths
    ]
    commits = []
    for path, read in reads:
        with stats.track("committer_load_single_pending_file"):
            data = read.result()
        if data is None:
            raise FileNotFoundError(f"{display(path)} does not exist")
        commits.append(SinglePendingCommit.from_json(data, source=display(path)))
    return commits
