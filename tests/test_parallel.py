"""magicfs.parallel: results in order, bounded, stop on the first failure (both forms)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any

import pytest

from magicfs.parallel import in_background, loop_map, thread_map


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join()
    running.close()


class Probe:
    """Counts calls started and the most running at once; fails at ``fail_at``."""

    def __init__(self, fail_at: int | None = None, delay: float = 0.002):
        self.fail_at = fail_at
        self.delay = delay
        self.started: list[int] = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def enter(self, item: int) -> None:
        with self.lock:
            self.started.append(item)
            self.running += 1
            self.most = max(self.most, self.running)

    def leave(self, item: int) -> int:
        with self.lock:
            self.running -= 1
        if item == self.fail_at:
            raise ValueError(f"item {item} failed")
        return item * 10

    def blocking(self, item: int) -> int:
        self.enter(item)
        time.sleep(self.delay * (item % 3))  # out-of-order completions
        return self.leave(item)

    async def coroutine(self, item: int) -> int:
        self.enter(item)
        await asyncio.sleep(self.delay * (item % 3))
        return self.leave(item)


Mapper = Callable[[Probe, Iterable[int], int], Iterator[int]]


def threads(probe: Probe, items: Iterable[int], bound: int) -> Iterator[int]:
    return thread_map(probe.blocking, items, bound)


@pytest.fixture(params=["threads", "loop"])
def mapper(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop) -> Mapper:
    if request.param == "threads":
        return threads

    def run_background(coroutine: Coroutine[Any, Any, int]) -> concurrent.futures.Future[int]:
        return asyncio.run_coroutine_threadsafe(coroutine, loop)

    return lambda probe, items, bound: loop_map(run_background, probe.coroutine, items, bound)


def test_results_come_in_order_with_a_bounded_number_running(mapper: Mapper) -> None:
    probe = Probe()
    assert list(mapper(probe, range(60), 4)) == [n * 10 for n in range(60)]
    assert sorted(probe.started) == list(range(60))
    assert 1 < probe.most <= 4


def test_items_are_taken_lazily(mapper: Mapper) -> None:
    taken = itertools.count()
    items = (next(taken) for _ in itertools.count())  # endless
    results = mapper(Probe(), items, 3)
    assert [next(results) for _ in range(5)] == [0, 10, 20, 30, 40]
    results.close()  # type: ignore[attr-defined]
    assert next(taken) <= 5 + 2 * 3 + 1  # at most the window ahead of what was handed out


def test_the_first_failure_stops_new_calls_and_is_raised(mapper: Mapper) -> None:
    probe = Probe(fail_at=7)
    got = []
    with pytest.raises(ValueError, match="item 7 failed"):
        got.extend(mapper(probe, range(1000), 4))
    assert got == [n * 10 for n in range(len(got))] and len(got) <= 7
    assert max(probe.started) < 7 + 2 * 4 + 1  # nothing started beyond the window
    assert probe.running == 0  # every started call ended before the error came out


def test_leaving_early_waits_for_the_running_calls(mapper: Mapper) -> None:
    probe = Probe(delay=0.02)
    for result in mapper(probe, range(100), 4):
        if result == 20:
            break
    assert probe.running == 0 and len(probe.started) < 100


def test_a_slow_first_call_is_waited_for_without_spinning(mapper: Mapper) -> None:
    """Later calls done behind a slow first one: the caller sleeps until the first ends
    (it used to spin, taking the GIL from the threads or IO loop doing the work)."""

    class SlowFirst(Probe):
        def blocking(self, item: int) -> int:
            self.enter(item)
            time.sleep(0.5 if item == 0 else 0)
            return self.leave(item)

        async def coroutine(self, item: int) -> int:
            self.enter(item)
            await asyncio.sleep(0.5 if item == 0 else 0)
            return self.leave(item)

    probe = SlowFirst()
    cpu = time.thread_time()
    assert list(mapper(probe, range(8), 4)) == [n * 10 for n in range(8)]
    # a spinning caller burns about the 0.5 s it waits; a waiting one next to nothing
    assert time.thread_time() - cpu < 0.1


def test_in_background_runs_one_call_on_a_thread_of_its_own():
    caller = threading.get_ident()
    done = in_background(lambda x: (x * 2, threading.get_ident()), 21, name="magicfs-test")
    value, thread = done.result(timeout=10)
    assert value == 42 and thread != caller

    def fails() -> None:
        raise OSError("store down")

    with pytest.raises(OSError, match="store down"):
        in_background(fails).result(timeout=10)
