"""Job commit at scale (10,000 to 1,000,000 files): its time against the floor, its memory.

    python benchmarks/large_jobs.py --quick                  # 2,000 and 10,000 files (~2 min)
    python benchmarks/large_jobs.py --files 10000,100000 --files-per-task 100,10
    python benchmarks/large_jobs.py --files 1000000 --files-per-task 100 --timeout 2400
    python benchmarks/large_jobs.py --only throttled --throttle-rate 500 --throttle-files 20000
    python benchmarks/large_jobs.py --only moto               # 10,000 files on moto vs the stub
    python benchmarks/large_jobs.py --files 100000 --committer-option max_request_rate=3000

The question (issue "a 1,000,000-file job commits in flat memory at the store's
request-rate limit"): how do the time, the requests and the driver's memory of
``commit_job()`` grow with the number of files, and what happens when the store throttles?

Each point is a synthetic magic-committer job on a fresh stub S3 (``benchmarks/stub_s3.py``:
a cheap S3-compatible endpoint in its own process; moto would spend ~6 ms of CPU per
request, hours at this scale). The job is set up for real (``committer_for(...,
committer="magic")`` and ``setup_job()``); then what its tasks would have left is
written with bare boto3 PUTs from worker processes, built with magicfs's own classes
(:class:`~magicfs.layouts.magic.MagicJobLayout`, :class:`~magicfs.records.PendingSet`): per task
attempt the ``.started`` marker and the ``.pendingset`` a task commit saves twice
(``tasks/<attempt>.pendingset`` and ``<task id>.pendingset``, which job commit without
messages lists and reads). Every commit names a *synthetic* upload (``synthetic-...``:
the stub treats it as pending without a ``CreateMultipartUpload``), one part ETag, a
destination ``out/part=NNNN/part-TTTTT-NNNN-<job>.c000.parquet`` and its length.
``--markers`` also writes each file's intent marker and ``.pending`` (a file-mode task's
whole tree: slower to set up, and job clean-up then lists and deletes them).

Measured, in a fresh child process (so its peak RSS is the driver's alone; the set-up
ran elsewhere): ``commit_job()`` without messages, its wall seconds, the process's peak
RSS (``ru_maxrss``) and its RSS before the call, requests per file (the stub's own
counters, reset just before; the client's count of API calls agrees) and its CPU
seconds. Checked: every file is at its destination (a paged listing), ``_SUCCESS``
exists, the job's tree is gone.

Baseline, on its own fresh stub holding the same records: **the floor**, a child process
that only calls boto3's ``complete_multipart_upload`` for every file from as many
threads as the committer uses (``--threads``, the committer's default 8), reading no
record. ``ratio`` = commit seconds / floor seconds, measured in the same run.

**Throttled** (``--throttle-rate``, default 500 and 200 requests/s): the stub answers
``503 SlowDown`` to mutating requests above the rate (token bucket, bursts of rate/10)
while the job commits ``--throttle-files`` files; reported: the completions per second
achieved against the configured rate (between the first and the last completion the
stub accepted), the 503s answered, how many times the committer's adaptive rate was cut
(:mod:`magicfs.stores.s3.rate`) and whether every file arrived (``commit_job`` returned, no file
missing). The floor (bare boto3, its default retries) is throttled the same way for
comparison. (A rate above what the client reaches unthrottled on this machine, the
scale table's floor, cannot be reached by either and says nothing about the limiter.)

**moto** (``--only moto`` or ``--moto``): the 10,000-file point against moto
(:class:`~magicfs.integrations.embedded_s3.EmbeddedS3Server`), with real uploads
(``CreateMultipartUpload`` and one small ``UploadPart`` each) since moto has no synthetic
ones, next to the stub:
the requests per file must agree.

On this 2-core machine client and stub share the CPU: absolute seconds are this
machine's, the ratios and the requests and memory per file are the result.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

# Nothing here may reach a real AWS endpoint or read the user's AWS configuration.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
os.environ["AWS_CONFIG_FILE"] = os.devnull
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

from stub_s3 import ACCESS_KEY, REGION, SECRET_KEY, SYNTHETIC_PREFIX, StubS3Process  # noqa: E402

BUCKET = "bkt"
DEST_KEY = "out"
DEST = f"s3://{BUCKET}/{DEST_KEY}"
PARTITIONS = 100
MiB = 1 << 20


# --- the synthetic job ---------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    files: int
    per_task: int

    @property
    def tasks(self) -> int:
        return -(-self.files // self.per_task)

    def files_of(self, task: int) -> int:
        return min(self.per_task, self.files - task * self.per_task)


def file_of(job_id: str, task: int, n: int) -> tuple[str, str, int]:
    """File ``n`` of task ``task``: (path relative to the destination, upload id, length)."""
    relative = f"part={task % PARTITIONS:04d}/part-{task:05d}-{n:04d}-{job_id}.c000.parquet"
    return relative, f"{SYNTHETIC_PREFIX}{job_id}-{task}-{n}", 1024 + (task * 31 + n * 7) % 4096


def fake_etag(upload_id: str) -> str:
    return '"' + hashlib.md5(upload_id.encode()).hexdigest() + '"'


def all_files(job_id: str, point: Point):
    for task in range(point.tasks):
        for n in range(point.files_of(task)):
            yield file_of(job_id, task, n)


def client_for(endpoint: str, pool: int, **config: Any) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(max_pool_connections=pool, **config),
    )


def storage_options(endpoint: str) -> dict[str, Any]:
    return {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "client_kwargs": {"endpoint_url": endpoint, "region_name": REGION},
        "skip_instance_cache": True,
    }


def _write_tasks(spec: dict[str, Any], first: int, last: int) -> int:
    """In a worker process: the records of tasks ``first..last-1`` (what task commits leave).

    ``spec["real_uploads"]``: create each upload and one part for real (moto), instead of
    naming a synthetic upload. Returns the number of PUT requests made.
    """
    from magicfs.layouts.magic import MagicJobLayout, task_attempt_id, task_id
    from magicfs.records import (
        TASK_ATTEMPT_ID_KEY,
        IOStatisticsSnapshot,
        PendingSet,
        SinglePendingCommit,
    )
    from magicfs.records.manifest import path_to_uri
    from magicfs.stores.s3.tracking import marker_metadata, upload_metadata

    job_id, point = spec["job_id"], Point(spec["files"], spec["per_task"])
    layout = MagicJobLayout(f"{BUCKET}/{DEST_KEY}", job_id)
    threads = spec["setup_threads"]
    # Checksums off: the records are the set-up, not what is measured.
    client = client_for(
        spec["endpoint"],
        threads * 2,
        request_checksum_calculation="when_required",
        retries={"max_attempts": 10, "mode": "standard"},
    )
    puts = [0] * (last - first)

    def key_of(path: str) -> str:
        return path.split("/", 1)[1]

    def one_task(task: int) -> None:
        attempt = task_attempt_id(job_id, task, 0)
        work = layout.work_path(attempt)
        client.put_object(
            Bucket=BUCKET, Key=key_of(layout.started_marker(attempt)), Body=attempt.encode()
        )
        made = 1
        commits = []
        for n in range(point.files_of(task)):
            relative, upload_id, length = file_of(job_id, task, n)
            magic_path = f"{work}/{relative}"
            destination = f"{DEST_KEY}/{relative}"
            etag = fake_etag(upload_id)
            if spec["markers"]:
                client.put_object(
                    Bucket=BUCKET,
                    Key=key_of(magic_path),
                    Body=b"",
                    Metadata=marker_metadata(job_id, attempt, uuid.uuid4().hex),
                )
                made += 1
            if spec["real_uploads"]:
                upload_id = client.create_multipart_upload(
                    Bucket=BUCKET, Key=destination, Metadata=upload_metadata(job_id, attempt)
                )["UploadId"]
                etag = client.upload_part(
                    Bucket=BUCKET,
                    Key=destination,
                    UploadId=upload_id,
                    PartNumber=1,
                    Body=b"x" * length,
                )["ETag"]
                made += 2
            commit = SinglePendingCommit(
                uri=path_to_uri("s3://" + magic_path),
                upload_id=upload_id,
                bucket=BUCKET,
                destination_key=destination,
                etags=[etag],
                length=length,
                job_id=job_id,
                task_id=attempt,
                # As task commit loaded it (file mode): where its .pending was.
                filename=f"s3://{magic_path}.pending",
            )
            if spec["markers"]:
                pending = SinglePendingCommit.from_json(commit.to_bytes())
                pending.filename = None
                client.put_object(
                    Bucket=BUCKET, Key=key_of(magic_path) + ".pending", Body=pending.to_bytes()
                )
                made += 1
            commits.append(commit)
        stats = IOStatisticsSnapshot(
            counters={
                "committer_task_file_count": len(commits),
                "stream_write_bytes": sum(c.length for c in commits),
                "stream_write_block_uploads": len(commits),
                "committer_magic_marker_put": len(commits),
            }
        )
        data = PendingSet(
            job_id=job_id,
            commits=commits,
            iostatistics=stats,
            extra_data={TASK_ATTEMPT_ID_KEY: attempt},
        ).to_bytes()
        for path in (layout.attempt_pendingset(attempt), layout.pendingset(task_id(job_id, task))):
            client.put_object(Bucket=BUCKET, Key=key_of(path), Body=data)
        puts[task - first] = made + 2

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(one_task, range(first, last)))
    return sum(puts)


def set_up_job(
    endpoint: str,
    point: Point,
    *,
    markers: bool,
    real_uploads: bool = False,
    processes: int = 2,
    threads: int = 16,
) -> dict[str, Any]:
    """Create the bucket, set the job up for real, write its tasks' records; returns the spec."""
    from magicfs import committer_for
    from magicfs.layouts.magic import MagicJobLayout

    start = time.perf_counter()
    job_id = str(uuid.uuid4())
    client_for(endpoint, 4).create_bucket(Bucket=BUCKET)
    committer: Any = committer_for(
        DEST,
        committer="magic",
        job_id=job_id,
        storage_options=storage_options(endpoint),
        progress=False,
    )
    assert committer.flow.layout == MagicJobLayout(f"{BUCKET}/{DEST_KEY}", job_id)
    committer.setup_job()
    spec = {
        "endpoint": endpoint,
        "job_id": job_id,
        "files": point.files,
        "per_task": point.per_task,
        "markers": markers,
        "real_uploads": real_uploads,
        "setup_threads": threads,
    }
    step = -(-point.tasks // (processes * 4))
    ranges = [(i, min(point.tasks, i + step)) for i in range(0, point.tasks, step)]
    with concurrent.futures.ProcessPoolExecutor(processes) as pool:
        futures = [pool.submit(_write_tasks, spec, a, b) for a, b in ranges]
        puts = sum(f.result() for f in futures)
    spec["setup_seconds"] = time.perf_counter() - start
    spec["setup_puts"] = puts
    return spec


# --- the measured children -----------------------------------------------------------------


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _memory_tracer() -> tuple[threading.Event, list[Any]]:
    """Snapshots of traced allocations near their peak (``--trace-memory``)."""
    import tracemalloc

    tracemalloc.start(8)
    stop = threading.Event()
    best: list[Any] = [0, None]

    def watch() -> None:
        while not stop.wait(1.0):
            current = tracemalloc.get_traced_memory()[0]
            if current > best[0] * 1.1:
                best[0], best[1] = current, tracemalloc.take_snapshot()

    threading.Thread(target=watch, daemon=True).start()
    return stop, best


def commit_child(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: ``commit_job()`` without messages (``all_committed_tasks=True``:
    this process did not set the job up); time, memory, requests."""
    import resource
    from collections import Counter

    from magicfs import committer_for

    if spec.get("log_rate"):  # the adaptive rate's cuts, on the child's stderr
        logging.basicConfig(stream=sys.stderr, format="%(relativeCreated)8.0f ms %(message)s")
        logging.getLogger("magicfs.s3.rate").setLevel(logging.INFO)

    committer: Any = committer_for(
        DEST,
        committer="magic",
        job_id=spec["job_id"],
        storage_options=storage_options(spec["endpoint"]),
        threads=spec["threads"],
        progress=False,
        **spec["options"],
    )
    calls: Counter[str] = Counter()

    def count(model: Any, **kwargs: Any) -> None:
        calls[model.name] += 1

    committer.store_fs.s3.meta.events.register("before-call.s3", count)
    tracer = _memory_tracer() if spec.get("trace_memory") else None
    rss_before = _rss_mib()
    samples: list[tuple[float, float]] = []
    sampling = threading.Event()
    cpu = os.times()
    start = time.perf_counter()

    def sample() -> None:  # RSS every 20 ms, to say which stage holds the memory
        while not sampling.wait(0.02):
            samples.append((time.perf_counter() - start, _rss_mib()))

    threading.Thread(target=sample, daemon=True).start()
    error = None
    files = 0
    try:
        files = committer.commit_job(all_committed_tasks=True).files
    except Exception as e:
        error = f"{type(e).__name__}: {e}"[:2000]
    seconds = time.perf_counter() - start
    sampling.set()
    now = os.times()
    stages = {
        name.removeprefix("job_stage_").removesuffix(".max"): millis / 1000
        for name, millis in committer.stats.snapshot().maximums.items()
        if name.startswith("job_stage_") and name.endswith(".max") and ".failures" not in name
    }
    result = {
        "seconds": seconds,
        "files": files,
        "error": error,
        "rss_before_mib": rss_before,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu_seconds": (now.user - cpu.user) + (now.system - cpu.system),
        "client_calls": dict(calls),
        "stages": stages,
        "rss_by_stage": rss_by_stage(stages, samples),
        "rate_cuts": committer.flow.store_hooks.store.rate.cuts,
        "final_rate": committer.flow.store_hooks.store.rate.rate(),
    }
    if tracer is not None:
        stop, best = tracer
        stop.set()
        if best[1] is not None:
            top = best[1].statistics("lineno")[:15]
            result["traced_peak_mib"] = best[0] / MiB
            result["traced_top"] = [f"{s.size / MiB:8.1f} MiB  {s.traceback}" for s in top]
    return result


#: The stages of a job commit, in the order they run (magicfs.protocol.committer).
STAGES = (
    "end_job",
    "load",
    "validate",
    "conflict",
    "journal",
    "delete_old",
    "publish",
    "success",
    "cleanup",
)


def rss_by_stage(stages: dict[str, float], samples: list[tuple[float, float]]) -> dict[str, float]:
    """The largest RSS sampled during each stage (stages run one after another)."""
    bounds, at = [], 0.0
    for name in STAGES:
        if name in stages:
            bounds.append((name, at, at + stages[name]))
            at += stages[name]
    peaks: dict[str, float] = {}
    for when, rss in samples:
        for name, first, last in bounds:
            if first <= when <= last + 0.05:
                peaks[name] = max(peaks.get(name, 0.0), rss)
    return {name: round(peaks[name]) for name, _, _ in bounds if name in peaks}


def floor_child(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: one bare boto3 ``complete_multipart_upload`` per file, no record read."""
    import resource

    from botocore.exceptions import ClientError

    threads = spec["threads"]
    client = client_for(spec["endpoint"], max(10, threads * 2))
    files = all_files(spec["job_id"], Point(spec["files"], spec["per_task"]))
    lock = threading.Lock()
    failed: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                item = next(files, None)
            if item is None:
                return
            relative, upload_id, length = item
            try:
                client.complete_multipart_upload(
                    Bucket=BUCKET,
                    Key=f"{DEST_KEY}/{relative}",
                    UploadId=upload_id,
                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": fake_etag(upload_id)}]},
                    MpuObjectSize=length,
                )
            except ClientError as e:
                failed.append(str(e))

    cpu = os.times()
    start = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    seconds = time.perf_counter() - start
    now = os.times()
    return {
        "seconds": seconds,
        "failed": len(failed),
        "first_failure": failed[0] if failed else None,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cpu_seconds": (now.user - cpu.user) + (now.system - cpu.system),
    }


def run_child(kind: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``commit_child`` or ``floor_child`` in a fresh interpreter; its JSON result."""
    command = [sys.executable, os.path.abspath(__file__), "--child", kind, json.dumps(spec)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": timeout, "error": f"timed out after {timeout:.0f} s", "timeout": True}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout)[-3000:]
        return {"seconds": float("nan"), "error": f"{kind} child exit {done.returncode}: {tail}"}
    return json.loads(lines[-1])


# --- checks ---------------------------------------------------------------------------------


def check_output(endpoint: str, files: int) -> dict[str, Any]:
    """What is at the destination: files, ``_SUCCESS``, what is left of the job's tree."""
    client = client_for(endpoint, 4)
    found = tree = 0
    success = False
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=f"{DEST_KEY}/"
    ):
        for entry in page.get("Contents", []):
            name = entry["Key"][len(DEST_KEY) + 1 :]
            if name == "_SUCCESS":
                success = True
            elif name.startswith("__magic_job-"):
                tree += 1
            else:
                found += 1
    return {
        "found": found,
        "missing": files - found,
        "success_file": success,
        "tree_left": tree,
        "ok": found == files and success and tree == 0,
    }


def server_requests(stats: dict[str, Any]) -> dict[str, int]:
    return {op: sum(by_status.values()) for op, by_status in stats["requests"].items()}


# --- the runs -------------------------------------------------------------------------------


@dataclass
class Row:
    point: Point
    commit: dict[str, Any]
    check: dict[str, Any]
    requests: dict[str, int]
    stub_cpu: float
    floor: dict[str, Any] | None = None
    setup: dict[str, Any] = field(default_factory=dict)

    @property
    def requests_per_file(self) -> float:
        return sum(self.requests.values()) / self.point.files


def measure_commit(stub: StubS3Process, spec: dict[str, Any], args: argparse.Namespace) -> tuple:
    """``commit_job()`` in a child; the stub's counters of it (``cpu_seconds``: during it)."""
    stub.reset_stats()
    cpu = stub.stats()["cpu_seconds"]
    child = dict(spec, threads=args.threads, options=args.options, trace_memory=args.trace_memory)
    commit = run_child("commit", child, args.timeout)
    stats = stub.stats()
    stats["cpu_seconds"] -= cpu
    stub.configure(rate=0)
    return commit, stats


def scale_point(point: Point, args: argparse.Namespace, floor: dict[str, Any] | None) -> Row:
    with StubS3Process(latency_ms=args.latency_ms) as stub:
        spec = set_up_job(
            stub.endpoint_url, point, markers=args.markers, processes=args.setup_processes
        )
        log(
            f"  {point.files:,} files / {point.per_task} per task: set up in "
            f"{spec['setup_seconds']:.1f}s ({spec['setup_puts']:,} PUTs)"
        )
        commit, stats = measure_commit(stub, spec, args)
        check = check_output(stub.endpoint_url, point.files)
    row = Row(point, commit, check, server_requests(stats), stats["cpu_seconds"], setup=spec)
    log(
        f"  commit_job: {commit['seconds']:.1f}s, peak RSS {commit.get('peak_rss_mib', 0):.0f} "
        f"MiB, {row.requests_per_file:.3f} requests/file, check {check}"
        + (f", error {commit['error']}" if commit.get("error") else "")
    )
    if floor is None and not args.no_floor:
        with StubS3Process(latency_ms=args.latency_ms) as stub:
            spec = set_up_job(
                stub.endpoint_url, point, markers=False, processes=args.setup_processes
            )
            floor = run_child("floor", dict(spec, threads=args.threads), args.timeout)
            log(f"  floor: {floor['seconds']:.1f}s, {floor.get('failed')} failed")
    row.floor = floor
    return row


def throttled_run(args: argparse.Namespace, rate: float) -> list[dict[str, Any]]:
    point = Point(args.throttle_files, 100)
    results = []
    for variant in ("commit", "floor"):
        with StubS3Process(latency_ms=args.latency_ms) as stub:
            spec = set_up_job(
                stub.endpoint_url, point, markers=False, processes=args.setup_processes
            )
            stub.reset_stats()
            stub.configure(rate=rate)
            child = dict(spec, threads=args.threads, options=args.options)
            timeout = max(args.timeout, 20 * point.files / rate)
            outcome = run_child(variant, child, timeout)
            stats = stub.stats()
            stub.configure(rate=0)
            check = check_output(stub.endpoint_url, point.files)
        completes = stats["requests"].get("CompleteMultipartUpload", {})
        done = completes.get("200", 0)
        first = stats["first_success"].get("CompleteMultipartUpload")
        last = stats["last_success"].get("CompleteMultipartUpload")
        window = (last - first) if first and last and last > first else float("nan")
        throttled = {op: s["503"] for op, s in stats["requests"].items() if "503" in s}
        result = {
            "variant": "magic commit_job()" if variant == "commit" else "floor (bare boto3)",
            "files": point.files,
            "rate": rate,
            "seconds": outcome["seconds"],
            "completed": done,
            "achieved": done / window if window == window else float("nan"),
            "throttled": throttled,
            "check": check,
            "error": outcome.get("error") or outcome.get("first_failure"),
            "failed_calls": outcome.get("failed"),
            "rate_cuts": outcome.get("rate_cuts", "-"),
            "requests": server_requests(stats),
        }
        log(
            f"  throttled {variant}: {outcome['seconds']:.1f}s, {result['achieved']:.0f} "
            f"completes/s, 503s {throttled}, missing {check['missing']}"
            + (f", error {result['error'][:300]}" if result["error"] else "")
        )
        results.append(result)
    return results


def moto_run(args: argparse.Namespace, files: int) -> list[dict[str, Any]]:
    from magicfs.integrations.embedded_s3 import EmbeddedS3Server

    point = Point(files, 100)
    results = []
    with EmbeddedS3Server() as moto:
        spec = set_up_job(moto.endpoint_url, point, markers=False, real_uploads=True, processes=1)
        log(f"  moto: set up {files:,} real uploads in {spec['setup_seconds']:.1f}s")
        cpu = moto.cpu_seconds()
        child = dict(spec, threads=args.threads, options=args.options)
        commit = run_child("commit", child, args.timeout)
        served = moto.cpu_seconds()
        check = check_output(moto.endpoint_url, files)
        uploads_left = len(
            moto.boto3_client().list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
        )
    results.append(
        {
            "server": "moto",
            "commit": commit,
            "check": check,
            "uploads_left": uploads_left,
            "server_requests": None,
            "server_cpu": (served - cpu) if served is not None and cpu is not None else None,
        }
    )
    with StubS3Process() as stub:
        spec = set_up_job(stub.endpoint_url, point, markers=False, processes=args.setup_processes)
        commit, stats = measure_commit(stub, spec, args)
        check = check_output(stub.endpoint_url, files)
    results.append(
        {
            "server": "stub",
            "commit": commit,
            "check": check,
            "uploads_left": stats["uploads"],
            "server_requests": server_requests(stats),
            "server_cpu": stats["cpu_seconds"],
        }
    )
    return results


# --- tables -----------------------------------------------------------------------------------


def code_version() -> str:
    """Which magicfs was measured: a hash of its sources and their newest change (no git)."""
    root = os.path.join(os.path.dirname(HERE), "magicfs")
    digest = hashlib.sha256()
    newest = 0.0
    for folder, _, names in sorted(os.walk(root)):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path, "rb") as source:
                digest.update(path[len(root) :].encode() + b"\0" + source.read())
            newest = max(newest, os.path.getmtime(path))
    changed = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(newest))
    return f"magicfs sources {digest.hexdigest()[:12]} (last changed {changed})"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _ops(requests: dict[str, int]) -> str:
    short = {
        "CompleteMultipartUpload": "complete",
        "GetObject": "get",
        "PutObject": "put",
        "HeadObject": "head",
        "DeleteObject": "delete",
        "DeleteObjects": "delete-batch",
        "ListObjectsV2": "list",
        "ListMultipartUploads": "list-uploads",
        "AbortMultipartUpload": "abort",
    }
    parts = sorted(requests.items(), key=lambda item: -item[1])
    return ", ".join(f"{short.get(op, op)} {n:,}" for op, n in parts)


