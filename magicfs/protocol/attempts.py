"""What travels between the driver, the tasks and the caller: attempts, messages, summaries.

All of them pickle (committers ship them to executors) and the message is also JSON.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Self, TypeAlias

from ..errors import CommitFailedError
from ..filesystems.magic import chained_url
from ..names import BASE
from ..paths import is_magic_element, join

#: How a chained work URL starts (``magic::s3://...``): tasks write it through magicfs.
CHAINED = "magic::"


@dataclass(frozen=True)
class TaskAttempt:
    """One attempt at one task. Picklable; build it with ``committer.task_attempt()``.

    ``work_path`` is where the attempt writes, as a path of ``committer.fs``;
    ``work_url`` the same place as a URL that URL-based writers (pandas ``to_csv``,
    dask, anything taking a URL and ``storage_options``) can open with
    ``committer.storage_options``.
    """

    job_id: str
    task_index: int
    attempt_number: int
    task_id: str
    attempt_id: str
    work_path: str
    work_url: str = ""

    def path(self, relative: str) -> str:
        """Where to write ``relative`` (e.g. ``"year=2024/part-0.parquet"``) in this attempt.

        The file becomes ``<dest>/<relative>`` at job commit. Refuses paths that could
        land outside the destination.
        """
        return join(self.work_path, check_relative(relative))

    def url(self, relative: str) -> str:
        """:meth:`path` as a fully qualified URL, for writers that take a URL and options.

        ``df.to_csv(task.url("x.csv"), storage_options=committer.storage_options)``.
        Chained (``magic://<path>::<store URL>``) for the magic, block-list and manifest
        committers, over ``file://...`` for the staging committers (task files on local disk,
        tracked as ``committer.fs``'s), the store's own URL for the classic committers —
        ``local://...`` on a local disk (see :meth:`OutputCommitter.work_url_for`): never
        ``file://``, which pandas opens with urllib. These URLs go through fsspec;
        pyarrow's own filesystems do not know them: give pyarrow :meth:`path` and
        ``filesystem=committer.fs``.

        A chained ``work_url`` (``magic::<store URL>``, the attempt's base) gives file
        URLs of the form ``magic://<path>::<store URL>``, the file's path in the first
        segment, where pandas infers compression (``.csv.gz``): see
        :func:`~magicfs.filesystems.magic.chained_url`.
        """
        base = self.work_url or self.work_path
        if base.startswith(CHAINED):
            return chained_url(join(base[len(CHAINED) :], check_relative(relative)))
        return join(base, check_relative(relative))


def check_relative(relative: str) -> str:
    """A relative output path that stays inside the destination, or ``ValueError``."""
    if not isinstance(relative, str) or not relative.strip("/"):
        raise ValueError(
            f"task.path()/task.url() name one output file relative to the destination, "
            f"not {relative!r}: for a writer that takes a directory "
            "(pyarrow.dataset.write_dataset(base_dir=...), a partitioned to_parquet) give "
            "it task.work_path (with filesystem=job.fs), or task.work_url with "
            "storage_options=job.storage_options"
        )
    if relative.startswith("/") or "://" in relative or relative.startswith("magic::"):
        raise ValueError(f"output path {relative!r} must be relative to the destination")
    for element in relative.split("/"):
        if element in ("", ".", ".."):
            raise ValueError(f"output path {relative!r} has an empty, '.' or '..' element")
        if is_magic_element(element) or element == BASE:
            raise ValueError(f"output path {relative!r} uses the reserved name {element!r}")
    return relative


@dataclass
class AttemptRun:
    """One task attempt being run by :meth:`OutputCommitter.attempt`.

    ``task`` is the attempt (``task.path(...)``, ``task.url(...)``), ``fs`` the filesystem
    to write with. Set ``rows`` to the rows written (reported in ``_SUCCESS``);
    ``message`` holds the task commit message once the ``with`` block has committed.
    """

    task: TaskAttempt
    fs: Any
    rows: int | None = None
    message: TaskCommitMessage | None = None

    def path(self, relative: str) -> str:
        return self.task.path(relative)

    def url(self, relative: str) -> str:
        return self.task.url(relative)


@dataclass(frozen=True)
class TaskCommitMessage:
    """What a committed task attempt tells the job (picklable and JSON-serialisable).

    ``record`` is the store path of the attempt's own commit record (a ``.pendingset``
    or manifest), so the job commits exactly this attempt without listing anything.
    ``rows`` is for writers that know how many rows they wrote (the Spark integration):
    the job reports the total in ``_SUCCESS``.

    ``record_json`` is that record's own JSON where it is small (at most
    :data:`CARRIED_RECORD_MAX` bytes: about 40 files), carried to the job so that its
    commit reads the record from the message, not from the store (one request per task
    less). It was saved before the message existed, with these very bytes; the job
    checks it as it checks a record it reads (and that it is the named attempt's), and
    a driver that restarts reads the saved record. It takes no part in comparing
    messages: a commit repeated after a lost reply gives an equal message.
    """

    committer: str
    job_id: str
    task_id: str
    attempt_id: str
    record: str
    files: int
    bytes: int
    rows: int | None = None
    record_json: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Self:
        data = json.loads(text)
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


#: The largest record a task commit message carries (:class:`TaskCommitMessage`).
#: Decision: a bound per task, not per file, so that what an engine's driver holds for a
#: job's messages grows with its tasks (as the engine's own bookkeeping of each task
#: does: Spark keeps a few KB per task), never with its files: a task of more files
#: than this carries none and job commit reads its record, as before.
CARRIED_RECORD_MAX = 16 * 1024

Messages: TypeAlias = Sequence["TaskCommitMessage | None"]
"""What job commit is given: one message per task. Spark hands ``None`` for a task that
never reported; job commit refuses such a list and names the missing message."""


def distinct(messages: Messages | None) -> Messages | None:
    """``messages`` with repeats of one message dropped (the first kept, order kept).

    Committing an attempt twice (a ``commit_task`` retried after a lost reply, or an
    engine reporting a task twice) gives equal messages: they name one record, so the
    job commits it once. Two *different* messages for one task stay, for the job to
    refuse. ``None`` (a task that never reported) is kept, every time, to be refused.
    """
    if messages is None:
        return None
    seen: set[TaskCommitMessage] = set()
    kept: list[TaskCommitMessage | None] = []
    for message in messages:
        if message is not None:
            if message in seen:
                continue
            seen.add(message)
        kept.append(message)
    return kept


def total_rows(messages: Messages | None) -> int | None:
    """Rows written by all tasks, when every message knows its count."""
    counts = [m.rows if m is not None else None for m in messages or []]
    if not counts or any(count is None for count in counts):
        return None
    return sum(count or 0 for count in counts)


@dataclass
class JobSummary:
    """What ``commit_job`` did.

    ``cleanup_incomplete`` is ``None`` when the job left nothing behind, or its clean-up
    still runs in the background (``committer.wait_cleanup()`` then says what it left);
    otherwise it says what clean-up could not delete, or that clean-up is off, and the
    command that finishes it (the output itself is complete and visible either way).

    ``foreign_uploads_aborted`` counts the multipart uploads under the destination that
    the job's clean-up aborted although the job did not start them (no record of the job
    names them: another tool's; each is logged at WARNING with its key, upload id and
    initiation time). Decision: counted rather than spared, as Hadoop's
    ``fs.s3a.committer.abort.pending.uploads`` does, because a job that shares its
    destination with other writers is told to keep markers (``intent_markers="always"``),
    and then only uploads on the keys the job writes are taken. With ``cleanup="background"``
    it is set when the clean-up ends (after ``committer.wait_cleanup()``).
    """

    job_id: str
    destination: str
    committer: str
    files: int
    bytes: int
    tasks: int
    seconds: float
    success_file: str | None
    filenames: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    cleanup_incomplete: str | None = None
    foreign_uploads_aborted: int = 0


def check_messages(job_id: str, messages: Messages, records_under: str) -> list[str]:
    """The records named by ``messages``, once each is known to be this job's own.

    One message per task, from this job, naming a record under ``records_under``; a
    missing message (Spark's ``None`` for a task that never reported) is an error.
    (Identical messages were merged into one by :func:`distinct` before.)
    """
    tasks: dict[str, TaskCommitMessage] = {}
    present = reported(job_id, messages)
    for message in present:
        if message.job_id != job_id:
            raise CommitFailedError(
                f"job {job_id}: message for task {message.task_id} comes from job {message.job_id}"
            )
        if not message.record.startswith(records_under.rstrip("/") + "/"):
            raise CommitFailedError(
                f"job {job_id}: message for task {message.task_id} names a record "
                f"outside this job: {message.record}"
            )
        earlier = tasks.setdefault(message.task_id, message)
        if earlier is message:
            continue
        if earlier.attempt_id == message.attempt_id:
            raise CommitFailedError(
                f"job {job_id}: two different messages for attempt "
                f"{message.attempt_id} ({earlier.files} files in {earlier.record}, "
                f"{message.files} files in {message.record}): give commit_job the "
                "message of the attempt's last commit_task"
            )
        raise CommitFailedError(
            f"job {job_id}: two messages for task {message.task_id} (attempts "
            f"{earlier.attempt_id} and {message.attempt_id}): give commit_job one "
            "message per task, the attempt to publish"
        )
    return [message.record for message in present]


def reported(job_id: str, messages: Messages) -> list[TaskCommitMessage]:
    """``messages``, refused if one is missing (Spark's ``None`` for a silent task)."""
    present = []
    for index, message in enumerate(messages):
        if message is None:
            raise CommitFailedError(
                f"job {job_id}: message {index} is missing: a task did not report, "
                "so the job cannot be committed"
            )
        present.append(message)
    return present


def carried_records(messages: Messages | None) -> dict[str, tuple[bytes, str]]:
    """The records ``messages`` carry (:attr:`TaskCommitMessage.record_json`), by path:
    their bytes and the attempt whose message carried them."""
    return {
        m.record: (m.record_json.encode("utf-8"), m.attempt_id)
        for m in messages or []
        if m is not None and m.record_json is not None
    }


def without_records(messages: Messages | None) -> Messages | None:
    """``messages`` carrying no records (the job commit then reads them from the store)."""
    if messages is None:
        return None
    return [None if m is None else replace(m, record_json=None) for m in messages]
