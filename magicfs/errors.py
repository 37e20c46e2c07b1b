"""Exceptions raised by magicfs.

Every error says *which file* and *what is wrong with it*: an operator reading a
failed job's log must be able to find the bad record without a debugger.
"""

from __future__ import annotations

import io


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


class UnsupportedTaskOperation(MagicFSError, io.UnsupportedOperation):
    """An operation that this store cannot do safely on a task path.

    Raised before anything is changed; the message names the path, the reason and what
    to do instead. (``io.UnsupportedOperation`` is both an ``OSError`` and a
    ``ValueError``.)
    """


class DeferredFileError(UnsupportedTaskOperation):
    """An operation needs the bytes of a task file that has none yet (S3 deferred writes).

    On S3 a file written under a task path exists only as an unfinished multipart
    upload aimed at its final key: it cannot be read, copied or moved before job
    commit. The message names the file, the operation and what to do instead.
    (``io.UnsupportedOperation`` is both an ``OSError`` and a ``ValueError``.)
    """


class TaskNotActiveError(MagicFSError, RuntimeError):
    """A write to a task attempt that has already committed or aborted in this process.

    Such a file would never be published: its task's record is already saved (or
    withdrawn). Nothing has been written when this is raised.
    """


class OutsideTaskPathError(MagicFSError, PermissionError):
    """A write through a job's filesystem to its destination, outside every task path.

    Such a file would skip the commit protocol: visible at once, and kept when the job
    aborts. Nothing has been written when this is raised; the message names the file and
    the route to use (``task.path(...)`` with ``job.fs``, ``task.url(...)`` with
    ``job.storage_options``).
    """


class JobAlreadyActiveError(MagicFSError, FileExistsError):
    """``setup_job`` for a job id that is already active (or already committed) here.

    Two drivers using one job id would mix their files; pick a new job id, or resume
    the job explicitly (``setup_job(resume=True)``).
    """


class LocalSpoolError(MagicFSError, OSError):
    """A local spool of a job's commit or clean-up (SQLite, in the temporary directory)
    could not be written: the directory is full, too small for the job, or not writable.
    The message names the file and how to give the spool room (``TMPDIR``); the job
    commit's own error says what was published (nothing, when its load stage failed)."""


class JobCommitError(CommitFailedError):
    """Job commit failed in a named stage.

    ``stage`` names the stage (``load``, ``validate``, ``publish``, ...), ``job_id`` the
    job; ``recoverable`` is true when the job was left for ``commit_job()`` to finish
    (replace mode after old data was deleted: rolling back would lose both; or a commit
    refused before anything changed, e.g. one that was not told what to publish), false
    when it was rolled back and aborted. The message says which, and the command to run.
    """

    def __init__(self, message: str, *, job_id: str, stage: str, recoverable: bool = False):
        super().__init__(message)
        self.job_id = job_id
        self.stage = stage
        self.recoverable = recoverable


class StoreCallError(MagicFSError, OSError):
    """A store request that failed: refused, kept failing through every retry, or unanswered.

    The message names the operation, the object (``s3://bucket/key``, with the upload id
    where there is one), and the store's answer: HTTP status, error code and message
    (``HTTP 400 InvalidPart (the store sent no message)``), or, when nothing answered, the
    endpoint that did not (:mod:`magicfs.stores.s3.failures`). The store's own error stays
    available as ``__cause__`` (``error_code()`` finds its code there). ``operation`` and
    ``target`` carry the first two, ``status`` and ``code`` the answer (``None`` without
    one), ``attempts`` how many times the call was made, and ``gave_up`` is true when the
    error was worth retrying and the retries ran out (an outage, not a refusal).

    Subclasses keep the exception classes s3fs gives the same answers, so callers'
    ``except FileNotFoundError`` (``NoSuchKey``, ``NoSuchUpload``), ``PermissionError``,
    ``FileExistsError`` and ``TimeoutError`` still work; other refusals keep s3fs's
    ``errno``.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        target: str,
        attempts: int,
        status: int | None = None,
        code: str | None = None,
        gave_up: bool = False,
    ):
        super().__init__(message)
        self.operation = operation
        self.target = target
        self.attempts = attempts
        self.status = status
        self.code = code
        self.gave_up = gave_up

    def __reduce__(self) -> tuple[object, ...]:  # keyword arguments survive pickling
        return (
            _rebuild_store_error,
            (
                type(self),
                str(self),
                self.operation,
                self.target,
                self.attempts,
                self.status,
                self.code,
                self.gave_up,
                self.errno,
            ),
        )


def _rebuild_store_error(
    cls: type[StoreCallError],
    message: str,
    operation: str,
    target: str,
    attempts: int,
    status: int | None,
    code: str | None,
    gave_up: bool,
    errno: int | None,
) -> StoreCallError:
    error = cls(
        message,
        operation=operation,
        target=target,
        attempts=attempts,
        status=status,
        code=code,
        gave_up=gave_up,
    )
    error.errno = errno
    return error


class StoreNotFoundError(StoreCallError, FileNotFoundError):
    """:class:`StoreCallError` for a missing object or upload (``NoSuchKey``, ``NoSuchUpload``)."""


class StoreAccessDeniedError(StoreCallError, PermissionError):
    """:class:`StoreCallError` for a request the store does not allow (``AccessDenied``...)."""


class StoreExistsError(StoreCallError, FileExistsError):
    """:class:`StoreCallError` for a conditional write that found an object (``If-None-Match``)."""


class StoreTimeoutError(StoreCallError, TimeoutError):
    """:class:`StoreCallError` for a request the store timed out (``RequestTimeout``)."""


class StoreUnreachableError(StoreCallError, ConnectionError):
    """:class:`StoreCallError` when no answer came: connection refused, timed out or reset.

    The message names the endpoint; ``status`` and ``code`` are ``None``.
    """


class MissingBucketError(StoreCallError):
    """:class:`StoreCallError` for ``NoSuchBucket``: the bucket itself is not there.

    Deliberately *not* a ``FileNotFoundError`` (s3fs makes it one): code that reads "no
    such file" as "nothing there yet" (a job's absent journal, an absent record) would
    otherwise carry on against a bucket that does not exist, and fail later with a message
    naming neither the bucket nor the job. ``errno`` is ``ENOENT``.
    """


class UploadsLeftError(MagicFSError, OSError):
    """Multipart uploads that could not be aborted and are left parked (billed) on the store.

    ``uploads`` lists ``(bucket, key, upload_id)`` of every one left; ``command`` is the
    ``magicfs`` command line that aborts them once the store accepts aborts again (add
    the store options, such as ``--endpoint-url``, it needs). The message names how many,
    the first few, the first error and the command.
    """

    def __init__(self, message: str, *, uploads: list[tuple[str, str, str]], command: str):
        super().__init__(message)
        self.uploads = uploads
        self.command = command

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_uploads_left, (str(self), self.uploads, self.command))


def _rebuild_uploads_left(
    message: str, uploads: list[tuple[str, str, str]], command: str
) -> UploadsLeftError:
    return UploadsLeftError(message, uploads=uploads, command=command)


class NoSnapshotError(MagicFSError, FileNotFoundError):
    """A destination has no job commit record to resolve a snapshot from
    (:func:`magicfs.snapshot`): nothing was committed there by a magicfs that writes
    them, or it is not a destination at all."""
