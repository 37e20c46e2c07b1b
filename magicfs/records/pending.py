"""``.pending`` and ``.pendingset``: the uncommitted multipart uploads of the S3 committers.

Same JSON keys, types and versions as Hadoop's ``SinglePendingCommit`` (version 2) and
``PendingSet`` (version 3), so either side reads the other's files. The other deferred
stores write the same records and name themselves in ``extraData["magicfs.store"]``
(:attr:`SinglePendingCommit.store`), an opaque name here: a record that names a store is
that store's to check (:meth:`magicfs.stores.deferred.DeferredStore.check`), beyond the
fields every record must have; one that names none is an S3 upload, with at least one part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from ..errors import InvalidCommitData
from ..paths import is_magic_element
from ..statistics import IOStatisticsSnapshot
from ._base import Record, java_date, now_millis
from ._fields import FieldReader

#: S3 allows at most 10,000 parts per upload.
MAX_PARTS = 10_000
#: S3 keys are at most 1,024 bytes of UTF-8.
MAX_KEY_BYTES = 1024
#: Extra-data key naming the deferred store a record belongs to, where it is not an S3
#: multipart upload (Hadoop's records name none). The name is opaque here: which stores
#: exist, and what their records may hold, is :mod:`magicfs.stores`' to say.
STORE_KEY = "magicfs.store"
#: Extra-data key naming the task attempt that committed a pendingset (HADOOP-17258).
TASK_ATTEMPT_ID_KEY = "task.attempt.id"
#: Extra-data key of the checksum algorithm a file's parts carry (a ``.pending``'s; see
#: :mod:`magicfs.stores.s3.checksums`) and, in a pendingset's own extraData, the
#: algorithm every file of the attempt declared (:func:`declared_checksums`).
CHECKSUM_ALGORITHM_KEY = "magicfs.checksum.algorithm"


@dataclass
class SinglePendingCommit(Record):
    """One multipart upload aimed at its final key, waiting for job commit.

    ``uri`` is the path the task wrote to (the magic path); the destination is
    ``bucket`` + ``destination_key``. ``etags[n]`` is the ETag of part ``n + 1``.
    """

    VERSION: ClassVar[int] = 2
    MAX_BYTES: ClassVar[int] = 4 << 20

    uri: str
    upload_id: str
    bucket: str
    destination_key: str
    etags: list[str]
    length: int
    created: int = field(default_factory=now_millis)
    saved: int = 0
    date: str = ""
    job_id: str = ""
    task_id: str = ""
    text: str = ""
    filename: str | None = None
    extra_data: dict[str, str] = field(default_factory=dict)
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)

    def __post_init__(self) -> None:
        self.saved = self.saved or self.created
        self.date = self.date or java_date(self.created)

    @property
    def part_count(self) -> int:
        return len(self.etags)

    @property
    def store(self) -> str | None:
        """The deferred store the record names (``extraData["magicfs.store"]``), or
        ``None``: an S3 multipart upload, as Hadoop's records are."""
        return self.extra_data.get(STORE_KEY)

    @property
    def destination(self) -> str:
        """``bucket/key`` of the object this upload will create."""
        return f"{self.bucket}/{self.destination_key}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.VERSION,
            "filename": self.filename,
            "uri": self.uri,
            "uploadId": self.upload_id,
            "bucket": self.bucket,
            "destinationKey": self.destination_key,
            "created": self.created,
            "saved": self.saved,
            "date": self.date,
            "jobId": self.job_id,
            "taskId": self.task_id,
            "text": self.text,
            "etags": list(self.etags),
            "extraData": dict(self.extra_data),
            "iostatistics": self.iostatistics.to_dict(),
            "length": self.length,
            "partCount": self.part_count,
        }

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        reader.expect_constant("version", cls.VERSION)
        commit = cls(
            uri=_uri(reader, "uri"),
            upload_id=reader.string("uploadId", nonempty=True) or "",
            bucket=_bucket(reader, "bucket"),
            destination_key=_destination_key(reader, "destinationKey"),
            etags=reader.string_list("etags", nonempty_items=True, max_items=MAX_PARTS),
            length=reader.integer("length", minimum=0),
            created=reader.integer("created", required=False, minimum=0),
            saved=reader.integer("saved", required=False, minimum=0),
            date=reader.string("date", required=False, max_length=256) or "",
            job_id=reader.string("jobId", required=False) or "",
            task_id=reader.string("taskId", required=False) or "",
            text=reader.string("text", required=False, control_chars=True) or "",
            filename=reader.string("filename", required=False, nullable=True, default=None),
            extra_data=reader.string_map("extraData"),
            iostatistics=reader.iostatistics(),
        )
        if not commit.etags and commit.store is None:  # a named store checks its own
            reader.fail("etags", "must list at least one part (every upload has a part)")
        part_count = reader.integer("partCount", required=False, default=len(commit.etags))
        if part_count != len(commit.etags):
            reader.fail(
                "etags",
                f"lists {len(commit.etags)} parts but partCount says {part_count}: "
                "parts are missing or were added",
            )
        return commit

    @classmethod
    def from_json(cls, text: str | bytes, source: str | None = None) -> Self:
        commit = super().from_json(text, source)
        if source:
            # As in Hadoop: the filename field is where the record was loaded from.
            commit.filename = source
        return commit

    def check_destination(self, bucket: str, key_prefix: str, source: str | None) -> None:
        """Refuse an upload that would land outside ``bucket/key_prefix``.

        ``key_prefix`` is the job's destination key (``""`` for a bucket root). A
        tampered or misdirected record fails here, before anything is completed.
        """
        where = source or self.filename
        if self.bucket != bucket:
            raise InvalidCommitData(
                where,
                "bucket",
                f"upload is for bucket {self.bucket!r}, but the job writes to bucket {bucket!r}",
            )
        prefix = key_prefix.strip("/")
        if prefix and not self.destination_key.startswith(prefix + "/"):
            raise InvalidCommitData(
                where,
                "destinationKey",
                f"{self.destination_key!r} is outside the job destination {bucket}/{prefix}",
            )


