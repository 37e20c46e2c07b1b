"""How fast a job's S3 calls start: adaptive to throttling, with an optional fixed cap.

S3 answers about 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second per
prefix and ``503 SlowDown`` beyond. A job commit with a fixed number of calls in flight
either stays below that (and wastes time) or overruns it (and is throttled). Two
mechanisms keep it at the limit:

* **adaptive** (always on for committers): no limit until the store throttles. At a
  throttled reply the rate is set to 90% of the rate at which the job's last calls
  started (the last 128, or those of the last second), and then grows again while
  replies are clean: slowly at first (4% of that rate per second), faster the longer no
  reply is throttled (a cubic term, as TCP's CUBIC does), so a job near the limit stays
  near it and a job cut far below it (by a burst, or while it was busy elsewhere) is back
  within seconds. Replies throttled within a second of a cut were answers to calls
  started before it and do not cut again; nor does a reply when the job started fewer
  than 10 calls in the last second (its rate cannot be measured, and its calls are not
  what overran the store). Over a cycle the job runs at about 95% of what the store
  allows. (botocore's own ``adaptive`` retry mode cuts by 30% each time and regrows
  slowly: measured, 52% of a 500/s store and 88% of a 200/s one; see docs/stores/s3.md,
  "Large jobs".)
* **fixed** (``max_request_rate=N`` on a committer): at most N calls per second from
  this job in this process, however clean the replies; for a bucket that serves readers
  at the same time, or an account-wide budget (Hadoop's ``fs.s3a.io.rate.limit``).

**Per job per process.** One :class:`JobCalls` (this rate control, the replies it
watches, the retry budget) serves every store of a job in a process: the committer's
adapter, the task view's writes, each file opened by URL (:mod:`magicfs.job_context`).
Where they were given different caps, the strictest holds. Not capped: other processes'
calls (each executor of a job has its own cap), and s3fs's own calls that do not go
through the store (:mod:`.store`'s docstring names them).

Calls are spaced evenly (no bursts): with a rate of N, call ``n`` starts no earlier than
``1 / N`` seconds after call ``n - 1``, so no second holds more than N starts (no
burst: an idle job does not save up slots). One limit covers all of a job's calls (reads
included): a store that throttles writes is not asked for more reads meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from .body import rewind
from .retry import THROTTLING_CODES, RetryBudget

log = logging.getLogger("magicfs.s3.rate")

#: A cut sets the rate to this share of the rate the last calls started at.
DECREASE = 0.9
#: ``t`` seconds after a cut the rate is ``cut * (1 + LINEAR * t + CUBIC * t**3)``:
#: back to the rate that was throttled after about 2 s, twice the cut after about 6 s.
LINEAR = 0.04
CUBIC = 0.004
#: At most this many of the last calls measure the rate they started at.
SAMPLE = 128
#: Throttled replies this many seconds after a cut do not cut again.
HOLD = 1.0
#: The window over which the rate of started calls is measured, in seconds.
WINDOW = 1.0
#: A cut needs this many calls started in the last window to measure their rate.
MIN_SAMPLE = 10
#: The adaptive rate never goes below this many calls per second.
FLOOR = 1.0


class RateControl:
    """When each of a job's calls may start (on one event loop or several: each slot is
    taken under a lock).

    ``max_rate``: the fixed cap in calls per second (``None``: none). ``clock``: a
    monotonic clock, replaceable in tests.
    """

    def __init__(self, max_rate: float | None = None, clock: Callable[[], float] = time.monotonic):
        if max_rate is not None and not max_rate > 0:
            raise ValueError(f"a request rate must be positive, not {max_rate}")
        self.max_rate = max_rate
        self.clock = clock
        #: The adaptive rate in calls per second (``None`` until the store throttles).
        self.adaptive: float | None = None
        #: How many times the adaptive rate was cut.
        self.cuts = 0
        self._cut_at = -math.inf
        self._next = -math.inf
        self._first: float | None = None
        self._starts: collections.deque[float] = collections.deque(maxlen=SAMPLE)
        self._lock = threading.Lock()

    def cap(self, max_rate: float | None) -> None:
        """Another store of the job was given ``max_rate``: the strictest cap holds."""
        if max_rate is not None and not max_rate > 0:
            raise ValueError(f"a request rate must be positive, not {max_rate}")
        if max_rate is not None and (self.max_rate is None or max_rate < self.max_rate):
            self.max_rate = max_rate

    def rate(self, now: float | None = None) -> float | None:
        """The calls per second allowed now (``None``: no limit)."""
        now = self.clock() if now is None else now
        limit = self.max_rate
        if self.adaptive is not None:
            t = max(0.0, now - self._cut_at)
            grown = self.adaptive * (1.0 + LINEAR * t + CUBIC * t**3)
            limit = grown if limit is None else min(limit, grown)
        return limit

    def started_rate(self, now: float) -> float:
        """The rate at which the last calls started: the last :data:`SAMPLE` of them, or
        those of the last :data:`WINDOW` seconds if fewer (over the time since the first
        call, if that was less than a window ago)."""
        while self._starts and self._starts[0] <= now - WINDOW:
            self._starts.popleft()
        if self._first is None or not self._starts:
            return 0.0
        if len(self._starts) == SAMPLE:
            span = now - self._starts[0]
        else:
            span = min(WINDOW, now - self._first)
        return len(self._starts) / max(span, 1e-3)

    async def acquire(self) -> None:
        """Wait for this call's slot, then count it as started."""
        with self._lock:
            now = self.clock()
            rate = self.rate(now)
            slot = now
            if rate is not None:
                slot = max(now, self._next)
                self._next = slot + 1.0 / rate
        if slot > now:
            await asyncio.sleep(slot - now)
            now = self.clock()
        with self._lock:
            if self._first is None:
                self._first = now
            self._starts.append(now)

    def throttled(self) -> None:
        """The store answered a call with throttling: cut the rate (once per :data:`HOLD`)."""
        with self._lock:
            self._throttled()

    def _throttled(self) -> None:
        now = self.clock()
        if now - self._cut_at < HOLD:
            return
        current = self.rate(now)
        started = self.started_rate(now)
        if len(self._starts) < MIN_SAMPLE:
            # Too few calls of ours to blame or to measure (a job between stages, or a
            # store busy with other work): cut from the current rate, if there is one.
            if current is None:
                return
            base = current
        else:
            base = started if current is None else min(current, started)
        self.adaptive = max(FLOOR, DECREASE * base)
        self._cut_at = now
        self.cuts += 1
        log.info(
            "the store throttled: %.0f calls/s from now (the last calls started at %.0f/s)",
            self.adaptive,
            started,
        )

    def throttled_call(self) -> None:
        """A throttled reply that the S3 client will send again by itself: cut the rate
        if due (:meth:`throttled`), and give the repeated call a slot of its own so that
        repeats do not push the job above the rate again."""
        self.throttled()
        with self._lock:
            rate = self.rate()
            if rate is not None:
                self._next = max(self.clock(), self._next) + 1.0 / rate


