"""Progress bars (tqdm) for long job commits, aborts and cleanups, only on a terminal;
and streaming in batches, the way every long stage walks its work."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")

#: Below this many items no bar is shown: small jobs finish before it would help.
MIN_ITEMS = 100


def progress_bar(total: int, description: str, enabled: bool | None = None) -> tqdm:
    """A tqdm bar; ``enabled=None`` means "if stderr is a terminal and the job is large".

    A disabled bar is tqdm's own no-op (``disable=True``): callers update it either way.
    """
    if enabled is None:
        enabled = total >= MIN_ITEMS and sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=description,
        unit="file",
        file=sys.stderr,
        leave=False,
        disable=not enabled,
    )


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter), consumed as they are needed."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch
