"""``magicfs demo``: a realistic job against an embedded S3 server on 127.0.0.1.

Four tasks write a partitioned Parquet dataset (pandas and pyarrow) through the magic
committer. Task 2's first attempt fails half-way and is retried; task 3 also runs a
speculative duplicate that commits but loses. The job commits exactly one attempt per
task, leaves no multipart upload behind, and writes a JSON ``_SUCCESS``.

Then the same files are committed again, three times each, by magicfs and the classic
way (FileOutputCommitter v1: rename at task commit and again at job commit; a rename on
S3 is a copy and a delete), on a server made as costly as S3 where it matters: 20 ms
added to every request and server-side copies at 10 MB/s (moto alone copies at memory
speed), 8 requests at a time. What does not depend on the machine's load — files,
requests, server-side copies, bytes copied — is printed as it is; the seconds as the
median of the runs with their spread, because on a busy machine one run of each side
says little (one run has shown magicfs ahead and another behind).

Every number is measured, on both sides alike: requests by the clients' botocore hooks,
server-side copies and their bytes by the server itself (it counts every ``CopyObject``
and ``UploadPartCopy`` it answers, ``EmbeddedS3Server.copies()``), read before and
after each side's commits, and the files published by listing each run's destination
once it is done (the job's files a reader finds there, with their sizes).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .embedded_s3 import CopyCount, EmbeddedS3Server

if TYPE_CHECKING:
    import pandas as pd

BUCKET = "demo"
DEST = f"s3://{BUCKET}/sales"
CLASSIC_DEST = f"{BUCKET}/sales-classic"
LATENCY_MS = 20
TASKS = 4
THREADS = 8
#: Commits of the demo's files by each side in the comparison.
RUNS = 3


class _Requests:
    """Counts S3 operations sent by one client (botocore hooks)."""

    def __init__(self, client: Any):
        self.counts: Counter[str] = Counter()
        client.meta.events.register("before-call.s3", self._record)

    def _record(self, model: Any, **kwargs: Any) -> None:
        self.counts[model.name] += 1

    def take(self) -> Counter[str]:
        counts, self.counts = self.counts, Counter()
        return counts


ROWS_PER_TASK = 300_000
#: Server-side copy speed of S3 (6-10 MB/s, as measured for Hadoop's S3A committers).
S3_COPY_MB_PER_S = 10


def _sales(task: int) -> pd.DataFrame:
    """One task's share of a sales table (random amounts: Parquet cannot shrink them)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(task)
    rows = ROWS_PER_TASK
    return pd.DataFrame(
        {
            "year": 2023 + rng.integers(0, 3, rows),
            "region": np.array(["north", "south", "east", "west"])[rng.integers(0, 4, rows)],
            "order_id": np.arange(task * rows, (task + 1) * rows),
            "amount": rng.random(rows) * 1000,
            "quantity": rng.integers(1, 100, rows),
        }
    )


def _write_task(job: Any, task: Any, index: int) -> None:
    """Even tasks write with pandas, odd ones with pyarrow; both partition by year/region."""
    frame = _sales(index)
    if index % 2 == 0:
        frame.to_parquet(
            task.work_path,
            filesystem=job.fs,
            partition_cols=["year", "region"],
            index=False,
            basename_template=f"part-{index:05d}-{{i}}.parquet",
        )
    else:
        import pyarrow as pa
        import pyarrow.dataset as ds

        ds.write_dataset(
            pa.Table.from_pandas(frame, preserve_index=False),
            task.work_path,
            format="parquet",
            partitioning=["year", "region"],
            partitioning_flavor="hive",
            filesystem=job.fs,
            basename_template=f"part-{index:05d}-{{i}}.parquet",
            existing_data_behavior="overwrite_or_ignore",
        )


def _magic_job(server: EmbeddedS3Server, say: Any) -> Any:
    """The demo job; returns its summary."""
    import magicfs

    options = {**server.storage_options, "skip_instance_cache": True}
    committer = magicfs.committer_for(
        DEST, storage_options=options, threads=THREADS, progress=False
    )
    committer.setup_job()
    messages = []
    for index in range(TASKS):
        task = committer.task_attempt(index)
        committer.setup_task(task)
        if index == 2:
            try:
                with committer.fs.open(
                    task.path("year=2023/region=north/broken.parquet"), "wb"
                ) as f:
                    f.write(b"PAR1 half a file")
                    raise ConnectionResetError("executor lost mid-write")
            except ConnectionResetError as e:
                committer.abort_task(task)
                say(f"  task {index} attempt 0 failed ({e}); aborted, retrying")
                task = committer.task_attempt(index, attempt=1)
                committer.setup_task(task)
        _write_task(committer, task, index)
        messages.append(committer.commit_task(task))
        say(f"  task {index} attempt {task.attempt_number} committed {messages[-1].files} files")
        if index == 3:
            duplicate = committer.task_attempt(index, attempt=1)
            committer.setup_task(duplicate)
            _write_task(committer, duplicate, index)
            committer.commit_task(duplicate)
            say(f"  task {index} attempt 1 (speculative duplicate) also committed; it will lose")
    return committer.commit_job(messages)


