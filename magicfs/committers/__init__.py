"""Committers: the job/task commit protocol over one store, chosen by ``committer_for``."""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from ..filesystems.originals import store_of
from ..protocol.committer import (
    CONFLICT_MODES,
    JobSummary,
    OutputCommitter,
    TaskAttempt,
    TaskCommitMessage,
)
from ..protocol.options import CommitterOptions
from ..stores.job_hooks import option_names
from ..stores.registry import committed_by, deferred_store_for
from .classic import FileOutputCommitter
from .magic_layout import BlockListCommitter, MagicCommitter, MagicLayoutCommitter
from .manifest import ManifestCommitter
from .staging import StagingCommitter

__all__ = [
    "CONFLICT_MODES",
    "BlockListCommitter",
    "FileOutputCommitter",
    "JobSummary",
    "MagicCommitter",
    "MagicLayoutCommitter",
    "ManifestCommitter",
    "OutputCommitter",
    "StagingCommitter",
    "TaskAttempt",
    "TaskCommitMessage",
    "accepted_options",
    "committer_for",
    "default_committer",
]

#: Every committer by its ``committer_for`` name: its class and the options it fixes.
#: ``magic``, ``block-list`` and ``magic-layout`` are configurations of one class (a
#: store's spec and its options: :mod:`.magic_layout`), as ``file-v1``/``file-v2`` are.
COMMITTERS: dict[str, tuple[type[OutputCommitter], dict[str, Any]]] = {
    "magic": (MagicLayoutCommitter, {"configuration": "magic"}),
    "block-list": (MagicLayoutCommitter, {"configuration": "block-list"}),
    "magic-layout": (MagicLayoutCommitter, {"configuration": "magic-layout"}),
    "manifest": (ManifestCommitter, {}),
    "file-v1": (FileOutputCommitter, {"algorithm": 1}),
    "file-v2": (FileOutputCommitter, {"algorithm": 2}),
    "directory": (StagingCommitter, {"partitioned": False}),
    "partitioned": (StagingCommitter, {"partitioned": True}),
}


def committer_for(
    dest: str,
    *,
    committer: str | None = None,
    job_id: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> OutputCommitter:
    """The committer for one job writing to ``dest``, chosen by what the store can do.

    A deferred store's own (:mod:`magicfs.stores.registry`: ``magic`` on S3, whose
    multipart uploads job commit completes; ``block-list`` on Azure Blob, whose staged
    blocks job commit publishes), else ``manifest`` (local files, memory, GCS: one rename
    per file), unless ``committer`` names one (:data:`COMMITTERS`). The store is ``fs``
    when given, else the URL's filesystem class — judged by what it is, not by its
    protocol's name. Nothing is written until :meth:`~magicfs.OutputCommitter.setup_job`.

    Args:
        dest: where the output goes, any fsspec URL.
        committer: a name of :data:`COMMITTERS`; by default the store's.
        job_id: the job's id (letters, digits, ``.``, ``-``); a fresh UUID by default,
            never one derived from a clock.
        storage_options: the store's fsspec options (as given to pandas).
        **options: ``threads`` (8: files published or renamed at once in job commit),
            ``conflict_mode`` (``append``, ``fail`` or ``replace``), ``success_file``
            (True: the JSON ``_SUCCESS``), ``fs`` (the store's fsspec filesystem, instead
            of ``storage_options``), ``progress`` (None: bars on a terminal),
            ``max_request_rate`` (S3 calls per second), and committer-specific ones
            such as ``in_memory`` (``magic``) or ``validate_output`` (``manifest``).

    Returns:
        An :class:`~magicfs.OutputCommitter` bound to this job (it pickles).

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
        committer = default_committer(dest, options.get("fs"))
    if committer not in COMMITTERS:
        known = ", ".join(sorted(COMMITTERS))
        raise ValueError(f"unknown committer {committer!r} for {dest} (available: {known})")
    cls, fixed = COMMITTERS[committer]
    check_options(committer, options)
    return cls(dest, job_id=job_id, storage_options=storage_options, **fixed, **options)


def default_committer(dest: str, fs: Any = None) -> str:
    """The name of the committer :func:`committer_for` picks for ``dest`` when none is
    named: its deferred store's own (:mod:`magicfs.stores.registry`), else ``manifest``.
    The store is ``fs`` when given, else the URL's filesystem class (none is built)."""
    # The store's own filesystem, never magicfs.install()'s wrapper (it hides S3's).
    spec = deferred_store_for(store_of(dest, fs))
    return spec.committer if spec is not None else ManifestCommitter.name


def accepted_options(committer: str) -> list[str]:
    """The options ``committer_for(..., committer=committer, **options)`` accepts, sorted.

    Read from the constructors' signatures up its flow class's method resolution order (a
    constructor taking ``**kwargs`` passes the rest on, at last to
    :meth:`CommitterOptions.build <magicfs.protocol.options.CommitterOptions.build>`), less
    what the name fixes, plus
    the typed options of the stores a configuration commits (their spec's ``options``).
    """
    cls, fixed = COMMITTERS[committer]
    names = {"job_id", "storage_options"}
    for spec in committed_by(fixed.get("configuration", "")):
        names.update(option_names(spec.options) if spec.options else [])
    for klass in cls.flow_class.__mro__:  # the committer passes its keywords to its flow
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameters = inspect.signature(init).parameters.values()
        keywords = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names.update(p.name for p in parameters if p.kind in keywords)
        names.difference_update(("self", "dest"))
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    else:  # every constructor passed the rest on: the options every committer takes
        build = inspect.signature(CommitterOptions.build).parameters
        names.update(n for n, p in build.items() if p.kind is p.KEYWORD_ONLY)
        names.discard("store_filesystem")  # how a committer builds its store, not an option
    return sorted(names - set(fixed))


def check_options(committer: str, options: dict[str, Any]) -> None:
    """Refuse an option ``committer`` does not take, naming it, a likely fix and the rest.

    Without this a typo (``conflict_mod="replace"``) reaches a constructor as a bare
    ``TypeError``, or worse, an option meant for another committer is silently dropped.
    """
    accepted = accepted_options(committer)
    for name in options:
        if name in accepted:
            continue
        close = difflib.get_close_matches(name, accepted, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"unknown option {name!r} for the {committer} committer{hint}; "
            f"its options are: {', '.join(accepted)}"
        )
