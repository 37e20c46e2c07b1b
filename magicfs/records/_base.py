"""What every commit record shares: JSON in and out, and load/save through any fsspec filesystem."""

from __future__ import annotations

import datetime
import json
import time
from typing import Any, ClassVar, Self, cast

from fsspec import AbstractFileSystem

from ._fields import FieldReader, parse_document


class Record:
    """Base of the JSON commit records.

    Subclasses define :meth:`to_dict` and :meth:`_read` (building an instance from a
    :class:`FieldReader`, validating as it goes), plus the ``MAX_BYTES`` limit and
    whether Hadoop pretty-prints the format.
    """

    #: Largest file accepted on load; bigger files are rejected before parsing.
    MAX_BYTES: ClassVar[int] = 16 << 20
    #: Hadoop writes the manifest committer's files indented, the S3A ones compact.
    PRETTY: ClassVar[bool] = False

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        raise NotImplementedError

    def to_json(self) -> str:
        if self.PRETTY:
            # Jackson's default pretty printer: two-space indent and " : ".
            return json.dumps(self.to_dict(), indent=2, separators=(",", " : "), ensure_ascii=False)
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    def to_bytes(self) -> bytes:
        return self.to_json().encode("utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | None = None) -> Self:
        return cls._read(FieldReader(data, source))

    @classmethod
    def from_json(cls, text: str | bytes, source: str | None = None) -> Self:
        """Parse and validate; ``source`` names the file in error messages."""
        return cls.from_dict(parse_document(text, source, cls.MAX_BYTES), source)

    @classmethod
    def load(cls, fs: AbstractFileSystem, path: str) -> Self:
        """Read ``path`` with one request and validate it.

        Only ``MAX_BYTES + 1`` bytes are ever read, so a huge file cannot exhaust
        memory. A missing file raises ``FileNotFoundError``; a bad one
        :class:`~magicfs.errors.InvalidCommitData` naming ``path``.
        """
        try:
            data = fs.cat_file(path, start=0, end=cls.MAX_BYTES + 1)
        except OSError as e:
            # S3 answers a ranged GET of a zero-byte object with InvalidRange.
            if "InvalidRange" not in f"{e} {e.__cause__}" and "Range Not Satisfiable" not in str(e):
                raise
            data = b""
        return cls.from_json(data, source=_display(fs, path))

    def save(self, fs: AbstractFileSystem, path: str) -> None:
        """Write the record as one object (a single PUT on object stores)."""
        fs.pipe_file(path, self.to_bytes())


def _display(fs: AbstractFileSystem, path: str) -> str:
    """``path`` with its protocol, for error messages."""
    try:
        return cast(str, fs.unstrip_protocol(path))
    except Exception:  # unstrip_protocol is best-effort cosmetics only
        return path


def now_millis() -> int:
    return int(time.time() * 1000)


def java_date(millis: int) -> str:
    """``java.util.Date.toString()`` in UTC, e.g. ``Wed Oct 09 13:20:00 UTC 2024``."""
    return time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(millis / 1000))


def iso_seconds(moment: datetime.datetime) -> str:
    """``moment`` in UTC, ISO 8601 to the second with a ``Z`` (``2026-12-07T06:08:31Z``):
    how magicfs's own output shows a time (a naive ``moment`` is taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def iso_millis(millis: Any) -> str | None:
    """A record's epoch milliseconds (a marker's ``created``) as :func:`iso_seconds`;
    ``None`` for anything but a positive integer (absent, zero: Hadoop's "not set")."""
    if not isinstance(millis, int) or isinstance(millis, bool) or millis <= 0:
        return None
    return iso_seconds(datetime.datetime.fromtimestamp(millis / 1000, datetime.UTC))
