"""Commit benchmarks: every magicfs committer, the classic FileOutputCommitter, the store's floor.

    python benchmarks/commit.py             # all three parts (about half an hour on 2 cores)
    python benchmarks/commit.py --quick     # smaller sizes, a few minutes
    python benchmarks/commit.py --only s3-floor|s3-committers|rename-stores

1. **s3-floor** — job commit time for 100 / 1,000 / 10,000 files at 1 / 8 / 32 threads
   against a moto server on 127.0.0.1 that adds a fixed latency to every request while
   a commit is timed (``--latency-ms``, 20 by default; preparation runs without it):
   the *floor*, N bare ``CompleteMultipartUpload`` calls from T boto3 threads (what any
   zero-rename commit must at least do against this server); the magic committer's
   ``commit_job``; and FileOutputCommitter v1's ``commit_job`` (a server-side copy and a
   delete per file, T at a time, as S3A's rename does). 10,000 files at 1 thread is
   skipped: 200 s of pure latency per variant.
2. **s3-committers** — one job of 1,000 small files in 10 tasks, 8 threads, latency on:
   task-commit and job-commit time, requests per file by phase and operation (botocore
   hooks), server-side copies, for magic (file and in-memory), directory, partitioned,
   file-v1 and file-v2.
3. **rename-stores** — manifest committer vs file-v1 vs file-v2 on a local disk and on
   Azurite (Azure's emulator, if installed: ``npm install --prefix .ci/node azurite``),
   100 / 1,000 / 10,000 files, 8 threads: mean task-commit and job-commit time.

Files are 1 KiB: the point is requests and renames, not bandwidth. Every variant starts
from an empty server. Absolute numbers measure this machine and the emulators (moto
and Azurite are single Python/Node processes); ratios measured in the same run are the
result.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import math
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


from magicfs import committer_for  # noqa: E402
from magicfs.integrations.azurite import LocalAzurite, azurite_binary  # noqa: E402
from magicfs.integrations.embedded_s3 import EmbeddedS3Server  # noqa: E402

FILE = b"x" * 1024
BUCKET = "bench"
PREPARE_THREADS = 16


class RequestCounter:
    """Counts S3 operations by name on one botocore/aiobotocore client."""

    def __init__(self, client) -> None:
        self.counts: Counter[str] = Counter()
        client.meta.events.register("before-call.s3", self._record)

    def _record(self, model, **kwargs) -> None:
        self.counts[model.name] += 1

    def take(self) -> Counter[str]:
        counts, self.counts = self.counts, Counter()
        return counts


@dataclass
class JobRun:
    """What one measured job did."""

    task_seconds: float = 0.0  # mean per task commit
    job_seconds: float = 0.0
    requests: dict[str, Counter] = field(default_factory=dict)


def run_job(committer, files: int, tasks: int, latency=None, counter=None) -> JobRun:
    """Write ``files`` small files in ``tasks`` tasks, then time the task and job commits."""
    committer.setup_job()
    attempts = [committer.task_attempt(t) for t in range(tasks)]
    per_task = math.ceil(files / tasks)

    def write(attempt) -> None:
        committer.setup_task(attempt)
        for n in range(min(per_task, files - attempt.task_index * per_task)):
            with committer.fs.open(attempt.path(f"p{attempt.task_index:04d}/f{n:05d}"), "wb") as f:
                f.write(FILE)

    if counter:
        counter.take()
    with concurrent.futures.ThreadPoolExecutor(PREPARE_THREADS) as pool:
        list(pool.map(write, attempts))
    run = JobRun()
    if counter:
        run.requests["write"] = counter.take()
    if latency:
        latency(True)
    start = time.perf_counter()
    messages = [committer.commit_task(attempt) for attempt in attempts]
    run.task_seconds = (time.perf_counter() - start) / tasks
    if counter:
        run.requests["task commit"] = counter.take()
    start = time.perf_counter()
    summary = committer.commit_job(messages)
    run.job_seconds = time.perf_counter() - start
    if latency:
        latency(False)
    if counter:
        run.requests["job commit"] = counter.take()
    assert summary.files == files, (committer.name, summary.files, files)
    return run


# --- part 1: S3 job commit against the floor ---------------------------------------------------


def s3_committer(server, name: str, dest: str, threads: int, **options):
    storage = {**server.storage_options, "skip_instance_cache": True}
    if name == "directory" or name == "partitioned":
        options.setdefault("buffer_dir", tempfile.mkdtemp(prefix="magicfs-bench-"))
    return committer_for(
        f"s3://{BUCKET}/{dest}",
        committer=name,
        storage_options=storage,
        threads=threads,
        progress=False,
        **options,
    )


def fresh(server, client) -> None:
    server.reset()
    client.create_bucket(Bucket=BUCKET)


def time_floor(server, client, files: int, threads: int, latency_ms: float) -> float:
    def create(n: int):
        key = f"floor/f{n:05d}"
        upload = client.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
        part = client.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=FILE)
        return key, upload, part["ETag"]

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

    server.set_latency(latency_ms)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(complete, uploads))
    seconds = time.perf_counter() - start
    server.set_latency(0)
    return seconds


def part_floor(server, quick: bool, latency_ms: float) -> list[str]:
    sizes = (100, 1000) if quick else (100, 1000, 10_000)
    thread_counts = (1, 8) if quick else (1, 8, 32)
    skip = set() if quick else {(10_000, 1)}
    client = server.boto3_client(max_pool_connections=64)
    rows = []
    for files in sizes:
        for threads in thread_counts:
            if (files, threads) in skip:
                continue
            tasks = max(1, files // 100)

            def latency(on: bool) -> None:
                server.set_latency(latency_ms if on else 0)

            fresh(server, client)
            floor = time_floor(server, client, files, threads, latency_ms)
            fresh(server, client)
            magic_committer = s3_committer(server, "magic", "magic", threads, in_memory=True)
            magic = run_job(magic_committer, files, tasks, latency)
            fresh(server, client)
            v1 = run_job(s3_committer(server, "file-v1", "v1", threads), files, tasks, latency)
            rows.append((files, threads, floor, magic.job_seconds, v1.job_seconds))
    bound = latency_ms / 1000
    lines = [
        f"job commit on S3, {latency_ms:.0f} ms per request (moto on 127.0.0.1)",
        "",
        "| files | threads | ceil(N/T)·L s | floor s | magic s | magic/floor | file-v1 s "
        "| file-v1/magic |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for files, threads, floor, magic, v1 in rows:
        lines.append(
            f"| {files:,} | {threads} | {math.ceil(files / threads) * bound:.2f} | {floor:.2f} | "
            f"{magic:.2f} | {magic / floor:.2f}x | {v1:.2f} | {v1 / magic:.1f}x |"
        )
    if skip:
        lines.append(f"\n(skipped: {sorted(skip)})")
    return lines


# --- part 2: every S3 committer on one job -------------------------------------------


S3_COMMITTERS = [
    ("magic", {}),
    ("magic (in memory)", {"in_memory": True}),
    ("directory", {}),
    ("partitioned", {}),
    ("file-v1", {}),
    ("file-v2", {}),
]


def part_s3_committers(server, quick: bool, latency_ms: float) -> list[str]:
    files, tasks, threads = (200, 4, 8) if quick else (1000, 10, 8)
    client = server.boto3_client(max_pool_connections=64)
    lines = [
        f"every S3 committer: one job of {files:,} files of 1 KiB in {tasks} tasks, "
        f"{threads} threads, {latency_ms:.0f} ms per request",
        "",
        "| committer | task commit s (mean) | job commit s | requests/file: write | task commit "
        "| job commit | total | server-side copies |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, options in S3_COMMITTERS:
        fresh(server, client)
        name = label.split(" ")[0]
        committer = s3_committer(server, name, "out", threads, **options)
        counter = RequestCounter(committer.store_fs.s3)

        def latency(on: bool) -> None:
            server.set_latency(latency_ms if on else 0)

        run = run_job(committer, files, tasks, latency, counter)
        per_file = {phase: sum(c.values()) / files for phase, c in run.requests.items()}
        copies = sum(c["CopyObject"] + c["UploadPartCopy"] for c in run.requests.values())
        lines.append(
            f"| {label} | {run.task_seconds:.3f} | {run.job_seconds:.2f} | "
            f"{per_file['write']:.2f} | {per_file['task commit']:.2f} | "
            f"{per_file['job commit']:.2f} | {sum(per_file.values()):.2f} | "
            f"{copies:,} ({copies * len(FILE) / 1e6:.1f} MB) |"
        )
    return lines


# --- part 3: rename stores -----------------------------------------------------------------------


def part_rename_stores(quick: bool) -> list[str]:
    import fsspec

    threads = 8
    stores = [("local disk", (100, 1000) if quick else (100, 1000, 10_000))]
    azurite_installed = _azurite_installed()
    if azurite_installed:
        stores.append(("Azurite", (100, 1000) if quick else (100, 1000, 5000)))
    lines = [
        f"rename stores: {threads} threads, mean task commit and job commit, seconds",
        "",
        "| store | files | manifest task | manifest job | file-v1 task | file-v1 job | "
        "file-v2 task | file-v2 job | file-v1 job / manifest job |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for store, sizes in stores:
        for files in sizes:
            results = {}
            for name in ("manifest", "file-v1", "file-v2"):
                if store == "local disk":
                    root = tempfile.mkdtemp(prefix="magicfs-bench-")
                    committer = committer_for(
                        f"file://{root}/out",
                        committer=name,
                        fs=fsspec.filesystem("file"),
                        threads=threads,
                        progress=False,
                    )
                    results[name] = run_job(committer, files, max(1, files // 100))
                    shutil.rmtree(root)
                    continue
                # A fresh Azurite per measurement: its in-memory store slows down as it
                # fills (about 34 ms per rename at 1,000 blobs, 145 ms at 5,000), so a
                # shared server would favour whichever committer ran first.
                import adlfs

                with _azurite() as azurite:
                    fs = adlfs.AzureBlobFileSystem(
                        skip_instance_cache=True, **azurite.storage_options
                    )
                    fs.mkdir("bench")
                    committer = committer_for(
                        "abfs://bench/out",
                        committer=name,
                        fs=fs,
                        threads=threads,
                        progress=False,
                    )
                    results[name] = run_job(committer, files, max(1, files // 100))
            m, v1, v2 = results["manifest"], results["file-v1"], results["file-v2"]
            lines.append(
                f"| {store} | {files:,} | {m.task_seconds:.3f} | {m.job_seconds:.2f} | "
                f"{v1.task_seconds:.3f} | {v1.job_seconds:.2f} | {v2.task_seconds:.3f} | "
                f"{v2.job_seconds:.2f} | {v1.job_seconds / m.job_seconds:.1f}x |"
            )
    if not azurite_installed:
        lines.append("\n(Azurite not installed: npm install --prefix .ci/node azurite)")
    return lines


def _azurite_installed() -> bool:
    try:
        azurite_binary()
    except FileNotFoundError:
        return False
    return True


@contextlib.contextmanager
def _azurite():
    """An Azurite server of its own, in memory, stopped on exit."""
    with (
        tempfile.TemporaryDirectory(prefix="magicfs-azurite-") as workspace,
        LocalAzurite(pathlib.Path(workspace), log_requests=False) as server,
    ):
        yield server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--only", choices=("s3-floor", "s3-committers", "rename-stores"))
    args = parser.parse_args()
    sections = []
    with EmbeddedS3Server() as server:
        if args.only in (None, "s3-floor"):
            sections.append(part_floor(server, args.quick, args.latency_ms))
        if args.only in (None, "s3-committers"):
            sections.append(part_s3_committers(server, args.quick, args.latency_ms))
    if args.only in (None, "rename-stores"):
        sections.append(part_rename_stores(args.quick))
    print()
    print("\n\n".join("\n".join(section) for section in sections))


if __name__ == "__main__":
    main()
