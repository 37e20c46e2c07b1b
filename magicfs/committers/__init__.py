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
    """The committer for one job writing to ``dest``, chosen by what the store can do.

    ``magic`` for a store with deferred writes (S3: multipart uploads completed at job
    commit), ``block-list`` for Azure Blob (blocks published at job commit), and
    ``manifest`` for every other store (local files, memory, GCS: one rename per file),
    unless ``committer`` names one. The store is judged by its capabilities
    (:mod:`magicfs.stores.capabilities`) — of ``fs`` when given, else of the URL's
    filesystem class — not by its protocol's name. Nothing is written until
    :meth:`~magicfs.OutputCommitter.setup_job`.

    Args:
        dest: where the output goes, any fsspec URL.
        committer: ``magic``, ``block-list``, ``manifest``, ``directory``,
            ``partitioned``, ``file-v1`` or ``file-v2``; by default the store's.
        job_id: the job's id (letters, digits, ``.``, ``-``); a fresh UUID by default,
            never one derived from a clock.
        storage_options: the store's fsspec options (as given to pandas).
        **options: ``threads`` (8: uploads completed or files renamed at once in job
            commit), ``conflict_mode`` (``append``, ``fail`` or ``replace``),
            ``success_file`` (True: write the JSON ``_SUCCESS``), ``fs`` (the store's
            fsspec filesystem, instead of ``storage_options``), ``progress`` (None: bars
            on a terminal), ``max_request_rate`` (S3 calls per second), and
            committer-specific ones such as ``in_memory`` for ``magic`` or
            ``validate_output`` for ``manifest``.

    Returns:
        An :class:`~magicfs.OutputCommitter` bound to this job; it pickles, so it can be
        shipped to executors.

    Raises:
        ValueError: an unknown committer name or option value, naming the choices.

    Example:
        >>> import magicfs
        >>> committer = magicfs.committer_for("memory://docs/committer-for")
        >>> committer.setup_job()
        >>> task = committer.task_attempt(0)
        >>> committer.setup_task(task)
        >>> committer.fs.pipe_file(task.path("part-0.txt"), b"hello")
        >>> summary = committer.commit_job([committer.commit_task(task)])
        >>> summary.committer, summary.files
        ('manifest', 1)
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
