"""A job commit record: what a committed job made visible, for readers of its destination.

magicfs's own record (Hadoop has none; its readers can only list, or wait for
``_SUCCESS``). A job commit writes it under ``<dest>/_magicfs/jobs/`` after the job's
last file is visible and before ``_SUCCESS``, in two objects:

* the **file list**, ``<sequence>-<job id>.files.jsonl.gz``: one JSON object per line,
  ``{"p": <path relative to the destination>, "s": <size in bytes>}``, gzip-compressed.
  Read as a stream, so a 1,000,000-file job is never one document in a reader's memory
  (about 30 bytes a file compressed); written through a local spool;
* the **head**, ``<sequence>-<job id>.json`` (:class:`JobRecord`), written last: job id, mode
  (``append``, ``replace``, or ``replace-partitions`` with the ``partitions`` it replaced),
  commit time, counts and the file list's name. Its existence means the commit
  finished: a reader that finds no head ignores the list (a commit that is running, was
  killed before its head, or was rolled back);
* for a replace job, the **retire list**, ``<sequence>-<job id>.retire.jsonl.gz`` (same
  lines, sizes 0): the old files still to delete once ``retireAfter`` (milliseconds) has
  passed. Written before the head, deleted once they are gone: while it exists with its
  head, the deletion is unfinished, and the next job on the destination or
  ``magicfs jobs vacuum`` finishes it (:mod:`magicfs.protocol.commit_record`).

The sequence number (20 digits) is one more than the highest the writer found listed
there when it wrote its record: it orders the jobs for readers
(:mod:`magicfs.readers.snapshot` says why that order is enough).

Both are untrusted input to a reader: every field and every line is checked, and a bad
one raises :class:`~magicfs.errors.InvalidCommitData` naming the object and the field
(``line 12.p``).
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar, NamedTuple, Self

from fsspec import AbstractFileSystem

from ..errors import InvalidCommitData
from ..names import JOB_FILE_LIST_SUFFIX, JOB_RECORD_SUFFIX, JOB_RECORDS_DIR, RETIRE_LIST_SUFFIX
from ..paths import join
from ._base import Record, _display, now_millis
from ._fields import MAX_STRING, FieldReader

JOB_RECORD_NAME = "magicfs/JobCommitRecord"
MODES = ("append", "replace", "replace-partitions")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Longest line accepted in a file list (a path of MAX_STRING characters and its size).
_MAX_LINE = MAX_STRING + 64


class CommittedFile(NamedTuple):
    """One file of a committed job: ``path`` relative to the destination, ``size`` bytes."""

    path: str
    size: int


def records_dir(dest: str) -> str:
    """Where ``dest``'s job commit records live (``<dest>/_magicfs/jobs``)."""
    return join(dest, JOB_RECORDS_DIR)


#: Digits of a record's sequence number in its names (sorted as text, they sort as numbers).
SEQUENCE_DIGITS = 20


def head_name(sequence: int, job_id: str) -> str:
    """``<sequence, 20 digits>-<job id>.json``: a head's name orders it among its
    destination's records (:mod:`magicfs.readers.snapshot`)."""
    return f"{sequence:0{SEQUENCE_DIGITS}d}-{job_id}{JOB_RECORD_SUFFIX}"


def file_list_name(sequence: int, job_id: str) -> str:
    return f"{sequence:0{SEQUENCE_DIGITS}d}-{job_id}{JOB_FILE_LIST_SUFFIX}"


def retire_list_name(sequence: int, job_id: str) -> str:
    return f"{sequence:0{SEQUENCE_DIGITS}d}-{job_id}{RETIRE_LIST_SUFFIX}"


def parse_head_name(name: str) -> tuple[int, str] | None:
    """``(sequence, job id)`` of a head's name (the last element of its path); ``None``
    for anything else under the records' directory (file lists, unknown objects)."""
    name = name.rstrip("/").rsplit("/", 1)[-1]
    if not name.endswith(JOB_RECORD_SUFFIX):
        return None
    sequence, _, job_id = name[: -len(JOB_RECORD_SUFFIX)].partition("-")
    if len(sequence) != SEQUENCE_DIGITS or not sequence.isdigit() or not job_id:
        return None
    return int(sequence), job_id


@dataclass
class JobRecord(Record):
    """The head of a job commit record (see the module docstring)."""

    VERSION: ClassVar[int] = 1
    MAX_BYTES: ClassVar[int] = 1 << 20

    job_id: str
    mode: str
    files: int
    bytes: int
    file_list: str  # its name, beside the head
    committer: str = ""
    committed: int = field(default_factory=now_millis)  # the writer's clock, milliseconds
    #: ``replace-partitions``: the partition directories (relative) whose older files
    #: leave the snapshot; the files elsewhere stay.
    partitions: list[str] = field(default_factory=list)
    #: A replace job's retire list (its name beside the head; "" for none) and the time
    #: (the writer's clock, milliseconds) from which its files may be deleted.
    retire: str = ""
    retire_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.partitions:
            extra["partitions"] = self.partitions
        if self.retire:
            extra.update(retire=self.retire, retireAfter=self.retire_after)
        return {
            "name": JOB_RECORD_NAME,
            "version": self.VERSION,
            "jobId": self.job_id,
            "mode": self.mode,
            "committed": self.committed,
            "files": self.files,
            "bytes": self.bytes,
            "fileList": self.file_list,
            "committer": self.committer,
            **extra,
        }

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        reader.expect_constant("name", JOB_RECORD_NAME)
        reader.expect_constant("version", cls.VERSION)
        mode = reader.string("mode") or ""
        if mode not in MODES:
            reader.fail("mode", f"must be one of {', '.join(MODES)}, found {mode!r}")
        file_list = _beside(reader, "fileList", required=True)
        partitions = reader.string_list("partitions", required=False, nonempty_items=True)
        if (mode == "replace-partitions") != bool(partitions):
            reader.fail("partitions", "must list the replaced partitions, for that mode only")
        return cls(
            job_id=reader.string("jobId", nonempty=True) or "",
            mode=mode,
            committed=reader.integer("committed", minimum=0),
            files=reader.integer("files", minimum=0),
            bytes=reader.integer("bytes", minimum=0),
            file_list=file_list,
            committer=reader.string("committer", required=False) or "",
            partitions=partitions,
            retire=_beside(reader, "retire", required=False),
            retire_after=reader.integer("retireAfter", required=False, minimum=0),
        )


