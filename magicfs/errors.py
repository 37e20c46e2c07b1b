"""Exceptions raised by magicfs.

Every error says *which file* and *what is wrong with it*: an operator reading a
failed job's log must be able to find the bad record without a debugger.
"""

from __future__ import annotations


class MagicFSError(Exception):
    """Base class of every error magicfs raises on purpose."""


class InvalidCommitData(MagicFSError, ValueError):
    """A commit record (``.pending``, ``.pendingset``, manifest, ``_SUCCESS``) is unusable.

    Raised when loading malformed JSON, a wrong version or type marker, a missing or
    mistyped field, or data that would commit outside the job's destination.
    The message always has the form ``<file>: <field>: <problem>``.
    """

    def __init__(self, source: str | None, field: str | None, problem: str):
        self.source = source or "<memory>"
        self.field = field
        self.problem = problem
        where = f"{self.source}: {field}: " if field else f"{self.source}: "
        super().__init__(where + problem)


class CommitConflictError(MagicFSError, FileExistsError):
    """The destination already holds data and the conflict mode is ``fail``."""


class JobNotActiveError(MagicFSError, RuntimeError):
    """A task tried to write or commit for a job that was never set up or has ended.

    Writers of a job that has been committed or aborted ("zombie" task attempts:
    speculative losers, partitioned executors) get this error; the upload they
    started has already been aborted by the time it is raised.
    """


class CommitFailedError(MagicFSError, OSError):
    """Job or task commit failed; what was made visible has been reverted."""


class NothingToCommitError(MagicFSError, FileNotFoundError):
    """``commit_job`` found no job: never set up, or already committed or aborted."""
