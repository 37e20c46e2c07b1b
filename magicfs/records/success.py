"""``_SUCCESS``: the JSON summary a committed job leaves in its destination.

``SuccessData`` is what Hadoop's S3A committers write (compact JSON, ``filenames`` as
``/key``); ``ManifestSuccessData`` what the manifest committer writes (indented, nulls
left out, ``filenames`` as full URIs). Both carry the same ``name`` constant and read
each other's files. A zero-byte ``_SUCCESS`` is the classic FileOutputCommitter's
marker and is rejected here with a message saying so.
"""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from ..errors import InvalidCommitData
from ..statistics import IOStatisticsSnapshot
from ._base import Record, java_date, now_millis
from ._fields import MAX_TEXT, FieldReader

SUCCESS_NAME = "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"
MANIFEST_COMMITTER_CLASS = (
    "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter"
)
#: Both committers list at most this many committed files.
MAX_FILENAMES = 100


@dataclass
class SuccessData(Record):
    """Hadoop's ``SuccessData``: who committed what, when, with which statistics."""

    MAX_BYTES: ClassVar[int] = 64 << 20

    success: bool = True
    timestamp: int = field(default_factory=now_millis)
    date: str = ""
    hostname: str = field(default_factory=socket.gethostname)
    committer: str = ""
    description: str = ""
    job_id: str = ""
    job_id_source: str = ""
    metrics: dict[str, int] = field(default_factory=dict)
    diagnostics: dict[str, str] = field(default_factory=dict)
    filenames: list[str] = field(default_factory=list)
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)
    state: str | None = None
    stage: str | None = None

    def __post_init__(self) -> None:
        self.date = self.date or self._format_date(self.timestamp)

    @staticmethod
    def _format_date(millis: int) -> str:
        return java_date(millis)

    def add_filename(self, name: str) -> None:
        """Remember a committed file; only the first :data:`MAX_FILENAMES` are kept."""
        if len(self.filenames) < MAX_FILENAMES:
            self.filenames.append(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": SUCCESS_NAME,
            "success": self.success,
            "timestamp": self.timestamp,
            "date": self.date,
            "hostname": self.hostname,
            "committer": self.committer,
            "description": self.description,
            "jobId": self.job_id,
            "jobIdSource": self.job_id_source,
            "metrics": dict(self.metrics),
            "diagnostics": dict(self.diagnostics),
            "filenames": list(self.filenames),
            "iostatistics": self.iostatistics.to_dict(),
            "state": self.state,
            "stage": self.stage,
        }

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        if reader.data.get("name") != SUCCESS_NAME:
            reader.fail(
                "name",
                f"expected {SUCCESS_NAME!r}, found {reader.data.get('name')!r}: "
                "not a committer _SUCCESS file",
            )
        return cls(
            success=reader.boolean("success", required=False, default=True),
            timestamp=reader.integer("timestamp", required=False, minimum=0),
            date=reader.string("date", required=False, max_length=256) or "",
            hostname=reader.string("hostname", required=False) or "",
            committer=reader.string("committer", required=False) or "",
            description=reader.string("description", required=False, nullable=True) or "",
            job_id=reader.string("jobId", required=False) or "",
            job_id_source=reader.string("jobIdSource", required=False) or "",
            metrics=reader.int_map("metrics"),
            diagnostics=reader.string_map("diagnostics", max_length=MAX_TEXT),
            filenames=reader.string_list("filenames", required=False),
            iostatistics=reader.iostatistics(),
            state=reader.string("state", required=False, nullable=True, default=None),
            stage=reader.string("stage", required=False, nullable=True, default=None),
        )

    @classmethod
    def from_json(cls, text: str | bytes, source: str | None = None) -> Self:
        if not text:
            raise InvalidCommitData(
                source,
                None,
                "zero-byte _SUCCESS: written by the classic FileOutputCommitter, "
                "it has no job summary",
            )
        return super().from_json(text, source)


@dataclass
class ManifestSuccessData(SuccessData):
    """Hadoop's ``ManifestSuccessData``: the manifest committer's ``_SUCCESS``."""

    PRETTY: ClassVar[bool] = True

    committer: str = MANIFEST_COMMITTER_CLASS

    @staticmethod
    def _format_date(millis: int) -> str:
        # ZonedDateTime.toString(): ISO-8601 with offset and zone id.
        moment = datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z") + "[UTC]"

    def to_dict(self) -> dict[str, Any]:
        # Written with NON_NULL inclusion; description/state/stage are normally absent.
        data = super().to_dict()
        for key in ("description", "state", "stage"):
            if not data[key]:
                del data[key]
        return data
