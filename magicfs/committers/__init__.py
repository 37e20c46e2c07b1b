"""Committers: the job/task commit protocol over one store, chosen by ``committer_for``."""

from __future__ import annotations

from typing import Any

import fsspec

from .base import (
    CONFLICT_MODES,
    JobSummary,
    OutputCommitter,
    TaskAttempt,
    TaskCommitMessage,
)
from .magic import MagicCommitter
from .manifest import ManifestCommitter

__all__ = [
    "CONFLICT_MODES",
    "JobSummary",
    "MagicCommitter",
    "ManifestCommitter",
    "OutputCommitter",
    "TaskAttempt",
    "TaskCommitMessage",
    "committer_for",
]

_S3_PROTOCOLS = ("s3", "s3a")


def committer_for(
    dest: str,
    *,
    committer: str | None = None,
    job_id: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> OutputCommitter:
    """The committer for ``dest``: ``magic`` for S3, ``manifest`` for every other store
    (local files, memory, Azure, GCS), or the one named by ``committer``.

    ``options``: ``threads`` (8), ``conflict_mode`` (``append``/``fail``/``replace``),
    ``success_file`` (True), ``fs`` (an fsspec filesystem for the store, instead of
    ``storage_options``), ``progress`` (None = on a terminal), and committer-specific
    ones such as ``in_memory`` for ``magic``.
    """
    protocol = fsspec.core.split_protocol(dest)[0] or "file"
    name = committer or ("magic" if protocol in _S3_PROTOCOLS else "manifest")
    classes: dict[str, type[OutputCommitter]] = {
        "magic": MagicCommitter,
        "manifest": ManifestCommitter,
    }
    if name not in classes:
        known = ", ".join(sorted(classes))
        raise ValueError(f"unknown committer {name!r} for {dest} (available: {known})")
    return classes[name](dest, job_id=job_id, storage_options=storage_options, **options)