@dataclass
class PendingSet(Record):
    """All pending uploads of one committed task attempt (``<task id>.pendingset``)."""

    VERSION: ClassVar[int] = 3
    MAX_BYTES: ClassVar[int] = 512 << 20

    job_id: str = ""
    commits: list[SinglePendingCommit] = field(default_factory=list)
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)
    extra_data: dict[str, str] = field(default_factory=dict)

    @property
    def task_attempt_id(self) -> str:
        return self.extra_data.get(TASK_ATTEMPT_ID_KEY, "")

    @property
    def total_bytes(self) -> int:
        return sum(commit.length for commit in self.commits)

    def to_dict(self) -> dict[str, Any]:
        # extraData is not written by Hadoop (no getter) and ignored by its readers;
        # we write it so a pendingset says which task attempt committed it.
        return {
            "version": self.VERSION,
            "jobId": self.job_id,
            "commits": [commit.to_dict() for commit in self.commits],
            "iostatistics": self.iostatistics.to_dict(),
            "extraData": dict(self.extra_data),
        }

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        reader.expect_constant("version", cls.VERSION)
        commits = [SinglePendingCommit._read(item) for item in reader.objects("commits")]
        seen: dict[str, int] = {}
        for index, commit in enumerate(commits):
            key = commit.destination
            if key in seen:
                reader.fail(
                    f"commits[{index}].destinationKey",
                    f"{key} is written to by more than one pending commit "
                    f"(also commits[{seen[key]}])",
                )
            seen[key] = index
        extra_data = reader.string_map("extraData")
        declared = extra_data.get(CHECKSUM_ALGORITHM_KEY)
        for index, commit in enumerate(commits):
            if declared and commit.extra_data.get(CHECKSUM_ALGORITHM_KEY) != declared:
                reader.fail(
                    f"commits[{index}].extraData.{CHECKSUM_ALGORITHM_KEY}",
                    f"the record of {commit.destination} has "
                    f"{commit.extra_data.get(CHECKSUM_ALGORITHM_KEY) or 'no'} checksums, but "
                    f"every file of this attempt was written with {declared} checksums "
                    f"(the pendingset's extraData.{CHECKSUM_ALGORITHM_KEY}): the record was "
                    "changed after it was saved",
                )
        return cls(
            job_id=reader.string("jobId", required=False) or "",
            commits=commits,
            iostatistics=reader.iostatistics(),
            extra_data=extra_data,
        )

    def check_destination(self, bucket: str, key_prefix: str, source: str | None) -> None:
        """:meth:`SinglePendingCommit.check_destination` for every commit."""
        for index, commit in enumerate(self.commits):
            try:
                commit.check_destination(bucket, key_prefix, source)
            except InvalidCommitData as e:
                raise InvalidCommitData(source, f"commits[{index}].{e.field}", e.problem) from None


