"""A fixed cap on requests per second, for a store shared with other work.

S3 answers about 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per second per
prefix and ``503 SlowDown`` beyond. Two mechanisms keep a job commit at that limit:

* **adaptive** (always on for committers): the client runs in botocore's ``adaptive``
  retry mode, whose client-side rate limiter engages at the first throttled reply,
  cuts the request rate (CUBIC, as TCP does) and grows it again while replies are
  clean. Nothing to configure; the committer's progress reports each throttled reply.
* **fixed** (``max_request_rate=N`` on a committer): at most N calls per second from
  this job, however clean the replies; for a bucket that serves readers at the same
  time, or an account-wide budget (Hadoop's ``fs.s3a.io.rate.limit``).

The cap spaces calls evenly (no bursts): call ``n`` starts no earlier than
``n / N`` seconds after the first.
"""

from __future__ import annotations

import asyncio
import time


class RateLimit:
    """At most ``per_second`` acquisitions per second, evenly spaced (for one event loop)."""

    def __init__(self, per_second: float):
        if per_second <= 0:
            raise ValueError(f"a request rate must be positive, not {per_second}")
        self.interval = 1.0 / per_second
        self._next = 0.0

    async def acquire(self) -> None:
        """Wait for this call's slot."""
        now = time.monotonic()
        slot = max(now, self._next)
        self._next = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)
