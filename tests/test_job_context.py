"""One job, one context (magicfs.job_context): what a job promises per process holds for
all of its calls, whichever object makes them.

A job's calls in one process go through several S3 stores: the committer's adapter,
the task view's writes and one more per file opened by URL. The server counts what
arrives (the fault front's arrival log); the job's ``max_request_rate`` and its retry
budget must hold across all of them.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import dataclasses
import datetime
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import fsspec
import s3fs

import magicfs
from magicfs.job_context import JOB_CONTEXTS, job_context
from magicfs.stores.azure.records import RECORDS_STATE, JobRecords
from magicfs.stores.job_check import CHECKS_STATE, SharedChecks, job_still_active
from magicfs.stores.s3.rate import RateControl
from magicfs.stores.s3.retry import RetryPolicy
from magicfs.task_files import TASK_FILES

WRITERS = 8


def committer_via(front, bucket, **options):
    storage = {**front.storage_options, "skip_instance_cache": True}
    return magicfs.committer_for(f"s3://{bucket}/out", storage_options=storage, **options)


def write_tasks(committer, files_per_writer: int) -> list:
    """:data:`WRITERS` threads, each a task attempt writing ``files_per_writer`` files
    through the committer's task view and one more opened by URL (a filesystem, and an
    S3 store, of its own)."""

    def task(index: int):
        attempt = committer.task_attempt(index)
        committer.setup_task(attempt)
        for n in range(files_per_writer):
            with committer.fs.open(attempt.path(f"t{index}/view-{n}.bin"), "wb") as f:
                f.write(b"v" * 1000)
        url = attempt.url(f"t{index}/url.bin")
        with fsspec.open(url, "wb", **committer.storage_options) as f:
            f.write(b"u" * 1000)
        return attempt

    with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
        return list(pool.map(task, range(WRITERS)))


class SlotLog(RateControl):
    """The job's rate control, also noting the start it gives each call (its slot, chosen
    under the control's lock: when the call may start, whenever its coroutine resumes)."""

    slots: list[float]

    def rate(self, now: float | None = None) -> float | None:
        allowed = super().rate(now)
        if now is not None and allowed is not None:  # asked for a call's slot (acquire)
            self.slots.append(max(now, self._next))
        return allowed


def busiest_window(starts: list[float], width: float = 1.0) -> int:
    """The most ``starts`` within any ``width`` seconds (half-open windows)."""
    starts = sorted(starts)
    return max(bisect.bisect_left(starts, s + width) - i for i, s in enumerate(starts))


def test_max_request_rate_caps_every_writer_of_the_job_in_this_process(
    faults_front, s3_client, bucket
):
    rate = 20
    committer = committer_via(faults_front, bucket, max_request_rate=rate)
    control = committer.flow.deferred.store.rate  # the job's one control in this process
    control.__class__, control.slots = SlotLog, []
    committer.setup_job()
    del control.slots[:]
    faults_front.reset_stats()  # from here on, every request is a writer's or a task commit's
    attempts = write_tasks(committer, files_per_writer=1)
    messages = [committer.commit_task(attempt) for attempt in attempts]
    arrivals = faults_front.arrivals()
    # Every request of these writers and task commits goes through a store of the job
    # (markers, creates, parts, records, the shared job check and the task listings) but
    # one: fsspec.open's makedirs, a bucket probe of s3fs's own per URL-opened file (the
    # fsspec calls left to s3fs, magicfs.stores.s3.store's docstring), not capped.
    probes = [a for a in arrivals if a[1] == "HeadBucket"]
    job = [a for a in arrivals if a[1] != "HeadBucket"]
    assert len(probes) == WRITERS
    assert {op for _, op, _ in job} == {
        "PutObject",
        "CreateMultipartUpload",
        "UploadPart",
        "HeadObject",
        "ListObjectsV2",
    }
    assert len(job) >= WRITERS * 2 * 4  # about four requests per file, 16 files
    # Every request the server saw took a slot of the job's one control (before the
    # job's stores shared it, the writers' took none: 38 requests signed in the busiest
    # second, on a loaded two-core machine), and the slots start 1/rate apart: no second
    # holds more than `rate` (no burst: an idle job saves up no slots). The server's own
    # clock (each request's X-Amz-Date, to the second) agrees over the whole run; per
    # second it cannot, on a loaded machine: a coroutine that resumes late signs its
    # request in the next second, beside that second's own.
    assert len(control.slots) == len(job)
    assert busiest_window(control.slots) <= rate
    signed = sorted(datetime.datetime.strptime(s, "%Y%m%dT%H%M%SZ") for _, _, s in job)
    seconds = (signed[-1] - signed[0]).total_seconds() + 1  # the seconds the run spans
    assert len(job) <= rate * seconds, collections.Counter(s for _, _, s in job)
    committer.commit_job(messages)
    keys = {o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert len({k for k in keys if k.endswith(".bin")}) == WRITERS * 2


@dataclasses.dataclass(frozen=True)
class FixedDelay(RetryPolicy):
    """Every retry waits ``wait`` seconds: the budget then allows an exact number of them."""

    wait: float = 0.1

    def delay(self, retry: int) -> float:
        return self.wait


def test_the_retry_budget_is_the_jobs_across_its_writers(faults_front, bucket, monkeypatch):
    """Eight files opened by URL (eight stores), every part refused with 503: the job's
    budget of 1 s, at 0.1 s a retry, allows ten retries in this process, not ten each."""
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)  # s3fs's own SlowDown retries off
    policy = FixedDelay(attempts=1000, budget=1.0)
    storage = {
        **faults_front.storage_options,
        "skip_instance_cache": True,
        "config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}},
    }
    committer = magicfs.committer_for(
        f"s3://{bucket}/out", storage_options=storage, retry_policy=policy
    )
    committer.setup_job()
    faults_front.add_rule("UploadPart", "503")

    def write(index: int):
        attempt = committer.task_attempt(index)
        committer.setup_task(attempt)
        with fsspec.open(attempt.url(f"f{index}.bin"), "wb", **committer.storage_options) as f:
            f.write(b"x" * 1000)
        return attempt

    with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
        attempts = list(pool.map(write, range(WRITERS)))
    failures = [f for a in attempts for f in TASK_FILES.settle(committer.job_id, a.attempt_id)]
    assert len(failures) == WRITERS
    assert all("retry budget of 1 s for this job is spent" in str(e) for _, e in failures)
    # One first try per file, then ten retries for the whole job.
    assert faults_front.stats()["UploadPart"]["requests"] == WRITERS + 10
    assert committer.flow.context.statistics.counter("store_io_retry") == 10
    faults_front.clear()
    committer.abort_job()


