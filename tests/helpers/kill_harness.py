"""Kill tests: a job SIGKILLed inside a chosen phase, recovered by a fresh process, checked.

The issue "Crash-proof jobs" asks that a killed driver, writer or task leaves a job that
can be finished (``commit_job()``) or rolled back (``abort_job()``) exactly, with zero
leaked uploads. This module runs that experiment, one row of the issue's table at a
time (:data:`ROWS`), each run reproducible from its seed.

**One run** (:meth:`KillHarness.run`):

1. A fresh bucket (or local directory, for the manifest committer) with a few
   pre-existing files whose names the job never writes.
2. The job runs in a child process (this file, ``job`` command) in its own process
   group: setup, every task writes its files (deterministic bytes per job, task and
   file, so the checker knows them), the tasks commit one after another (each message
   saved as JSON the moment ``commit_task`` returns), the driver commits the job. The
   child prints ``PHASE setup|write|task_commit|job_commit|done`` (flushed) and
   ``TASK_COMMIT n`` / ``MESSAGE n`` around each task commit.
3. The parent kills the job inside the row's phase. S3 traffic goes through a fault
   front (:mod:`.fault_front`), which counts it: an unkilled run of the same job shape,
   itself checked, is held at each phase while its requests are counted (once per shape
   and committer), and each run draws one of the phase's requests from its seed
   (``at_request``). The job waits at the phase until a ``delay`` rule on that request
   is armed, and is killed the moment the request is held, so the request never reaches
   the server (an exact, repeatable kill point). A phase with no S3 request (the
   manifest committer on a local disk, the staging committer's writes) is killed after a
   delay drawn within the first half of its calibrated duration instead. The front is
   stopped with the job, so requests the dead process had not yet got onto the server
   are lost with it (a request already forwarded completes on the server, as one in
   flight would on S3; stopping the front waits for those answers, so recovery starts
   with the server quiet: :meth:`.fault_front.FrontServer.drain`). The phase a kill hit
   is the last ``PHASE`` line the child printed: **a kill that landed after the row's
   phase** (the job had moved on, or finished) **fails the run**, since it proves
   nothing about the phase.
4. Recovery runs in a fresh process (``recover`` command) with a new committer for the
   same destination and job id: ``commit_job()`` (``all_committed_tasks=True``: the
   recovering process did not set the job up, so it says that the committed tasks are
   the whole job; a journal, when there is one, decides instead), ``commit_job(messages)``
   with the saved messages, ``abort_job()`` or ``cleanup_job()``; a call refused with a recoverable
   :class:`~magicfs.errors.JobCommitError` is followed by the plan's next call. Then the
   last call is made once more (in this process, with a fresh committer): it must be
   harmless.
5. The checker compares what the store holds with what the issue requires (see
   :func:`judge`): visible files and their bytes, ``_SUCCESS``, pending uploads, the
   job's tree, the staging directory — before and after the second call.

Fault rows (no kill): the job runs to the end through a front with the row's fault
rules (seeded by the run's seed) and must succeed with exact output and nothing left.

Child commands (the repository root is put on ``PYTHONPATH``; each child prints which
``magicfs`` it imported and the parent checks it is this worktree's)::

    python tests/helpers/kill_harness.py job SPEC_JSON
    python tests/helpers/kill_harness.py recover SPEC_JSON ACTION[,ACTION...]
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import itertools
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from magicfs.integrations.local_server import (
    ACCESS_KEY,
    CREDENTIALS,
    REGION,
    SECRET_KEY,
    s3_boto3_client,
    s3_storage_options,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
PHASES = ("setup", "write", "task_commit", "job_commit", "done")
MiB = 1 << 20

# --- what a job writes ----------------------------------------------------------------------


@dataclass
class JobSpec:
    """Everything the job child and the recovery child need (travels as JSON)."""

    committer: str  # magic | magic-mem | directory | manifest
    dest: str  # s3://bucket/out or file:///...
    endpoint: str | None  # S3 endpoint the process talks to (None: local disk)
    job_id: str
    conflict_mode: str
    tasks: int
    files_per_task: int
    file_size: int
    big_file_size: int  # one multi-part file per task when > 0
    part_size: int
    threads: int
    workdir: str  # messages/, buffer/ (staging), the child's stderr
    driver_messages: bool  # the job's driver commits with its messages (else it lists)
    hold: str = ""  # a phase at which the job waits for a line on stdin ("*": at each one)
    key: str = ACCESS_KEY  # the S3 store's credentials (moto takes any; Ceph RGW checks)
    secret: str = SECRET_KEY

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        return cls(**json.loads(text))

    @property
    def messages_dir(self) -> str:
        return os.path.join(self.workdir, "messages")

    @property
    def buffer_dir(self) -> str:
        return os.path.join(self.workdir, "buffer")

    def task_files(self, task: int) -> dict[str, int]:
        """Relative name -> size of every file task ``task`` writes."""
        files = {
            f"t{task % 3}/part-{task:04d}-{n:04d}.bin": self.file_size + (n * 37 + task) % 512
            for n in range(self.files_per_task)
        }
        if self.big_file_size:
            files[f"big/part-{task:04d}.bin"] = self.big_file_size + task * 1000
        return files

    def data(self, name: str, size: int) -> bytes:
        """The bytes of file ``name``: deterministic per job and name."""
        seed = hashlib.sha256(f"{self.job_id}/{name}".encode()).digest()
        return (seed * (size // len(seed) + 1))[:size]


def preexisting_files(seed: int, count: int) -> dict[str, bytes]:
    """Old data at the destination: names no job writes, bytes known to the checker."""
    return {
        (f"old/keep-{n:03d}.dat" if n % 2 else f"keep-{n:03d}.dat"): hashlib.sha256(
            f"old/{seed}/{n}".encode()
        ).digest()
        * (10 + n)
        for n in range(count)
    }


def storage_options(
    endpoint: str, key: str = ACCESS_KEY, secret: str = SECRET_KEY
) -> dict[str, Any]:
    return {**s3_storage_options(endpoint, (key, secret)), "skip_instance_cache": True}


def make_committer(spec: JobSpec, endpoint: str | None = None):
    import magicfs

    options: dict[str, Any] = {
        "job_id": spec.job_id,
        "conflict_mode": spec.conflict_mode,
        "threads": spec.threads,
        "progress": False,
    }
    endpoint = endpoint or spec.endpoint
    if spec.committer == "manifest":
        return magicfs.committer_for(spec.dest, committer="manifest", **options)
    options["storage_options"] = storage_options(endpoint, spec.key, spec.secret)
    if spec.committer == "magic-mem":
        return magicfs.committer_for(spec.dest, committer="magic", in_memory=True, **options)
    if spec.committer == "directory":
        return magicfs.committer_for(
            spec.dest,
            committer="directory",
            buffer_dir=spec.buffer_dir,
            part_size=spec.part_size,
            **options,
        )
    return magicfs.committer_for(spec.dest, committer=spec.committer, **options)


# --- the children ---------------------------------------------------------------------------


def _say(line: str) -> None:
    print(line, flush=True)


def _phase(spec: JobSpec, phase: str) -> None:
    _say(f"PHASE {phase}")
    if spec.hold in (phase, "*"):
        sys.stdin.readline()  # the parent arms its kill trigger (or counts), then lets it go on


def child_job(spec: JobSpec) -> None:
    """The job: setup, write, task commits (messages saved at once), job commit."""
    import magicfs

    _say(f"MAGICFS {magicfs.__file__}")
    _phase(spec, "setup")
    committer = make_committer(spec)
    committer.setup_job()
    tasks = [committer.task_attempt(t) for t in range(spec.tasks)]
    for task in tasks:
        committer.setup_task(task)
    os.makedirs(spec.messages_dir, exist_ok=True)

    options = {"block_size": spec.part_size} if spec.committer.startswith("magic") else {}

    def write(item) -> None:
        task, name, size = item
        data = spec.data(name, size)
        with committer.fs.open(task.path(name), "wb", **options) as f:
            for offset in range(0, len(data), MiB):  # like a writer producing output
                f.write(data[offset : offset + MiB])

    _phase(spec, "write")
    files = [
        (task, name, size)
        for task in tasks
        for name, size in spec.task_files(task.task_index).items()
    ]
    with concurrent.futures.ThreadPoolExecutor(4 * spec.tasks) as pool:  # tasks run in parallel
        list(pool.map(write, files))
    # A file's close may finish in the background (its last part, its record:
    # magicfs.task_files), which task commit would wait for: the write phase ends once
    # they have, so a kill at one of the write's requests lands in the write.
    from magicfs.task_files import TASK_FILES

    TASK_FILES.settle(committer.job_id)
    _phase(spec, "task_commit")
    messages = []
    for task in tasks:
        _say(f"TASK_COMMIT {task.task_index}")
        message = committer.commit_task(task)
        path = os.path.join(spec.messages_dir, f"{task.task_index:04d}.json")
        with open(path + ".tmp", "w") as out:
            out.write(message.to_json())
        os.replace(path + ".tmp", path)  # a reader never sees half a message
        _say(f"MESSAGE {task.task_index}")
        messages.append(message)
    _phase(spec, "job_commit")
    summary = committer.commit_job(messages if spec.driver_messages else None)
    _say(f"SUMMARY {summary.files} {summary.bytes}")
    _say("PHASE done")


def saved_messages(spec: JobSpec) -> dict[int, Any]:
    from magicfs.committers import TaskCommitMessage

    found = {}
    if os.path.isdir(spec.messages_dir):
        for name in sorted(os.listdir(spec.messages_dir)):
            if name.endswith(".json"):
                with open(os.path.join(spec.messages_dir, name)) as f:
                    found[int(name.split(".")[0])] = TaskCommitMessage.from_json(f.read())
    return found


def call(committer, action: str, spec: JobSpec) -> dict[str, Any]:
    """One recovery call; what it returned or raised, as JSON."""
    start = time.monotonic()
    try:
        if action == "commit":
            summary = committer.commit_job(all_committed_tasks=True)
        elif action == "commit-messages":
            summary = committer.commit_job(list(saved_messages(spec).values()))
        elif action == "abort":
            summary = committer.abort_job()
        elif action == "cleanup":
            summary = committer.cleanup_job()
        else:
            raise ValueError(f"unknown recovery action {action!r}")
    except Exception as e:
        return {
            "action": action,
            "ok": False,
            "error": type(e).__name__,
            "kinds": [c.__name__ for c in type(e).__mro__],
            "recoverable": getattr(e, "recoverable", None),
            "stage": getattr(e, "stage", None),
            "message": str(e)[:1500],
            "seconds": round(time.monotonic() - start, 3),
        }
    result: dict[str, Any] = {
        "action": action,
        "ok": True,
        "seconds": round(time.monotonic() - start, 3),
    }
    if summary is not None:
        result["files"] = summary.files
        result["cleanup_incomplete"] = summary.cleanup_incomplete
    return result


def refused_recoverably(result: dict[str, Any]) -> bool:
    return not result["ok"] and "JobCommitError" in result["kinds"] and bool(result["recoverable"])


def run_plan(committer, actions: list[str], spec: JobSpec) -> list[dict[str, Any]]:
    """Each action in turn while the previous one was refused recoverably."""
    results = []
    for action in actions:
        results.append(call(committer, action, spec))
        if not refused_recoverably(results[-1]):
            break
    return results


def child_recover(spec: JobSpec, actions: list[str]) -> None:
    import magicfs

    _say(f"MAGICFS {magicfs.__file__}")
    for result in run_plan(make_committer(spec), actions, spec):
        _say("RESULT " + json.dumps(result))


def main(argv: list[str]) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    command, spec = argv[0], JobSpec.from_json(argv[1])
    if command == "job":
        child_job(spec)
    elif command == "recover":
        child_recover(spec, argv[2].split(","))
    else:
        raise SystemExit(f"unknown command {command!r}")


# --- rows of the table --------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """How big a job is."""

    tasks: int
    files_per_task: int
    file_size: int
    big_file_size: int = 0
    latency_ms: float = 0.0  # added per request by the front (kills are exact: none needed)


SHAPES = {
    "small": Shape(tasks=3, files_per_task=4, file_size=1500),
    "multipart": Shape(tasks=2, files_per_task=3, file_size=2000, big_file_size=11 * MiB),
    "many": Shape(tasks=4, files_per_task=300, file_size=100),
    "wide": Shape(tasks=4, files_per_task=1000, file_size=50),
    # Fault rows: enough creates that 10% of them fail (lost-create), few enough requests
    # that 30% SlowDown replies and their back-off keep a run short (slowdown).
    "faulty": Shape(tasks=3, files_per_task=16, file_size=2000, big_file_size=6 * MiB),
    "throttled": Shape(tasks=3, files_per_task=4, file_size=2000, big_file_size=6 * MiB),
}


@dataclass(frozen=True)
class Row:
    """One row of the issue's table: what is killed (or faulted) and how it is recovered."""

    key: str
    title: str
    committers: tuple[str, ...]
    phases: tuple[str, ...] = ("job_commit",)
    plans: tuple[str, ...] = ("commit",)  # comma-separated recovery calls
    conflict_modes: tuple[str, ...] = ("append",)
    shape: str = "small"
    faults: tuple[tuple[str, str], ...] = ()  # (operations, action) rules of the front
    fault_rates: tuple[float, float] = (0.0, 0.0)
    driver_messages: tuple[bool, ...] = (True, False)

    @property
    def killed(self) -> bool:
        return not self.faults


