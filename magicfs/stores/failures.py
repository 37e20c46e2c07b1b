"""What a store's errors say, read the store's own way, for messages written once above
the stores (``magicfs``'s operator commands).

Each store's client says things its own way: S3's replies carry an error code
(``NoSuchBucket``, ``AccessDenied``) and an HTTP status behind s3fs's ``OSError``, and
botocore raises errors that are no ``OSError`` at all when no connection was made. A
deferred store that can tell more than the exception's class declares a
:class:`StoreFailures` as its spec's ``failures`` (:class:`~.deferred.DeferredStoreSpec`;
S3's is :mod:`.s3.failures`); :func:`read` turns one error into a :class:`Failure`, and
the registry (:func:`~.registry.explain`) asks every declared store, so no caller
imports a store's module or compares its codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class StoreFailures(Protocol):
    """A store's way to read its errors (declared as ``DeferredStoreSpec.failures``)."""

    #: The exception types its client raises that are no ``OSError`` (S3: botocore's
    #: ``BotoCoreError``: no credentials, no connection, a bad endpoint ...).
    raises: tuple[type[BaseException], ...]

    def code(self, error: BaseException) -> str | None:
        """The store's error code behind ``error``, if it answered with one."""
        ...

    def http_status(self, error: BaseException) -> int | None:
        """The HTTP status of the store's reply behind ``error``, if it replied."""
        ...

    def answer(self, error: BaseException) -> str:
        """The store's answer in its own words (S3: ``HTTP 403 AccessDenied: <its
        message>``), or why none came."""
        ...

    def is_not_connected(self, error: BaseException) -> bool:
        """No connection to the store could be made (nothing was sent)."""
        ...

    def is_missing_bucket(self, error: BaseException) -> bool:
        """The store said the bucket (container) is not there."""
        ...


@dataclass(frozen=True)
class Failure:
    """One error as its store reads it (:func:`read`)."""

    code: str | None
    status: int | None
    #: :meth:`StoreFailures.answer`.
    answer: str
    not_connected: bool
    missing_bucket: bool

    @property
    def answered(self) -> bool:
        """The store replied with a code or a status (else it never answered)."""
        return self.code is not None or self.status is not None


def read(failures: StoreFailures, error: BaseException) -> Failure | None:
    """``error`` as ``failures`` reads it; ``None`` when it is not that store's: neither
    of a type its client raises nor one in which it reads a code or a status."""
    code, status = failures.code(error), failures.http_status(error)
    if code is None and status is None and not isinstance(error, failures.raises):
        return None
    return Failure(
        code=code,
        status=status,
        answer=failures.answer(error),
        not_connected=failures.is_not_connected(error),
        missing_bucket=failures.is_missing_bucket(error),
    )
