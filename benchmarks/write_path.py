"""Write-path benchmark: one large file through magicfs vs boto3's ``upload_fileobj``.

    python benchmarks/write_path.py                       # moto and RGW; 64, 128, 256 MiB; 3 runs
    python benchmarks/write_path.py --quick               # moto, 64 MiB, one run
    python benchmarks/write_path.py --servers rgw --sizes 128,256 --runs 5
    python benchmarks/write_path.py --unsigned-payload    # both writers: no payload SHA-256

Both sides are timed **until the bytes are visible** at their final key, with part
checksums declared, on the same server:

* ``magicfs``: the magic committer, as a job uses it: ``open(task path, "wb")``, 1 MiB
  ``write()`` calls, ``close()`` (the parts upload in the background while the caller
  writes; the ``.pending`` record), ``commit_task`` and ``commit_job`` (the completion,
  with the parts' CRC32 checksums, then ``_SUCCESS`` and the job's clean-up).
  ``setup_job``/``setup_task`` run before the clock starts (once per job, not per file).
  Default options: 8 MiB parts, 4 parts in flight, ``checksum="CRC32"``;
* ``magicfs-bg``: the same with ``cleanup="background"``: until ``commit_job()``
  returns, the object visible and ``_SUCCESS`` written, the job's clean-up going on after;
* ``magicfs-close``: the same job, its time until ``close()`` returns: the writer's own
  cost (task and job commit are then the difference to ``magicfs``);
* ``boto3``: ``upload_fileobj`` of the same bytes from a file on local disk (written
  before timing starts: a seekable source is how it is normally fed), the default
  ``TransferConfig`` (8 MiB parts, 10 threads) and botocore's default
  ``request_checksum_calculation="when_supported"``, which declares CRC32 on the upload
  and sends each part's CRC32.

``--unsigned-payload`` gives both writers botocore's ``s3={"payload_signing_enabled":
False}``: over plain HTTP botocore otherwise hashes every part's bytes (SHA-256) for its
signature, on the thread that signs (magicfs: s3fs's one IO loop; boto3: its 10
threads); over HTTPS a part that carries its checksum is not hashed at all, so this is
the write path as an HTTPS store sees it, still on loopback HTTP. The parts still carry
their CRC32, which the server checks.

The difference left between the two: magicfs stages 4 parts at once per file (its
``parts_in_flight``, bounded memory), boto3 10 (``max_concurrency``). Each measurement
runs in a fresh child process, so its peak RSS (``ru_maxrss`` above the child's
baseline once its client is made and connected) belongs to that writer alone, and
garbage collection walks that writer's objects only: a magicfs child makes no boto3
client, whose second copy of the S3 model doubled the heap a full collection walks
(about 90 ms on s3fs's IO loop, once per large upload, while no part is sent; this
benchmark's own client put it there until this version). The ``checksums`` column is what
the child saw on the wire (botocore hooks): the upload's declared algorithm and how many
parts carried a checksum. Servers: ``moto`` (in its own process, reset between runs)
and ``rgw`` (Ceph RGW, ``tests/helpers/rgw.py``, a fresh bucket per run and the deleted
data garbage-collected after it; skipped with a message when Ceph is not installed),
both on 127.0.0.1 with no added latency: absolute MB/s measure this machine and the
server, the ratios are the result.

Two ratios to boto3 are printed: ``x boto3``, boto3's median seconds over the writer's,
and ``x boto3, paired``, the median (and range) of the per-run ratios, each run of a
writer against boto3's run in the same turn (the writers one after the other, boto3 last in
one turn and first in the next): a slow minute of the machine or the server then
weighs on both sides of a pair. ``after last part ms`` is the median time from the last
UploadPart's reply to the writer's end: for boto3 its completion, for magicfs the task
and job commit that follow the upload (the part that does not grow with the file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
CHUNK = MiB
METHODS = ("magicfs", "magicfs-bg", "magicfs-close", "boto3")
#: Set for the children by ``--unsigned-payload``.
UNSIGNED_PAYLOAD = "MAGICFS_BENCH_UNSIGNED_PAYLOAD"


def _chunks(size: int) -> Iterator[bytes]:
    """``size`` bytes in 1 MiB ``bytes`` objects, each a new one as a real producer makes
    (the same object every time would let a writer that keeps the caller's bytes, rather
    than copying them, hold almost no memory of its own)."""
    block = memoryview(os.urandom(CHUNK))
    for start in range(0, size, CHUNK):
        yield bytes(block[: min(CHUNK, size - start)])  # a copy: a new object


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class WireChecksums:
    """What the requests of a botocore client said about checksums (a before-call hook),
    and when its last part was uploaded (an after-call hook)."""

    def __init__(self) -> None:
        #: When the last part's reply came (``perf_counter``).
        self.last_part = 0.0
        self.declared: set[str] = set()
        self.parts = 0
        self.parts_with_checksum = 0

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-call.s3", self._seen)
        client.meta.events.register("after-call.s3.UploadPart", self._part_done)

    def _part_done(self, **kwargs: Any) -> None:
        self.last_part = time.perf_counter()

    def _seen(self, model: Any, params: dict[str, Any], **kwargs: Any) -> None:
        headers = {k.lower(): v for k, v in params.get("headers", {}).items()}
        if model.name == "CreateMultipartUpload":
            self.declared.add(headers.get("x-amz-checksum-algorithm", "none"))
        if model.name == "UploadPart":
            # A header set by the caller, or one botocore will add (header or trailer).
            resolved = (params.get("context", {}).get("checksum") or {}).get("request_algorithm")
            self.parts += 1
            self.parts_with_checksum += bool(
                resolved or any(h.startswith("x-amz-checksum-") for h in headers)
            )

    def describe(self) -> str:
        return f"{','.join(sorted(self.declared))}; {self.parts_with_checksum}/{self.parts} parts"


def _magicfs(
    size: int, options: dict[str, Any], method: str, wire: WireChecksums
) -> tuple[float, float, float, int]:
    """Seconds to the point ``method`` times, that point (``perf_counter``), the RSS once
    the job is set up (its client made and connected, as boto3's is before its clock
    starts) and the size visible."""
    from magicfs import committer_for

    cleanup = "background" if method == "magicfs-bg" else "inline"
    committer = committer_for(
        "s3://bench/out", committer="magic", storage_options=options, cleanup=cleanup
    )
    wire.attach(committer.store_fs.s3)
    committer.setup_job()
    attempt = committer.task_attempt(0)
    committer.setup_task(attempt)
    baseline = _rss_mib()
    start = time.perf_counter()
    with committer.fs.open(attempt.path("big.bin"), "wb") as f:
        for chunk in _chunks(size):
            f.write(chunk)
    closed = time.perf_counter()
    committer.commit_job([committer.commit_task(attempt)])
    done = time.perf_counter()
    committer.wait_cleanup()
    written = committer.store_fs.info("bench/out/big.bin", refresh=True)["size"]
    ended = closed if method == "magicfs-close" else done
    return ended - start, ended, baseline, int(written)


def _boto3(size: int, client: Any, wire: WireChecksums) -> tuple[float, float]:
    wire.attach(client)
    with tempfile.NamedTemporaryFile(suffix=".bin") as local:
        for chunk in _chunks(size):
            local.write(chunk)
        local.flush()
        start = time.perf_counter()
        with open(local.name, "rb") as source:
            client.upload_fileobj(source, "bench", "out/big.bin")
        ended = time.perf_counter()
        return ended - start, ended


def child(method: str, size: int, endpoint: str, credentials: tuple[str, str]) -> dict[str, Any]:
    """Run one measurement in this process: seconds, peak RSS growth, checksums sent."""
    sys.path.insert(0, ROOT)
    from magicfs.integrations.local_server import s3_boto3_client, s3_storage_options

    options = {**s3_storage_options(endpoint, credentials), "skip_instance_cache": True}
    config: dict[str, Any] = {}
    if os.environ.get(UNSIGNED_PAYLOAD):
        config = {"s3": {"payload_signing_enabled": False}}
        options["config_kwargs"] = config
    wire = WireChecksums()
    if method == "boto3":
        client = s3_boto3_client(endpoint, credentials, **config)
        client.list_objects_v2(Bucket="bench", MaxKeys=1)  # connect before measuring
        baseline = _rss_mib()
        seconds, ended = _boto3(size, client, wire)
        written = client.head_object(Bucket="bench", Key="out/big.bin")["ContentLength"]
    else:
        # No boto3 client here: its own copy of the S3 model would double the objects the
        # garbage collector walks, and a full collection stops s3fs's IO loop mid-upload.
        seconds, ended, baseline, written = _magicfs(size, options, method, wire)
    assert written == size, f"{method}: {written} bytes visible, {size} written"
    return {
        "seconds": seconds,
        "after_last_part": ended - wire.last_part,
        "peak_rss_mib": _rss_mib() - baseline,
        "wire": wire.describe(),
    }


def measure(method: str, size: int, server: Any) -> dict[str, Any]:
    """One measurement in a fresh child, on a fresh ``bench`` bucket of ``server``."""
    client = server.boto3_client()
    if hasattr(server, "reset"):
        server.reset()
    client.create_bucket(Bucket="bench")
    try:
        argv = [method, str(size), server.endpoint_url, json.dumps(server.credentials)]
        result = subprocess.run(
            [sys.executable, __file__, "--child", *argv], capture_output=True, text=True
        )
        if result.returncode:
            raise SystemExit(f"{method} ({size // MiB} MiB) failed:\n{result.stderr[-3000:]}")
        return dict(json.loads(result.stdout.strip().splitlines()[-1]))
    finally:
        _empty(client)
        if hasattr(server, "collect_garbage"):
            server.collect_garbage()


def _empty(client: Any) -> None:
    for upload in client.list_multipart_uploads(Bucket="bench").get("Uploads", []):
        key, upload_id = upload["Key"], upload["UploadId"]
        client.abort_multipart_upload(Bucket="bench", Key=key, UploadId=upload_id)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench"):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket="bench", Delete={"Objects": keys, "Quiet": True})
    client.delete_bucket(Bucket="bench")


@contextlib.contextmanager
def started(name: str) -> Iterator[Any]:
    """The server ``name`` on 127.0.0.1, no added latency; ``None`` without Ceph (rgw)."""
    sys.path.insert(0, ROOT)
    if name == "moto":
        from magicfs.integrations.embedded_s3 import EmbeddedS3Server

        with EmbeddedS3Server() as server:
            yield server
        return
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from helpers.rgw import RgwServer, missing_programs

    if missing := missing_programs():
        print(f"rgw: skipped, Ceph is not installed ({', '.join(missing)})", file=sys.stderr)
        yield None
        return

    with (
        tempfile.TemporaryDirectory(prefix="magicfs-write-path-") as workdir,
        RgwServer(pathlib.Path(workdir), tls=False) as rgw,
    ):
        measure("boto3", 16 * MiB, rgw)  # a fresh cluster creates its pools on first use
        yield rgw


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="moto, 64 MiB, one run")
    parser.add_argument("--servers", default="moto,rgw", help="comma-separated: moto,rgw")
    parser.add_argument("--sizes", default="64,128,256", help="MiB, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="runs per size and writer (median)")
    parser.add_argument(
        "--unsigned-payload",
        action="store_true",
        help="both writers: no SHA-256 of the parts (as over HTTPS; module docstring)",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.unsigned_payload:
        os.environ[UNSIGNED_PAYLOAD] = "1"  # inherited by every child
    if args.child:
        method, size, endpoint, credentials = args.child
        print(json.dumps(child(method, int(size), endpoint, tuple(json.loads(credentials)))))
        return
    servers = ["moto"] if args.quick else args.servers.split(",")
    if unknown := sorted(set(servers) - {"moto", "rgw"}):
        raise SystemExit(f"--servers: unknown {', '.join(unknown)}; choose from moto, rgw")
    sizes = [64 * MiB] if args.quick else [int(s) * MiB for s in args.sizes.split(",")]
    runs = 1 if args.quick else args.runs
    for name in servers:
        with started(name) as server:
            if server is None:
                continue
            rows = []
            for size in sizes:
                results: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
                for run in range(runs):  # interleaved: a slow moment hits every writer alike
                    # boto3 last in one turn, first in the next: no writer always follows it.
                    for method in METHODS if run % 2 == 0 else METHODS[::-1]:
                        results[method].append(measure(method, size, server))
                boto3 = [r["seconds"] for r in results["boto3"]]
                rows += [summary(size, method, results[method], boto3) for method in METHODS]
            print_table(name + (", unsigned payload" if args.unsigned_payload else ""), rows, runs)


def summary(
    size: int, method: str, results: list[dict[str, Any]], boto3: list[float]
) -> dict[str, Any]:
    """One row: the median seconds, and the median of the per-run ratios to boto3
    (``boto3[i]`` ran in the same turn as this writer's run ``i``: a slow minute of the
    machine or the server weighs on both sides of a pair, where it can fall on one side
    only of the ratio of the two medians)."""
    seconds = [r["seconds"] for r in results]
    paired = [b / s for b, s in zip(boto3, seconds, strict=True)]
    return {
        "size": size,
        "method": method,
        "seconds": statistics.median(seconds),
        "range": (min(seconds), max(seconds)),
        "after_last_part": statistics.median(r["after_last_part"] for r in results),
        "paired": statistics.median(paired),
        "paired_range": (min(paired), max(paired)),
        "rss": max(r["peak_rss_mib"] for r in results),
        "wire": results[0]["wire"],
    }


def print_table(server: str, rows: list[dict[str, Any]], runs: int) -> None:
    print(f"\n### {server}: one file, 1 MiB writes, until visible; median of {runs} run(s)\n")
    columns = (
        "size | writer | seconds (min-max) | MB/s | x boto3 | x boto3, paired (min-max) "
        "| after last part ms | peak RSS MiB | checksums"
    )
    print(f"| {columns} |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    boto3 = {r["size"]: r["seconds"] for r in rows if r["method"] == "boto3"}
    for r in rows:
        low, high = r["range"]
        print(
            f"| {r['size'] // MiB} MiB | {r['method']} | {r['seconds']:.2f} ({low:.2f}-{high:.2f}) "
            f"| {r['size'] / MiB / r['seconds']:.0f} | {boto3[r['size']] / r['seconds']:.2f}x "
            f"| {r['paired']:.2f}x ({r['paired_range'][0]:.2f}-{r['paired_range'][1]:.2f}) "
            f"| {_after_last_part(r)} "
            f"| {r['rss']:.0f} | {r['wire']} |"
        )


def _after_last_part(row: dict[str, Any]) -> str:
    """Milliseconds from the last part's reply to the writer's end (none for
    ``magicfs-close``: its ``close()`` returns while the last parts still upload)."""
    return "-" if row["method"] == "magicfs-close" else f"{row['after_last_part'] * 1000:.0f}"


if __name__ == "__main__":
    main()