def _beside(reader: FieldReader, key: str, required: bool) -> str:
    """The name of an object beside the head (no directory, not hidden)."""
    name = reader.string(key, required=required, nonempty=required) or ""
    if "/" in name or name.startswith("."):
        reader.fail(key, f"must name an object beside the head, found {name!r}")
    return name


def write_file_list(out: IO[bytes], files: Iterable[CommittedFile]) -> tuple[int, int]:
    """Stream ``files``, gzip-compressed, into ``out``; returns (files, bytes) listed.

    The caller spools ``out`` locally and uploads it whole, with its length: a PUT
    streamed without one is refused by some stores (Ceph RGW over TLS:
    ``MissingContentLength``), and magicfs's own requests carry the checksum headers
    they need (:mod:`magicfs.protocol.commit_record`).
    """
    count = size = 0
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
        for entry in files:
            packed.write(b'{"p":%s,"s":%d}\n' % (_json_string(entry.path), entry.size))
            count += 1
            size += entry.size
    return count, size


def read_file_list(fs: AbstractFileSystem, path: str) -> Iterator[CommittedFile]:
    """The files a list names, streamed; each line checked (a bad one names its line).

    Lines are parsed :data:`_BATCH` at a time as one JSON array (a million lines must
    not cost a million parser calls); a batch that fails is parsed line by line to name
    the culprit."""
    source = _display(fs, path)
    with fs.open(path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as packed:
        number = 0
        try:
            while batch := list(itertools.islice(packed, _BATCH)):
                yield from _entries(batch, source, number)
                number += len(batch)
        except (OSError, EOFError) as e:  # a truncated or corrupt gzip stream
            if isinstance(e, FileNotFoundError):
                raise
            raise InvalidCommitData(
                source, None, f"not a whole gzip stream after line {number}: {e}"
            ) from None


#: Lines of a file list parsed at a time.
_BATCH = 1000


def _entries(lines: list[bytes], source: str, before: int) -> Iterator[CommittedFile]:
    """The entries of ``lines`` (lines ``before + 1`` on), checked."""
    try:
        if any(len(line) > _MAX_LINE or not line.endswith(b"\n") for line in lines):
            raise ValueError("a long or unterminated line")
        parsed = json.loads(b"[" + b",".join(lines) + b"]")
        if len(parsed) != len(lines):
            raise ValueError("a line holds more than one value")
    except ValueError:  # find the line at fault, and say what is wrong with it
        for number, line in enumerate(lines, before + 1):
            _entry(_parse(line, source, number), source, number)
        raise InvalidCommitData(source, None, "malformed JSON lines") from None
    for number, data in enumerate(parsed, before + 1):
        yield _entry(data, source, number)


def _parse(line: bytes, source: str, number: int) -> Any:
    if len(line) > _MAX_LINE:
        raise _refusal(source, number, None, f"line is longer than {_MAX_LINE} bytes")
    if not line.endswith(b"\n"):
        raise _refusal(source, number, None, "the last line is cut short (no newline)")
    try:
        return json.loads(line)
    except ValueError as e:
        raise _refusal(source, number, None, f"malformed JSON line: {e}") from None


def _refusal(source: str, number: int, field: str | None, problem: str) -> InvalidCommitData:
    return InvalidCommitData(f"{source} (line {number})", field, problem)


def _entry(data: Any, source: str, number: int) -> CommittedFile:
    """One parsed line, checked (type checks: a million lines must not cost a million
    strict parses); any problem is refused naming the line."""
    if not isinstance(data, dict):
        raise _refusal(source, number, None, "expected a JSON object")
    relative, size = data.get("p"), data.get("s")
    if not isinstance(relative, str) or not relative:
        raise _refusal(source, number, "p", "must be a non-empty string")
    if (
        relative.startswith("/")
        or "//" in relative
        or ".." in relative.split("/")
        or _CONTROL.search(relative)
    ):
        problem = f"must be a path inside the destination, found {relative!r}"
        raise _refusal(source, number, "p", problem)
    if type(size) is not int or size < 0:
        raise _refusal(source, number, "s", f"must be an integer >= 0, found {size!r}")
    return CommittedFile(relative, size)


def _json_string(text: str) -> bytes:
    return json.dumps(text, ensure_ascii=False).encode("utf-8")
