"""The job checks a process shares (``magicfs.stores.job_check``): who joins which check,
and when a check is a listing.

A caller takes only the answer of a check that started after it asked; callers that ask
while one runs share the next. An ``in_memory`` task commit needs the tasks marked
touched, which only a listing finds: the check it joins is a listing, and the writers
who join the same check take its answer. A writer whose task commit checks anyway waits
(``delay``) for the next caller's check, or goes alone when its delay is up, or at exit.
Plain coroutines on an event loop stand in for
the store's HEAD and listing, and each records that it ran.
"""

from __future__ import annotations

import asyncio
import threading

from magicfs.stores.job_check import JobCheck, job_check, start_waiting_checks

LISTED = JobCheck(True, frozenset({"task_7"}))


class Store:
    """A HEAD and a listing that wait for ``release`` and record each run."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.release = asyncio.Event()

    async def head(self) -> bool:
        self.runs.append("HEAD")
        await self.release.wait()
        return True

    async def listing(self) -> JobCheck:
        self.runs.append("LIST")
        await self.release.wait()
        return LISTED

    def writer(self, delay: float = 0.0) -> asyncio.Future[JobCheck]:
        return asyncio.ensure_future(job_check("bucket", "marker", self.head, delay=delay))

    def task_commit(self) -> asyncio.Future[JobCheck]:
        return asyncio.ensure_future(job_check("bucket", "marker", self.head, self.listing))


def run(scenario) -> None:
    asyncio.run(scenario(Store()))


def test_a_writer_and_a_task_commit_asking_during_a_check_share_one_listing_after_it():
    async def scenario(store: Store) -> None:
        first = store.writer()
        await asyncio.sleep(0)  # its HEAD is running
        writer, commit = store.writer(), store.task_commit()
        await asyncio.sleep(0)
        store.release.set()
        answers = await asyncio.gather(first, writer, commit)
        assert store.runs == ["HEAD", "LIST"]
        assert answers == [JobCheck(True), LISTED, LISTED]

    run(scenario)


def test_a_task_commit_never_takes_the_answer_of_a_head_that_was_running():
    async def scenario(store: Store) -> None:
        running = store.writer()
        await asyncio.sleep(0)
        commit = store.task_commit()
        store.release.set()
        assert (await running, await commit) == (JobCheck(True), LISTED)
        assert store.runs == ["HEAD", "LIST"]

    run(scenario)


def test_writers_alone_send_heads_and_share_them():
    async def scenario(store: Store) -> None:
        first = store.writer()
        await asyncio.sleep(0)
        others = [store.writer() for _ in range(5)]
        await asyncio.sleep(0)
        store.release.set()
        answers = await asyncio.gather(first, *others)
        assert store.runs == ["HEAD", "HEAD"]  # the running one, then one for the five
        assert set(answers) == {JobCheck(True)}

    run(scenario)


def test_after_a_listing_the_next_check_is_a_head_again_unless_a_commit_asks():
    async def scenario(store: Store) -> None:
        store.release.set()
        assert await store.task_commit() == LISTED
        assert await store.writer() == JobCheck(True)
        assert store.runs == ["LIST", "HEAD"]

    run(scenario)


def test_a_writer_that_can_wait_takes_the_next_task_commits_listing():
    async def scenario(store: Store) -> None:
        store.release.set()
        waiting = [store.writer(delay=30) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert store.runs == []  # nobody in a hurry yet
        commit = store.task_commit()
        assert await asyncio.wait_for(asyncio.gather(*waiting, commit), 5) == [LISTED] * 4
        assert store.runs == ["LIST"]

    run(scenario)


def test_a_writer_that_can_wait_goes_alone_when_its_delay_is_up():
    async def scenario(store: Store) -> None:
        store.release.set()
        loop = asyncio.get_running_loop()
        start = loop.time()
        waiting = [store.writer(delay=5), store.writer(delay=0.2)]
        assert await asyncio.gather(*waiting) == [JobCheck(True)] * 2
        assert store.runs == ["HEAD"]  # one, when the first delay was up
        assert 0.2 <= loop.time() - start < 4

    run(scenario)


def test_a_writer_that_can_wait_joins_no_check_already_running():
    async def scenario(store: Store) -> None:
        running = store.writer()
        await asyncio.sleep(0)
        waiting = store.writer(delay=30)
        await asyncio.sleep(0)
        store.release.set()
        assert await running == JobCheck(True)
        await asyncio.sleep(0.05)
        assert not waiting.done() and store.runs == ["HEAD"]  # its own is still to come
        assert await asyncio.wait_for(store.task_commit(), 5) == LISTED
        assert await waiting == LISTED

    run(scenario)


def test_at_exit_the_checks_still_waiting_start_at_once():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        store = asyncio.run_coroutine_threadsafe(_ready_store(), loop).result()
        waiting = asyncio.run_coroutine_threadsafe(
            job_check("bucket", "marker", store.head, delay=600), loop
        )
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), loop).result()
        assert not waiting.done() and store.runs == []
        start_waiting_checks()
        assert waiting.result(timeout=5) == JobCheck(True)
        assert store.runs == ["HEAD"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


async def _ready_store() -> Store:
    store = Store()
    store.release.set()
    return store
