"""What every stage shares: store operations, the job's layout, statistics, parallelism."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ...layouts.manifest import ManifestJobLayout
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
        """``function`` over ``items`` on ``threads`` threads, at most ``2 x threads`` queued.

        Results come in completion order. The first failure stops new work: what is
        running finishes, then the failure is raised. Memory stays bounded however many
        items the iterable yields (it is consumed lazily).
        """
        limit = self.threads * 2
        items = iter(items)
        failure: BaseException | None = None
        with (
            progress_bar(total or 0, description, self.progress if total else False) as bar,
            concurrent.futures.ThreadPoolExecutor(self.threads, "magicfs-stage") as pool,
        ):
            running: set[concurrent.futures.Future[Any]] = set()
            while True:
                while failure is None and len(running) < limit:
                    item = next(items, _END)
                    if item is _END:
                        break
                    running.add(pool.submit(function, item))
                if not running:
                    break
                done, running = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    bar.update()
                    error = future.exception()
                    if error is not None:
                        failure = failure or error
                    else:
                        yield future.result()
        if failure is not None:
            raise failure


_END: Any = object()
