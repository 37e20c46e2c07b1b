"""Which task files a glob pattern names, as fsspec's ``glob`` would match them.

The task views' ``rm`` takes patterns, as every fsspec ``rm`` does: ``[``, ``]``, ``*``
and ``?`` select names (:func:`glob.has_magic`, fsspec's own test). The store's ``glob``
finds the files the store holds; the files this process is still writing may not be
there yet (an S3 writer's marker is on its way, an unmarked job has none until the file
closes), so the views match the pattern against their registry too, with fsspec's own
translation of a pattern (:func:`fsspec.utils.glob_translate`): the same names match.

Single-path methods never come here: their names are literal.
"""

from __future__ import annotations

import re

from fsspec.utils import glob_translate

from ..task_files import TaskFile, TaskFiles


def static_root(pattern: str) -> str:
    """The directory of ``pattern`` before its first glob character (``a/b`` of
    ``a/b/c*/d``): every name it can match is below it."""
    first = min((i for i, c in enumerate(pattern) if c in "*?["), default=len(pattern))
    return pattern[: pattern.rfind("/", 0, first) + 1]


def known_matches(registry: TaskFiles, pattern: str, recursive: bool) -> list[TaskFile]:
    """The files of ``registry`` that ``pattern`` names; ``recursive``: also those below
    a directory it names (as ``rm(pattern, recursive=True)`` deletes them)."""
    matches = re.compile(glob_translate(pattern.rstrip("/"))).match
    found = []
    for entry in registry.under(static_root(pattern)):
        names = [entry.path]
        if recursive:
            parts = entry.path.split("/")
            names += ["/".join(parts[:depth]) for depth in range(1, len(parts))]
        if any(matches(name) for name in names):
            found.append(entry)
    return found