@dataclass
class CommitRun:
    """One commit of the demo's files by one side: seconds and requests per phase, the
    server-side copies the server answered during the commits, and the data files a
    reader lists at the destination afterwards (:func:`_published`)."""

    task_seconds: float
    job_seconds: float
    task_requests: int
    job_requests: int
    copied: CopyCount
    published: int


@contextlib.contextmanager
def _costly(server: EmbeddedS3Server) -> Iterator[None]:
    """The server as costly as S3 where it matters, for the ``with`` block only."""
    server.set_latency(LATENCY_MS)
    server.set_copy_bandwidth(S3_COPY_MB_PER_S)
    try:
        yield
    finally:
        server.set_latency(0)
        server.set_copy_bandwidth(0)


def _task_of(name: str) -> int:
    """``year=2023/region=east/part-00002-0.parquet`` -> 2 (the task that wrote it)."""
    return int(name.rsplit("/", 1)[-1].split("-")[1])


def magicfs_commit(
    server: EmbeddedS3Server, files: dict[str, bytes], run: int, committer: str = "magic"
) -> CommitRun:
    """Commit ``files`` once more with magicfs, as the demo job did.

    Every task's files are written first, at full speed and synchronously
    (``background_close=False``), so that the commits that follow, timed on the costly
    server, carry exactly the commits' own requests. One attempt per task, as on the
    classic side. ``committer``: the demo's is ``magic``; the tests also run ``manifest``
    (which renames, so copies, on S3) to see the copies counted.
    """
    import magicfs

    options = {**server.storage_options, "skip_instance_cache": True}
    job = magicfs.committer_for(
        f"s3://{BUCKET}/runs/{committer}-{run}",
        committer=committer,
        storage_options=options,
        threads=THREADS,
        progress=False,
    )
    writer = magicfs.MagicFileSystem(fs=job.store_fs, background_close=False)
    requests = _Requests(job.store_fs.s3)
    job.setup_job()
    attempts = []
    for index in range(TASKS):
        task = job.task_attempt(index)
        job.setup_task(task)
        for name, data in files.items():
            if _task_of(name) == index:
                writer.pipe_file(task.path(name), data)
        attempts.append(task)
    requests.take()
    with _costly(server):
        copies_before = server.copies()
        start = time.perf_counter()
        messages = [job.commit_task(task) for task in attempts]
        task_seconds = time.perf_counter() - start
        task_requests = sum(requests.take().values())
        start = time.perf_counter()
        job.commit_job(messages)
        job_seconds = time.perf_counter() - start
        job_requests = sum(requests.take().values())
        copied = server.copies() - copies_before
    published = _published(server.boto3_client(), f"runs/{committer}-{run}/", files)
    return CommitRun(task_seconds, job_seconds, task_requests, job_requests, copied, published)


def classic_commit(server: EmbeddedS3Server, files: dict[str, bytes], run: int) -> CommitRun:
    """Commit ``files`` once with FileOutputCommitter v1's algorithm on S3.

    ``files`` are the demo job's output, at ``s3://demo/sales/<name>``. Each task's files
    are placed under ``_temporary/0/_temporary/<attempt>/`` (copied at memory speed,
    before timing); task commit renames the attempt's files to ``_temporary/0/<task>/``,
    job commit renames those to the destination. On S3 every
    rename is a server-side copy plus a delete, ``THREADS`` at a time, as magicfs's
    completions are. (No failed or duplicate attempts here: v1 on S3 has no safe answer
    to them.)
    """
    client = server.boto3_client(max_pool_connections=THREADS * 2)
    requests = _Requests(client)
    dest = f"runs/v1-{run}"
    root = f"{dest}/_temporary/0"
    pristine = {f"sales/{name}": name for name in files}
    renames: list[tuple[str, str]] = [
        (source, f"{root}/_temporary/attempt_{_task_of(name)}/{name}")
        for source, name in pristine.items()
    ]
    _rename_all(client, renames, delete=False)  # the tasks' output, before timing
    requests.take()
    with _costly(server):
        copies_before = server.copies()
        start = time.perf_counter()
        for index in range(TASKS):
            attempt = f"{root}/_temporary/attempt_{index}/"
            sources = _listing(client, attempt)
            _rename_all(client, [(s, f"{root}/task_{index}/{s[len(attempt) :]}") for s in sources])
        task_seconds = time.perf_counter() - start
        task_requests = sum(requests.take().values())
        start = time.perf_counter()
        sources = _listing(client, f"{root}/task_")
        targets = [f"{dest}/{s.split('/', 5)[5]}" for s in sources]
        _rename_all(client, list(zip(sources, targets, strict=True)))
        client.put_object(Bucket=BUCKET, Key=f"{dest}/_SUCCESS", Body=b"")
        job_seconds = time.perf_counter() - start
        job_requests = sum(requests.take().values())
        copied = server.copies() - copies_before
    published = _published(client, f"{dest}/", files)
    return CommitRun(task_seconds, job_seconds, task_requests, job_requests, copied, published)


