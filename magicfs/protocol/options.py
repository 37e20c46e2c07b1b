"""A committer's configuration: the options it was built with, checked once, and what
follows from them (the store's filesystem, URLs, the commands that finish a job).

Everything here is settled in the constructor and travels with the committer when it
pickles to an executor (the statistics, which hold a lock, are rebuilt per process).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

import fsspec

from ..filesystems.originals import store_filesystem, unwrapped
from ..layouts.magic import check_job_id
from ..names import SUCCESS_FILE
from ..paths import join
from ..statistics import IOStatisticsStore
from .cleanup import CLEANUP_MODES, BackgroundCleanup
from .destination import Destination

CONFLICT_MODES = ("append", "fail", "replace")
#: The longest ``replace_retention`` (30 days): the job does not wait it out, the next
#: job on the destination or ``magicfs jobs vacuum`` deletes the old files after it.
MAX_REPLACE_RETENTION = 30 * 86400.0


def elapsed(start: float) -> float:
    """Seconds since ``start`` (a ``time.monotonic()`` reading)."""
    return time.monotonic() - start


class CommitterOptions:
    """The configuration part of :class:`~magicfs.protocol.committer.OutputCommitter`.

    The constructor calls one overridable hook, :meth:`_store_filesystem`, and hands it
    every value it needs as an argument (a subclass's version may also read what its own
    constructor set before calling this one: the magic-layout committer's store options).
    """

    name: str = "abstract"  # per instance where one class serves several (file-v1/v2)
    #: The clean-up of this committer's job still running in this process, if any.
    _cleanup_run: BackgroundCleanup | None = None

    def __init__(
        self,
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
    ):
        if cleanup not in CLEANUP_MODES:
            raise ValueError(
                f"unknown cleanup {cleanup!r}: use one of {', '.join(CLEANUP_MODES)} "
                "(see magicfs.protocol.cleanup)"
            )
        if conflict_mode not in CONFLICT_MODES:
            raise ValueError(
                f"unknown conflict_mode {conflict_mode!r}: use one of {', '.join(CONFLICT_MODES)}"
            )
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        if not 0 <= replace_retention <= MAX_REPLACE_RETENTION:
            raise ValueError(
                f"replace_retention must be between 0 and {MAX_REPLACE_RETENTION:.0f} seconds, "
                f"not {replace_retention!r} (see docs/readers.md)"
            )
        self.job_id = check_job_id(job_id) if job_id is not None else str(uuid.uuid4())
        #: The id is a UUID drawn here and not set up yet: job setup need not look it up.
        self._fresh_job_id = job_id is None
        # Hadoop's values: "Generated Locally", "spark.sql.sources.writeJobUUID", "JobID"...
        self.job_id_source = job_id_source or ("job_id" if job_id else "Generated Locally")
        #: The options the store's filesystem was built with (see :attr:`storage_options`).
        self.store_options = dict(storage_options or {})
        self.threads = threads
        self.conflict_mode = conflict_mode
        self.success_file = success_file
        self.app_attempt = app_attempt
        self.progress = progress
        #: When a committed job's clean-up runs (:mod:`.cleanup`).
        self.cleanup = cleanup
        #: ``replace``: seconds the old files stay after the new snapshot is published;
        #: 0 by default, as plain readers would see duplicate rows (docs/readers.md says
        #: why, and who deletes them later: the next job, ``magicfs jobs vacuum``).
        self.replace_retention = float(replace_retention)
        # The store itself, even when install() made its URLs build magic wrappers.
        if fs is not None:
            self.store_fs = unwrapped(fs)
            if not self.store_options:  # the store's, not a wrapper's
                self.store_options = dict(getattr(self.store_fs, "storage_options", {}) or {})
        else:
            protocol = fsspec.core.split_protocol(dest)[0] or "file"
            self.store_fs = self._store_filesystem(protocol, dict(self.store_options), threads)
        self.dest = self.store_fs._strip_protocol(dest).rstrip("/")
        self.stats = IOStatisticsStore()

    def _store_filesystem(
        self, protocol: str, options: dict[str, Any], threads: int
    ) -> fsspec.AbstractFileSystem:
        """The store's filesystem for a destination of ``protocol`` (no ``fs=`` given).

        Given everything it may use, because the constructor calls it before the
        committer is whole (the S3 committers add their client settings).
        """
        return store_filesystem(protocol, **options)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("stats", None)  # per process; holds a lock
        state.pop("_cleanup_run", None)  # a thread of this process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.stats = IOStatisticsStore()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dest={self.url!r}, job_id={self.job_id!r})"

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

    def success_names_this_job(self) -> bool:
        """Whether the destination's ``_SUCCESS`` says this job committed there."""
        return self.destination.success_job_id() == self.job_id

    @property
    def protocol(self) -> str:
        """The store's protocol name, as chained URLs key their options by it."""
        protocol: str | tuple[str, ...] | list[str] = self.store_fs.protocol
        return protocol[0] if isinstance(protocol, (tuple, list)) else protocol

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options that go with :meth:`TaskAttempt.url` URLs (``storage_options=``).

        For committers whose tasks write through ``magic::`` URLs they are nested per
        protocol, as fsspec's chained URLs expect (``{"magic": {...}, "s3": {...}}``).
        """
        return dict(self.store_options)

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
