"""The cost of safety: a whole committed job against the floor of bare deferral.

    python benchmarks/job_cost.py                   # moto, stub, rgw; 3 runs each (long)
    python benchmarks/job_cost.py --quick --phases  # one run each, smaller workloads
    python benchmarks/job_cost.py --servers stub --only small,large --repeat 5
    python benchmarks/job_cost.py --variants direct,multipart-floor,put-then-copy-floor,file-v1
    python benchmarks/job_cost.py --busy-core          # the same, one core kept busy
    python benchmarks/job_cost.py --servers moto --only newcomer --variants direct,magic

What a user compares is not job commit alone but the whole job: today they write the
files straight to their final keys with s3fs (fast, and unsafe: a failed or speculative
task leaves partial or duplicate files). Each workload runs as a real job would: tasks
on ``--executors`` parallel threads, each task writing its files one after another
(``open``/``write``/``close``), then its task commit; then job commit from the tasks'
messages. Variants, each on an empty bucket of the same server, in the same run:

* ``direct``: s3fs writes to the final keys (no commit protocol: the unsafe floor);
* ``multipart-floor``: bare CreateMultipartUpload + one UploadPart per file, file after
  file on the executors, CompleteMultipartUpload of them all at job commit (no records, no
  checks): what no protocol uploading each file from its writer this way can beat in
  requests. Not in wall time: its calls wait one after another on the executor, while
  magicfs uploads a closed file in the background as the task writes the next one;
* ``put-then-copy-floor``: bare PUT to a hidden key per file, then at job commit a
  server-side copy to the final key and batched DeleteObjects of the hidden keys: what
  no protocol that copies at commit can beat;
* ``magic``, ``magic-in-memory``: the magic committer (records in the store / in memory);
* ``magic-bg``, ``magic-in-memory-bg``: the same with ``cleanup="background"``: timed
  until ``commit_job()`` returns (the output is complete and visible), the clean-up
  finishing after it; its requests and client CPU are still counted (the run waits for
  it, untimed, before reading the counters and checking that nothing is left);
* ``directory``: the staging committer (local files, uploaded at task commit);
* ``file-v1``: Hadoop's classic FileOutputCommitter v1 (rename = copy + delete on S3).

The default variants are all but the last two, which copy, and run only where the
server copies (not on the stub).

The same job runs against each of ``--servers`` (``benchmarks/bench_servers.py``):
``moto`` (on 127.0.0.1 in its own process, a costly server: about 6 ms of CPU per
request; server-side copies at ``--copy-mb-per-s``, 10 by default, as S3 copies),
``stub`` (``benchmarks/stub_s3.py``: real bytes, negligible server CPU, so what remains
is the client's cost and the latency) and ``rgw`` (Ceph RGW behind a latency front;
skipped with a message when Ceph is not installed). ``--latency-ms`` (20) is added to
every request on each. Reported per (server, workload, variant): wall seconds of the
whole job (median of ``--repeat`` runs, with min-max), the ratio to the multipart floor
and to ``direct`` of the same run, S3 requests per file (counted by the server where it
can: the stub and RGW's front; by the client's botocore hooks on moto), client CPU
milliseconds per file (this process, every thread: what a user's executors pay) and the
server's CPU seconds (what S3 never charges). ``--phases`` adds, per committer, a table
of requests per file by phase and purpose (``benchmarks/job_phases.py``): from the
stub's own log of keys, and from the client's botocore hooks on moto and RGW. ``--rss``
also measures the writing process's peak RSS as the number of files per task grows
tenfold (each in a process of its own, on moto).
Every variant's filesystem reads botocore's JSON models through one loader shared by the
process (as magicfs's own filesystems do), so none pays to parse them again per run.
``--busy-core`` keeps one core busy in a separate process during every run of every
variant (a machine with other work, load about 2 on 2 cores). Every run checks its
output: the expected files, no upload left. Before each run the
process's garbage is collected (``gc.collect()``), for every variant alike: a full
collection of what earlier runs left (100-300 ms on this heap, measured) would
otherwise land in a random run's timed region — one second, at 8 MiB.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import s3fs  # noqa: E402
from bench_servers import SERVERS, UNSUPPORTED, RequestCounter, Target, started  # noqa: E402
from job_phases import ClientLog, ServerLog, phase_table, phased_job  # noqa: E402

from magicfs import committer_for  # noqa: E402
from magicfs.integrations.embedded_s3 import EmbeddedS3Server  # noqa: E402
from magicfs.stores.s3.client import share_models  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
VARIANTS = (
    "direct",
    "multipart-floor",
    "magic",
    "magic-in-memory",
    "magic-bg",
    "magic-in-memory-bg",
    "directory",
    "put-then-copy-floor",
    "file-v1",
)
DEFAULT_VARIANTS = VARIANTS[:7]
COMMITTERS = ("magic", "magic-in-memory", "directory")
#: Variants whose clean-up runs in the background: the committer's ``cleanup`` option.
BACKGROUND = "-bg"
FLOORS = ("multipart-floor", "put-then-copy-floor")
#: Job-commit threads: the committers' default (``OutputCommitter(threads=8)``); the
#: floors complete or copy on as many.
COMMIT_THREADS = 8
DELETE_BATCH = 1000  # keys per DeleteObjects request (the S3 maximum)


@dataclass(frozen=True)
class Workload:
    name: str
    files: int
    size: int
    tasks: int
    executors: int

    def describe(self) -> str:
        size = f"{self.size // MiB} MiB" if self.size >= MiB else f"{self.size // KiB} KiB"
        return (
            f"{self.files:,} files x {size} ({self.tasks} tasks, {self.executors} "
            f"executor{'s' if self.executors > 1 else ''})"
        )


def workloads(quick: bool, executors: int) -> dict[str, Workload]:
    scale = 4 if quick else 1
    return {
        "small": Workload("small", 128 // scale, 256 * KiB, 16 // scale, executors),
        "large": Workload("large", 32 // scale, 8 * MiB, 8 // scale, executors),
        "one-executor": Workload("one-executor", 128 // scale, 256 * KiB, 16 // scale, 1),
        "many": Workload("many", 1000 // scale, 16 * KiB, 100 // scale, executors),
        # Not run by default (``--only wide``): per-task and per-job requests spread over
        # 128 files per task, what requests per file tend to as tasks grow.
        "wide": Workload("wide", 512 // scale, 16 * KiB, 4, executors),
        # Not run by default (``--only eights``): 8 files per task, as "small", in a job of
        # 128 tasks, so the job's own requests (about 20) weigh 1/8 as much per file.
        "eights": Workload("eights", 1024 // scale, 16 * KiB, 128 // scale, executors),
        # Not run by default (``--only newcomer``): what a new user tries first, many
        # small files (2,000 x 1 KiB in 20 tasks) against plain s3fs writes.
        "newcomer": Workload("newcomer", 2000 // scale, KiB, 20 // scale, executors),
    }


#: The workloads run unless ``--only`` names others.
DEFAULT_WORKLOADS = ("small", "large", "one-executor", "many")


@dataclass
class Run:
    seconds: float
    requests: Counter = field(default_factory=Counter)
    counted_by: str = "client"  # "server": the server's own counters; "client": botocore hooks
    client_cpu: float = 0.0  # this process (every thread): what the user's executors pay
    server_cpu: float | None = None  # the emulator's process: what S3 never charges

    @property
    def copies(self) -> int:
        return self.requests["CopyObject"] + self.requests["UploadPartCopy"]


def file_names(workload: Workload) -> list[list[str]]:
    per_task = workload.files // workload.tasks
    return [
        [f"part-{task:04d}-{n:04d}.bin" for n in range(per_task)] for task in range(workload.tasks)
    ]


def make_committer(storage: dict, variant: str, bucket: str):
    options: dict = {"threads": COMMIT_THREADS, "progress": False}
    if variant.endswith(BACKGROUND):
        variant, options["cleanup"] = variant.removesuffix(BACKGROUND), "background"
    name = variant
    if variant == "magic-in-memory":
        name, options["in_memory"] = "magic", True
    if variant == "directory":
        options["buffer_dir"] = tempfile.mkdtemp(prefix="magicfs-bench-")
    return committer_for(f"s3://{bucket}/out", committer=name, storage_options=storage, **options)


def bare_filesystem(storage: dict) -> s3fs.S3FileSystem:
    """The s3fs filesystem of the variants without a committer, reading botocore's models
    through the process's shared loader as a committer's does
    (``magicfs.stores.s3.client.share_models``): no variant pays to parse them again."""
    fs = s3fs.S3FileSystem(**storage)
    share_models(fs)
    return fs


def run_once(server: Target, workload: Workload, variant: str, bucket: str) -> Run:
    """One job of ``workload`` with ``variant``; checks its output."""
    payload = os.urandom(workload.size)
    storage = {**server.storage_options, "skip_instance_cache": True}
    names = file_names(workload)
    counted = RequestCounter()
    server.reset_counts()
    gc.collect()
    server_cpu = server.cpu_seconds()  # first: on RGW a walk of /proc, not the job's CPU
    cpu = os.times()
    start = time.perf_counter()
    done = None  # when commit_job() returned (a clean-up in the background may go on)
    if variant == "direct":
        fs = bare_filesystem(storage)
        counted.attach(fs)

        def direct_task(task: int) -> None:
            for name in names[task]:
                with fs.open(f"{bucket}/out/{name}", "wb") as f:
                    f.write(payload)

        with concurrent.futures.ThreadPoolExecutor(workload.executors) as pool:
            list(pool.map(direct_task, range(workload.tasks)))
    elif variant in FLOORS:
        floor_job(storage, counted, workload, variant, bucket, names, payload)
    else:
        committer = make_committer(storage, variant, bucket)
        counted.attach(committer.store_fs)
        committer.setup_job()

        def committed_task(task: int):
            attempt = committer.task_attempt(task)
            committer.setup_task(attempt)
            for file_name in names[task]:
                with committer.fs.open(attempt.path(file_name), "wb") as f:
                    f.write(payload)
            return committer.commit_task(attempt)

        with concurrent.futures.ThreadPoolExecutor(workload.executors) as pool:
            messages = list(pool.map(committed_task, range(workload.tasks)))
        committer.commit_job(messages)
        done = time.perf_counter()
        left = committer.wait_cleanup()  # untimed; its requests and CPU still count
        if left is not None:
            raise SystemExit(f"{variant} on {workload.name}: clean-up left {left}")
    seconds = (done or time.perf_counter()) - start
    now, server_now = os.times(), server.cpu_seconds()
    client = (now.user - cpu.user) + (now.system - cpu.system)
    served = None if server_cpu is None or server_now is None else server_now - server_cpu
    on_server = server.server_counts()
    check(server, bucket, workload, variant)
    if on_server is not None:
        return Run(seconds, on_server, "server", client, served)
    return Run(seconds, counted.counts, "client", client, served)


def floor_job(
    storage: dict,
    counted: RequestCounter,
    workload: Workload,
    variant: str,
    bucket: str,
    names: list[list[str]],
    payload: bytes,
) -> None:
    """A job of one of the ``FLOORS``: bare calls on the s3fs client ``direct`` writes with.

    No safety at all (no records, no markers, no listing, no retries beyond the client's
    own): each task's calls on its executor thread, task commit does nothing, job commit
    on ``COMMIT_THREADS`` threads.
    """
    fs = bare_filesystem(storage)
    counted.attach(fs)
    call = fs.call_s3  # the same client, event loop and retries as ``direct``'s writes
    if variant == "multipart-floor":

        def multipart_task(task: int) -> list[tuple[str, str, str]]:
            pending = []
            for name in names[task]:
                key = f"out/{name}"
                upload = call("create_multipart_upload", Bucket=bucket, Key=key)["UploadId"]
                part = call(
                    "upload_part",
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload,
                    PartNumber=1,
                    Body=payload,  # the whole file as one part (8 MiB files too)
                )
                pending.append((key, upload, part["ETag"]))
            return pending  # task commit: nothing

        def complete(pending: tuple[str, str, str]) -> None:
            key, upload, etag = pending
            call(
                "complete_multipart_upload",
                Bucket=bucket,
                Key=key,
                UploadId=upload,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
            )

        with concurrent.futures.ThreadPoolExecutor(workload.executors) as pool:
            messages = list(pool.map(multipart_task, range(workload.tasks)))
        with concurrent.futures.ThreadPoolExecutor(COMMIT_THREADS) as pool:
            list(pool.map(complete, [p for message in messages for p in message]))
        return

    def staged_task(task: int) -> list[str]:
        for name in names[task]:
            call("put_object", Bucket=bucket, Key=f"out/_staged/{name}", Body=payload)
        return names[task]  # task commit: nothing

    def publish(name: str) -> None:
        source = {"Bucket": bucket, "Key": f"out/_staged/{name}"}
        call("copy_object", Bucket=bucket, Key=f"out/{name}", CopySource=source)

    with concurrent.futures.ThreadPoolExecutor(workload.executors) as pool:
        messages = list(pool.map(staged_task, range(workload.tasks)))
    staged = [name for message in messages for name in message]
    with concurrent.futures.ThreadPoolExecutor(COMMIT_THREADS) as pool:
        list(pool.map(publish, staged))
    for first in range(0, len(staged), DELETE_BATCH):
        batch = [{"Key": f"out/_staged/{name}"} for name in staged[first : first + DELETE_BATCH]]
        result = call("delete_objects", Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        if result.get("Errors"):
            raise SystemExit(f"{variant}: DeleteObjects failed: {result['Errors'][:3]}")


def check(server: Target, bucket: str, workload: Workload, variant: str) -> None:
    client = server.boto3_client()
    keys, staged = [], []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="out/"):
        keys += [o["Key"] for o in page.get("Contents", []) if "/_" not in o["Key"]]
        staged += [
            o["Key"] for o in page.get("Contents", []) if o["Key"].startswith("out/_staged/")
        ]
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    expected = workload.tasks * (workload.files // workload.tasks)
    if len(keys) != expected or uploads or staged:
        raise SystemExit(
            f"{variant} on {workload.name}: {len(keys)} files (expected {expected}), "
            f"{len(uploads)} uploads left, {len(staged)} staged files left"
        )


def empty_bucket(client, bucket: str) -> None:
    """Delete what a run left (its output, any upload), then the bucket: memory back."""
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    client.delete_bucket(Bucket=bucket)


def measure(
    server: Target, workload: Workload, variants: list[str], repeat: int
) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {v: [] for v in variants}
    client = server.boto3_client()
    for round_ in range(repeat):
        for variant in variants:  # interleaved: a slow moment hits every variant alike
            bucket = f"bench-{workload.name}-{variant}-{round_}".replace("_", "-")
            client.create_bucket(Bucket=bucket)
            runs[variant].append(run_once(server, workload, variant, bucket))
            empty_bucket(client, bucket)
            server.free_deleted()
    return runs


def _median_range(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def table(workload: Workload, runs: dict[str, list[Run]]) -> list[str]:
    def base(variant: str) -> float | None:
        if variant not in runs:
            return None
        return statistics.median(r.seconds for r in runs[variant])

    floor, direct = base("multipart-floor"), base("direct")
    lines = [
        f"**{workload.describe()}**",
        "",
        "| variant | seconds (min-max) | x floor | x direct | requests/file "
        "| MiB copied | client CPU ms/file | server CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, measured in runs.items():
        seconds = statistics.median(r.seconds for r in measured)
        requests = sum(measured[0].requests.values()) / workload.files
        by = "" if measured[0].counted_by == "server" else " (client)"
        copied = measured[0].copies * workload.size / MiB
        to_floor = f"{seconds / floor:.2f}" if floor else "-"
        to_direct = f"{seconds / direct:.2f}" if direct else "-"
        client = statistics.median(r.client_cpu for r in measured) * 1000 / workload.files
        served = [r.server_cpu for r in measured if r.server_cpu is not None]
        server = f"{statistics.median(served):.2f}" if served else "-"
        lines.append(
            f"| {variant} | {_median_range([r.seconds for r in measured])} | {to_floor} "
            f"| {to_direct} | {requests:.2f}{by} | {copied:,.0f} | {client:.1f} | {server} |"
        )
    return lines


def phases(server: Target, workload: Workload, variant: str, latency_ms: float) -> list[str]:
    """The ``--phases`` table of ``variant`` on ``workload`` (one more job, not timed)."""
    bucket = f"phases-{workload.name}-{variant}"
    client = server.boto3_client()
    client.create_bucket(Bucket=bucket)
    storage = {**server.storage_options, "skip_instance_cache": True}
    committer = make_committer(storage, variant, bucket)
    payload = os.urandom(workload.size)
    names = file_names(workload)

    def write_task(attempt) -> None:
        for file_name in names[attempt.task_index]:
            with committer.fs.open(attempt.path(file_name), "wb") as f:
                f.write(payload)

    def executors(work, count: int) -> list:
        with concurrent.futures.ThreadPoolExecutor(workload.executors) as pool:
            return list(pool.map(work, range(count)))

    on_server = server.request_log() is not None
    requests = ServerLog(server) if on_server else ClientLog(committer.store_fs)
    server.log_requests(True)
    try:
        counts = phased_job(requests, committer, workload.tasks, write_task, executors, latency_ms)
    finally:
        server.log_requests(False)
    check(server, bucket, workload, variant)
    empty_bucket(client, bucket)
    by = "the server" if on_server else "the client's botocore hooks"
    title = f"{variant} on {server.name}, {workload.describe()}, counted by {by}"
    return phase_table(title, counts, workload.files)


# --- peak RSS as the files per task grow ---------------------------------------------------


def rss_child(endpoint: str, files_per_task: int) -> None:
    """In a process of its own: one magic task writing ``files_per_task`` files; print max RSS."""
    import resource

    storage = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint},
        "skip_instance_cache": True,
    }
    bucket = f"rss-{files_per_task}"
    committer = committer_for(f"s3://{bucket}/out", storage_options=storage, progress=False)
    committer.store_fs.mkdir(bucket)
    committer.setup_job()
    attempt = committer.task_attempt(0)
    committer.setup_task(attempt)
    payload = os.urandom(1 * MiB)
    for n in range(files_per_task):
        with committer.fs.open(attempt.path(f"f{n:05d}"), "wb") as f:
            f.write(payload)
    committer.commit_job([committer.commit_task(attempt)])
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


def rss_rows(server: EmbeddedS3Server, counts: list[int]) -> list[str]:
    lines = [
        "**Peak RSS of the writing process (one task, files of 1 MiB, magic committer)**",
        "",
        "| files per task | peak RSS MiB |",
        "|---:|---:|",
    ]
    for count in counts:
        result = subprocess.run(
            [sys.executable, __file__, "--rss-child", server.endpoint_url, str(count)],
            capture_output=True,
            text=True,
            check=True,
        )
        lines.append(f"| {count:,} | {int(result.stdout.split()[-1])} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads, one run each")
    parser.add_argument(
        "--only",
        help="workloads, comma-separated: small,large,one-executor,many (default), wide, newcomer",
    )
    parser.add_argument(
        "--servers", default=",".join(SERVERS), help="comma-separated: moto,stub,rgw"
    )
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help="comma-separated")
    parser.add_argument("--repeat", type=int, help="runs per variant (median); default 3, quick 1")
    parser.add_argument("--executors", type=int, default=4, help="tasks running at once")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added to every request")
    parser.add_argument("--copy-mb-per-s", type=float, default=10.0, help="moto's copy speed")
    parser.add_argument(
        "--phases",
        action="store_true",
        help="requests per file by phase and purpose, per committer (small and large)",
    )
    parser.add_argument("--rss", action="store_true", help="also measure peak RSS (subprocesses)")
    parser.add_argument(
        "--busy-core",
        action="store_true",
        help="keep one core busy in a separate process during every run of every variant "
        "(a loaded machine: an executor encoding Parquet beside the writes)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--rss-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child[0], int(args.rss_child[1]))
        return
    repeat = args.repeat or (1 if args.quick else 3)
    every = workloads(args.quick, args.executors)
    names = args.only.split(",") if args.only else DEFAULT_WORKLOADS
    if set(names) - set(every):
        raise SystemExit(f"--only: unknown {', '.join(sorted(set(names) - set(every)))}")
    chosen = {name: every[name] for name in names}
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(
            f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(VARIANTS)}"
        )
    servers = args.servers.split(",")
    if set(servers) - set(SERVERS):  # refused before any server starts
        unknown = ", ".join(sorted(set(servers) - set(SERVERS)))
        raise SystemExit(f"--servers: unknown {unknown}; choose from {', '.join(SERVERS)}")
    report: dict = {"latency_ms": args.latency_ms, "copy_mb_per_s": args.copy_mb_per_s}
    if args.busy_core:
        report["busy_core"] = True
    with busy_core(args.busy_core):
        run_servers(servers, chosen, variants, repeat, args, report)
    if args.json:
        print(json.dumps(report, indent=2))


@contextlib.contextmanager
def busy_core(wanted: bool) -> Iterator[None]:
    """With ``wanted``: a child process spinning on one core until the block ends.

    The same load for every variant of the run (it starts before the first server and
    stops after the last), so the ratios compare like with like; it is another process,
    as an executor's own computation would be, not a thread competing for our GIL.
    """
    if not wanted:
        yield
        return
    spinner = subprocess.Popen(
        # Spins while this process lives: it ends by itself if this one is killed.
        [sys.executable, "-c", f"import os\nwhile os.getppid() == {os.getpid()}: pass"],
    )
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def run_servers(
    servers: list[str],
    chosen: dict[str, Workload],
    variants: list[str],
    repeat: int,
    args,
    report: dict,
) -> None:
    """Each server of ``servers`` in turn: its tables, and its numbers into ``report``."""
    for name in servers:
        with started(name, args.latency_ms, args.copy_mb_per_s) as server:
            if server is None:
                continue
            report[name] = run_server(server, chosen, variants, repeat, args)
            if args.rss and isinstance(server.endpoint, EmbeddedS3Server):
                server.endpoint.set_latency(0)
                rss = rss_rows(server.endpoint, [10, 100] if args.quick else [20, 200])
                report[name]["rss"] = rss
                if not args.json:
                    print("\n".join([*rss, ""]), flush=True)


def run_server(
    server: Target, chosen: dict[str, Workload], variants: list[str], repeat: int, args
) -> dict:
    """Every workload on one server: the tables printed as they come, the numbers returned."""
    skipped = [v for v in variants if v in UNSUPPORTED.get(server.name, ())]
    runnable = [v for v in variants if v not in skipped]
    say = (
        (lambda *lines: None) if args.json else (lambda *lines: print("\n".join(lines), flush=True))
    )
    say(
        f"## {server.name}: {server.describe}; median of {repeat} run(s)"
        + (f"; skipped here (no server-side copy): {', '.join(skipped)}" if skipped else ""),
        "",
    )
    server.warm_up()
    report: dict = {}
    for workload in chosen.values():
        runs = measure(server, workload, runnable, repeat)
        report[workload.name] = {
            v: {
                "seconds": [r.seconds for r in rs],
                "client_cpu": [r.client_cpu for r in rs],
                "server_cpu": [r.server_cpu for r in rs],
                "requests": dict(rs[0].requests),
                "counted_by": rs[0].counted_by,
                "files": workload.files,
            }
            for v, rs in runs.items()
        }
        say(*table(workload, runs), "")
    if args.phases:  # on the workloads of the targets (256 KiB and 8 MiB files)
        at_sizes = [w for w in chosen.values() if w.name in ("small", "large")]
        for workload in at_sizes or list(chosen.values())[:1]:
            for variant in (v for v in COMMITTERS if v in runnable):
                say(*phases(server, workload, variant, args.latency_ms), "")
    return report


if __name__ == "__main__":
    main()
