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

**One copy of botocore's models per process** (:func:`share_models`). s3fs makes a
botocore session per filesystem, and each session parses botocore's JSON data again
(the partitions and endpoints, the S3 service model, its endpoint rules: more CPU than a
small job's own requests, and one more copy of the models in the heap). A job makes
filesystems often: each committer on a destination whose options
skip fsspec's instance cache, each executor task that unpickles a committer so made,
each operator command. Every S3 filesystem magicfs calls through (:class:`~.store.S3Store`)
is therefore given, before its first request, the same session s3fs would make itself
(``AioSession(**fs.kwargs)``: the same profile and settings), reading its data through a
loader shared by the process. A filesystem that already has a session (the caller's
``session=``, or one s3fs made) is left as it is.
"""

from __future__ import annotations

import threading
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


#: botocore data loaders by search path (``None``: botocore's own data), shared.
_LOADERS: dict[Any, Any] = {}
_LOADERS_LOCK = threading.Lock()


def share_models(fs: Any) -> None:
    """Give ``fs`` (an ``s3fs.S3FileSystem``) the session s3fs would make for it, reading
    botocore's data through the process's shared loader (module docstring); nothing if it
    has a session or a client already. A session that cannot be made here (a profile
    that does not exist) is left to s3fs, which then raises its own error as before."""
    if getattr(fs, "session", None) is not None or getattr(fs, "_s3", None) is not None:
        return
    from aiobotocore.session import AioSession
    from botocore.loaders import create_loader

    try:
        session = AioSession(**getattr(fs, "kwargs", {}))
        search_path = session.get_config_variable("data_path")
    except Exception:
        return
    with _LOADERS_LOCK:
        loader = _LOADERS.get(search_path)
        if loader is None:
            loader = _LOADERS[search_path] = create_loader(search_path)
    session.register_component("data_loader", loader)
    if getattr(fs, "session", None) is None and getattr(fs, "_s3", None) is None:
        fs.session = session
