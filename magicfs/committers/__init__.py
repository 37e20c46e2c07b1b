"""Committers: the job/task commit protocol over one store, chosen by ``committer_for``."""

from __future__ import annotations

from typing import Any

import fsspec

from ..filesystems.originals import store_class, unwrapped
from ..protocol.committer import (
    CONFLICT_MODES,
    JobSummary,
    OutputCommitter,
    TaskAttempt,
    TaskCommitMessage,
)
from ..stores.capabilities import capabilities
from .blocks import BlockListCommitter
from .classic import FileOutputCommitter
from .magic import MagicCommitter
from .manifest import ManifestCommitter
from .staging import StagingCommitter

__all__ = [
    "CONFLICT_MODES",
    "BlockListCommitter",
    "FileOutputCommitter",
    "JobSummary",
    "MagicCommitter",
    "ManifestCommitter",
    "OutputCommitter",
    "StagingCommitter",
    "TaskAttempt",
    "TaskCommitMessage",
    "committer_for",
]


def committer_for(
    dest: str,
    *,
    committer: str | None = None,
    job_id: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> OutputCommitter:
    """The committer for ``dest``: ``magic`` for a store with deferred writes (S3),
    ``block-list`` for Azure Blob (deferred writes through block lists), ``manifest``
    for every other store (local files, memory, GCS), or the one
    named by ``committer``. The store is judged by its capabilities
    (:mod:`magicfs.stores.capabilities`), not by its protocol's name.

    ``options``: ``threads`` (8), ``conflict_mode`` (``append``/``fail``/``replace``),
    ``success_file`` (True), ``fs`` (an fsspec filesystem for the store, instead of
    ``storage_options``), ``progress`` (None = on a terminal), and committer-specific
    ones such as ``in_memory`` for ``magic``.
    """
    if committer is None:
        # The filesystem given, else the URL's class: the store's own, never the wrapper
        # magicfs.install() registers (which would hide S3's multipart uploads).
        store = unwrapped(options.get("fs"))
        if store is None:
            store = store_class(fsspec.core.split_protocol(dest)[0] or "file")
        found = capabilities(store)
        committer = (
            "magic" if found.deferred_writes else "block-list" if found.block_lists else "manifest"
        )
    name = committer
    classes: dict[str, tuple[type[OutputCommitter], dict[str, Any]]] = {
        "magic": (MagicCommitter, {}),
        "block-list": (BlockListCommitter, {}),
        "manifest": (ManifestCommitter, {}),
        "file-v1": (FileOutputCommitter, {"algorithm": 1}),
        "file-v2": (FileOutputCommitter, {"algorithm": 2}),
        "directory": (StagingCommitter, {"partitioned": False}),
        "partitioned": (StagingCommitter, {"partitioned": True}),
    }
    if name not in classes:
        known = ", ".join(sorted(classes))
        raise ValueError(f"unknown committer {name!r} for {dest} (available: {known})")
    cls, fixed = classes[name]
    return cls(dest, job_id=job_id, storage_options=storage_options, **fixed, **options)
