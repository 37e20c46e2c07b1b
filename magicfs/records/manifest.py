"""``<task id>-manifest.json``: a task attempt's files and directories, for rename stores.

Hadoop's manifest committer format (``TaskManifest/1``): files are ``FileEntry``
(short keys ``s`` source, ``d`` destination, ``z`` size, ``e`` etag), directories are
``DirEntry`` (``d`` directory, ``t`` status code, ``l`` depth below the attempt dir).
Paths are URIs (a space is ``%20``); :func:`path_to_uri` and :func:`uri_to_path`
convert between them and fsspec paths.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self
from urllib.parse import quote, unquote

from ..errors import InvalidCommitData
from ..statistics import IOStatisticsSnapshot
from ._base import Record
from ._fields import FieldReader

MANIFEST_TYPE = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1"


class EntryStatus(enum.IntEnum):
    """What a destination directory was when the task looked (Hadoop ``EntryStatus``)."""

    UNKNOWN = 0
    NOT_FOUND = 1
    FILE = 2
    DIR = 3
    CREATED_DIR = 4


# Characters Java's multi-argument URI constructors leave alone in a path.
_URI_SAFE = "/:@!$&'()*+,;=-._~"


def path_to_uri(path: str, protocol: str | None = None) -> str:
    """``s3://b/a b`` -> ``s3://b/a%20b``: quote what Java's ``Path.toUri()`` quotes.

    Non-ASCII characters stay as they are, as in ``URI.toString()``.
    """
    if "://" in path:
        protocol, path = path.split("://", 1)
    quoted = "".join(ch if ord(ch) > 127 else quote(ch, safe=_URI_SAFE) for ch in path)
    return f"{protocol}://{quoted}" if protocol else quoted


def uri_to_path(uri: str) -> str:
    """Inverse of :func:`path_to_uri`."""
    return unquote(uri)


@dataclass
class FileEntry:
    """One file to rename at job commit: ``source`` -> ``dest``."""

    source: str
    dest: str
    size: int
    etag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"s": self.source, "d": self.dest, "z": self.size}
        if self.etag is not None:
            data["e"] = self.etag
        return data

    @classmethod
    def read(cls, reader: FieldReader) -> Self:
        return cls(
            source=reader.string("s", nonempty=True) or "",
            dest=reader.string("d", nonempty=True) or "",
            size=reader.integer("z", minimum=0),
            etag=reader.string("e", required=False, nullable=True, default=None),
        )


@dataclass
class DirEntry:
    """A destination directory the task's files need."""

    dir: str
    status: int = EntryStatus.UNKNOWN
    level: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"d": self.dir, "t": int(self.status), "l": self.level}

    @classmethod
    def read(cls, reader: FieldReader) -> Self:
        return cls(
            dir=reader.string("d", nonempty=True) or "",
            status=reader.integer("t", minimum=0, maximum=max(EntryStatus)),
            level=reader.integer("l", minimum=0),
        )


@dataclass
class TaskManifest(Record):
    """Hadoop's ``TaskManifest``: what one task attempt committed on a rename store."""

    VERSION: ClassVar[int] = 1
    MAX_BYTES: ClassVar[int] = 512 << 20
    PRETTY: ClassVar[bool] = True

    job_id: str = ""
    job_attempt_number: int = 0
    task_id: str = ""
    task_attempt_id: str = ""
    task_attempt_dir: str = ""
    files: list[FileEntry] = field(default_factory=list)
    directories: list[DirEntry] = field(default_factory=list)
    extra_data: dict[str, str] = field(default_factory=dict)
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": MANIFEST_TYPE,
            "version": self.VERSION,
            "jobId": self.job_id,
            "jobAttemptNumber": self.job_attempt_number,
            "taskID": self.task_id,
            "taskAttemptID": self.task_attempt_id,
            "taskAttemptDir": self.task_attempt_dir,
            "files": [entry.to_dict() for entry in self.files],
            "directories": [entry.to_dict() for entry in self.directories],
            "extraData": dict(self.extra_data),
            "iostatistics": self.iostatistics.to_dict(),
        }

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        reader.expect_constant("type", MANIFEST_TYPE)
        reader.expect_constant("version", cls.VERSION)
        files = [FileEntry.read(item) for item in reader.objects("files", required=False)]
        seen: dict[str, int] = {}
        for index, entry in enumerate(files):
            if entry.dest in seen:
                reader.fail(
                    f"files[{index}].d",
                    f"destination {entry.dest} is written to by more than one pending commit "
                    f"(also files[{seen[entry.dest]}])",
                )
            seen[entry.dest] = index
        return cls(
            job_id=reader.string("jobId", required=False) or "",
            job_attempt_number=reader.integer("jobAttemptNumber", required=False, minimum=0),
            task_id=reader.string("taskID", required=False) or "",
            task_attempt_id=reader.string("taskAttemptID", required=False) or "",
            task_attempt_dir=reader.string("taskAttemptDir", required=False) or "",
            files=files,
            directories=[
                DirEntry.read(item) for item in reader.objects("directories", required=False)
            ],
            extra_data=reader.string_map("extraData"),
            iostatistics=reader.iostatistics(),
        )

    def check_sources(self, attempt_dir_uri: str, source: str | None) -> None:
        """Refuse files whose source is not inside the attempt's own working directory.

        ``attempt_dir_uri`` is the working directory of *this manifest's* attempt in URI
        form. A source edited to point elsewhere (another attempt's file, a file outside
        the job) would otherwise be moved into the destination by job commit.
        """
        base = attempt_dir_uri.rstrip("/") + "/"
        for index, entry in enumerate(self.files):
            relative = entry.source[len(base) :] if entry.source.startswith(base) else None
            if relative is None or any(
                element in ("", ".", "..") for element in uri_to_path(relative).split("/")
            ):
                raise InvalidCommitData(
                    source,
                    f"files[{index}].s",
                    f"{entry.source} is not in the working directory of task attempt "
                    f"{self.task_attempt_id} ({attempt_dir_uri})",
                )

    def check_destination(self, dest_uri: str, source: str | None) -> None:
        """Refuse files or directories that would land outside ``dest_uri``.

        ``dest_uri`` is the job destination in URI form (:func:`path_to_uri`).
        """
        base = dest_uri.rstrip("/") + "/"
        entries = [(f"files[{i}].d", entry.dest) for i, entry in enumerate(self.files)]
        entries += [(f"directories[{i}].d", entry.dir) for i, entry in enumerate(self.directories)]
        for name, target in entries:
            relative = target[len(base) :] if target.startswith(base) else None
            if relative is None or any(
                element in ("", ".", "..") for element in uri_to_path(relative).split("/")
            ):
                raise InvalidCommitData(
                    source, name, f"{target} is outside the job destination {dest_uri}"
                )
