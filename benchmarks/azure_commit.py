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
timed. The committers:

* ``block-list`` (what ``committer_for`` picks for ``abfs://``): each file is blocks
  staged on its final blob; job commit publishes each with one Put Block List. No byte
  is copied.
* ``block-list-in-memory`` (``in_memory=True``): the same, but writers keep each file's
  record in the process (no ``.pending`` saved, none deleted at task commit).
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

``--phases`` runs one more job per committer (``--files-per-task`` files in
``--phase-tasks`` tasks) with barriers between its phases and prints where its requests
go: requests per file by phase (``write``: ``setup_job``, ``setup_task``, the writes
and their background closes; ``task commit``; ``job commit``, up to and including the
``_SUCCESS`` Put Blob; ``clean-up``, what ``commit_job`` sends after it) and by purpose
(:func:`purpose`), in the style of ``benchmarks/job_phases.py``'s S3 table.

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
from magicfs.task_files import TASK_FILES  # noqa: E402

KiB = 1 << 10
CONTAINER = "bench"
COMMITTERS = ("block-list", "block-list-in-memory", "manifest")
#: The variants' committer_for options (block-list is what it picks for abfs://).
OPTIONS = {
    "block-list": {},
    "block-list-in-memory": {"in_memory": True},
    "manifest": {"committer": "manifest"},
}
BASELINE = "block-list"
COPY_OPERATIONS = ("Blob_StartCopyFromURL", "Blob_CopyFromURL")
MAGIC = "__magic_job-"


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


def start_job(name: str, azurite: LocalAzurite, threads: int):
    """A fresh container and a committer ``name`` for ``abfs://bench/out``: (fs, committer)."""
    fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **azurite.storage_options)
    fs.mkdir(CONTAINER)
    dest = f"abfs://{CONTAINER}/out"
    options = {"threads": threads, "progress": False, "fs": fs}
    committer = committer_for(dest, **options, **OPTIONS[name])
    if committer.name != name.removesuffix("-in-memory"):
        raise AssertionError(f"asked for {name}, got the {committer.name} committer")
    return fs, committer


