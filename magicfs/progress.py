"""Progress bars (tqdm) for long job commits, aborts and cleanups, only on a terminal."""

from __future__ import annotations

import sys
from typing import Any

#: Below this many items no bar is shown: small jobs finish before it would help.
MIN_ITEMS = 100


class _NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def progress_bar(total: int, description: str, enabled: bool | None = None) -> Any:
    """A tqdm bar; ``enabled=None`` means "if stderr is a terminal and the job is large"."""
    if enabled is None:
        enabled = total >= MIN_ITEMS and sys.stderr.isatty()
    if not enabled:
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit="file", file=sys.stderr, leave=False)
