"""Where a committed job's requests go: by phase and by purpose, counted by the server.

``job_cost.py --phases`` runs one more job per committer variant, with barriers between
the phases (every task writes; then every task commits; then the job commits), and
takes the (operation, key) of each request of each phase from a :class:`RequestLog`:
the server's own where it keeps one (the stub: ``GET /_stub/log``), else the client's
(:class:`ClientLog`, botocore hooks on the committer's store client; on the stub both
count the same requests per file). Each request gets a purpose from its operation and
key:

* ``marker``: a PUT under ``__magic_job-*`` that is neither a record nor the journal:
  the job marker ``_magicfs_job.json``, a task's ``.started``, a file's zero-byte
  ``__base/...`` placeholder;
* ``record``: a PUT or GET of ``.pending``, ``.pendingset``, ``_SUCCESS`` or the commit
  journal ``_magicfs_commit.json`` (writing ``_SUCCESS`` is its own record);
* ``check``: any other HEAD or GET (is the job active, is there a journal, a ``_SUCCESS``);
* ``create``, ``part``, ``complete``: the multipart upload of a destination file;
* ``list``: ListObjects(V2), ListMultipartUploads, ListParts;
* ``delete``: DeleteObject(s), AbortMultipartUpload;
* ``other``: anything else (a PUT straight to a destination key, a bucket request).

Phases: ``write`` (``setup_job``, ``setup_task``, the writes, until the server is quiet:
magicfs finishes uploading a closed file in the background), ``task commit``, ``job
commit`` (up to and including the ``_SUCCESS`` PUT) and ``clean-up`` (what
``commit_job`` sends after ``_SUCCESS``: listing and deleting the job's tree, marking the
journal committed).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol


class RequestLog(Protocol):
    """(operation, key) of the requests answered since ``reset()``, in order."""

    def reset(self) -> None: ...

    def entries(self) -> list[tuple[str, str]]: ...


class ServerLog:
    """The log a server keeps (a ``bench_servers`` target with ``request_log()``)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def reset(self) -> None:
        self.target.reset_counts()

    def entries(self) -> list[tuple[str, str]]:
        return list(self.target.request_log())


class ClientLog:
    """Every call an s3fs filesystem's client makes, by botocore's
    ``before-parameter-build`` event (the one that still sees the call's ``Key``).

    Sees a retried call once (the event fires per call, not per attempt): the server's
    log is the better count where it exists."""

    def __init__(self, fs: Any) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []
        fs.s3.meta.events.register("before-parameter-build.s3", self._record)

    def _record(self, model: Any, params: Any, **kwargs: Any) -> None:
        with self.lock:
            self.log.append((model.name, str(params.get("Key", ""))))

    def reset(self) -> None:
        with self.lock:
            self.log = []

    def entries(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.log)


PHASES = ("write", "task commit", "job commit", "clean-up")
PURPOSES = ("marker", "create", "part", "record", "check", "complete", "list", "delete", "other")
_RECORD_ENDINGS = (".pending", ".pendingset", "/_SUCCESS", "_magicfs_commit.json")
_BY_OPERATION = {
    "CreateMultipartUpload": "create",
    "UploadPart": "part",
    "CompleteMultipartUpload": "complete",
    "ListObjectsV2": "list",
    "ListObjects": "list",
    "ListMultipartUploads": "list",
    "ListParts": "list",
    "DeleteObject": "delete",
    "DeleteObjects": "delete",
    "AbortMultipartUpload": "delete",
}


def purpose(operation: str, key: str) -> str:
    """The purpose of one request (see the module docstring)."""
    if operation in _BY_OPERATION:
        return _BY_OPERATION[operation]
    record = key.endswith(_RECORD_ENDINGS) or key == "_SUCCESS"
    if operation in ("GetObject", "HeadObject"):
        return "record" if record and operation == "GetObject" and "pending" in key else "check"
    if operation == "PutObject":
        if record:
            return "record"
        return "marker" if "__magic_job-" in key else "other"
    return "other"


def split_clean_up(
    log: list[tuple[str, str]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``commit_job``'s requests: (up to and including the ``_SUCCESS`` PUT, after it)."""
    for index, (operation, key) in enumerate(log):
        if operation == "PutObject" and key.rsplit("/", 1)[-1] == "_SUCCESS":
            return log[: index + 1], log[index + 1 :]
    return log, []


def wait_quiet(requests: RequestLog, latency_ms: float) -> list[tuple[str, str]]:
    """The log once no request came for a while (magicfs's background uploads done)."""
    pause = 0.3 + 3 * latency_ms / 1000
    log = requests.entries()
    while True:
        time.sleep(pause)
        now = requests.entries()
        if len(now) == len(log):
            return now
        log = now


def phased_job(
    requests: RequestLog,
    committer: Any,
    tasks: int,
    write_task: Callable[[Any], None],
    executors: Callable[[Callable[[int], Any], int], list[Any]],
    latency_ms: float,
) -> dict[str, Counter[str]]:
    """One job with barriers between phases; requests by phase, then by purpose."""
    requests.reset()
    committer.setup_job()

    def write(task: int) -> Any:
        attempt = committer.task_attempt(task)
        committer.setup_task(attempt)
        write_task(attempt)
        return attempt

    attempts = executors(write, tasks)
    logs = {"write": wait_quiet(requests, latency_ms)}
    requests.reset()
    messages = executors(lambda task: committer.commit_task(attempts[task]), tasks)
    logs["task commit"] = requests.entries()
    requests.reset()
    committer.commit_job(messages)
    logs["job commit"], logs["clean-up"] = split_clean_up(requests.entries())
    return {phase: Counter(purpose(op, key) for op, key in log) for phase, log in logs.items()}


def phase_table(title: str, counts: dict[str, Counter[str]], files: int) -> list[str]:
    """Requests per file: a row per purpose, a column per phase, totals."""
    lines = [
        f"**{title}**: requests per file",
        "",
        "| purpose | " + " | ".join(PHASES) + " | total |",
        "|---|" + "---:|" * (len(PHASES) + 1),
    ]
    for name in (*PURPOSES, "total"):
        row = [sum(counts[p].values()) if name == "total" else counts[p][name] for p in PHASES]
        if not any(row):
            continue
        cells = " | ".join(f"{n / files:.2f}" if n else "" for n in row)
        label = f"**{name}**" if name == "total" else name
        lines.append(f"| {label} | {cells} | {sum(row) / files:.2f} |")
    return lines
