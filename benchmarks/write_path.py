"""Write-path benchmark: one large file through magicfs vs plain s3fs vs boto3, same server.

    python benchmarks/write_path.py            # 256 MiB and 1 GiB, 3 runs each
    python benchmarks/write_path.py --quick    # 64 MiB and 128 MiB, 1 run

Every measurement runs in a fresh child process so that its peak RSS (``ru_maxrss``
above the child's baseline after imports) belongs to that writer alone. The data is
generated 1 MiB at a time, so no writer is handed the whole file at once:

* ``magicfs``: ``MagicFileSystem.open(magic path, "wb")`` + ``close()`` (parts
  upload in the background, ``.pending`` saved), then the one
  ``CompleteMultipartUpload`` job commit would make: the time until the bytes are
  visible, as for the others;
* ``magicfs-close``: the same, timed only until ``close()`` returns — the writer's own
  cost; the completion is job commit's (on S3 a metadata operation, while moto copies
  the whole object in Python: several seconds per GiB in every other row);
* ``magicfs-close-no-checksum``: ``magicfs-close`` with ``checksum=None``: what the
  parts' CRC32 checksums (the default, :mod:`magicfs.stores.s3.checksums`) cost the writer;
* ``s3fs``: plain ``S3FileSystem.open(path, "wb")`` (autocommit; 50 MiB blocks uploaded
  one after another);
* ``boto3``: ``upload_fileobj`` reading a file on local disk (written before timing
  starts), default TransferConfig (8 MiB parts, 10 threads). A seekable source is how
  it is normally fed; given a non-seekable stream instead, boto3 buffers far ahead
  (2.7 GiB of RSS for a 1 GiB file in our first run).

The server is moto in its own process on 127.0.0.1 (reset between runs): absolute
MB/s measure this machine and moto, the ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
CHUNK = MiB
METHODS = ("magicfs", "magicfs-close", "magicfs-close-no-checksum", "s3fs", "boto3")


def _chunks(size: int):
    block = os.urandom(CHUNK)
    for start in range(0, size, CHUNK):
        yield block[: min(CHUNK, size - start)]


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(method: str, size: int, endpoint: str) -> dict:
    """Run one measurement in this process; returns seconds and peak RSS growth."""
    import s3fs

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from magicfs import MagicFileSystem
    from magicfs.integrations.local_server import s3_boto3_client, s3_storage_options
    from magicfs.records import SinglePendingCommit

    options = s3_storage_options(endpoint)
    fs = s3fs.S3FileSystem(**options)
    client = s3_boto3_client(endpoint)
    fs.ls("bench")  # connect before measuring
    local = tempfile.NamedTemporaryFile(suffix=".bin")  # noqa: SIM115 - lives until exit
    if method == "boto3":
        for chunk in _chunks(size):
            local.write(chunk)
        local.flush()
    baseline = _rss_mib()
    start = time.perf_counter()
    if method.startswith("magicfs"):
        magic = MagicFileSystem(fs=fs, checksum=None if "no-checksum" in method else "CRC32")
        path = "bench/out/__magic/job-1/task-1/__base/big.bin"
        with magic.open(path, "wb") as f:
            for chunk in _chunks(size):
                f.write(chunk)
        closed = time.perf_counter()
        commit = SinglePendingCommit.load(fs, path + ".pending")
        magic.view.store.run(
            magic.view.store.acomplete_upload(
                commit.bucket, commit.destination_key, commit.upload_id, commit.etags
            )
        )
        key = "out/big.bin"
    elif method == "s3fs":
        with fs.open("bench/plain/big.bin", "wb") as f:
            for chunk in _chunks(size):
                f.write(chunk)
        key = "plain/big.bin"
    else:
        with open(local.name, "rb") as source:
            client.upload_fileobj(source, "bench", "boto3/big.bin")
        key = "boto3/big.bin"
    seconds = (closed if method.startswith("magicfs-close") else time.perf_counter()) - start
    assert client.head_object(Bucket="bench", Key=key)["ContentLength"] == size
    return {"seconds": seconds, "peak_rss_mib": _rss_mib() - baseline}


def measure(method: str, size: int, server) -> dict:
    server.reset()
    server.boto3_client().create_bucket(Bucket="bench")
    result = subprocess.run(
        [sys.executable, __file__, "--child", method, str(size), server.endpoint_url],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 and 128 MiB, one run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        method, size, endpoint = args.child
        print(json.dumps(child(method, int(size), endpoint)))
        return

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from magicfs.integrations.embedded_s3 import EmbeddedS3Server

    sizes = (64 * MiB, 128 * MiB) if args.quick else (256 * MiB, 1024 * MiB)
    runs = 1 if args.quick else args.runs
    rows = []
    with EmbeddedS3Server() as server:
        for size in sizes:
            results = {m: [measure(m, size, server) for _ in range(runs)] for m in METHODS}
            for method in METHODS:
                seconds = statistics.median(r["seconds"] for r in results[method])
                rss = max(r["peak_rss_mib"] for r in results[method])
                rows.append((size, method, seconds, rss))
    print_table(rows, runs)


def print_table(rows: list[tuple[int, str, float, float]], runs: int) -> None:
    print(f"\nwrite path, median of {runs} run(s); moto server on 127.0.0.1 in its own process\n")
    print(
        f"{'size':>8} | {'writer':<13} | {'seconds':>8} | {'MB/s':>7} | "
        f"{'vs s3fs':>7} | {'vs boto3':>8} | {'peak RSS MiB':>12}"
    )
    print("-" * 83)
    by_key = {(size, method): seconds for size, method, seconds, _ in rows}
    for size, method, seconds, rss in rows:
        throughput = size / MiB / seconds
        vs_s3fs = by_key[(size, "s3fs")] / seconds
        vs_boto3 = by_key[(size, "boto3")] / seconds
        print(
            f"{size // MiB:>5}MiB | {method:<13} | {seconds:>8.2f} | {throughput:>7.1f} | "
            f"{vs_s3fs:>6.2f}x | {vs_boto3:>7.2f}x | {rss:>12.0f}"
        )


if __name__ == "__main__":
    main()
