"""A committer's configuration: the options it was built with, checked once, and what
follows from them (the store's filesystem, URLs, the commands that finish a job).

:class:`CommitterOptions` is a frozen value the committer holds (``committer.options``),
not a base class of it: a collaborator given the options gets the configuration and
nothing of the committer, and no code can change an option once the job began. It
travels with the committer when that pickles to an executor.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import fsspec

from ..filesystems.originals import store_filesystem, unwrapped
from ..layouts.magic import check_job_id
from ..names import SUCCESS_FILE
from ..paths import join
from .cleanup import CLEANUP_MODES
from .destination import Destination

CONFLICT_MODES = ("append", "fail", "replace")
#: The longest ``replace_retention`` (30 days): the job does not wait it out, the next
#: job on the destination or ``magicfs jobs vacuum`` deletes the old files after it.
MAX_REPLACE_RETENTION = 30 * 86400.0


def elapsed(start: float) -> float:
    """Seconds since ``start`` (a ``time.monotonic()`` reading)."""
    return time.monotonic() - start


#: How a committer builds its store's filesystem when no ``fs=`` is given: the protocol,
#: the caller's options (a copy, the committer's to add to) and ``threads``.
StoreFilesystemFactory = Callable[[str, dict[str, Any], int], fsspec.AbstractFileSystem]


def default_store_filesystem(
    protocol: str, options: dict[str, Any], threads: int
) -> fsspec.AbstractFileSystem:
    """The store's own filesystem for ``protocol`` with the caller's options."""
    return store_filesystem(protocol, **options)


@dataclass(frozen=True, eq=False)
class CommitterOptions:
    """The configuration of one committer: what :func:`magicfs.committer_for` was given
    that every committer shares, checked once (:meth:`build`), and what follows from it.

    ``dest`` is the destination as a path of ``store_fs`` (no protocol, no trailing
    ``/``); ``store_options``: the options the store's filesystem was built with (see
    :attr:`storage_options`). A committer's own options (a store's ``in_memory``, the
    manifest committer's ``summary_dir``...) are its own values beside this one.
    """

    dest: str
    store_fs: fsspec.AbstractFileSystem
    job_id: str
    #: Hadoop's name of where the id came from ("Generated Locally", "JobID"...).
    job_id_source: str
    store_options: dict[str, Any] = field(default_factory=dict)
    threads: int = 8
    conflict_mode: str = "append"
    success_file: bool = True
    app_attempt: int = 0
    progress: bool | None = None
    #: When a committed job's clean-up runs (:mod:`.cleanup`).
    cleanup: str = "inline"
    #: ``replace``: seconds the old files stay after the new snapshot is published; 0 by
    #: default, as plain readers would see duplicate rows (docs/readers.md says why, and
    #: who deletes them later: the next job, ``magicfs jobs vacuum``).
    replace_retention: float = 0.0

    def __post_init__(self) -> None:
        if self.cleanup not in CLEANUP_MODES:
            raise ValueError(
                f"unknown cleanup {self.cleanup!r}: use one of {', '.join(CLEANUP_MODES)} "
                "(see magicfs.protocol.cleanup)"
            )
        if self.conflict_mode not in CONFLICT_MODES:
            raise ValueError(
                f"unknown conflict_mode {self.conflict_mode!r}: use one of "
                f"{', '.join(CONFLICT_MODES)}"
            )
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, not {self.threads}")
        if not 0 <= self.replace_retention <= MAX_REPLACE_RETENTION:
            raise ValueError(
                f"replace_retention must be between 0 and {MAX_REPLACE_RETENTION:.0f} seconds, "
                f"not {self.replace_retention!r} (see docs/readers.md)"
            )

    @classmethod
    def build(
        cls,
        dest: str,
        *,
        job_id: str | None = None,
        storage_options: dict[str, Any] | None = None,
        fs: fsspec.AbstractFileSystem | None = None,
        threads: int = 8,
        conflict_mode: str = "append",
        success_file: bool = True,
        app_attempt: int = 0,
        progress: bool | None = None,
        job_id_source: str | None = None,
        cleanup: str = "inline",
        replace_retention: float = 0.0,
        store_filesystem: StoreFilesystemFactory = default_store_filesystem,
    ) -> CommitterOptions:
        """The options from a committer's keywords: a fresh UUID unless ``job_id`` is
        given; the store's filesystem ``fs`` (unwrapped: the store itself, even when
        :func:`magicfs.install` made its URLs build magic wrappers), or one
        ``store_filesystem`` builds for ``dest``'s protocol."""
        if threads < 1:  # before a filesystem is built for it
            raise ValueError(f"threads must be at least 1, not {threads}")
        store_options = dict(storage_options or {})
        if fs is not None:
            store_fs = unwrapped(fs)
            if not store_options:  # the store's, not a wrapper's
                store_options = dict(getattr(store_fs, "storage_options", {}) or {})
        else:
            protocol = fsspec.core.split_protocol(dest)[0] or "file"
            store_fs = store_filesystem(protocol, dict(store_options), threads)
        return cls(
            dest=store_fs._strip_protocol(dest).rstrip("/"),
            store_fs=store_fs,
            job_id=check_job_id(job_id) if job_id is not None else str(uuid.uuid4()),
            # Hadoop's values: "Generated Locally", "spark.sql.sources.writeJobUUID", "JobID"...
            job_id_source=job_id_source or ("job_id" if job_id else "Generated Locally"),
            store_options=store_options,
            threads=threads,
            conflict_mode=conflict_mode,
            success_file=success_file,
            app_attempt=app_attempt,
            progress=progress,
            cleanup=cleanup,
            replace_retention=float(replace_retention),
        )

    @property
    def url(self) -> str:
        """The destination with its protocol, for messages and ``_SUCCESS``."""
        return cast(str, self.store_fs.unstrip_protocol(self.dest))

    @property
    def success_path(self) -> str:
        return join(self.dest, SUCCESS_FILE)

    @property
    def destination(self) -> Destination:
        """What the destination shows readers (:mod:`.destination`; holds no state)."""
        return Destination(self.store_fs, self.dest)

    @property
    def protocol(self) -> str:
        """The store's protocol name, as chained URLs key their options by it."""
        protocol: str | tuple[str, ...] | list[str] = self.store_fs.protocol
        return protocol[0] if isinstance(protocol, (tuple, list)) else protocol

    def recover_command(self, *, all_committed_tasks: bool = False, messages: bool = False) -> str:
        """The command line that finishes this job's interrupted commit (its journal's
        records). For a job whose commit never began, the explicit choice that needs
        (:mod:`magicfs.protocol.active_jobs`): ``all_committed_tasks``, every committed
        task; ``messages``, exactly the attempts a file of commit messages names."""
        choice = " --all-committed-tasks" if all_committed_tasks else ""
        choice += " --messages FILE" if messages else ""
        return f"magicfs jobs recover{choice} --job {self.job_id} {self.url}"

    def rollback_command(self, job_id: str | None = None) -> str:
        """The command line that rolls this job's interrupted commit back (``job_id``:
        another job's at the same destination)."""
        return f"magicfs jobs rollback --job {job_id or self.job_id} {self.url}"
