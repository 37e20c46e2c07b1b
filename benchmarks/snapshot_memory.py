"""Resolving a snapshot of up to 1,000,000 files: its time, requests and memory.

    python benchmarks/snapshot_memory.py --quick             # 10,000 and 100,000 files (~1 min)
    python benchmarks/snapshot_memory.py                     # 10,000 to 1,000,000 files
    python benchmarks/snapshot_memory.py --store s3          # on moto (embedded, 127.0.0.1)

The question (issue "readers can read exactly the committed jobs"): does
``magicfs.snapshot(dest)`` stay flat in memory, and cost requests per job, not per file?

Each point writes the job commit records a job of N files would leave (built with
magicfs's own record writer, :func:`magicfs.records.job_record.write_file_list`, and
:class:`~magicfs.records.job_record.JobRecord`), as one job or as two ``append`` jobs of
N/2 files each that both name the first tenth of their paths (the snapshot then keeps a
spool of the paths it yielded, to yield each once). No data file is written: the
snapshot never looks at them. Then, in a fresh child process (so its peak RSS is the
reader's alone): ``magicfs.snapshot(dest)`` and one pass over its files (``for path in
snap``), timed; the process's peak RSS (``ru_maxrss``) against its RSS before the call,
and, on S3, the requests the pass made (the client's own count of API calls).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

CHILD = r"""
import json, resource, sys, time
import magicfs
url, options = sys.argv[1], json.loads(sys.argv[2])
calls = []
if url.startswith("s3://"):
    import s3fs
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.s3  # the client, made now
    fs.s3.meta.events.register("before-call.s3", lambda **kw: calls.append(kw["model"].name))
else:
    import fsspec
    fs = fsspec.filesystem("file")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
snap = magicfs.snapshot(url, fs=fs)
count = sum(1 for _ in snap)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"files": count, "jobs": len(snap.jobs), "seconds": seconds,
                  "rss_before_mb": before / 1024, "peak_mb": peak / 1024,
                  "requests": len(calls)}))
"""


def write_records(fs: Any, dest: str, files: int, jobs: int) -> None:
    """The records ``jobs`` append jobs of ``files`` files in all would leave at ``dest``."""
    from magicfs.paths import join
    from magicfs.records.job_record import (
        CommittedFile,
        JobRecord,
        file_list_name,
        head_name,
        records_dir,
        write_file_list,
    )

    directory = records_dir(dest)
    fs.makedirs(directory, exist_ok=True)
    each = files // jobs
    shared = each // 10 if jobs > 1 else 0  # names every job writes
    for number in range(1, jobs + 1):
        job_id = f"bench-{number}"

        def names(n: int = number) -> Any:
            for i in range(each):
                tag = "shared" if i < shared else f"job{n}"
                yield CommittedFile(f"year={2000 + i % 25}/part-{tag}-{i:07d}.parquet", 4096)

        with fs.open(join(directory, file_list_name(number, job_id)), "wb") as out:
            count, size = write_file_list(out, names())
        JobRecord(job_id, "append", count, size, file_list_name(number, job_id)).save(
            fs, join(directory, head_name(number, job_id))
        )


def one_point(url: str, options: dict[str, Any], fs: Any, dest: str, n: int, jobs: int) -> dict:
    write_records(fs, dest, n, jobs)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, json.dumps(options)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    expected = n if jobs == 1 else n - (jobs - 1) * (n // jobs // 10)
    assert result["files"] == expected, (result, expected)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 and 100,000 files only")
    parser.add_argument("--files", default="10000,100000,1000000")
    parser.add_argument("--store", choices=["local", "s3"], default="local")
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [int(n) for n in args.files.split(",")]
    rows = []
    if args.store == "s3":
        import s3fs

        from magicfs.integrations.embedded_s3 import EmbeddedS3Server

        server = EmbeddedS3Server()
        server.__enter__()
        options = server.storage_options
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        fs.mkdir("bench")
    else:
        server, options = None, {}
        import fsspec

        fs = fsspec.filesystem("file")
        root = tempfile.mkdtemp(prefix="magicfs-snapshot-bench-")
    try:
        for n in sizes:
            for jobs in (1, 2):
                if args.store == "s3":
                    dest = f"bench/out-{n}-{jobs}"
                    url = f"s3://{dest}"
                else:
                    dest = os.path.join(root, f"out-{n}-{jobs}")
                    url = f"file://{dest}"
                result = one_point(url, options, fs, dest, n, jobs)
                rows.append((n, jobs, result))
                print(
                    f"{n:>9,} files in {jobs} job(s): {result['files']:>9,} yielded in "
                    f"{result['seconds']:6.2f}s, peak RSS {result['peak_mb']:6.1f} MB "
                    f"(before: {result['rss_before_mb']:5.1f} MB)"
                    + (f", {result['requests']} requests" if args.store == "s3" else ""),
                    flush=True,
                )
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"this process's own peak RSS: {own} MB")
    print(f"finished {time.strftime('%Y-%m-%d %H:%M:%S')}")


if __name__ == "__main__":
    main()
