"""What every stage shares: store operations, the job's layout, statistics, parallelism."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ...layouts.manifest import ManifestJobLayout
from ...parallel import thread_map
from ...progress import progress_bar
from ...statistics import IOStatisticsStore
from ...stores.rename import RenameStore

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class StageContext:
    store: RenameStore
    layout: ManifestJobLayout
    stats: IOStatisticsStore
    threads: int = 8
    progress: bool | None = None

    @property
    def job_id(self) -> str:
        return self.layout.job_id

    def parallel(
        self,
        function: Callable[[T], R],
        items: Iterable[T],
        description: str = "",
        total: int | None = None,
    ) -> Iterator[R]:
        """``function`` over ``items``, ``threads`` at once (:func:`~magicfs.parallel.thread_map`).

        Results come in the order of ``items``. The first failure stops new work: what is
        running finishes, then the failure is raised. Memory stays bounded however many
        items the iterable yields (it is consumed lazily, ``2 x threads`` ahead).
        """
        with progress_bar(total or 0, description, self.progress if total else False) as bar:
            for result in thread_map(function, items, self.threads, name="magicfs-stage"):
                bar.update()
                yield result