def shape_for(row: Row, committer: str) -> str:
    """The row's job shape; the manifest committer on local disk commits 1,200 small files
    (anything less commits in a few milliseconds: no time to land a kill inside)."""
    return "many" if committer == "manifest" and row.shape == "small" else row.shape


S3_COMMITTERS = ("magic", "magic-mem", "directory")
ROWS: dict[str, Row] = {
    row.key: row
    for row in (
        Row(
            "commit",
            "driver killed during job commit, then commit_job() again (no messages), append",
            S3_COMMITTERS,
        ),
        Row(
            "commit-messages",
            "same, commit_job(messages) with the dead driver's saved messages",
            S3_COMMITTERS,
            plans=("commit-messages",),
            driver_messages=(True,),
        ),
        Row(
            "manifest-commit",
            "manifest committer (local disk, 1,200 files) killed during job commit, then "
            "commit_job()",
            ("manifest",),
            shape="many",
        ),
        Row(
            "abort",
            "driver killed during job commit, then abort_job() (magic, manifest, directory)",
            ("magic", "magic-mem", "directory", "manifest"),
            plans=("abort",),
        ),
        Row(
            "fail",
            "killed during job commit with conflict_mode='fail', then commit_job()",
            ("magic", "magic-mem", "directory", "manifest"),
            conflict_modes=("fail",),
        ),
        Row(
            "replace-commit",
            "killed during job commit with conflict_mode='replace', then commit_job()",
            ("magic", "magic-mem", "directory", "manifest"),
            conflict_modes=("replace",),
        ),
        Row(
            "replace-abort",
            "same, then abort_job(): rolls back, or refuses (recoverable) and commit_job() "
            "finishes",
            ("magic", "magic-mem", "directory", "manifest"),
            plans=("abort,commit",),
            conflict_modes=("replace",),
        ),
        Row(
            "cleanup-refused",
            "killed during job commit, then cleanup_job() (refused while a commit is "
            "unfinished), then commit_job() or abort_job()",
            ("magic", "magic-mem", "directory", "manifest"),
            plans=("cleanup,commit", "cleanup,abort"),
        ),
        Row(
            "writer",
            "writer killed mid-write (multi-part files of 11 MiB, 5 MiB parts), then "
            "abort_job() / cleanup_job()",
            ("magic", "directory"),
            phases=("write",),
            plans=("abort", "cleanup,abort"),
            shape="multipart",
        ),
        Row(
            "writer-in-memory",
            "same in in_memory=True mode (magic committer)",
            ("magic-mem",),
            phases=("write",),
            plans=("abort", "cleanup,abort"),
            shape="multipart",
        ),
        Row(
            "task-commit",
            "task killed during task commit, then abort_job() or cleanup_job() (or "
            "commit_job(all_committed_tasks=True): the committed tasks)",
            ("magic", "magic-mem", "directory", "manifest"),
            phases=("task_commit",),
            plans=("abort", "cleanup,abort", "commit"),
        ),
        Row(
            "lost-create",
            "10% of CreateMultipartUpload replies lost: the job succeeds, zero uploads parked",
            S3_COMMITTERS,
            faults=(("CreateMultipartUpload", "reset-after"),),
            fault_rates=(0.1, 0.1),
            shape="faulty",
        ),
        Row(
            "slowdown",
            "10-30% 503 SlowDown on UploadPart, PutObject, CompleteMultipartUpload, "
            "ListObjectsV2: the job succeeds with exact output",
            S3_COMMITTERS,
            faults=(
                ("UploadPart", "503"),
                ("PutObject", "503"),
                ("CompleteMultipartUpload", "503"),
                ("ListObjectsV2", "503"),
            ),
            fault_rates=(0.1, 0.3),
            shape="throttled",
        ),
    )
}


