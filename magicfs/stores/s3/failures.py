"""What a failed S3 call tells the user: the operation, the object and the store's answer.

s3fs turns a store's error reply into an ``OSError`` whose text is the reply's
``<Message>`` alone, so a store that sends a code and no message (Ceph RGW's
``InvalidPart``) surfaces as ``OSError: [Errno 22] None``; a connection that was never
made surfaces as botocore's ``EndpointConnectionError``, which is no ``OSError`` at all.
:func:`store_error` rewrites both into a :class:`~magicfs.errors.StoreCallError` whose
message reads, for example::

    CompleteMultipartUpload s3://bkt/out/a.csv (upload 2~x3): HTTP 400 InvalidPart (the
    store sent no message)
    GetObject s3://bkt/out/__magic_job-1/_magicfs_commit.json: no answer from the store at
    http://127.0.0.1:9000: connection refused; check the endpoint URL and that the store
    is running
    HeadObject s3://no-such-bucket/out/x: HTTP 404 NoSuchBucket: bucket no-such-bucket
    does not exist

The original error stays as ``__cause__`` and the exception class stays what callers
expect (see :class:`~magicfs.errors.StoreCallError`'s subclasses), except ``NoSuchBucket``
(:class:`~magicfs.errors.MissingBucketError`, no ``FileNotFoundError``: a missing bucket
is never "nothing there yet").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import aiohttp
import botocore.exceptions

from ...errors import (
    MissingBucketError,
    StoreAccessDeniedError,
    StoreCallError,
    StoreExistsError,
    StoreNotFoundError,
    StoreTimeoutError,
    StoreUnreachableError,
)
from .retry import NO_ANSWER_TYPES, chain, describe, error_code

#: Errors that mean no connection could be made (nothing was sent).
NOT_CONNECTED_TYPES = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectTimeoutError,
    aiohttp.ClientConnectorError,
    ConnectionRefusedError,
)


def http_status(error: BaseException) -> int | None:
    """The HTTP status of the store's reply behind ``error``, if it replied."""
    for candidate in chain(error):
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
    return None


def store_message(error: BaseException) -> str | None:
    """The ``<Message>`` of the store's error reply, if it sent one."""
    for candidate in chain(error):
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            message = response.get("Error", {}).get("Message")
            return str(message) if message else None
    return None


def is_not_connected(error: BaseException) -> bool:
    """No connection to the endpoint could be made (refused, or no answer in time)."""
    return http_status(error) is None and any(
        isinstance(e, NOT_CONNECTED_TYPES) for e in chain(error)
    )


def endpoint_of(error: BaseException, fs: Any = None) -> str | None:
    """``scheme://host:port`` the failed request went to (from botocore's error, else
    the client ``fs`` made)."""
    for candidate in chain(error):
        details = getattr(candidate, "kwargs", None)  # botocore's exceptions keep theirs
        url = details.get("endpoint_url") if isinstance(details, dict) else None
        if isinstance(url, str) and url:
            parts = urlsplit(url)
            return f"{parts.scheme}://{parts.netloc}"
    client = getattr(fs, "_s3", None)
    url = getattr(getattr(client, "meta", None), "endpoint_url", None)
    return url if isinstance(url, str) else None


def answer(error: BaseException, bucket: str | None = None, fs: Any = None) -> str:
    """The store's answer in words: ``HTTP 400 InvalidPart: <message>``, or why none came."""
    status, code = http_status(error), error_code(error)
    if status is not None or code is not None:
        text = " ".join(part for part in (f"HTTP {status}" if status else None, code) if part)
        message = store_message(error)
        if code == "NoSuchBucket" and bucket:
            return f"{text}: bucket {bucket} does not exist"
        return f"{text}: {message}" if message else f"{text} (the store sent no message)"
    endpoint = endpoint_of(error, fs) or "(unknown endpoint)"
    if is_not_connected(error):
        why = _connect_failure(error)
        return (
            f"no answer from the store at {endpoint}: {why}; check the endpoint URL and "
            "that the store is running"
        )
    return f"no answer from the store at {endpoint}: {type(error).__name__}: {error}"