class Replies:
    """Sees every reply of an s3fs client, including those botocore retries by itself
    (its ``needs-retry`` event): counts the throttled ones, cutting ``rate`` at each,
    and notes that the endpoint has answered (:mod:`.retry`: a connection refused before
    any answer is not retried)."""

    def __init__(self, rate: RateControl):
        self.rate = rate
        #: Replies that were throttling (``SlowDown``, 503), retries included.
        self.throttled = 0
        #: Has the endpoint ever answered (any HTTP reply, errors included)?
        self.answered = False
        self._watched: set[int] = set()

    async def watch(self, fs: Any) -> None:
        """Hook this object into ``fs``'s client, once per client s3fs makes.

        The client's handlers are registered once per client, however many stores (one
        per job) watch it: one ``needs-retry`` handler (:func:`show_reply`) shows each
        reply to every watch still alive, and one rewinds bodies. A handler per store
        would stay registered after its job, and a process running many jobs on one
        filesystem would run them all on every request.
        """
        client = getattr(fs, "_s3", None)  # the client s3fs made (cheaper than asking)
        if client is not None and id(client) in self._watched:
            return
        client = await fs.set_session()
        if id(client) not in self._watched:
            self._watched.add(id(client))
            watches = _WATCHES.get(client)
            if watches is None:
                watches = _WATCHES[client] = weakref.WeakSet()
                events = client.meta.events
                events.register(
                    "needs-retry.s3", partial(show_reply, watches), unique_id=REPLY_HANDLER
                )
                # Not about replies, but once per client too: every call sends a part whole.
                events.register("before-parameter-build.s3", rewind, unique_id=REWIND_HANDLER)
            watches.add(self)

    def on_reply(self, response: Any = None, **_: Any) -> None:
        if response is None:
            return
        self.answered = True
        http, parsed = response
        code = (parsed or {}).get("Error", {}).get("Code")
        if code in THROTTLING_CODES or getattr(http, "status_code", None) == 503:
            self.throttled += 1
            self.rate.throttled_call()


#: The reply watches of each S3 client (a client is shared by the jobs of a process on
#: one filesystem); a watch leaves when its store is gone.
_WATCHES: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Replies]] = weakref.WeakKeyDictionary()
#: botocore's ``unique_id`` of the handlers :meth:`Replies.watch` registers.
REPLY_HANDLER = "magicfs.s3.replies"
REWIND_HANDLER = "magicfs.s3.rewind"


class JobCalls:
    """What every S3 store of one job shares in this process (module docstring): when
    calls start, the replies seen, the retry waits spent."""

    def __init__(self, max_rate: float | None = None) -> None:
        self.rate = RateControl(max_rate)
        self.replies = Replies(self.rate)
        self.budget = RetryBudget()


def show_reply(watches: weakref.WeakSet[Replies], response: Any = None, **_: Any) -> None:
    """botocore's ``needs-retry`` handler of a client: ``response`` shown to each watch."""
    for watch in list(watches):
        watch.on_reply(response=response)
