"""Waiting for something to become true, with a deadline: synchronisation without sleeps.

A test that sleeps "long enough" for a background thread either waits longer than it
needs or, on a loaded machine, not long enough; polling a condition does neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """``condition()``'s first truthy value, polled every 10 ms; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.01)
