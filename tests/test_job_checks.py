"""The job checks a process shares (``magicfs.stores.job_check``): who joins which check,
and when a check is a listing.

A caller takes only the answer of a check that started after it asked; callers that ask
while one runs share the next. An ``in_memory`` task commit needs the tasks marked
touched, which only a listing finds: the check it joins is a listing, and the writers
who join the same check take its answer. Plain coroutines on an event loop stand in for
the store's HEAD and listing, and each records that it ran.
"""

from __future__ import annotations

import asyncio

from magicfs.stores.job_check import JobCheck, job_check

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

    def writer(self) -> asyncio.Future[JobCheck]:
        return asyncio.ensure_future(job_check("bucket", "marker", self.head))

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
