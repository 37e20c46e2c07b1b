"""``magicfs.local_s3()``: an S3 server on 127.0.0.1 for this process, to try magicfs on.

The README's and the docs' examples start from it. It imports the embedded server
(:mod:`magicfs.integrations.embedded_s3`) only when called: ``import magicfs`` must not
load that module, which also runs as a script (``python -m``) in the server's process.
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .embedded_s3 import EmbeddedS3Server


class _Shared:
    """The server :func:`local_s3` runs for this process (one, started at first use)."""

    lock = threading.Lock()
    server: EmbeddedS3Server | None = None


def local_s3(bucket: str = "bkt") -> dict[str, Any]:
    """Storage options of an S3 server on 127.0.0.1 that has bucket ``bucket``: magicfs's
    examples run as they are, with no store of your own.

    The first call starts the embedded S3 server (moto, data in memory; the ``demo``
    extra) in a child process, on a free loopback port; later calls reuse it and create
    ``bucket`` if it is new. The server stops when this process exits, even when it is
    killed. With a real store, replace the call by its options (``{"profile": "prod"}``);
    for another process, run ``magicfs server --bucket bkt`` in a terminal.

    Args:
        bucket: a bucket the server must have (created when missing).

    Returns:
        The options for s3fs (``storage_options=`` for pandas, Dask, Ray, magicfs), a new
        dict on each call.

    Raises:
        ValueError: ``bucket`` is not a valid S3 bucket name.
        ModuleNotFoundError: moto is not installed (``pip install 'magicfs[demo]'``).

    Example:
        >>> import magicfs
        >>> opts = magicfs.local_s3(bucket="bkt")
        >>> opts["client_kwargs"]["endpoint_url"].startswith("http://127.0.0.1:")
        True
    """
    from .embedded_s3 import EmbeddedS3Server, bucket_name

    bucket_name(bucket)
    with _Shared.lock:
        if _Shared.server is None:
            server = EmbeddedS3Server(buckets=[bucket]).start()
            atexit.register(server.stop)
            _Shared.server = server
        else:
            _Shared.server.create_bucket(bucket)
        return _Shared.server.storage_options