# --- observing the store -----------------------------------------------------------------------


@dataclass
class Snapshot:
    """What the destination holds, as the checker sees it."""

    visible: dict[str, str]  # relative name -> sha256 of the bytes
    success_job: str | None  # the jobId _SUCCESS names (None: no _SUCCESS / unreadable)
    journal: dict[str, Any] | None  # the commit journal, if one exists
    uploads: list[str]  # pending multipart uploads in the bucket (keys)
    tree: list[str]  # what is left of the job's own tree
    staging_left: bool = False
    directories: set[str] | None = None  # visible directories (local disks; None on S3)

    def same_output(self, other: Snapshot) -> bool:
        return self.visible == other.visible and self.success_job == other.success_job


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hidden(relative: str) -> bool:
    return any(element.startswith(("_", ".")) for element in relative.split("/"))


class Observer:
    """Reads a destination directly (boto3 on the server, or the local disk)."""

    def __init__(self, spec: JobSpec, client: Any = None):
        self.spec = spec
        self.client = client

    def journal_path(self) -> str:
        spec = self.spec
        if spec.committer == "manifest":
            return os.path.join(
                _local(spec.dest), "_temporary", spec.job_id, "_magicfs_commit.json"
            )
        if spec.committer == "directory":
            return os.path.join(
                spec.buffer_dir,
                spec.job_id,
                "staging-uploads",
                "_temporary",
                "0",
                "_magicfs_commit.json",
            )
        return f"__magic_job-{spec.job_id}/_magicfs_commit.json"

    def snapshot(self) -> Snapshot:
        if self.spec.committer == "manifest":
            return self._local_snapshot()
        return self._s3_snapshot()

    def _s3_snapshot(self) -> Snapshot:
        spec, client = self.spec, self.client
        bucket, prefix = _split_s3(spec.dest)
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix + "/"
        ):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        visible, success, journal, tree = {}, None, None, []
        for key in keys:
            relative = key[len(prefix) + 1 :]
            if "__magic_job-" in key:
                tree.append(key)
            if relative == "_SUCCESS":
                success = _job_named(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            elif relative == self.journal_path():
                journal = _json_or_none(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            elif not _hidden(relative):
                visible[relative] = _sha(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        if spec.committer == "directory":
            journal = _read_json_file(self.journal_path())
        uploads = []
        paginator = client.get_paginator("list_multipart_uploads")
        for page in paginator.paginate(Bucket=bucket):
            uploads.extend(u["Key"] for u in page.get("Uploads", []))
        staging = spec.committer == "directory" and os.path.exists(
            os.path.join(spec.buffer_dir, spec.job_id)
        )
        return Snapshot(visible, success, journal, uploads, tree, staging)

    def _local_snapshot(self) -> Snapshot:
        root = _local(self.spec.dest)
        visible, success, tree, directories = {}, None, [], set()
        for directory, subdirectories, names in os.walk(root):
            for name in subdirectories:
                relative = os.path.relpath(os.path.join(directory, name), root)
                if not _hidden(relative.replace(os.sep, "/")):
                    directories.add(relative.replace(os.sep, "/"))
            for name in names:
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root).replace(os.sep, "/")
                if relative == "_SUCCESS":
                    with open(path, "rb") as f:
                        success = _job_named(f.read())
                elif relative.startswith(("_temporary/", f"__magic_job-{self.spec.job_id}")):
                    tree.append(relative)
                elif not _hidden(relative):
                    with open(path, "rb") as f:
                        visible[relative] = _sha(f.read())
        for name in ("_temporary", f"__magic_job-{self.spec.job_id}"):
            if os.path.isdir(os.path.join(root, name)) and not any(
                t.startswith(name + "/") for t in tree
            ):
                tree.append(name + "/")  # an empty directory left behind
        journal = _read_json_file(self.journal_path())
        return Snapshot(visible, success, journal, [], tree, directories=directories)


def _local(url: str) -> str:
    return url.removeprefix("file://")


def _split_s3(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key.rstrip("/")


def _json_or_none(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _job_named(data: bytes) -> str | None:
    value = _json_or_none(data)
    return str(value.get("jobId")) if value and value.get("jobId") else None


def _read_json_file(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            return _json_or_none(f.read())
    except FileNotFoundError:
        return None


# --- judging --------------------------------------------------------------------------------


@dataclass
class Expectations:
    """What the checker knows about the job independently of the store."""

    spec: JobSpec
    preexisting: dict[str, str]  # name -> sha256
    phase: str  # the phase the kill hit ("done": the job had finished)
    saved: set[int]  # tasks whose message was saved before the kill
    in_flight: int | None  # the task whose commit had started but whose message was not saved

    def task_files(self, task: int) -> dict[str, str]:
        spec = self.spec
        return {n: _sha(spec.data(n, s)) for n, s in spec.task_files(task).items()}

    def complete(self, tasks: set[int]) -> dict[str, str]:
        base = {} if self.spec.conflict_mode == "replace" else dict(self.preexisting)
        for task in tasks:
            base.update(self.task_files(task))
        return base


def tasks_visible(expect: Expectations, snapshot: Snapshot) -> tuple[set[int], list[str]]:
    """Which tasks' files are all visible with the right bytes; problems for the rest."""
    found, problems = set(), []
    for task in range(expect.spec.tasks):
        files = expect.task_files(task)
        right = [n for n, sha in files.items() if snapshot.visible.get(n) == sha]
        wrong = [
            n for n, sha in files.items() if n in snapshot.visible and snapshot.visible[n] != sha
        ]
        if wrong:
            problems.append(f"task {task}: wrong bytes in {len(wrong)} files, e.g. {wrong[0]}")
        if len(right) == len(files):
            found.add(task)
        elif right or wrong:
            problems.append(f"task {task}: only {len(right)} of {len(files)} files visible")
    return found, problems


def compare(expected: dict[str, str], snapshot: Snapshot, what: str) -> list[str]:
    problems = []
    missing = sorted(set(expected) - set(snapshot.visible))
    extra = sorted(set(snapshot.visible) - set(expected))
    wrong = sorted(
        n for n in expected if n in snapshot.visible and snapshot.visible[n] != expected[n]
    )
    if missing:
        problems.append(f"{what}: {len(missing)} files missing, e.g. {missing[0]}")
    if extra:
        problems.append(f"{what}: {len(extra)} unexpected visible files, e.g. {extra[0]}")
    if wrong:
        problems.append(f"{what}: {len(wrong)} files with wrong bytes, e.g. {wrong[0]}")
    if snapshot.directories is not None:
        # A directory no expected file needs was left by the job (an empty one: on a
        # local disk a reader, or a conflict_mode="fail" job, sees it as data).
        needed = {"/".join(n.split("/")[:i]) for n in expected for i in range(1, n.count("/") + 1)}
        stray = sorted(snapshot.directories - needed)
        if stray:
            problems.append(f"{what}: {len(stray)} directories left, e.g. {stray[0]}/")
    return problems


def leftovers(spec: JobSpec, snapshot: Snapshot) -> list[str]:
    """Anything of the job left after recovery: uploads, its tree, its staging directory."""
    problems = []
    if snapshot.uploads:
        problems.append(f"{len(snapshot.uploads)} pending uploads left, e.g. {snapshot.uploads[0]}")
    if snapshot.tree:
        problems.append(f"job tree left ({len(snapshot.tree)} entries, e.g. {snapshot.tree[0]})")
    if snapshot.staging_left:
        problems.append(f"staging directory {spec.buffer_dir}/{spec.job_id} left")
    return problems


def _is(result: dict[str, Any], kind: str) -> bool:
    return not result["ok"] and kind in result["kinds"]


def _describe(result: dict[str, Any]) -> str:
    if result["ok"]:
        return f"{result['action']}: ok"
    return f"{result['action']}: {result['error']}: {result['message'][:300]}"


def judge(
    expect: Expectations, pre: Snapshot, steps: list[dict[str, Any]], final: Snapshot
) -> tuple[str, list[str]]:
    """The outcome of a recovery (``finished``, ``rolled back``...) and every problem found.

    The rules are the issue's (module docstring of the test module has them in prose):

    * refusals: ``cleanup_job()`` must refuse (recoverable ``JobCommitError``) exactly
      when a commit journal of an unfinished commit exists; ``abort_job()`` may refuse
      (recoverable) only in ``replace`` mode once old data was already deleted;
    * **finish** (``commit_job`` succeeded): visible = old data (none for ``replace``) +
      exactly the files of a task set T, bytes exact, ``_SUCCESS`` names the job. T is
      every task if the kill hit job commit; otherwise it holds every task whose message
      was saved and at most the one task whose commit was in flight (``commit_job``
      with messages: exactly the saved ones);
    * ``NothingToCommitError`` from ``commit_job`` only for a job that had finished
      (then its output is complete); a job that had printed ``done`` must get it;
    * **roll back** (``abort_job`` / ``cleanup_job`` succeeded): visible = old data
      exactly and no ``_SUCCESS`` naming the job — unless the job had fully committed
      (``_SUCCESS`` names it): then its output stays, complete;
    * always: no pending upload, no job tree, no staging directory.
    """
    spec = expect.spec
    problems: list[str] = []
    unfinished_journal = pre.journal is not None and pre.journal.get("phase") != "committed"
    committed_before = pre.success_job == spec.job_id or (
        pre.journal is not None and pre.journal.get("phase") == "committed"
    )
    old_deleted = any(name not in pre.visible for name in expect.preexisting)
    all_tasks = set(range(spec.tasks))
    outcome = "?"
    for index, result in enumerate(steps):
        last = index == len(steps) - 1
        action = result["action"]
        if refused_recoverably(result) and not last:
            if action == "cleanup":
                if not unfinished_journal:
                    problems.append("cleanup_job() refused although no commit was unfinished")
            elif action == "abort":
                if spec.conflict_mode != "replace" or not old_deleted:
                    problems.append(
                        "abort_job() refused to roll back although no old file had been "
                        f"deleted yet ({_describe(result)})"
                    )
            else:
                problems.append(f"unexpected refusal: {_describe(result)}")
            continue
        if not last:
            problems.append(f"plan went on after {_describe(result)}")
            continue
        if action == "cleanup" and result["ok"] and unfinished_journal:
            problems.append("cleanup_job() did not refuse an unfinished commit")
        if action in ("commit", "commit-messages"):
            if _is(result, "NothingToCommitError"):
                outcome = "nothing to commit"
                if not committed_before:
                    problems.append(f"commit_job() found nothing to commit: {result['message']}")
                problems += compare(expect.complete(all_tasks), final, "finished job")
                if final.success_job != spec.job_id:
                    problems.append("finished job: _SUCCESS does not name the job")
                continue
            if not result["ok"]:
                outcome = "failed"
                problems.append(f"recovery failed: {_describe(result)}")
                continue
            outcome = "finished"
            if expect.phase == "done":
                problems.append(
                    "commit_job() of a job that had finished did not raise NothingToCommitError"
                )
            found, task_problems = tasks_visible(expect, final)
            problems += task_problems
            if expect.phase in ("job_commit", "done"):
                allowed_low, allowed_high = all_tasks, all_tasks
            elif expect.phase == "task_commit":
                allowed_low = set(expect.saved)
                allowed_high = set(expect.saved)
                if action == "commit" and expect.in_flight is not None:
                    allowed_high.add(expect.in_flight)
            else:
                allowed_low, allowed_high = set(), set()
            if not allowed_low <= found <= allowed_high:
                problems.append(
                    f"committed tasks {sorted(found)}; expected at least {sorted(allowed_low)}"
                    f" and at most {sorted(allowed_high)}"
                )
            problems += compare(expect.complete(found), final, "finished job")
            if final.success_job != spec.job_id:
                problems.append(f"finished job: _SUCCESS names {final.success_job!r}")
        elif action in ("abort", "cleanup"):
            if not result["ok"]:
                outcome = "failed"
                problems.append(f"recovery failed: {_describe(result)}")
                continue
            if committed_before:
                outcome = "already committed, kept"
                problems += compare(expect.complete(all_tasks), final, "committed job")
            else:
                outcome = "rolled back"
                problems += compare(dict(expect.preexisting), final, "rolled-back job")
                if final.success_job == spec.job_id:
                    problems.append("rolled-back job: _SUCCESS still names the job")
    if len(steps) > 1 and outcome in ("finished", "rolled back"):
        outcome = f"refused, then {outcome}"
    problems += leftovers(spec, final)
    return outcome, problems


# --- the parent's side: one run ------------------------------------------------------------------


@dataclass
class RunResult:
    """One run: where it was killed, how it was recovered, what was wrong."""

    row: str
    seed: int
    committer: str
    conflict_mode: str
    plan: str
    target_phase: str
    delay: float
    phase: str  # the phase the kill hit (the child's last PHASE line)
    detail: str  # where inside it (journal phase, files visible)
    outcome: str
    problems: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    faults: dict[str, Any] = field(default_factory=dict)
    at_request: int | None = None  # killed at this request of the phase (else after delay)
    tasks_visible: list[int] | None = None  # the tasks whose files are visible at the end

    @property
    def clean(self) -> bool:
        return not self.problems

    def replay(self) -> str:
        command = f"python benchmarks/kill_runs.py --rows {self.row} --seed {self.seed}"
        if self.at_request is not None:
            return f"{command} --sweep {self.at_request}:{self.at_request}"
        return f"{command} --runs 1"

    def line(self) -> str:
        status = "clean" if self.clean else "NOT CLEAN: " + "; ".join(self.problems)
        when = (
            f"@request {self.at_request}" if self.at_request is not None else f"+{self.delay:.3f}s"
        )
        return (
            f"[{self.row} seed={self.seed} {self.committer}/{self.conflict_mode} plan={self.plan}"
            f" kill {self.target_phase}{when} -> hit {self.phase} ({self.detail})]"
            f" {self.outcome} (tasks visible: {self.tasks_visible}): {status}"
        )


class ChildJob:
    """The job child: its output lines, time-stamped as they arrive."""

    def __init__(self, spec: JobSpec):
        self.spec = spec
        self.lines: list[tuple[float, str]] = []
        self.phase_times: dict[str, float] = {}
        self._arrived = threading.Condition()
        self.stderr_path = os.path.join(spec.workdir, f"job-{uuid.uuid4().hex[:8]}.stderr")
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(pathlib.Path(__file__).resolve()), "job", spec.to_json()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=child_env(),
                start_new_session=True,  # its own process group: killed as a whole
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            now = time.monotonic()
            with self._arrived:
                self.lines.append((now, line.rstrip("\n")))
                if line.startswith("PHASE "):
                    self.phase_times[line.split()[1]] = now
                self._arrived.notify_all()
        with self._arrived:
            self._arrived.notify_all()

    def wait_for_phase(self, phase: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while phase not in self.phase_times:
                if self.process.poll() is not None and not self._reader.is_alive():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._arrived.wait(min(left, 0.2))
        return True

    def go_on(self) -> None:
        """Let a job held at its ``hold`` phase continue."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def count_requests(self, front: Any, counted: dict[str, int], timeout: float) -> None:
        """For a job held at every phase (``hold="*"``): the front's request count at the
        start of each phase and at ``done`` into ``counted``, letting the job go on after
        each (it stops where the job ends early)."""
        for phase in PHASES:
            if not self.wait_for_phase(phase, timeout):
                return
            counted[phase] = sum(op["requests"] for op in front.stats().values())
            if phase != "done":
                with contextlib.suppress(BrokenPipeError):
                    self.go_on()

    def kill_when_fired(self, front: Any, rule_id: int, timeout: float = 120.0) -> bool:
        """Kill the job the moment the front's rule ``rule_id`` has fired (a deterministic
        kill point: a ``delay`` rule holds the request until the front is stopped, so it
        never reaches the server). ``False`` if the job ended or time ran out first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if front.rules()[rule_id]["fired"]:
                self.kill()
                return True
            if self.process.poll() is not None:
                return False
            time.sleep(0.01)
        self.kill()
        return False

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.finish()

    def finish(self, timeout: float | None = None) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code

    @property
    def phase(self) -> str:
        phases = [line.split()[1] for _, line in self.lines if line.startswith("PHASE ")]
        return phases[-1] if phases else "not started"

    def tagged(self, tag: str) -> list[int]:
        return [int(line.split()[1]) for _, line in self.lines if line.startswith(tag + " ")]

    def magicfs_file(self) -> str | None:
        for _, line in self.lines:
            if line.startswith("MAGICFS "):
                return line.split(" ", 1)[1]
        return None

    def stderr_tail(self, lines: int = 15) -> str:
        with open(self.stderr_path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    env.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    env.setdefault("AWS_DEFAULT_REGION", REGION)
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def recover_in_child(spec: JobSpec, actions: list[str], timeout: float) -> list[dict[str, Any]]:
    """The recovery plan in a fresh process; its results (or a failure result)."""
    process = subprocess.run(
        [
            sys.executable,
            str(pathlib.Path(__file__).resolve()),
            "recover",
            spec.to_json(),
            ",".join(actions),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
    )
    results = [
        json.loads(line[len("RESULT ") :])
        for line in process.stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    if process.returncode != 0 or not results:
        results.append(
            {
                "action": actions[len(results)] if len(results) < len(actions) else actions[-1],
                "ok": False,
                "error": f"exit {process.returncode}",
                "kinds": [],
                "recoverable": None,
                "stage": None,
                "message": process.stderr[-1500:],
            }
        )
    return results


class KillHarness:
    """Runs rows against an S3 server (``upstream_url``: moto or Ceph RGW on 127.0.0.1,
    whose keys are ``credentials``) and local disk.

    Each S3 run gets its own bucket and its own fault front (seeded with the run's seed),
    both removed afterwards (``keep=True`` keeps them and the run's directory for a
    look). Phase durations are calibrated once per job shape by an unkilled run.
    """

    def __init__(
        self,
        upstream_url: str,
        workdir: str | None = None,
        *,
        keep: bool = False,
        timeout: float = 120.0,
        credentials: tuple[str, str] = CREDENTIALS,
    ):
        self.upstream_url = upstream_url
        self.credentials = credentials
        self.workdir = workdir or tempfile.mkdtemp(prefix="magicfs-kill-")
        self.keep = keep
        self.timeout = timeout
        self.client = s3_boto3_client(upstream_url, credentials)
        self.calibrations: dict[tuple, dict[str, float]] = {}
        #: S3 requests of each phase of an unkilled job, per (shape, committer).
        self.phase_requests: dict[tuple, dict[str, int]] = {}
        self.calibration_results: list[RunResult] = []

    # -- the pieces of a run --

    def _choose(self, row: Row, seed: int) -> dict[str, Any]:
        rng = random.Random(f"{row.key}/{seed}")
        return {
            "rng": rng,
            "committer": rng.choice(row.committers),
            "conflict_mode": rng.choice(row.conflict_modes),
            "plan": rng.choice(row.plans),
            "phase": rng.choice(row.phases) if row.killed else "none",
            "driver_messages": rng.choice(row.driver_messages),
        }

    def prepare(
        self,
        shape_name: str,
        seed: int,
        committer: str,
        conflict_mode: str = "append",
        driver_messages: bool = True,
        endpoint: str | None = None,
        tag: str = "run",
    ) -> tuple[JobSpec, dict[str, str]]:
        """A fresh destination with old data (none for ``fail``) and the job's spec.

        Returns the spec and the old files (name -> sha256). ``endpoint``: where the job
        talks to S3 (default: the server itself).
        """
        shape = SHAPES[shape_name]
        endpoint = endpoint or (None if committer == "manifest" else self.upstream_url)
        run_dir = tempfile.mkdtemp(prefix=f"{tag}-{seed}-", dir=self.workdir)
        job_id = f"kill-{seed}-{uuid.uuid4().hex[:8]}"
        old = {} if conflict_mode == "fail" else preexisting_files(seed, 4)
        if committer == "manifest":
            dest_dir = os.path.join(run_dir, "out")
            os.makedirs(dest_dir)
            for name, data in old.items():
                os.makedirs(os.path.dirname(os.path.join(dest_dir, name)), exist_ok=True)
                with open(os.path.join(dest_dir, name), "wb") as f:
                    f.write(data)
            dest = "file://" + dest_dir
        else:
            bucket = f"kill-{seed % 10**9}-{uuid.uuid4().hex[:10]}"
            self.client.create_bucket(Bucket=bucket)
            for name, data in old.items():
                self.client.put_object(Bucket=bucket, Key=f"data/out/{name}", Body=data)
            dest = f"s3://{bucket}/data/out"
        spec = JobSpec(
            committer=committer,
            dest=dest,
            endpoint=endpoint,
            job_id=job_id,
            conflict_mode=conflict_mode,
            tasks=shape.tasks,
            files_per_task=shape.files_per_task,
            file_size=shape.file_size,
            big_file_size=shape.big_file_size,
            part_size=5 * MiB,
            threads=4,
            workdir=run_dir,
            driver_messages=driver_messages,
            key=self.credentials[0],
            secret=self.credentials[1],
        )
        return spec, {name: _sha(data) for name, data in old.items()}

    def front(self, seed: int = 0, latency_ms: float = 0.0):
        """A fault front (started) in front of the server; stop it when done."""
        from .fault_front import FaultFront

        front = FaultFront(
            self.upstream_url, seed=seed, latency_ms=latency_ms, credentials=self.credentials
        )
        return front.start()

    def discard(self, spec: JobSpec) -> None:
        """Remove the run's bucket and directory (unless ``keep``)."""
        if self.keep:
            return
        if spec.committer != "manifest":
            bucket, _ = _split_s3(spec.dest)
            with contextlib.suppress(Exception):
                _empty_bucket(self.client, bucket)
        shutil.rmtree(spec.workdir, ignore_errors=True)

    def calibrate(self, row: Row, committer: str) -> tuple[dict[str, float], dict[str, int]]:
        """Phase durations and S3 requests per phase of an unkilled job of this shape
        (cached); the run is checked too.

        The job runs in ``append`` mode with its driver's messages: the fewest requests
        at job commit (``replace`` also deletes, a driver without messages also lists), so
        a kill drawn among a phase's counted requests lands inside that phase whatever
        the run's mode. The job is held at each phase while its requests so far are
        counted, so the counts are exact.
        """
        key = (shape_for(row, committer), committer)
        if key in self.calibrations:
            return self.calibrations[key], self.phase_requests[key]
        calibration_row = Row(
            f"calibrate-{key[0]}", "unkilled run", (committer,), phases=(), shape=key[0]
        )
        counted: dict[str, int] = {}
        result, times = self._run_to_end(calibration_row, 0, committer, "append", True, {}, counted)
        self.calibration_results.append(result)
        if not times:
            raise RuntimeError(f"calibration run failed: {result.line()}")
        durations = {
            phase: times[after] - times[phase]
            for phase, after in itertools.pairwise(PHASES)
            if phase in times and after in times
        }
        requests = {
            phase: counted[after] - counted[phase]
            for phase, after in itertools.pairwise(PHASES)
            if phase in counted and after in counted
        }
        self.calibrations[key], self.phase_requests[key] = durations, requests
        return durations, requests

    # -- runs --

    def run(self, row: Row, seed: int, at_request: int | None = None) -> RunResult:
        """One run of ``row`` with ``seed`` (a harness error is reported as a problem).

        ``at_request=n``: kill at the n-th S3 request of the phase instead of after a
        random delay (the job waits at the phase until the trigger is armed: an exact,
        repeatable kill point, for sweeping a phase request by request).
        """
        start = time.monotonic()
        try:
            result = self._run(row, seed, at_request)
        except Exception as e:
            result = RunResult(row.key, seed, "?", "?", "?", "?", 0.0, "?", "", "harness error")
            result.problems.append(f"harness error: {type(e).__name__}: {e}")
        result.seconds = round(time.monotonic() - start, 2)
        return result

    def _run(self, row: Row, seed: int, at_request: int | None) -> RunResult:
        choice = self._choose(row, seed)
        choice["at_request"] = at_request
        if not row.killed:
            rng = choice["rng"]
            rate = round(rng.uniform(*row.fault_rates), 3)
            result, _ = self._run_to_end(
                row,
                seed,
                choice["committer"],
                choice["conflict_mode"],
                choice["driver_messages"],
                {"rate": rate},
            )
        else:
            result = self._run_killed(row, seed, choice)
        return result

    def _run_to_end(
        self,
        row: Row,
        seed: int,
        committer: str,
        conflict_mode: str,
        driver_messages: bool,
        faults: dict[str, Any],
        counted: dict[str, int] | None = None,
    ) -> tuple[RunResult, dict]:
        """A job run to its end (fault rows, calibration): it must succeed, exactly.

        ``counted`` (S3 committers): filled with the front's request count at the start
        of each phase (and at ``done``), the job held at each phase while it is read.
        """
        shape = SHAPES[shape_for(row, committer)]
        front = None
        endpoint = None
        if committer != "manifest":
            front = self.front(seed, shape.latency_ms)
            endpoint = front.endpoint_url
            for operation, action in row.faults:
                front.add_rule(operation, action, rate=faults["rate"])
        spec, old = self.prepare(
            shape_for(row, committer),
            seed,
            committer,
            conflict_mode,
            driver_messages,
            endpoint,
            row.key,
        )
        result = RunResult(
            row.key, seed, committer, conflict_mode, "none", "none", 0.0, "?", "", "?"
        )
        if counted is not None and front is not None:
            spec.hold = "*"
        try:
            child = ChildJob(spec)
            try:
                if spec.hold == "*":
                    child.count_requests(front, counted, self.timeout)
                code = child.finish(self.timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                code = -1
            result.phase = child.phase
            if front is not None:
                stats = front.stats()
                injected = sum(sum(op["faults"].values()) for op in stats.values())
                result.faults = {"rate": faults.get("rate", 0.0), "stats": stats}
                if row.faults:
                    result.detail = f"rate {faults['rate']}: {injected} faults injected"
                front.stop()
                front = None
            self._check_magicfs(child, result)
            snapshot = Observer(spec, self.client).snapshot()
            expect = Expectations(spec, old, "job_commit", set(), None)
            if code != 0:
                result.outcome = "failed"
                result.problems.append(f"job exited {code}: {child.stderr_tail()}")
            else:
                result.outcome = "succeeded"
                result.problems += compare(expect.complete(set(range(spec.tasks))), snapshot, "job")
                if snapshot.success_job != spec.job_id:
                    result.problems.append(f"_SUCCESS names {snapshot.success_job!r}")
            result.problems += leftovers(spec, snapshot)
            times = dict(child.phase_times) if code == 0 else {}
        finally:
            if front is not None:
                front.stop()
            if result.clean:
                self.discard(spec)
        return result, times

    def _run_killed(self, row: Row, seed: int, choice: dict[str, Any]) -> RunResult:
        rng = choice["rng"]
        committer, mode, phase = choice["committer"], choice["conflict_mode"], choice["phase"]
        at_request = choice["at_request"] if committer != "manifest" else None
        delay = 0.0
        at_start = False
        if at_request is None:
            durations, requests = self.calibrate(row, committer)
            if committer != "manifest" and requests.get(phase, 0) > 0:
                at_request = rng.randint(1, requests[phase])  # one of the phase's requests
            elif committer != "manifest":
                # An S3 committer's phase that sends no request (the staging committer's
                # writes go to local disk): nothing the store sees differs within it, and
                # a moment drawn from a calibrated duration can fall after a phase that
                # ran faster (seen once in three CI runs). Killed at its start, held there.
                at_start = True
            else:  # the manifest committer on a local disk: a moment in its first half
                delay = round(rng.uniform(0.0, durations.get(phase, 0.5) / 2), 4)
        shape = SHAPES[shape_for(row, committer)]
        front = self.front(seed, shape.latency_ms) if committer != "manifest" else None
        spec, old = self.prepare(
            shape_for(row, committer),
            seed,
            committer,
            mode,
            choice["driver_messages"],
            front.endpoint_url if front else None,
            row.key,
        )
        spec.hold = phase if at_request is not None or at_start else ""
        result = RunResult(
            row.key, seed, committer, mode, choice["plan"], phase, delay, "?", "", "?"
        )
        result.at_request = at_request
        try:
            child = ChildJob(spec)
            reached = child.wait_for_phase(phase, self.timeout)
            fired = True
            if reached and at_request is not None and front is not None:
                front.add_rule("*", "delay", ms=600_000, nth=at_request)
                child.go_on()
                fired = child.kill_when_fired(front, 0, self.timeout)
            elif reached:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(delay)
            child.kill()
            if front is not None:
                # What the dead process had not got onto the server is lost; what it had
                # is answered before stop() returns (the front drains).
                front.stop()
                front = None
            result.phase = child.phase
            self._check_magicfs(child, result)
            if not reached:
                result.outcome = "job failed before the phase"
                result.problems.append(f"the job never reached {phase}: {child.stderr_tail()}")
                return result
            if child.phase != phase or not fired:
                # A kill after the phase proves nothing about the phase: the row fails.
                result.outcome = "kill missed its phase"
                where = "the job had finished" if child.phase == "done" else f"in {child.phase}"
                result.problems.append(f"the kill landed after {phase} ({where})")
                return result
            if spec.committer != "manifest":
                spec.endpoint = self.upstream_url  # recovery talks to the server directly
            observer = Observer(spec, self.client)
            pre = observer.snapshot()
            saved = set(saved_messages_ids(spec))
            started = child.tagged("TASK_COMMIT")
            in_flight = next((t for t in started if t not in saved), None)
            expect = Expectations(spec, old, child.phase, saved, in_flight)
            result.detail = _detail(expect, pre)
            result.steps = recover_in_child(spec, choice["plan"].split(","), self.timeout)
            final = observer.snapshot()
            result.tasks_visible = sorted(tasks_visible(expect, final)[0])
            result.outcome, result.problems = judge(expect, pre, result.steps, final)
            result.problems += self._second_call(spec, result.steps[-1], final, observer)
        finally:
            if front is not None:
                front.stop()
            if result.clean:
                self.discard(spec)
        return result

    def _second_call(
        self, spec: JobSpec, last: dict[str, Any], before: Snapshot, observer: Observer
    ) -> list[str]:
        """The last recovery call once more, in this process: it must change nothing."""
        again = call(make_committer(spec, spec.endpoint), last["action"], spec)
        after = observer.snapshot()
        problems = []
        if not (again["ok"] or _is(again, "NothingToCommitError")):
            problems.append(f"second call not harmless: {_describe(again)}")
        if not after.same_output(before):
            problems.append("second call changed the output")
        problems += [
            f"after a second call: {p}"
            for p in leftovers(spec, after)
            if p not in leftovers(spec, before)
        ]
        return problems

    @staticmethod
    def _check_magicfs(child: ChildJob, result: RunResult) -> None:
        found = child.magicfs_file()
        if found is not None and not found.startswith(str(ROOT) + os.sep):
            result.problems.append(f"the child imported magicfs from {found}, not {ROOT}")


def saved_messages_ids(spec: JobSpec) -> list[int]:
    if not os.path.isdir(spec.messages_dir):
        return []
    return sorted(
        int(n.split(".")[0]) for n in os.listdir(spec.messages_dir) if n.endswith(".json")
    )


def _detail(expect: Expectations, pre: Snapshot) -> str:
    """Where inside its phase the kill landed, as the store shows it."""
    parts = []
    if pre.journal is not None:
        parts.append(f"journal {pre.journal.get('phase')}")
    elif expect.phase == "job_commit":
        parts.append("no journal")
    job_files = sum(
        1 for t in range(expect.spec.tasks) for n in expect.task_files(t) if n in pre.visible
    )
    total = sum(len(expect.spec.task_files(t)) for t in range(expect.spec.tasks))
    parts.append(f"{job_files}/{total} visible")
    if expect.spec.conflict_mode == "replace" and expect.preexisting:
        gone = sum(1 for n in expect.preexisting if n not in pre.visible)
        parts.append(f"{gone}/{len(expect.preexisting)} old deleted")
    if pre.success_job == expect.spec.job_id:
        parts.append("_SUCCESS")
    if expect.phase == "task_commit":
        parts.append(f"messages {sorted(expect.saved)}, in flight {expect.in_flight}")
    return ", ".join(parts)


def _empty_bucket(client: Any, bucket: str) -> None:
    for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
        for upload in page.get("Uploads", []):
            client.abort_multipart_upload(
                Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
            )
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    client.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    main(sys.argv[1:])