def scale_table(rows: list[Row], args: argparse.Namespace) -> list[str]:
    lines = [
        f"**Job commit without messages, {args.threads} threads, stub S3 "
        f"({args.latency_ms:g} ms per request){', with markers' if args.markers else ''}**",
        "",
        "| files | files/task | tasks | commit s | floor s | commit/floor | requests/file "
        "| peak RSS MiB | RSS before MiB | KiB/file | client CPU s | stub CPU s | check |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        c = row.commit
        floor = row.floor["seconds"] if row.floor else float("nan")
        ratio = c["seconds"] / floor if row.floor and not c.get("error") else float("nan")
        peak = c.get("peak_rss_mib", float("nan"))
        before = c.get("rss_before_mib", float("nan"))
        per_file = (peak - before) * 1024 / row.point.files
        if c.get("error"):
            status = "FAILED: " + c["error"][:80].replace("|", "/").replace("\n", " ")
        elif row.check["ok"]:
            status = "ok"
        else:
            status = f"{row.check['missing']:,} missing, _SUCCESS {row.check['success_file']}"
        lines.append(
            f"| {row.point.files:,} | {row.point.per_task} | {row.point.tasks:,} "
            f"| {c['seconds']:.1f} | {floor:.1f} | {ratio:.2f} | {row.requests_per_file:.3f} "
            f"| {peak:,.0f} | {before:,.0f} | {per_file:.2f} | {c.get('cpu_seconds', 0):.1f} "
            f"| {row.stub_cpu:.1f} | {status} |"
        )
    lines += ["", "Requests by operation and stage seconds:", ""]
    for row in rows:
        stages = ", ".join(
            f"{k} {v:.1f}" for k, v in row.commit.get("stages", {}).items() if v >= 0.05
        )
        memory = ", ".join(f"{k} {v:,}" for k, v in row.commit.get("rss_by_stage", {}).items())
        lines.append(
            f"* {row.point.files:,} / {row.point.per_task} per task: {_ops(row.requests)}; "
            f"stages (s): {stages}; RSS by stage (MiB): {memory}"
        )
        for line in row.commit.get("traced_top", []):
            lines.append(f"    {line}")
    return lines


def throttle_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "**Throttled store: mutating requests above the rate answer 503 SlowDown**",
        "",
        "| variant | files | configured rate/s | seconds | completes/s achieved "
        "| 503s answered | rate cuts | missing files | result |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        throttled = sum(r["throttled"].values())
        by_op = ", ".join(f"{op} {n:,}" for op, n in r["throttled"].items())
        result = (
            "ok"
            if not r["error"] and r["check"]["missing"] == 0
            else ("FAILED: " + str(r["error"])[:100].replace("|", "/").replace("\n", " "))
        )
        lines.append(
            f"| {r['variant']} | {r['files']:,} | {r['rate']:g} | {r['seconds']:.1f} "
            f"| {r['achieved']:.0f} | {throttled:,} ({by_op}) | {r.get('rate_cuts', '-')} "
            f"| {r['check']['missing']:,} "
            f"| {result} |"
        )
    return lines


def moto_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "**The same job commit on moto (real uploads) and on the stub (synthetic uploads)**",
        "",
        "| server | files | commit s | API calls/file (client) | requests/file (server) "
        "| server CPU s | uploads left | check | calls by operation (client) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        c = r["commit"]
        files = r["check"]["found"] + r["check"]["missing"]
        calls = sum(c.get("client_calls", {}).values()) / files
        served = r["server_requests"]
        server = f"{sum(served.values()) / files:.3f}" if served else "-"
        cpu = f"{r['server_cpu']:.1f}" if r["server_cpu"] is not None else "-"
        ok = "ok" if r["check"]["ok"] and not c.get("error") else f"FAILED {c.get('error')}"
        lines.append(
            f"| {r['server']} | {files:,} | {c['seconds']:.1f} | {calls:.3f} | {server} | {cpu} "
            f"| {r['uploads_left']} | {ok} | {_ops(c.get('client_calls', {}))} |"
        )
    return lines


def parse_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--committer-option {text!r}: use key=value")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="10000,100000,1000000", help="comma-separated sizes")
    parser.add_argument("--files-per-task", default="100,10", help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="2,000 and 10,000 files, 100/task")
    parser.add_argument(
        "--only", default="scale,throttled", help="comma-separated: scale, throttled, moto"
    )
    parser.add_argument("--moto", action="store_true", help="also run the moto comparison")
    parser.add_argument("--moto-files", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=8, help="committer threads (default 8)")
    parser.add_argument(
        "--committer-option",
        action="append",
        default=[],
        type=parse_option,
        metavar="KEY=VALUE",
        help="passed to committer_for (value parsed as JSON when it can be); repeatable",
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="stub latency per request")
    parser.add_argument(
        "--throttle-rate",
        default="500,200",
        help="store limits to run, requests/s, comma-separated (0 skips the run)",
    )
    parser.add_argument("--throttle-files", type=int, default=20_000)
    parser.add_argument("--markers", action="store_true", help="also write markers and .pending")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor runs")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per measured child, s")
    parser.add_argument("--setup-processes", type=int, default=2)
    parser.add_argument(
        "--trace-memory", action="store_true", help="tracemalloc's top allocations (slow)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every result as JSON")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, spec = args.child
        result = (
            commit_child(json.loads(spec)) if kind == "commit" else floor_child(json.loads(spec))
        )
        print(json.dumps(result))
        return
    args.options = dict(args.committer_option)
    if args.quick:
        args.files, args.files_per_task = "2000,10000", "100"
        args.throttle_files = min(args.throttle_files, 2000)
    sizes = [int(s) for s in args.files.split(",") if s]
    per_task = [int(s) for s in args.files_per_task.split(",") if s]
    only = set(args.only.split(","))
    if args.moto:
        only.add("moto")
    report: dict[str, Any] = {
        "args": {k: v for k, v in vars(args).items() if k != "child"},
        "code": code_version(),
    }
    output: list[str] = [
        f"stub S3 on 127.0.0.1 (own process, {args.latency_ms:g} ms per request); "
        f"committer options {args.options or '{}'}; {os.cpu_count()} cores; {code_version()}",
        "",
    ]
    if "scale" in only:
        rows = []
        for files in sizes:
            floor = None
            for fpt in per_task:
                log(f"scale point: {files:,} files, {fpt} per task")
                row = scale_point(Point(files, fpt), args, floor)
                floor = row.floor  # one floor per size: it reads no record
                rows.append(row)
                report.setdefault("scale", []).append(
                    {
                        "files": files,
                        "per_task": fpt,
                        "commit": row.commit,
                        "floor": row.floor,
                        "check": row.check,
                        "requests": row.requests,
                        "stub_cpu": row.stub_cpu,
                        "setup_seconds": row.setup.get("setup_seconds"),
                    }
                )
                print("\n".join(scale_table(rows, args)) + "\n", file=sys.stderr, flush=True)
        output += [*scale_table(rows, args), ""]
    rates = [float(r) for r in args.throttle_rate.split(",") if float(r) > 0]
    if "throttled" in only and rates:
        results = []
        for rate in rates:
            log(f"throttled: {args.throttle_files:,} files at {rate:g} requests/s")
            results += throttled_run(args, rate)
        report["throttled"] = results
        output += [*throttle_table(results), ""]
    if "moto" in only:
        log(f"moto: {args.moto_files:,} files")
        results = moto_run(args, args.moto_files)
        report["moto"] = results
        output += [*moto_table(results), ""]
    print("\n".join(output))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2, default=str)


if __name__ == "__main__":
    main()