def test_a_writer_finds_its_jobs_context_by_the_job_its_path_names(s3_options, bucket):
    committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=s3_options)
    assert job_context(committer.job_id, f"s3://{bucket}/out/") is committer.flow.context
    assert JOB_CONTEXTS.find(committer.job_id, f"{bucket}/elsewhere") is None
    committer.setup_job()
    attempt = committer.task_attempt(0)
    committer.setup_task(attempt)
    with committer.fs.open(attempt.path("a.bin"), "wb") as f:
        f.write(b"a")
        writer = TASK_FILES.get(attempt.path("a.bin").split("://")[-1]).writer
        # The writer's calls and the committer's share the job's rate and budget.
        assert writer.hooks.store.context is committer.flow.context
        assert writer.hooks.store.rate is committer.flow.deferred.store.rate
        assert writer.hooks.store.budget is committer.flow.deferred.store.budget
    # A context pickles as its job: unpickled here, it is this process's context.
    assert pickle.loads(pickle.dumps(committer.flow.context)) is committer.flow.context
    committer.commit_job([committer.commit_task(attempt)])


def test_a_closed_context_shuts_its_pools_and_is_forgotten():
    context = job_context("closing-job", "s3://b/out")
    pool = context.pool("work", 2)
    assert pool.submit(lambda: 7).result() == 7
    closed = []
    context.on_close(lambda: closed.append(True))
    context.close()
    assert closed == [True]
    assert JOB_CONTEXTS.find("closing-job", "b/out") is None
    try:
        pool.submit(lambda: 1)
    except RuntimeError as error:
        assert "shutdown" in str(error)
    else:
        raise AssertionError("a closed context's pool took work")
    assert job_context("closing-job", "b/out") is not context


def write_one_task(committer):
    committer.setup_job()
    attempt = committer.task_attempt(0)
    committer.setup_task(attempt)
    with committer.fs.open(attempt.path("a.bin"), "wb") as f:
        f.write(b"a")
    return [committer.commit_task(attempt)]


def job_tree(s3_client, bucket) -> list[str]:
    listing = s3_client.list_objects_v2(Bucket=bucket, Prefix="out/__magic_job-")
    return [o["Key"] for o in listing.get("Contents", [])]


def test_a_job_that_ends_here_closes_its_context(s3_options, bucket, s3_client):
    committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=s3_options)
    messages = write_one_task(committer)
    context = committer.flow.context
    pool = context.pool("probe", 1)
    committer.commit_job(messages)
    # Its pools are shut down and the registry forgets it; a later writer of the same
    # job id (a retried commit, an operator's clean-up) starts afresh.
    assert context.closed
    assert JOB_CONTEXTS.find(committer.job_id, f"{bucket}/out") is None
    try:
        pool.submit(lambda: 1)
    except RuntimeError as error:
        assert "shutdown" in str(error)
    else:
        raise AssertionError("an ended job's pool took work")
    assert job_context(committer.job_id, f"s3://{bucket}/out") is not context
    assert job_tree(s3_client, bucket) == []