def _connect_failure(error: BaseException) -> str:
    for candidate in chain(error):
        if isinstance(candidate, ConnectionRefusedError):
            return "connection refused"
        if isinstance(candidate, botocore.exceptions.ConnectTimeoutError):
            return "connection timed out"
    return f"could not connect ({type(error).__name__}: {error})"


def store_error(
    operation: str,
    params: dict[str, Any],
    error: BaseException,
    *,
    attempts: int = 1,
    gave_up: str = "",
    fs: Any = None,
) -> BaseException:
    """``error`` (raised by one S3 call) as a :class:`StoreCallError` naming everything.

    ``gave_up``: why retrying stopped (``"failed 4 times ..."``), empty for an error that
    was final at once. Errors that are neither a store's answer nor a lost connection
    (a bad parameter, a bug) are returned unchanged.
    """
    status, code = http_status(error), error_code(error)
    answered = status is not None or code is not None
    if not answered and not any(isinstance(e, NO_ANSWER_TYPES) for e in chain(error)):
        return error
    target = describe(operation, params)
    text = answer(error, params.get("Bucket"), fs)
    message = f"{target} {gave_up}; last answer: {text}" if gave_up else f"{target}: {text}"
    cls = _class_for(error, code, answered)
    wrapped = cls(
        message,
        operation=target.split(" ", 1)[0],
        target=target,
        attempts=attempts,
        status=status,
        code=code,
        gave_up=bool(gave_up),
    )
    wrapped.errno = 2 if code == "NoSuchBucket" else getattr(error, "errno", None)
    return wrapped


def _class_for(error: BaseException, code: str | None, answered: bool) -> type[StoreCallError]:
    if code == "NoSuchBucket":
        return MissingBucketError
    if not answered:
        return StoreUnreachableError
    for kind, cls in (
        (FileNotFoundError, StoreNotFoundError),
        (PermissionError, StoreAccessDeniedError),
        (FileExistsError, StoreExistsError),
        (TimeoutError, StoreTimeoutError),
    ):
        if isinstance(error, kind):
            return cls
    return StoreCallError


def is_missing_bucket(error: BaseException) -> bool:
    """The store answered ``NoSuchBucket`` (s3fs raises ``FileNotFoundError``; magicfs
    its :class:`~magicfs.errors.MissingBucketError`)."""
    return error_code(error) == "NoSuchBucket"


class S3Failures:
    """S3's way to read its errors, for messages written above the stores
    (:class:`~..failures.StoreFailures`; declared as ``SPEC.failures``)."""

    #: No credentials, no connection, a bad endpoint ...: botocore's, no ``OSError``.
    raises: tuple[type[BaseException], ...] = (botocore.exceptions.BotoCoreError,)

    def code(self, error: BaseException) -> str | None:
        return error_code(error)

    def http_status(self, error: BaseException) -> int | None:
        return http_status(error)

    def answer(self, error: BaseException) -> str:
        return answer(error)

    def is_not_connected(self, error: BaseException) -> bool:
        return is_not_connected(error)

    def is_missing_bucket(self, error: BaseException) -> bool:
        return is_missing_bucket(error)


#: The one :class:`S3Failures` (it holds nothing).
FAILURES = S3Failures()


def listing_error(operation: str, path: str, error: FileNotFoundError) -> OSError:
    """What to raise when one of s3fs's own listings of ``path`` (``bucket/key``) failed
    with ``FileNotFoundError``: a :class:`MissingBucketError` naming the bucket when the
    bucket is missing, else ``error`` itself (the path is just not there)."""
    if not is_missing_bucket(error):
        return error
    bucket, _, key = path.partition("/")
    wrapped = store_error(operation, {"Bucket": bucket, "Key": key}, error)
    return wrapped if isinstance(wrapped, OSError) else error
