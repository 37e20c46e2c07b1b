"""``magicfs demo``: a realistic job against an embedded S3 server on 127.0.0.1.

Four tasks write a partitioned Parquet dataset (pandas and pyarrow) through the magic
committer. Task 2's first attempt fails half-way and is retried; task 3 also runs a
speculative duplicate that commits but loses. The job commits exactly one attempt per
task, leaves no multipart upload behind, and writes a JSON ``_SUCCESS``. The same data
is then committed the classic way (FileOutputCommitter v1: rename at task commit and
again at job commit; a rename on S3 is a copy and a delete) for contrast. Both sides'
commits run on a server made as costly as S3 where it matters — 20 ms added to every
request, and server-side copies at 10 MB/s (moto alone copies at memory speed) — and 8
requests at a time, so the times compare like for like, measured.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from .embedded_s3 import EmbeddedS3Server

if TYPE_CHECKING:
    import pandas as pd

BUCKET = "demo"
DEST = f"s3://{BUCKET}/sales"
CLASSIC_DEST = f"{BUCKET}/sales-classic"
LATENCY_MS = 20
TASKS = 4
THREADS = 8


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
#: Server-side copy speed of S3 (the seed documents and the zero-rename paper: 6-10 MB/s).
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


def _magic_job(server: EmbeddedS3Server, say: Any) -> tuple[Any, float, Counter[str]]:
    """The demo job; returns its summary and the time and requests of its commits."""
    import magicfs

    options = {**server.storage_options, "skip_instance_cache": True}
    committer = magicfs.committer_for(
        DEST, storage_options=options, threads=THREADS, progress=False
    )
    requests = _Requests(committer.store_fs.s3)
    committer.setup_job()
    messages, commit_seconds = [], 0.0

    def commit_task(task: Any) -> Any:
        nonlocal commit_seconds
        requests.take()  # count the commits only, not the writes
        server.set_latency(LATENCY_MS)
        server.set_copy_bandwidth(S3_COPY_MB_PER_S)
        start = time.perf_counter()
        message = committer.commit_task(task)
        commit_seconds += time.perf_counter() - start
        server.set_latency(0)
        server.set_copy_bandwidth(0)
        committed.update(requests.take())
        return message

    committed: Counter[str] = Counter()
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
        messages.append(commit_task(task))
        say(f"  task {index} attempt {task.attempt_number} committed {messages[-1].files} files")
        if index == 3:
            duplicate = committer.task_attempt(index, attempt=1)
            committer.setup_task(duplicate)
            _write_task(committer, duplicate, index)
            commit_task(duplicate)
            say(f"  task {index} attempt 1 (speculative duplicate) also committed; it will lose")
    requests.take()
    server.set_latency(LATENCY_MS)
    server.set_copy_bandwidth(S3_COPY_MB_PER_S)
    start = time.perf_counter()
    summary = committer.commit_job(messages)
    commit_seconds += time.perf_counter() - start
    server.set_latency(0)
    server.set_copy_bandwidth(0)
    committed.update(requests.take())
    return summary, commit_seconds, committed


def _classic_job(server: EmbeddedS3Server) -> tuple[int, float, Counter[str], int]:
    """The same data committed by FileOutputCommitter v1's algorithm on S3.

    Each task writes under ``_temporary/0/_temporary/<attempt>/``; task commit renames
    the attempt's files to ``_temporary/0/<task>/``, job commit renames those to the
    destination. On S3 every rename is a server-side copy plus a delete, ``THREADS`` at a
    time, as magicfs's completions are. (No failed or duplicate attempts here: v1 on S3
    has no safe answer to them.)
    """
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
    client = server.boto3_client(max_pool_connections=THREADS * 2)
    requests = _Requests(client)
    root = f"{CLASSIC_DEST}/_temporary/0"
    for index in range(TASKS):
        _sales(index).to_parquet(
            f"{root}/_temporary/attempt_{index}",
            filesystem=fs,
            partition_cols=["year", "region"],
            index=False,
            basename_template=f"part-{index:05d}-{{i}}.parquet",
        )

    def rename_all(pairs: list[tuple[str, str]]) -> None:
        def rename(pair: tuple[str, str]) -> None:
            source, target = (path.split("/", 1)[1] for path in pair)
            client.copy_object(
                Bucket=BUCKET, Key=target, CopySource={"Bucket": BUCKET, "Key": source}
            )
            client.delete_object(Bucket=BUCKET, Key=source)

        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(rename, pairs))

    def listing(prefix: str) -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return [f"{BUCKET}/{o['Key']}" for page in pages for o in page.get("Contents", [])]

    copied = sum(fs.info(path)["size"] for path in fs.find(root)) * 2  # each byte twice
    requests.take()
    server.set_latency(LATENCY_MS)
    server.set_copy_bandwidth(S3_COPY_MB_PER_S)
    start = time.perf_counter()
    for index in range(TASKS):  # task commits
        attempt = f"{root}/_temporary/attempt_{index}/"
        sources = listing(attempt.split("/", 1)[1])
        rename_all([(p, f"{root}/task_{index}/{p[len(attempt) :]}") for p in sources])
    sources = [p for p in listing(root.split("/", 1)[1] + "/task_")]  # job commit
    targets = [f"{CLASSIC_DEST}/{p.split('/', 5)[5]}" for p in sources]
    rename_all(list(zip(sources, targets, strict=True)))
    client.put_object(Bucket=BUCKET, Key=f"{CLASSIC_DEST.split('/', 1)[1]}/_SUCCESS", Body=b"")
    seconds = time.perf_counter() - start
    server.set_latency(0)
    server.set_copy_bandwidth(0)
    return len(sources), seconds, requests.take(), copied


def _table(
    title: str, columns: tuple[str, str], rows: list[tuple[str, str, str]], say: Any
) -> None:
    width = max(len(title), *(len(label) for label, _, _ in rows))
    say(f"   {title:<{width}} | {columns[0]:>9} | {columns[1]:>11}")
    for label, left, right in rows:
        say(f"   {label:<{width}} | {left:>9} | {right:>11}")


def _command() -> str:
    """How to run the magicfs command from here (the venv's bin/ may not be on PATH)."""
    import shutil
    import sys

    return "magicfs" if shutil.which("magicfs") else f"{sys.executable} -m magicfs"


def run_demo(keep: bool = False) -> int:
    import pandas as pd
    import s3fs

    from ..records import SuccessData

    started = time.monotonic()

    def say(text: str = "") -> None:
        print(text, flush=True)

    with EmbeddedS3Server() as server:
        say(f"embedded S3 server (moto) on {server.endpoint_url}")
        client = server.boto3_client()
        client.create_bucket(Bucket=BUCKET)

        say(f"\n1. job -> {DEST}: {TASKS} tasks writing partitioned Parquet through magic paths")
        summary, magic_seconds, magic_requests = _magic_job(server, say)
        say(f"   committed {summary.files} files ({summary.bytes:,} B) from {summary.tasks} tasks")

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
        say(f"\n2. output tree of {DEST}")
        for path in sorted(fs.find(DEST.removeprefix("s3://")))[:12]:
            say(f"   {path:<70} {fs.info(path)['size']:>8,} B")
        if summary.files > 11:
            say(f"   ... {summary.files + 1} objects in all")
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

        uploads = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
        say(f"\n4. pending multipart uploads left in s3://{BUCKET}: {len(uploads)}")

        say("\n5. the same data committed by rename (FileOutputCommitter v1 on S3), for contrast")
        classic_files, classic_seconds, classic_requests, copied = _classic_job(server)
        say()
        _table(
            f"task + job commits, {THREADS} requests at a time",
            ("magicfs", "v1 rename"),
            [
                ("files", f"{summary.files}", f"{classic_files}"),
                ("seconds (measured)", f"{magic_seconds:.2f}", f"{classic_seconds:.2f}"),
                (
                    "requests",
                    f"{sum(magic_requests.values())}",
                    f"{sum(classic_requests.values())}",
                ),
                ("bytes copied on the server", "0", f"{copied:,}"),
            ],
            say,
        )
        say(f"   (the server added {LATENCY_MS} ms to every request and copied at")
        say(f"   {S3_COPY_MB_PER_S} MB/s per copy: S3's figures from the seed documents — moto")
        say("   alone copies at memory speed. magicfs's side also carries its writes' last")
        say("   parts, which finish in the background while task commit waits for them, and")
        say("   aborting the losing duplicate attempt's uploads. Whole jobs against direct")
        say('   writes: `python benchmarks/job_cost.py`, README "The cost of safety".)')
        say(f"\ndemo finished in {time.monotonic() - started:.1f}s")
        if keep:
            command = _command()
            store = f"--endpoint-url {server.endpoint_url} -o key=testing -o secret=testing"
            say(f"\nserver kept running at {server.endpoint_url} (Ctrl-C to stop). Try:")
            say(f"  {command} success {store} s3://{BUCKET}/sales")
            say(f"  {command} uploads list {store} s3://{BUCKET}/")
            say(f"  {command} jobs list {store} s3://{BUCKET}/sales")
            say(
                f"  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing aws --endpoint-url "
                f"{server.endpoint_url} s3 ls --recursive s3://{BUCKET}/"
            )
            say("  in Python: s3fs.S3FileSystem(key='testing', secret='testing', client_kwargs=")
            say(f"             {{'endpoint_url': '{server.endpoint_url}'}}).find('{BUCKET}')")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    return 0