def test_an_aborted_job_closes_its_context(s3_options, bucket, s3_client):
    committer = magicfs.committer_for(f"s3://{bucket}/out", storage_options=s3_options)
    write_one_task(committer)
    context = committer.flow.context
    committer.abort_job()
    assert context.closed
    assert JOB_CONTEXTS.find(committer.job_id, f"{bucket}/out") is None
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_background_clean_up_closes_the_context_when_it_ends(
    s3_options, bucket, s3_client, monkeypatch
):
    """``cleanup="background"``: the job's context stays open (its pools usable) until
    the clean-up, running after commit_job() returned, has ended."""
    committer = magicfs.committer_for(
        f"s3://{bucket}/out", storage_options=s3_options, cleanup="background"
    )
    messages = write_one_task(committer)
    context = committer.flow.context
    go = threading.Event()
    seen = []
    clean_up = committer.flow.clean_up

    def held_clean_up(*args):  # the clean-up waits for the test, then uses a job pool
        go.wait()
        seen.append(context.pool("cleanup-probe", 1).submit(lambda: "ran").result())
        clean_up(*args)

    monkeypatch.setattr(committer.flow, "clean_up", held_clean_up)
    committer.commit_job(messages)
    assert not context.closed  # the clean-up has not run yet
    assert JOB_CONTEXTS.find(committer.job_id, f"{bucket}/out") is context
    go.set()
    assert committer.wait_cleanup() is None  # it left nothing
    assert seen == ["ran"]
    assert context.closed
    assert JOB_CONTEXTS.find(committer.job_id, f"{bucket}/out") is None
    assert job_tree(s3_client, bucket) == []


def test_a_jobs_shared_checks_live_in_its_context():
    """Callers of one job share a check of its marker; another job's callers, with the
    same store and marker key, do not: the shared checks are the job's (its context's
    slot), and none stays once nobody waits."""
    ours, theirs = job_context("checks-a", "s3://b/out"), job_context("checks-b", "s3://b/out")
    heads: list[str] = []

    async def scenario() -> list[bool]:
        release = asyncio.Event()

        def head(job: str):
            async def check() -> bool:
                heads.append(job)
                await release.wait()
                return True

            return check

        def ask(context, job):
            return asyncio.ensure_future(
                job_still_active("b", "marker", head(job), context=context)
            )

        first = ask(ours, "a")  # its check starts and waits for the release
        await asyncio.sleep(0)
        shared = ours.state(CHECKS_STATE)
        assert isinstance(shared, SharedChecks) and len(shared.current()) == 1
        assert theirs.state(CHECKS_STATE) is None
        later = [ask(ours, "a"), ask(ours, "a"), ask(theirs, "b")]
        await asyncio.sleep(0)
        release.set()
        answers = await asyncio.gather(first, *later)
        assert shared.current() == {}
        return answers

    assert asyncio.run(scenario()) == [True] * 4
    # Job a: its first check, then one shared by the two that asked while it ran; job b:
    # one of its own.
    assert sorted(heads) == ["a", "a", "b"]


def test_azure_writer_records_are_the_jobs_and_end_with_it(azurite_server, abfs, azure_container):
    """The records a process's writers keep of an attempt (one blob per segment, not one
    per file) are in the job's context, which the files' registry entries hold; they go
    when the job ends here."""
    storage = azurite_server.storage_options
    committer = magicfs.committer_for(f"abfs://{azure_container}/out", storage_options=storage)
    committer.setup_job()
    attempt = committer.task_attempt(0)
    committer.setup_task(attempt)
    for name in ("a.csv", "b.csv"):
        with committer.fs.open(attempt.path(name), "wb") as f:
            f.write(name.encode())
    assert TASK_FILES.settle(committer.job_id, attempt.attempt_id) == []  # closes finished
    context = committer.flow.context
    kept = context.state(RECORDS_STATE)
    assert isinstance(kept, JobRecords)
    [(attempt_id, records)] = kept.open.values()  # both files' records: one attempt's
    assert attempt_id == attempt.attempt_id and set(records.where) == {
        attempt.path(name).split("://")[-1] for name in ("a.csv", "b.csv")
    }
    assert TASK_FILES.get(attempt.path("a.csv").split("://")[-1]).context is context
    committer.commit_job([committer.commit_task(attempt)])
    assert context.closed and JOB_CONTEXTS.find(committer.job_id, f"{azure_container}/out") is None
    assert abfs.cat(f"{azure_container}/out/a.csv") == b"a.csv"


EXIT_SCRIPT = """
import atexit, concurrent.futures, sys
{register}
pool = concurrent.futures.ThreadPoolExecutor(1)  # as asyncio's default executor, made earlier

def hook():
    print("pool ran:", pool.submit(lambda: "yes").result(), flush=True)

register(hook)
"""


def run_exit_script(register: str) -> subprocess.CompletedProcess[str]:
    script = EXIT_SCRIPT.format(register=register)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_exit_hooks_run_while_thread_pools_still_take_work():
    """Why magicfs.lifecycle keeps CPython's threading._register_atexit: a hook registered
    through it can still use a thread pool (s3fs resolves names in one), one registered
    with the public atexit.register cannot."""
    ours = run_exit_script("from magicfs.lifecycle import at_exit as register")
    assert ours.returncode == 0 and "pool ran: yes" in ours.stdout, ours.stderr
    public = run_exit_script("register = atexit.register")
    assert "pool ran" not in public.stdout
    assert "cannot schedule new futures after interpreter shutdown" in public.stderr
