"""Job commit of a many-task job against the bare completions of the same run.

    python benchmarks/job_commit.py                       # moto and stub, 3 runs each
    python benchmarks/job_commit.py --servers stub --repeat 1 --cleanup inline

The shape is Spark's usual one (issue 28, item 4): ``--files`` (400) small files in
``--tasks`` (40) tasks, job commit with ``--threads`` (8), ``--latency-ms`` (20) added
to every request. Per run, on an empty bucket of the same server:

* **floor**: ``--files`` bare ``CompleteMultipartUpload`` calls from ``--threads`` boto3
  threads (uploads created and filled beforehand, not timed): what any zero-rename job
  commit must at least do;
* **magic**: the magic committer's tasks write and commit (not timed), then
  ``commit_job(messages)`` is timed until it returns; how long its clean-up went on
  after that (``cleanup="background"``: until ``wait_cleanup()`` returns) is reported
  apart, with the requests of each, and the time of each stage of the commit.

Reported: medians of ``--repeat`` runs (min-max), the ratio of job commit to the floor
of the same run, requests per file. Each run checks its output: every file visible,
no upload left, the job's tree gone once clean-up has finished.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_servers import SERVERS, RequestCounter, Target, started  # noqa: E402

from magicfs import committer_for  # noqa: E402

FILE = b"x" * 1024
PREPARE_THREADS = 16
STAGES = ("end_job", "load", "validate", "journal", "publish", "success")


@dataclass
class Run:
    floor: float = 0.0
    floor_cpu: float = 0.0
    commit: float = 0.0
    commit_cpu: float = 0.0
    cleanup: float = 0.0
    commit_requests: int = 0
    cleanup_requests: int = 0
    stages: dict[str, float] = field(default_factory=dict)


def time_floor(target: Target, bucket: str, files: int, threads: int) -> tuple[float, float]:
    client = target.boto3_client()

    def create(n: int) -> tuple[str, str, str]:
        key = f"floor/f{n:05d}"
        upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=FILE)
        return key, upload, part["ETag"]

    with concurrent.futures.ThreadPoolExecutor(PREPARE_THREADS) as pool:
        uploads = list(pool.map(create, range(files)))

    def complete(item: tuple[str, str, str]) -> None:
        key, upload, etag = item
        client.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
        )

    start, cpu = time.perf_counter(), time.process_time()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(complete, uploads))
    return time.perf_counter() - start, time.process_time() - cpu


def time_magic(target: Target, bucket: str, args: argparse.Namespace, run: Run) -> None:
    storage = {**target.storage_options, "skip_instance_cache": True}
    committer = committer_for(
        f"s3://{bucket}/out",
        committer="magic",
        storage_options=storage,
        threads=args.threads,
        progress=False,
        cleanup=args.cleanup,
        **({"checksum": None} if args.no_checksum else {}),
    )
    per_task = args.files // args.tasks
    committer.setup_job()

    def task(index: int):
        attempt = committer.task_attempt(index)
        committer.setup_task(attempt)
        for n in range(per_task):
            with committer.fs.open(attempt.path(f"p{index:04d}/f{n:05d}"), "wb") as f:
                f.write(FILE)
        return committer.commit_task(attempt)

    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        messages = list(pool.map(task, range(args.tasks)))
    counting = RequestCounter()
    counting.attach(committer.store_fs)
    start, cpu = time.perf_counter(), time.process_time()
    summary = committer.commit_job(messages)
    run.commit, run.commit_cpu = time.perf_counter() - start, time.process_time() - cpu
    run.commit_requests = counting.take()
    start = time.perf_counter()
    committer.wait_cleanup()
    run.cleanup = time.perf_counter() - start
    run.cleanup_requests = counting.take()
    maxima = committer.stats.snapshot().maximums
    run.stages = {s: maxima.get(f"job_stage_{s}.max", 0) / 1000 for s in STAGES}
    assert summary.files == per_task * args.tasks, summary
    check_output(target, bucket, summary.files, args.cleanup)


def check_output(target: Target, bucket: str, files: int, cleanup: str) -> None:
    client = target.boto3_client()
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="out/"):
        keys += [o["Key"] for o in page.get("Contents", [])]
    visible = [k for k in keys if "/__magic" not in k and not k.endswith("_SUCCESS")]
    assert len(visible) == files, (len(visible), files)
    if cleanup != "off":
        assert not [k for k in keys if "/__magic" in k], "the job's tree is left"
        uploads = client.list_multipart_uploads(Bucket=bucket, Prefix="out/")
        assert not uploads.get("Uploads"), "uploads left"


def one_run(target: Target, args: argparse.Namespace, n: int) -> Run:
    run = Run()
    client = target.boto3_client()
    floor_bucket, magic_bucket = f"floor-{n}", f"magic-{n}"
    client.create_bucket(Bucket=floor_bucket)
    client.create_bucket(Bucket=magic_bucket)
    run.floor, run.floor_cpu = time_floor(target, floor_bucket, args.files, args.threads)
    time_magic(target, magic_bucket, args, run)
    return run


def report(target: Target, runs: list[Run], args: argparse.Namespace) -> list[str]:
    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    floor = [r.floor for r in runs]
    commit = [r.commit for r in runs]
    ratios = [r.commit / r.floor for r in runs]
    files = args.files
    lines = [
        f"### {target.name}: {target.describe}; {files} files in {args.tasks} tasks, "
        f"{args.threads} threads, clean-up {args.cleanup}, median of {len(runs)}",
        "",
        "| what | seconds (min-max) | x floor | requests/file | client CPU ms/file |",
        "|---|---:|---:|---:|---:|",
        f"| bare completions (floor) | {median(floor)} | 1.00 | 1.00 | "
        f"{statistics.median(r.floor_cpu for r in runs) * 1000 / files:.1f} |",
        f"| magic commit_job | {median(commit)} | {statistics.median(ratios):.2f} "
        f"({min(ratios):.2f}-{max(ratios):.2f}) | "
        f"{statistics.median(r.commit_requests for r in runs) / files:.3f} | "
        f"{statistics.median(r.commit_cpu for r in runs) * 1000 / files:.1f} |",
        f"| clean-up after it returned | {median([r.cleanup for r in runs])} | - | "
        f"{statistics.median(r.cleanup_requests for r in runs) / files:.3f} | - |",
        "",
        "Stages of commit_job, median seconds: "
        + ", ".join(
            f"{s} {statistics.median(r.stages.get(s, 0.0) for r in runs):.3f}" for s in STAGES
        ),
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="moto,stub")
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-checksum", action="store_true", help="checksum=None")
    parser.add_argument("--cleanup", default="background", choices=("background", "inline", "off"))
    args = parser.parse_args()
    out: list[str] = []
    for name in args.servers.split(","):
        if name not in SERVERS:
            raise SystemExit(f"--servers: unknown server {name!r}")
        with started(name, args.latency_ms, 10.0) as target:
            if target is None:
                continue
            target.warm_up()
            runs = [one_run(target, args, n) for n in range(args.repeat)]
            lines = report(target, runs, args)
            print("\n".join(lines), flush=True)
            out += lines
    print("\n".join(["", "command: python benchmarks/job_commit.py " + " ".join(sys.argv[1:])]))


if __name__ == "__main__":
    main()