def declared_checksums(commits: list[SinglePendingCommit]) -> dict[str, str]:
    """What a task attempt's pendingset declares of its files' checksums (its extraData).

    Where every file's record carries one checksum algorithm, the pendingset says so, and
    loading it refuses a record without it: a record stripped of its checksums no longer
    passes for one written without them. Records without checksums (Hadoop's, or a job's
    with ``checksum=None``) declare nothing and still commit.
    """
    algorithms = {commit.extra_data.get(CHECKSUM_ALGORITHM_KEY) for commit in commits}
    if len(algorithms) != 1 or None in algorithms:
        return {}
    return {CHECKSUM_ALGORITHM_KEY: algorithms.pop() or ""}


def check_checksums_agree(commits: list[SinglePendingCommit], sources: list[str]) -> None:
    """Refuse an attempt whose files disagree on checksums (some carry them, some not):
    a record changed before task commit. Names the record (``sources[i]`` is where
    ``commits[i]`` came from) and its file."""
    found = sorted({c.extra_data.get(CHECKSUM_ALGORITHM_KEY) or "" for c in commits} - {""})
    if not found:
        return
    declared = found[0]
    for commit, source in zip(commits, sources, strict=True):
        if commit.extra_data.get(CHECKSUM_ALGORITHM_KEY) != declared:
            raise InvalidCommitData(
                source,
                f"extraData.{CHECKSUM_ALGORITHM_KEY}",
                f"the record of {commit.destination} has "
                f"{commit.extra_data.get(CHECKSUM_ALGORITHM_KEY) or 'no'} checksums, but "
                f"other files of its attempt were written with {declared} checksums: the "
                "record was changed after it was saved",
            )


_URI_START = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:|/)")


def _uri(reader: FieldReader, key: str) -> str:
    """A URI as Java's ``URI`` would parse it: scheme, no raw spaces (HADOOP-17112)."""
    value = reader.string(key, nonempty=True) or ""
    if " " in value:
        reader.fail(key, "is not a valid URI: it contains a raw space (write %20)")
    if not _URI_START.match(value):
        reader.fail(key, f"is not a valid URI (no scheme and not absolute): {value!r}")
    return value


def _bucket(reader: FieldReader, key: str) -> str:
    value = reader.string(key, nonempty=True, max_length=255) or ""
    if "/" in value or " " in value:
        reader.fail(key, f"is not a valid bucket name: {value!r}")
    return value


def _destination_key(reader: FieldReader, key: str) -> str:
    value = reader.string(key, nonempty=True) or ""
    if len(value.encode("utf-8")) > MAX_KEY_BYTES:
        reader.fail(key, f"is longer than S3's limit of {MAX_KEY_BYTES} bytes")
    if value.startswith("/") or value.endswith("/"):
        reader.fail(key, f"must not start or end with '/': {value!r}")
    if any(element in ("", ".", "..") for element in value.split("/")):
        reader.fail(key, f"has an empty, '.' or '..' path element: {value!r}")
    if any(is_magic_element(element) for element in value.split("/")):
        reader.fail(key, f"points into a magic directory: {value!r}")
    return value
