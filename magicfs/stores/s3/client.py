"""The S3 client settings magicfs's committers use, unless the user sets their own.

botocore's defaults are made for one interactive call: a 60 s connect timeout and, in
its ``legacy`` mode, five attempts. A committer makes thousands of calls and has its own
retry policy on top (:mod:`.retry`), so the client it builds (the ``config_kwargs`` of
its s3fs filesystem) gets:

* ``connect_timeout`` :data:`CONNECT_TIMEOUT` s (the AWS SDK for Java 2.x waits 2 s): a
  TCP handshake takes milliseconds, even across an ocean; one lost SYN is resent after
  1 s and still fits, and botocore retries a timed-out connection with a new one;
* ``retries``: botocore's ``standard`` mode with :data:`CLIENT_ATTEMPTS` attempts in
  all. Its back-off before attempt ``n + 1`` is up to ``2**(n-1)`` s, so three attempts
  wait at most 3 s. An endpoint that refuses connections therefore fails a call within
  about 3 s, and one that does not answer within ``3 * 1.5 + 3 = 7.5`` s; magicfs adds no
  retry of its own to a connection that was never made before the endpoint first
  answered (:meth:`~magicfs.stores.s3.store.S3Store.acall`). Throttling and 5xx
  replies are retried further by the retry policy and paced by the rate control
  (:mod:`.rate`); botocore's ``adaptive`` mode would cut the rate a second time;
* ``max_pool_connections``: twice the committer's threads (at least 10).

Each is a default: whatever the user passes in ``config_kwargs`` (``retries``,
``connect_timeout``, ``read_timeout``...) is kept as given. The read timeout stays
botocore's 60 s: a ``CompleteMultipartUpload`` of a large object may take that long.
"""

from __future__ import annotations

from typing import Any

#: Seconds to wait for a TCP connection to the endpoint.
CONNECT_TIMEOUT = 1.5
#: Attempts botocore makes per call (its ``total_max_attempts``, ``standard`` mode).
CLIENT_ATTEMPTS = 3


def client_config(config_kwargs: dict[str, Any] | None, threads: int = 8) -> dict[str, Any]:
    """``config_kwargs`` for s3fs with magicfs's defaults filled in (module docstring)."""
    config = dict(config_kwargs or {})
    config.setdefault("max_pool_connections", max(10, threads * 2))
    config.setdefault("connect_timeout", CONNECT_TIMEOUT)
    config.setdefault("retries", {"mode": "standard", "total_max_attempts": CLIENT_ATTEMPTS})
    return config
