"""Job-commit benchmark: magicfs's magic committer vs a rename-based commit vs the store's floor.

    python benchmarks/commit.py            # 100 / 1,000 / 10,000 files x 1 / 8 / 32 threads
    python benchmarks/commit.py --quick    # 100 / 1,000 files x 1 / 8 threads

All in one run, against one moto server on 127.0.0.1 (its own process) that adds a
fixed latency to every request while a commit is timed (``--latency-ms``, 20 by
default; preparation runs without it):

* **floor**: N bare ``CompleteMultipartUpload`` calls from T boto3 threads — the least
  any zero-rename commit can do against this server (ceil(N/T) x latency plus the
  server's own time per request);
* **magicfs**: ``MagicCommitter.commit_job(messages)`` with ``threads=T`` — loading the
  task records, validating, completing, ``_SUCCESS``, clean-up;
* **rename**: what FileOutputCommitter v1's job commit does on S3: for each file a
  server-side copy from ``_temporary/`` to its final key and a delete, T threads.

Then one 1,000-file job (10 tasks) is run end to end in each writer mode, counting
requests by operation with botocore hooks: per file, the write side, task commit and
job commit, and the bytes copied on the server (zero for magicfs).
Files are 1 KiB: the point is requests, not bandwidth.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from magicfs import MagicCommitter
from magicfs.embedded_s3 import EmbeddedS3Server

FILE = b"x" * 1024
BUCKET = "bench"
PREPARE_THREADS = 16


class RequestCounter:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.copied_bytes = 0

    def attach(self, client) -> None:
        client.meta.events.register("before-call.s3", self._record)

    def _record(self, model, params=None, **kwargs) -> None:
        self.counts[model.name] += 1

    def take(self) -> Counter[str]:
        counts, self.counts = self.counts, Counter()
        return counts


def new_committer(server, dest: str, threads: int, in_memory: bool) -> MagicCommitter:
    options = {**server.storage_options, "skip_instance_cache": True}
    return MagicCommitter(
        f"s3://{BUCKET}/{dest}",
        storage_options=options,
        threads=threads,
        in_memory=in_memory,
        progress=False,
    )


def run_tasks(committer: MagicCommitter, files: int, tasks: int) -> list:
    """Write ``files`` small files in ``tasks`` task attempts (in threads) and commit them."""
    per_task = math.ceil(files / tasks)

    def task(index: int):
        attempt = committer.task_attempt(index)
        committer.setup_task(attempt)
        for n in range(min(per_task, files - index * per_task)):
            committer.fs.pipe_file(attempt.path(f"part-{index:05d}-{n:05d}"), FILE)
        return committer.commit_task(attempt)

    with concurrent.futures.ThreadPoolExecutor(PREPARE_THREADS) as pool:
        return list(pool.map(task, range(tasks)))


def time_magic(server, files: int, threads: int, latency: float) -> float:
    committer = new_committer(server, f"magic-{files}-{threads}", threads, in_memory=True)
    committer.setup_job()
    messages = run_tasks(committer, files, max(1, files // 100))
    server.set_latency(latency)
    start = time.perf_counter()
    summary = committer.commit_job(messages)
    seconds = time.perf_counter() - start
    server.set_latency(0)
    assert summary.files == files
    return seconds


def time_floor(server, client, files: int, threads: int, latency: float) -> float:
    def create(n: int):
        key = f"floor-{files}-{threads}/f{n:05d}"
        upload = client.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        etag = client.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=FILE)[
            "ETag"
        ]
        return key, upload, etag

    with concurrent.futures.ThreadPoolExecutor(PREPARE_THREADS) as pool:
        uploads = list(pool.map(create, range(files)))

    def complete(item) -> None:
        key, upload, etag = item
        client.complete_multipart_upload(
            Bucket=BUCKET,
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
        )

    server.set_latency(latency)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(complete, uploads))
    seconds = time.perf_counter() - start
    server.set_latency(0)
    return seconds


def time_rename(server, client, files: int, threads: int, latency: float) -> float:
    prefix = f"rename-{files}-{threads}"
    keys = [f"{prefix}/_temporary/0/task_{n // 100:05d}/part-{n:05d}" for n in range(files)]
    with concurrent.futures.ThreadPoolExecutor(PREPARE_THREADS) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=BUCKET, Key=k, Body=FILE), keys))

    def rename(key: str) -> None:
        final = f"{prefix}/{key.rsplit('/', 1)[1]}"
        client.copy_object(Bucket=BUCKET, Key=final, CopySource={"Bucket": BUCKET, "Key": key})
        client.delete_object(Bucket=BUCKET, Key=key)

    server.set_latency(latency)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(rename, keys))
    seconds = time.perf_counter() - start
    server.set_latency(0)
    return seconds


def request_profile(server, in_memory: bool, files: int = 1000, tasks: int = 10) -> dict:
    """Requests per committed file by phase and operation, for one whole job."""
    committer = new_committer(server, f"profile-{in_memory}", 8, in_memory)
    counter = RequestCounter()
    counter.attach(committer.store_fs.s3)
    committer.setup_job()
    setup = counter.take()
    attempts = [committer.task_attempt(i) for i in range(tasks)]
    for attempt in attempts:
        committer.setup_task(attempt)
    per_task = files // tasks

    def write(attempt):
        for n in range(per_task):
            committer.fs.pipe_file(attempt.path(f"{attempt.task_index}/f{n:05d}"), FILE)

    with concurrent.futures.ThreadPoolExecutor(PREPARE_THREADS) as pool:
        list(pool.map(write, attempts))
    write_side = counter.take()
    messages = [committer.commit_task(attempt) for attempt in attempts]
    task_commit = counter.take()
    committer.commit_job(messages)
    job_commit = counter.take()
    copies = sum(
        phase[op]
        for phase in (write_side, task_commit, job_commit)
        for op in ("CopyObject", "UploadPartCopy")
    )
    return {
        "setup": setup,
        "write": write_side,
        "task commit": task_commit,
        "job commit": job_commit,
        "files": files,
        "copies": copies,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    sizes = (100, 1000) if args.quick else (100, 1000, 10_000)
    thread_counts = (1, 8) if args.quick else (1, 8, 32)
    skip = set() if args.quick else {(10_000, 1)}  # ~200 s of pure latency per variant

    rows = []
    with EmbeddedS3Server() as server:
        client = server.boto3_client(max_pool_connections=64)
        for files in sizes:
            for threads in thread_counts:
                if (files, threads) in skip:
                    continue
                timings = []
                for variant in ("floor", "magic", "rename"):
                    # every variant starts from the same empty server
                    server.reset()
                    client.create_bucket(Bucket=BUCKET)
                    if variant == "floor":
                        timings.append(time_floor(server, client, files, threads, args.latency_ms))
                    elif variant == "magic":
                        timings.append(time_magic(server, files, threads, args.latency_ms))
                    else:
                        timings.append(time_rename(server, client, files, threads, args.latency_ms))
                rows.append((files, threads, *timings))
        server.reset()
        client.create_bucket(Bucket=BUCKET)
        profiles = {
            mode: request_profile(server, mode == "in memory") for mode in ("file", "in memory")
        }

    bound = args.latency_ms / 1000
    print(f"\njob commit, {args.latency_ms:.0f} ms per request; moto on 127.0.0.1, own process\n")
    print(
        f"{'files':>6} | {'threads':>7} | {'ceil(N/T)*L':>11} | {'floor s':>8} | "
        f"{'magicfs s':>9} | {'vs floor':>8} | {'rename s':>8} | {'rename/magicfs':>14}"
    )
    print("-" * 95)
    for files, threads, floor, magic, rename in rows:
        print(
            f"{files:>6} | {threads:>7} | {math.ceil(files / threads) * bound:>11.2f} | "
            f"{floor:>8.2f} | {magic:>9.2f} | {magic / floor:>7.2f}x | {rename:>8.2f} | "
            f"{rename / magic:>13.1f}x"
        )
    if skip:
        print(f"(skipped, pure latency too long for a routine run: {sorted(skip)})")

    print("\nrequests per committed file (1,000 files in 10 tasks), by operation")
    for mode, profile in profiles.items():
        files = profile["files"]
        print(f"\n{mode} mode:")
        total = 0
        for phase in ("setup", "write", "task commit", "job commit"):
            counts = profile[phase]
            total += sum(counts.values())
            detail = ", ".join(f"{op} {n / files:.3f}" for op, n in sorted(counts.items()))
            print(f"  {phase:<12} {sum(counts.values()) / files:>6.3f}  ({detail})")
        print(f"  {'total':<12} {total / files:>6.3f}   server-side copies: {profile['copies']}")


if __name__ == "__main__":
    main()
