"""Job commit on Azure Blob (Azurite): the block-list committer against the manifest committer.

    python benchmarks/azure_commit.py                   # 1,000 and 2,000 files of 64 KiB
    python benchmarks/azure_commit.py --quick           # 100 and 500 files (a smoke run)
    python benchmarks/azure_commit.py --files 1000,5000 # what the issue asked; see below

Azurite keeps blobs and blocks in an in-memory database (LokiJS) whose requests cost
more the more it holds: a task commit of 100 files took 10 s with 3,000 files' blobs and
blocks stored and 3 s once most were gone, and at 5,000 files one Azurite sat at 100%
CPU for minutes without answering (so the default stops at 2,000). That cost is the
emulator's and hits both committers; the ratios of one run are the result.

What is measured: one job per (committer, size) — tasks of ``--files-per-task`` (100)
files each, written through ``committer.fs`` under the task's paths on ``--executors``
threads (8), then every task commit, then ``commit_job(messages)``, which alone is
timed. The two committers:

* ``block-list`` (what ``committer_for`` picks for ``abfs://``): each file is blocks
  staged on its final blob; job commit publishes each with one Put Block List. No byte
  is copied.
* ``manifest`` (``committer="manifest"``): files are written to the task's directory;
  job commit renames each, which on Azure is a server-side copy (Copy Blob) plus a
  delete per file: O(bytes).

Reported per run: job-commit seconds; Azure requests per file during job commit alone
and over the whole job (setup, writes, task commits, job commit); the server-side
copies during job commit and the bytes they copy (copies x file size: 0 for block-list);
and the manifest committer's job-commit time over block-list's at the same size.

Requests are counted on the server: each run gets a FRESH Azurite (Blob service, in
memory, on 127.0.0.1, ``--skipApiVersionCheck --loose``) started by this script with
``--debug <its own log>``, where every request it dispatches logs one line holding
``Operation=<name>`` (``BlockBlob_StageBlock``, ``BlockBlob_CommitBlockList``,
``Blob_StartCopyFromURL``, ``Blob_Delete``...). A fresh server per run also keeps the
runs fair: Azurite's in-memory store slows down as it fills. Every run checks its
output with adlfs ``find``: exactly the N files with their sizes, plus ``_SUCCESS``,
nothing else; a wrong output fails the run loudly.

Absolute numbers measure this machine (2 cores, shared with other work) and Azurite (a
single Node process, which also pays for the debug log); the ratios measured in the
same process tree are the result. Azurite copies at memory speed, unlike Azure, so the
manifest committer's O(bytes) copies cost it less here than they would on Azure.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import adlfs  # noqa: E402

from magicfs import committer_for  # noqa: E402
from magicfs.integrations.azurite import LocalAzurite, azurite_binary  # noqa: E402

KiB = 1 << 10
CONTAINER = "bench"
COMMITTERS = ("block-list", "manifest")
BASELINE = "block-list"
COPY_OPERATIONS = ("Blob_StartCopyFromURL", "Blob_CopyFromURL")


@dataclass
class Run:
    files: int
    committer: str
    commit_seconds: float
    commit_requests: Counter = field(default_factory=Counter)
    job_requests: Counter = field(default_factory=Counter)
    file_size: int = 0
    data_copies: int = 0  # server-side copies onto an output file during job commit

    @property
    def copies(self) -> int:
        """Every server-side copy during job commit (output files and the committer's
        own records, which it writes to a temporary name and renames)."""
        return sum(self.commit_requests[op] for op in COPY_OPERATIONS)


def run_job(
    name: str, files: int, per_task: int, file_size: int, executors: int, threads: int
) -> Run:
    """One job of ``files`` files with committer ``name`` on an Azurite of its own."""
    payload = os.urandom(file_size)
    tasks = -(-files // per_task)
    with (
        tempfile.TemporaryDirectory(prefix="magicfs-azurite-") as workdir,
        LocalAzurite(pathlib.Path(workdir)) as azurite,
    ):
        fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **azurite.storage_options)
        fs.mkdir(CONTAINER)
        dest = f"abfs://{CONTAINER}/out"
        options = {"threads": threads, "progress": False, "fs": fs}
        committer = (
            committer_for(dest, **options)  # picks block-list for abfs://
            if name == "block-list"
            else committer_for(dest, committer=name, **options)
        )
        if committer.name != name:
            raise AssertionError(f"asked for {name}, got the {committer.name} committer")
        names = {
            f"part-{t:04d}-{n:05d}.bin"
            for t in range(tasks)
            for n in range(min(per_task, files - t * per_task))
        }
        job_start = len(azurite.operations())
        committer.setup_job()

        def task(index: int):
            attempt = committer.task_attempt(index)
            committer.setup_task(attempt)
            for n in range(min(per_task, files - index * per_task)):
                with committer.fs.open(attempt.path(f"part-{index:04d}-{n:05d}.bin"), "wb") as f:
                    f.write(payload)
            return attempt

        with concurrent.futures.ThreadPoolExecutor(executors) as pool:
            attempts = list(pool.map(task, range(tasks)))
        messages = [committer.commit_task(attempt) for attempt in attempts]
        commit_start = len(azurite.operations())
        start = time.perf_counter()
        summary = committer.commit_job(messages)
        seconds = time.perf_counter() - start
        operations = azurite.operations()
        if summary.files != files:
            raise AssertionError(f"{name}: commit_job reports {summary.files} files, not {files}")
        check_output(fs, name, names, file_size)
        outputs = {f"out/{n}" for n in names}
        return Run(
            files,
            name,
            seconds,
            Counter(op for op, _ in operations[commit_start:]),
            Counter(op for op, _ in operations[job_start:]),
            file_size,
            sum(
                op in COPY_OPERATIONS and blob in outputs for op, blob in operations[commit_start:]
            ),
        )


def check_output(fs, committer: str, names: set[str], size: int) -> None:
    """Exactly ``names``, each of ``size`` bytes, plus ``_SUCCESS``; nothing else."""
    fs.invalidate_cache()
    root = f"{CONTAINER}/out"
    found = {
        path[len(root) + 1 :]: info
        for path, info in fs.find(root, detail=True).items()
        if info.get("type") != "directory"
    }
    missing = sorted(names - found.keys())
    extra = sorted(found.keys() - names - {"_SUCCESS"})
    wrong = sorted(n for n in names & found.keys() if found[n]["size"] != size)
    problems = []
    if "_SUCCESS" not in found:
        problems.append("no _SUCCESS")
    if missing:
        problems.append(f"{len(missing)} files missing, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} unexpected files, e.g. {extra[:3]}")
    if wrong:
        problems.append(
            f"{len(wrong)} files of the wrong size, e.g. {wrong[0]}: "
            f"{found[wrong[0]]['size']} bytes, not {size}"
        )
    if problems:
        raise AssertionError(f"{committer}: wrong output at abfs://{root}: " + "; ".join(problems))


def table(runs: list[Run]) -> list[str]:
    lines = [
        "| files | committer | job commit s | requests/file (commit) | requests/file (job) "
        "| copies: files (+ records) | bytes copied | commit time vs block-list |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    baseline = {r.files: r.commit_seconds for r in runs if r.committer == BASELINE}
    for r in runs:
        copied = r.data_copies * r.file_size
        lines.append(
            f"| {r.files:,} | {r.committer} | {r.commit_seconds:.2f} | "
            f"{sum(r.commit_requests.values()) / r.files:.2f} | "
            f"{sum(r.job_requests.values()) / r.files:.2f} | "
            f"{r.data_copies:,} (+{r.copies - r.data_copies}) | "
            f"{copied / 1e6:.1f} MB | {r.commit_seconds / baseline[r.files]:.2f}x |"
        )
    return lines


def breakdown(runs: list[Run]) -> list[str]:
    lines = ["requests during job commit, by operation", ""]
    for r in runs:
        ops = ", ".join(f"{op} {n:,}" for op, n in r.commit_requests.most_common())
        lines.append(f"* {r.files:,} files, {r.committer}: {ops}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="1000,2000", help="job sizes, comma-separated")
    parser.add_argument("--quick", action="store_true", help="100 and 500 files")
    parser.add_argument("--file-kib", type=int, default=64)
    parser.add_argument("--files-per-task", type=int, default=100)
    parser.add_argument("--executors", type=int, default=8, help="threads writing tasks")
    parser.add_argument("--threads", type=int, default=8, help="the committers' threads")
    args = parser.parse_args()
    # SIGTERM (a timeout, a scheduler) unwinds like Ctrl-C, so every Azurite is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        azurite_binary()
    except FileNotFoundError as missing:
        sys.exit(str(missing))
    sizes = [100, 500] if args.quick else [int(s) for s in args.files.split(",")]
    runs = []
    started = time.perf_counter()
    for files in sizes:
        for name in COMMITTERS:
            run = run_job(
                name, files, args.files_per_task, args.file_kib * KiB, args.executors, args.threads
            )
            print(
                f"{files:,} files, {name}: job commit {run.commit_seconds:.2f} s "
                f"({time.perf_counter() - started:.0f} s so far)",
                file=sys.stderr,
            )
            runs.append(run)
    print(
        f"\njob commit on Azurite: files of {args.file_kib} KiB, {args.files_per_task} per task, "
        f"{args.threads} commit threads, a fresh Azurite per run\n"
    )
    print("\n".join(table(runs)))
    print()
    print("\n".join(breakdown(runs)))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