def file_names(files: int, per_task: int) -> list[list[str]]:
    """The names each task writes: ``part-<task>-<n>.bin``."""
    tasks = -(-files // per_task)
    return [
        [f"part-{t:04d}-{n:05d}.bin" for n in range(min(per_task, files - t * per_task))]
        for t in range(tasks)
    ]


def write_tasks(committer, names: list[list[str]], payload: bytes, executors: int) -> list:
    """Every task set up and its files written, ``executors`` tasks at once: the attempts."""

    def task(index: int):
        attempt = committer.task_attempt(index)
        committer.setup_task(attempt)
        for name in names[index]:
            with committer.fs.open(attempt.path(name), "wb") as f:
                f.write(payload)
        return attempt

    with concurrent.futures.ThreadPoolExecutor(executors) as pool:
        return list(pool.map(task, range(len(names))))


def run_job(
    name: str, files: int, per_task: int, file_size: int, executors: int, threads: int
) -> Run:
    """One job of ``files`` files with committer ``name`` on an Azurite of its own."""
    payload = os.urandom(file_size)
    names = file_names(files, per_task)
    with (
        tempfile.TemporaryDirectory(prefix="magicfs-azurite-") as workdir,
        LocalAzurite(pathlib.Path(workdir)) as azurite,
    ):
        fs, committer = start_job(name, azurite, threads)
        job_start = len(azurite.operations())
        committer.setup_job()
        attempts = write_tasks(committer, names, payload, executors)
        messages = [committer.commit_task(attempt) for attempt in attempts]
        commit_start = len(azurite.operations())
        start = time.perf_counter()
        summary = committer.commit_job(messages)
        seconds = time.perf_counter() - start
        operations = azurite.operations()
        if summary.files != files:
            raise AssertionError(f"{name}: commit_job reports {summary.files} files, not {files}")
        written = {n for task in names for n in task}
        check_output(fs, name, written, file_size)
        outputs = {f"out/{n}" for n in written}
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


# -- where the requests go: by phase and purpose ------------------------------------------

PHASES = ("write", "task commit", "job commit", "clean-up")
PURPOSES = (
    "marker",
    "data",
    "part",
    "record",
    "check",
    "complete",
    "copy",
    "list",
    "delete",
    "other",
)
_RECORD_ENDINGS = (".pending", ".pendingset", "/_SUCCESS", "_magicfs_commit.json")
_BY_OPERATION = {
    "BlockBlob_StageBlock": "part",
    "BlockBlob_CommitBlockList": "complete",
    "Blob_StartCopyFromURL": "copy",
    "Blob_CopyFromURL": "copy",
    "Container_ListBlobFlatSegment": "list",
    "Container_ListBlobHierarchySegment": "list",
    "Blob_Delete": "delete",
    "Container_SubmitBatch": "delete",
}


def purpose(operation: str, blob: str) -> str:
    """The purpose of one Azure request (operation as Azurite logs it, blob name):

    * ``marker``: a Put Blob under ``__magic_job-*`` that is not a record (the job's
      ``_magicfs_job.json``, a task's ``.started``, a file's zero-byte ``__base/...``);
    * ``data``: a Put Blob of a task file anywhere else (the manifest committer's writes);
    * ``part`` (Put Block), ``complete`` (Put Block List), ``copy`` (Copy Blob);
    * ``record``: a Put Blob, or a read, of ``.pending``, ``.pendingset``, ``_SUCCESS`` or
      the journal ``_magicfs_commit.json`` (writing ``_SUCCESS`` is its own record);
    * ``check``: any other read (Get Blob Properties, Get Blob, Get Block List);
    * ``list``: List Blobs; ``delete``: Delete Blob, Blob Batch; ``other``: the rest.
    """
    if operation in _BY_OPERATION:
        return _BY_OPERATION[operation]
    record = blob.endswith(_RECORD_ENDINGS) or blob == "_SUCCESS"
    if operation == "BlockBlob_Upload":
        if record:
            return "record"
        return "marker" if MAGIC in blob else "data"
    if operation == "Blob_Download" and record and "pending" in blob:
        return "record"
    if operation in ("Blob_Download", "Blob_GetProperties", "BlockBlob_GetBlockList"):
        return "check"
    return "other"


class AzuriteLog:
    """The requests Azurite logged between two :meth:`boundary` calls.

    Azurite writes its debug log asynchronously and, on a busy machine, seconds late, so
    a quiet log proves nothing. A boundary is a request of its own (Get Blob Properties of
    ``_phase/<n>``, which does not exist) sent once the phase's requests have all been
    answered: Azurite logs in dispatch order, so once the boundary is in the log, every
    request before it is too. Boundary requests are not counted.
    """

    def __init__(self, azurite: LocalAzurite) -> None:
        from azure.storage.blob import BlobServiceClient

        self.azurite = azurite
        self.service = BlobServiceClient.from_connection_string(azurite.connection_string)
        self.count = 0
        self.start = self._boundary()

    def _boundary(self) -> int:
        """Send a boundary request; the log's length once it holds it."""
        self.count += 1
        name = f"_phase/{self.count}"
        if self.service.get_blob_client(CONTAINER, name).exists():  # one request
            raise AssertionError(f"{name} exists")
        while True:
            log = self.azurite.operations()
            if any(blob == name for _, blob in log):
                return len(log)
            time.sleep(0.2)

    def boundary(self) -> list[tuple[str, str]]:
        """The requests since the last boundary, boundaries left out."""
        end = self._boundary()
        log = self.azurite.operations()[self.start : end]
        self.start = end
        return [(op, blob) for op, blob in log if not blob.startswith("_phase/")]


def split_clean_up(log: list[tuple[str, str]]) -> tuple[list, list]:
    """``commit_job``'s requests: (up to and including the ``_SUCCESS`` Put Blob, after it)."""
    for index, (operation, blob) in enumerate(log):
        if operation == "BlockBlob_Upload" and blob.rsplit("/", 1)[-1] == "_SUCCESS":
            return log[: index + 1], log[index + 1 :]
    return log, []


def phased_job(
    name: str, tasks: int, per_task: int, file_size: int, executors: int, threads: int
) -> dict[str, Counter]:
    """One job with barriers between phases; requests by phase, then by purpose."""
    names = file_names(tasks * per_task, per_task)
    with (
        tempfile.TemporaryDirectory(prefix="magicfs-azurite-") as workdir,
        LocalAzurite(pathlib.Path(workdir)) as azurite,
    ):
        fs, committer = start_job(name, azurite, threads)
        log = AzuriteLog(azurite)
        committer.setup_job()
        attempts = write_tasks(committer, names, os.urandom(file_size), executors)
        for attempt in attempts:  # the files' closes, finishing in the background
            TASK_FILES.settle(committer.job_id, attempt.attempt_id)
        logs = {"write": log.boundary()}
        with concurrent.futures.ThreadPoolExecutor(executors) as pool:
            messages = list(pool.map(committer.commit_task, attempts))
        logs["task commit"] = log.boundary()
        committer.commit_job(messages)
        logs["job commit"], logs["clean-up"] = split_clean_up(log.boundary())
        check_output(fs, name, {n for task in names for n in task}, file_size)
    return {phase: Counter(purpose(op, blob) for op, blob in ops) for phase, ops in logs.items()}


def phase_table(title: str, counts: dict[str, Counter], files: int) -> list[str]:
    """Requests per file: a row per purpose, a column per phase, totals."""
    lines = [
        f"**{title}**: requests per file",
        "",
        "| purpose | " + " | ".join(PHASES) + " | total |",
        "|---|" + "---:|" * (len(PHASES) + 1),
    ]
    for row_name in (*PURPOSES, "total"):
        row = [
            sum(counts[p].values()) if row_name == "total" else counts[p][row_name] for p in PHASES
        ]
        if not any(row):
            continue
        cells = " | ".join(f"{n / files:.2f}" if n else "" for n in row)
        label = f"**{row_name}**" if row_name == "total" else row_name
        lines.append(f"| {label} | {cells} | {sum(row) / files:.2f} |")
    return lines


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
        base = baseline.get(r.files)
        ratio = f"{r.commit_seconds / base:.2f}x" if base else "-"
        lines.append(
            f"| {r.files:,} | {r.committer} | {r.commit_seconds:.2f} | "
            f"{sum(r.commit_requests.values()) / r.files:.2f} | "
            f"{sum(r.job_requests.values()) / r.files:.2f} | "
            f"{r.data_copies:,} (+{r.copies - r.data_copies}) | "
            f"{copied / 1e6:.1f} MB | {ratio} |"
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
    parser.add_argument("--committers", default=",".join(COMMITTERS), help="comma-separated")
    parser.add_argument("--phases", action="store_true", help="also the per-phase tables")
    parser.add_argument("--phases-only", action="store_true", help="only the per-phase tables")
    parser.add_argument("--phase-tasks", type=int, default=4, help="tasks of the phased job")
    args = parser.parse_args()
    # SIGTERM (a timeout, a scheduler) unwinds like Ctrl-C, so every Azurite is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        azurite_binary()
    except FileNotFoundError as missing:
        sys.exit(str(missing))
    committers = args.committers.split(",")
    started = time.perf_counter()
    if not args.phases_only:
        timed(args, committers)
    if args.phases or args.phases_only:
        print(
            f"\nwhere the requests go: {args.phase_tasks} tasks x {args.files_per_task} files of "
            f"{args.file_kib} KiB, {args.executors} executors, a fresh Azurite per job\n"
        )
        for name in committers:
            counts = phased_job(
                name,
                args.phase_tasks,
                args.files_per_task,
                args.file_kib * KiB,
                args.executors,
                args.threads,
            )
            files = args.phase_tasks * args.files_per_task
            print("\n".join(phase_table(name, counts, files)) + "\n")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


def timed(args: argparse.Namespace, committers: list[str]) -> None:
    """The timed job commits and their table."""
    sizes = [100, 500] if args.quick else [int(s) for s in args.files.split(",")]
    runs = []
    started = time.perf_counter()
    for files in sizes:
        for name in committers:
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


if __name__ == "__main__":
    main()
