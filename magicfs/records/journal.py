"""The job-commit journal: what a commit decided, saved before anything becomes visible.

magicfs's own record (Hadoop has none; its committers cannot finish or roll back a
commit whose driver died). A job commit saves it after every task record has loaded
and validated and the conflict decision is taken, and before the first file becomes
visible or the first old file is deleted:

* ``records``: exactly the task records this commit publishes. A retried
  ``commit_job()`` publishes these again — never a different set listed later — so a
  finished commit is exactly what the uninterrupted one would have been;
* ``conflictMode`` and ``phase``: the conflict check passed (a retry must not mistake
  the commit's own files for a conflict); in ``replace`` mode, ``phase`` is
  ``"replacing"`` when the new files are published first and the old files listed in
  the delete pages are deleted only after the job commit record
  (:mod:`magicfs.protocol.commit_record`), so a reader of the old snapshot is never
  pulled from under; or, when the new files reuse an old file's name (or the committer
  writes no record), ``"deleting"`` until every old file is gone, then
  ``"publishing"``, so a retry deletes old files only while nothing new is visible;
* ``deletes``: how many old files the delete pages list (:class:`DeletePage`, 1,000
  paths each, beside the journal);
* phase ``"committed"`` (with ``result``: files, bytes, tasks) once ``_SUCCESS`` is
  saved: the job is committed. What is left is its clean-up, which runs inline, in the
  background after ``commit_job()`` has returned, or not at all (the committers'
  ``cleanup`` option, :mod:`magicfs.protocol.cleanup`); a driver that dies before it
  finished leaves a job that ``commit_job()`` or ``cleanup_job()`` finishes by cleaning
  up, without publishing anything again.

Saved twice, and both are needed: the first save is the crash guarantee (nothing is
visible before it); the second, ``committed``, is what tells a retry, ``magicfs jobs``
and ``setup_job`` that only clean-up is left — with ``success_file=False`` nothing else
says so, and it must follow ``_SUCCESS`` (saved together, a crash could leave a
"committed" job that never gets its ``_SUCCESS``).

The journal is deleted last, with the job's tree, once the clean-up is complete. Its
presence means "a commit started and its clean-up did not finish": in phase
``committed`` ``cleanup_job()`` finishes it; otherwise ``commit_job()`` finishes it and
``abort_job()`` rolls it back; ``magicfs jobs`` lists it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from ..names import JOURNAL_FILE  # noqa: F401 (re-exported)
from ._base import Record, now_millis
from ._fields import FieldReader

JOURNAL_NAME = "magicfs/CommitJournal"
DELETE_PAGE_NAME = "magicfs/CommitJournal/deletes"
PHASES = ("deleting", "publishing", "replacing", "committed")
#: Paths per delete page: one DeleteObjects request's worth.
PAGE_SIZE = 1000


@dataclass
class CommitJournal(Record):
    """See the module docstring."""

    VERSION: ClassVar[int] = 1
    MAX_BYTES: ClassVar[int] = 64 << 20

    job_id: str
    committer: str
    destination: str
    conflict_mode: str
    phase: str
    records: list[str]
    deletes: int = 0
    created: int = field(default_factory=now_millis)
    updated: int = 0
    result: dict[str, int] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return -(-self.deletes // PAGE_SIZE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": JOURNAL_NAME,
            "version": self.VERSION,
            "jobId": self.job_id,
            "committer": self.committer,
            "destination": self.destination,
            "conflictMode": self.conflict_mode,
            "phase": self.phase,
            "deletes": self.deletes,
            "created": self.created,
            "updated": self.updated or self.created,
            "result": dict(self.result),
            "records": list(self.records),
        }

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        reader.expect_constant("name", JOURNAL_NAME)
        reader.expect_constant("version", cls.VERSION)
        phase = reader.string("phase") or ""
        if phase not in PHASES:
            reader.fail("phase", f"must be one of {', '.join(PHASES)}, found {phase!r}")
        return cls(
            job_id=reader.string("jobId", nonempty=True) or "",
            committer=reader.string("committer", nonempty=True) or "",
            destination=reader.string("destination", nonempty=True) or "",
            conflict_mode=reader.string("conflictMode", nonempty=True) or "",
            phase=phase,
            records=reader.string_list("records", nonempty_items=True),
            deletes=reader.integer("deletes", minimum=0),
            created=reader.integer("created", minimum=0),
            updated=reader.integer("updated", minimum=0),
            result=reader.int_map("result"),
        )


@dataclass
class DeletePage(Record):
    """One page of old files a ``replace`` commit deletes (see the module docstring)."""

    VERSION: ClassVar[int] = 1
    MAX_BYTES: ClassVar[int] = 16 << 20

    job_id: str
    page: int
    paths: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": DELETE_PAGE_NAME,
            "version": self.VERSION,
            "jobId": self.job_id,
            "page": self.page,
            "paths": list(self.paths),
        }

    @classmethod
    def _read(cls, reader: FieldReader) -> Self:
        reader.expect_constant("name", DELETE_PAGE_NAME)
        reader.expect_constant("version", cls.VERSION)
        return cls(
            job_id=reader.string("jobId", nonempty=True) or "",
            page=reader.integer("page", minimum=0),
            paths=reader.string_list("paths", nonempty_items=True, max_items=PAGE_SIZE),
        )
