"""The retry policy of every S3 call magicfs makes, on top of botocore's and s3fs's own.

botocore retries throttling, 5xx replies and connection errors (5 attempts in its
default mode, about 0.5 s, 1 s ... apart) and s3fs retries ``SlowDown`` again. That is
tuned for one call; a job commit makes one per file, and at 10,000 files a call that
fails five times in a row is to be expected under throttling or a flaky network. Failing
the job for it would roll back 9,999 good files. So each call is repeated, with full
jitter, a few more times while its error is **transient**:

* throttling and server-side errors: ``SlowDown``, ``ServiceUnavailable``,
  ``InternalError``, ``RequestTimeout``, ``OperationAborted``, HTTP 500/502/503/504;
* connection errors and timeouts, wherever they come from (botocore's
  ``EndpointConnectionError`` and ``ConnectionClosedError`` are not ``OSError``\\ s;
  aiohttp's are).

Everything else (``NoSuchUpload``, ``NoSuchKey``, ``AccessDenied``,
``PreconditionFailed``, ``InvalidPart``...) is final and raised at once.

**Why repeating is safe here**, operation by operation: a repeated ``PutObject`` of a
record writes the same bytes (a conditional marker PUT recognises its own earlier
success by the writer's nonce); ``UploadPart`` replaces the part with the same bytes;
a second ``CreateMultipartUpload`` makes an extra upload on a key the job's intent
marker already names, which the job's sweep aborts; a repeated
``CompleteMultipartUpload`` answers ``NoSuchUpload`` and is recognised as done by the
object's job id (:mod:`magicfs.stores.commit_ops`); aborts, deletes, reads and listings
have no side effects beyond the first.

**A budget for the whole job.** ``attempts`` bounds one call; ``budget`` (seconds, off by
default) bounds them all: the waits between retries of every call made through one
store — one committer's calls for its job, or one filesystem's writes — add up, and
once the next wait would pass the budget the error is final. Concurrent waits each
count, so the budget is an upper bound on the time a job spends waiting to retry.
Set it when a store outage should fail a job in bounded time rather than let each of
its 10,000 calls wait out its own attempts:
``committer_for(dest, retry_policy=RetryPolicy(budget=120))``.

A call whose error survives the policy raises :class:`~magicfs.errors.StoreCallError`
(an ``OSError``) naming the operation, the object, the number of attempts and the last
error, which stays available as ``__cause__``.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

import aiohttp
import botocore.exceptions

TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "OperationAborted",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "500",
        "502",
        "503",
        "504",
    }
)
#: The codes by which a store says "slow down" (botocore's adaptive mode reacts to them).
THROTTLING_CODES = frozenset(
    {"SlowDown", "ThrottlingException", "Throttling", "RequestLimitExceeded"}
)

_TRANSIENT_TYPES = (
    botocore.exceptions.HTTPClientError,  # ConnectionClosedError, ReadTimeoutError...
    botocore.exceptions.ConnectionError,  # EndpointConnectionError, ConnectTimeoutError...
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
    TimeoutError,
    ConnectionError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried (module docstring).

    ``attempts`` counts calls (each one with botocore's own attempts inside); the delay
    before retry ``n`` is uniform in ``[0, min(max_delay, base_delay * 2**n)]``.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    #: Seconds of retry waits allowed in all, per store instance (``None``: no limit).
    budget: float | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1, not {self.attempts}")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"RetryPolicy.budget must be None or >= 0, not {self.budget}")

    def delay(self, retry: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * (2**retry)))


DEFAULT_POLICY = RetryPolicy()


def chain(error: BaseException) -> list[BaseException]:
    """``error`` and its causes and contexts, nearest first (cycles cut)."""
    seen: list[BaseException] = []
    pending = [error]
    while pending:
        current = pending.pop(0)
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        pending += [current.__cause__, current.__context__]  # type: ignore[list-item]
    return seen


def error_code(error: BaseException) -> str | None:
    """The S3 error code (``NoSuchUpload``, ``SlowDown`` ...) behind ``error``, if any."""
    for candidate in chain(error):
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code:
                return str(code)
    return None


def is_transient(error: BaseException) -> bool:
    """Throttling, a server error or a connection problem: worth another try."""
    code = error_code(error)
    if code is not None:
        return code in TRANSIENT_CODES
    return any(isinstance(e, _TRANSIENT_TYPES) for e in chain(error))


def describe(operation: str, params: dict[str, Any]) -> str:
    """``PutObject s3://bkt/key`` (upload ids and part numbers where they apply).

    ``operation`` may be s3fs's method name (``put_object``): S3's own name is shown.
    """
    if "_" in operation or operation.islower():
        operation = "".join(word.capitalize() for word in operation.split("_"))
    where = f"s3://{params.get('Bucket', '?')}/{params.get('Key', '')}".rstrip("/")
    extra = ""
    if "UploadId" in params:
        extra = f" (upload {params['UploadId']}"
        extra += f", part {params['PartNumber']})" if "PartNumber" in params else ")"
    return f"{operation} {where}{extra}"
