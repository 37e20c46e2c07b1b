"""Progress bars (tqdm) for long job commits, aborts and cleanups, only on a terminal."""

from __future__ import annotations

import sys

from tqdm import tqdm

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
