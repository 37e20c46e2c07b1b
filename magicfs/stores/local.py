"""A local filesystem for task files on local disk (classic committers; staging under magic).

Two differences from fsspec's ``LocalFileSystem``: writing a file creates its parent
directories (as writing an object-store key does, so task code behaves the same on
every store), and its class name differs — pyarrow replaces a filesystem whose class is
named ``LocalFileSystem`` with its own native one, which would not create them.
"""

from __future__ import annotations

from typing import Any

from fsspec.implementations.local import LocalFileSystem


class TaskLocalFileSystem(LocalFileSystem):
    """``LocalFileSystem(auto_mkdir=True)`` that pyarrow uses through fsspec."""

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("auto_mkdir", True)
        super().__init__(**kwargs)