def _published(client: Any, prefix: str, files: dict[str, bytes]) -> int:
    """The data files a reader lists under ``prefix`` once the job is done: every key
    outside hidden names (``_SUCCESS``, ``_temporary/``, ``__magic_job-*``) that is one of
    the job's files with its bytes (its size; a wrong file or a missing one is not
    counted), as the store lists them, not as the job meant them."""
    sizes = {name: len(data) for name, data in files.items()}
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    found = 0
    for page in pages:
        for item in page.get("Contents", []):
            name = item["Key"][len(prefix) :]
            if any(part.startswith(("_", ".")) for part in name.split("/")):
                continue
            found += sizes.get(name) == item["Size"]
    return found


def _rename_all(client: Any, pairs: list[tuple[str, str]], delete: bool = True) -> None:
    """Rename keys the only way S3 can: a copy, then a delete of the source."""

    def rename(pair: tuple[str, str]) -> None:
        source, target = pair
        client.copy_object(Bucket=BUCKET, Key=target, CopySource={"Bucket": BUCKET, "Key": source})
        if delete:
            client.delete_object(Bucket=BUCKET, Key=source)

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(rename, pairs))


def _listing(client: Any, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _spread(values: list[float]) -> str:
    """``1.53 (1.41-1.70)``: the median and the range of the runs."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _count(values: list[int]) -> str:
    """The same count on every run (as it should be) is shown once; otherwise its range."""
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def _compare(server: EmbeddedS3Server, files: dict[str, bytes], say: Any) -> None:
    """Commit the demo's files ``RUNS`` times by each side and print the comparison."""
    magic = [magicfs_commit(server, files, run) for run in range(RUNS)]
    classic = [classic_commit(server, files, run) for run in range(RUNS)]
    rows = [
        (
            "files published",
            _count([r.published for r in magic]),
            _count([r.published for r in classic]),
        ),
        (
            "server-side copies",
            _count([r.copied.copies for r in magic]),
            _count([r.copied.copies for r in classic]),
        ),
        (
            "bytes copied on the server",
            _count([r.copied.bytes for r in magic]),
            _count([r.copied.bytes for r in classic]),
        ),
        (
            "requests, task commits",
            _count([r.task_requests for r in magic]),
            _count([r.task_requests for r in classic]),
        ),
        (
            "requests, job commit",
            _count([r.job_requests for r in magic]),
            _count([r.job_requests for r in classic]),
        ),
        (
            "seconds, task commits",
            _spread([r.task_seconds for r in magic]),
            _spread([r.task_seconds for r in classic]),
        ),
        (
            "seconds, job commit",
            _spread([r.job_seconds for r in magic]),
            _spread([r.job_seconds for r in classic]),
        ),
    ]
    _table(f"{RUNS} runs each, {THREADS} requests at a time", ("magicfs", "v1 rename"), rows, say)


def _table(
    title: str, columns: tuple[str, str], rows: list[tuple[str, str, str]], say: Any
) -> None:
    width = max(len(title), *(len(label) for label, _, _ in rows))
    say(f"   {title:<{width}} | {columns[0]:>17} | {columns[1]:>17}")
    for label, left, right in rows:
        say(f"   {label:<{width}} | {left:>17} | {right:>17}")


def _command() -> str:
    """How to run the magicfs command from here (the venv's bin/ may not be on PATH)."""
    import shutil
    import sys

    return "magicfs" if shutil.which("magicfs") else f"{sys.executable} -m magicfs"


def run_demo(keep: bool = False) -> int:
    import s3fs

    started = time.monotonic()

    def say(text: str = "") -> None:
        print(text, flush=True)

    with EmbeddedS3Server(buckets=[BUCKET]) as server:
        say(f"embedded S3 server (moto) on {server.endpoint_url}")
        client = server.boto3_client()

        say(f"\n1. job -> {DEST}: {TASKS} tasks writing partitioned Parquet through magic paths")
        summary = _magic_job(server, say)
        say(f"   committed {summary.files} files ({summary.bytes:,} B) from {summary.tasks} tasks")

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
        _show_output(fs, summary.files, say)
        uploads = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
        say(f"\n4. pending multipart uploads left in s3://{BUCKET}: {len(uploads)}")
        _show_contrast(server, fs, say)
        say(f"\ndemo finished in {time.monotonic() - started:.1f}s")
        if keep:
            _keep_serving(server, say)
    return 0


def _show_output(fs: Any, files: int, say: Any) -> None:
    """Steps 2 and 3: the committed tree, read back with pandas, and its ``_SUCCESS``."""
    import pandas as pd

    from ..records import SuccessData

    say(f"\n2. output tree of {DEST}")
    for path in _output(fs)[:12]:
        say(f"   {path:<70} {fs.info(path)['size']:>8,} B")
    if files > 11:
        say(f"   ... {files + 1} objects in all")
    frame = pd.read_parquet(DEST.removeprefix("s3://"), filesystem=fs)
    say(
        f"   read back: {len(frame):,} rows, one copy per task (order ids unique: "
        f"{frame['order_id'].is_unique})"
    )

    say("\n3. _SUCCESS")
    success = SuccessData.load(fs, f"{DEST.removeprefix('s3://')}/_SUCCESS")
    say(f"   committer={success.committer} job={success.job_id} host={success.hostname}")
    say(
        f"   files={success.metrics['files']} bytes={success.metrics['bytes']:,} "
        f"tasks={success.metrics['tasks']} first file={success.filenames[0]}"
    )


def _output(fs: Any) -> list[str]:
    """The job's output and ``_SUCCESS``, sorted: not its commit record (``_magicfs/``,
    for snapshot readers: ``docs/readers.md``)."""
    return sorted(p for p in fs.find(DEST.removeprefix("s3://")) if "/_magicfs/" not in p)


def _show_contrast(server: EmbeddedS3Server, fs: Any, say: Any) -> None:
    """Step 5: the same files committed by rename, on a server as costly as S3."""
    say("\n5. the same files committed by rename (FileOutputCommitter v1 on S3), for contrast")
    say(f"   on the server made as costly as S3: {LATENCY_MS} ms added to every request and")
    say(f"   server-side copies at {S3_COPY_MB_PER_S} MB/s (moto alone copies at memory speed)")
    say()
    files = {
        path.removeprefix(f"{DEST.removeprefix('s3://')}/"): fs.cat_file(path)
        for path in _output(fs)
        if not path.endswith("/_SUCCESS")
    }
    _compare(server, files, say)
    say("   Requests are counted by the clients, copies and their bytes by the server.")
    say("   Counts and bytes are the same on every run and machine; seconds are the median")
    say("   (min-max) and move with the machine's load. With these ~400 KB files a copy is")
    say("   short; v1 copies every byte twice and its cost grows with the data, magicfs's")
    say("   commit sends one request per file whatever its size.")


def _keep_serving(server: EmbeddedS3Server, say: Any) -> None:
    """``--keep``: print how to look at the result, then serve until Ctrl-C."""
    command = _command()
    key, secret = server.credentials
    store = f"--endpoint-url {server.endpoint_url} -o key={key} -o secret={secret}"
    say(f"\nserver kept running at {server.endpoint_url} (Ctrl-C to stop). Try:")
    say(f"  {command} success {store} s3://{BUCKET}/sales")
    say(f"  {command} uploads list {store} s3://{BUCKET}/")
    say(f"  {command} jobs list {store} s3://{BUCKET}/sales")
    say(
        f"  AWS_ACCESS_KEY_ID={key} AWS_SECRET_ACCESS_KEY={secret} aws --endpoint-url "
        f"{server.endpoint_url} s3 ls --recursive s3://{BUCKET}/"
    )
    say(f"  in Python: s3fs.S3FileSystem(key='{key}', secret='{secret}', client_kwargs=")
    say(f"             {{'endpoint_url': '{server.endpoint_url}'}}).find('{BUCKET}')")
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)
