"""Fault injection at the S3 client: botocore event hooks on an s3fs filesystem's client.

Nothing in magicfs is patched: the requests themselves fail, as they would when the
network or the store misbehaves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError


class InjectedFault(OSError):
    """What an injected failure raises: a call that has definitively failed.

    Not a connection error or throttling (those are transient: magicfs's retry policy
    would repeat the call). Transient faults are the fault front's business
    (``helpers.fault_front``); these hooks model the call that failed for good.
    """


def s3_error(code: str, operation: str, message: str = "injected") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class Faults:
    """Make chosen S3 operations fail on ``fs``'s client."""

    def __init__(self, fs: Any):
        self.events = fs.s3.meta.events
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def fail(
        self,
        operation: str,
        *,
        nth: int | None = None,
        when: Callable[[dict], bool] | None = None,
        error: Callable[[], BaseException] | None = None,
    ) -> None:
        """Fail ``operation`` (e.g. ``"CompleteMultipartUpload"``).

        ``nth``: only the n-th call (1-based); ``when``: only calls whose API parameters
        satisfy it; ``error``: what to raise (default :class:`InjectedFault`).
        """

        def handler(params: dict, **kwargs: Any) -> None:
            with self._lock:
                count = self.calls[operation] = self.calls.get(operation, 0) + 1
            if nth is not None and count != nth:
                return
            if when is not None and not when(params):
                return
            raise error() if error else InjectedFault(f"injected failure of {operation} #{count}")

        self.events.register(f"before-parameter-build.s3.{operation}", handler)
