"""The retry policy of every S3 call made through the store, on top of botocore's and s3fs's.

"Every call" means every request of :class:`~magicfs.stores.s3.store.S3Store` (its
``acall``): the committers' and the magic writer's uploads, completions, aborts, record
reads and writes, listings and deletes, and the CLI's. The calls left to s3fs itself
(task-file reads through the filesystems, the protocol layer's ``_SUCCESS`` read and
destination listings...) are named, with the reason, in that module's docstring: they
have botocore's and s3fs's retries only, and do not count against ``budget``.

botocore retries throttling, 5xx replies and connection errors (5 attempts in its
default mode, about 0.5 s, 1 s ... apart; 3 in the committers' client: :mod:`.client`)
and s3fs retries ``SlowDown`` again. That is tuned for one call; a job commit makes one
per file, and at 10,000 files a call that
fails five times in a row is to be expected under throttling or a flaky network. Failing
the job for it would roll back 9,999 good files. So each call is repeated, with full
jitter, a few more times while its error is **transient**:

* throttling and server-side errors: ``SlowDown``, ``ServiceUnavailable``,
  ``InternalError``, ``RequestTimeout``, ``OperationAborted``, HTTP 500/502/503/504;
* connection errors and timeouts, wherever they come from (botocore's
  ``EndpointConnectionError`` and ``ConnectionClosedError`` are not ``OSError``\\ s;
  aiohttp's are) — except a connection that cannot be made before the endpoint ever
  answered the store: that is a wrong endpoint or a store that is down, and repeating
  it only delays the error (see "Bounds" below).

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
default) bounds them all: the waits between retries of every call a job makes in this
process add up (:class:`RetryBudget`, kept in the job's context,
:mod:`magicfs.job_context`: the committer's calls, its tasks' writes through the task
view and each file opened by URL, all alike), and once the next wait would pass the
budget the error is final. Calls outside a job (the CLI's) have a budget per store.
Other processes of the job (executors) have budgets of their own. Concurrent waits each
count, so the budget is an upper bound on the time a job spends waiting to retry.
Set it when a store outage should fail a job in bounded time rather than let each of
its 10,000 calls wait out its own attempts:
``committer_for(dest, retry_policy=RetryPolicy(budget=120))``.

**Bounds without a budget (the defaults, decided for issue 25).** No default budget: a
large job under heavy throttling legitimately waits a long time in total, and a budget
that counts concurrent waits would fail it. Instead three rules keep a failing job short:

* *A refused or unanswered connection is not retried by magicfs* before the endpoint
  first answered (:meth:`~magicfs.stores.s3.store.S3Store.acall`); the committers'
  client makes 3 attempts with a 1.5 s connect timeout (:mod:`.client`), so a wrong or
  dead endpoint fails the job within about 3 s (refused) or 7.5 s (no answer), naming it.
  Once the endpoint has answered, connection errors are transient again (a store
  restarting mid-commit).
* *Publishing stops at its first failure* (:mod:`magicfs.stores.commit_ops`).
* *Aborting stops at the first abort that exhausts its retries*
  (:func:`~magicfs.stores.s3.sweep.abort_uploads`): aborts run 16 at once, and once one
  has failed through all its attempts no further abort starts and those in flight are
  cancelled. The error (:class:`~magicfs.errors.UploadsLeftError`) counts the uploads
  left parked, names the first three (key and upload id) and gives the command that
  aborts them later, ``magicfs uploads abort --force --job JOB s3://bucket/dest``.

So each stage of a failed commit (publish, roll-back, clean-up) ends within about one
call's retries: with the default policy at most 7 s of magicfs's waits plus 4 times the
client's 3 attempts (at most 3 s of botocore's back-off each), about 20 s, whatever the
number of files. Measured (``benchmarks/failing_job.py``) on the fault front, a store
answering every completion and every abort with ``503 SlowDown``: a 200-file job fails
in 57 s (26 s publishing, 7 s of roll-back checks, 20 s of aborts, 290 abort requests),
where it took over 14 minutes and 3,630 abort requests before; a 1,000-file job in 60
to 67 s (257 to 320 abort requests, two runs): only the roll-back's one HEAD per file
grows with the job. With a ``budget``, the budget bounds all of it: once spent, every
later transient error (the roll-back's included) is final at once.

A call whose error survives the policy, or is final, raises
:class:`~magicfs.errors.StoreCallError` (an ``OSError``, of the class s3fs would raise:
:mod:`.failures`) naming the operation, the object, the HTTP status and S3 error code
(or the endpoint that did not answer) and, after retries, the number of attempts; the
store's error stays available as ``__cause__``.
"""

from __future__ import annotations

import asyncio
import random
import threading
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

#: Errors that mean a request got no answer at all: transient, and reported with the
#: endpoint rather than an HTTP status (:mod:`.failures`).
NO_ANSWER_TYPES = (
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
    #: Seconds of retry waits allowed in all, per job per process (``None``: no limit).
    budget: float | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1, not {self.attempts}")
        if self.budget is not None and self.budget < 0:
            raise ValueError(f"RetryPolicy.budget must be None or >= 0, not {self.budget}")

    def delay(self, retry: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * (2**retry)))

    def gave_up(self, retry: int, waits: float) -> str | None:
        """Why retry number ``retry`` is not to be made when the store's retry waits would
        then add up to ``waits`` seconds; ``None``: make it."""
        failed = f"failed {retry} times (each with the S3 client's own retries)"
        if retry >= self.attempts:
            return failed
        if self.budget is not None and waits > self.budget:
            return f"{failed}; the retry budget of {self.budget:g} s for this job is spent"
        return None


DEFAULT_POLICY = RetryPolicy()


class RetryBudget:
    """The seconds of retry waits a job's calls in this process have taken so far
    (:attr:`RetryPolicy.budget`); shared by the job's stores, so its updates are locked
    (they may wait on more than one thread's loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Seconds waited before retries so far, by every call of the job here.
        self.waits = 0.0
        #: Retries made so far.
        self.retries = 0

    def take(self, policy: RetryPolicy, retry: int) -> tuple[float, str | None]:
        """Retry number ``retry`` under ``policy``: its delay, and why it is not to be
        made (``None``: make it; its delay is then counted as spent)."""
        delay = policy.delay(retry)
        with self._lock:
            gave_up = policy.gave_up(retry, self.waits + delay)
            if gave_up is None:
                self.waits += delay
                self.retries += 1
            return delay, gave_up


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
    return any(isinstance(e, NO_ANSWER_TYPES) for e in chain(error))


def describe(operation: str, params: dict[str, Any]) -> str:
    """``PutObject s3://bkt/key`` (upload ids and part numbers where they apply; a batch
    delete names its first key and how many more, a listing its prefix).

    ``operation`` may be s3fs's method name (``put_object``): S3's own name is shown.
    """
    if "_" in operation or operation.islower():
        operation = "".join(word.capitalize() for word in operation.split("_"))
    batch = (params.get("Delete") or {}).get("Objects") or [{}]
    key = params.get("Key") or batch[0].get("Key") or params.get("Prefix") or ""
    where = f"s3://{params.get('Bucket', '?')}/{key}".rstrip("/")
    if len(batch) > 1:
        where += f" (and {len(batch) - 1} more keys)"
    extra = ""
    if "UploadId" in params:
        extra = f" (upload {params['UploadId']}"
        extra += f", part {params['PartNumber']})" if "PartNumber" in params else ")"
    return f"{operation} {where}{extra}"
