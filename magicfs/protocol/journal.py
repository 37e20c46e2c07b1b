"""Keeping one job's commit journal and its delete pages (:mod:`magicfs.records.journal`).

The journal lives beside the job's other records (its location is the committer's
choice); this module only reads, validates and writes it through a :class:`RecordIO`,
the two operations every store offers. Nothing read back is trusted: the journal must
name this job, and a delete page may only name visible files inside the destination —
a tampered page can never make a retried commit delete anything else.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from ..errors import InvalidCommitData
from ..names import JOURNAL_FILE, journal_page
from ..paths import join
from ..records.journal import PAGE_SIZE, CommitJournal, DeletePage


class RecordIO(Protocol):
    """Small whole-object reads and writes on a store."""

    def read(self, path: str, limit: int) -> bytes | None:
        """At most ``limit + 1`` bytes of ``path``; ``None`` when it does not exist."""

    def write(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` as one unit (no reader sees half of it)."""

    def display(self, path: str) -> str:
        """``path`` with its protocol, for messages."""


class JournalKeeper:
    """The journal at ``<directory>/_magicfs_commit.json`` of the job writing to ``dest``."""

    def __init__(self, io: RecordIO, directory: str, dest: str, job_id: str):
        self.io = io
        self.directory = directory
        self.dest = dest
        self.job_id = job_id

    @property
    def path(self) -> str:
        return join(self.directory, JOURNAL_FILE)

    def page_path(self, page: int) -> str:
        return join(self.directory, journal_page(page))

    def all_paths(self, journal: CommitJournal | None) -> list[str]:
        """The journal and its pages (pages first: the journal is deleted last)."""
        pages = range(journal.pages) if journal is not None else range(0)
        return [*(self.page_path(n) for n in pages), self.path]

    def read(self) -> CommitJournal | None:
        data = self.io.read(self.path, CommitJournal.MAX_BYTES)
        if data is None:
            return None
        source = self.io.display(self.path)
        journal = CommitJournal.from_json(data, source=source)
        if journal.job_id != self.job_id:
            raise InvalidCommitData(
                source,
                "jobId",
                f"the journal is for job {journal.job_id}, this is job {self.job_id}",
            )
        return journal

    def start(self, journal: CommitJournal, doomed: list[str]) -> CommitJournal:
        """Save the delete pages, then the journal (the pages must exist before it names them)."""
        for page in range(0, len(doomed), PAGE_SIZE):
            record = DeletePage(self.job_id, page // PAGE_SIZE, doomed[page : page + PAGE_SIZE])
            self.io.write(self.page_path(page // PAGE_SIZE), record.to_bytes())
        journal.deletes = len(doomed)
        self.save(journal)
        return journal

    def save(self, journal: CommitJournal) -> None:
        self.io.write(self.path, journal.to_bytes())

    def pages(self, journal: CommitJournal) -> Iterator[list[str]]:
        """The paths each delete page names, validated page by page."""
        for number in range(journal.pages):
            path = self.page_path(number)
            source = self.io.display(path)
            data = self.io.read(path, DeletePage.MAX_BYTES)
            if data is None:
                raise InvalidCommitData(source, None, "delete page named by the journal is missing")
            page = DeletePage.from_json(data, source=source)
            if page.job_id != self.job_id or page.page != number:
                raise InvalidCommitData(
                    source,
                    "jobId",
                    f"page {page.page} of job {page.job_id} is not page {number} "
                    f"of job {self.job_id}",
                )
            for index, doomed in enumerate(page.paths):
                problem = self._outside(doomed)
                if problem:
                    raise InvalidCommitData(source, f"paths[{index}]", problem)
            yield page.paths

    def _outside(self, path: str) -> str | None:
        """Why ``path`` may not be deleted by a replace commit (``None``: it may)."""
        prefix = self.dest.rstrip("/") + "/"
        if not path.startswith(prefix):
            return f"{path} is outside the destination {self.dest}"
        elements = path[len(prefix) :].split("/")
        if any(e in ("", ".", "..") for e in elements):
            return f"{path} has an empty, '.' or '..' element"
        if elements[0].startswith(("_", ".")):
            return f"{path} is not visible data of the destination (hidden name {elements[0]!r})"
        return None
