"""magicfs: commit many-file job output to object stores without rename.

The Python counterpart of Hadoop's S3A "magic" committer and manifest committer, for
fsspec, pandas, pyarrow, PySpark, Dask and Ray: files written by a job's tasks stay
invisible until the job commits, then appear at their final names; :func:`snapshot`
gives readers the files of exactly the jobs whose commit finished.

Start with :func:`write_job` (scripts and notebooks), :func:`committer_for` (the
protocol step by step, for engines), :mod:`magicfs.spark`, :mod:`magicfs.dask` or
:mod:`magicfs.ray`. ``help(magicfs.write_job)`` has an example; :func:`local_s3` starts
an S3 server on 127.0.0.1 to try them on. The documentation site is in the repository's
``docs/`` folder.
"""

from . import errors, paths, records
from .committers import (
    JobSummary,
    MagicCommitter,
    ManifestCommitter,
    OutputCommitter,
    TaskAttempt,
    TaskCommitMessage,
    committer_for,
)
from .errors import InvalidCommitData
from .filesystems import MagicFileSystem
from .filesystems.install import install, uninstall
from .integrations.job import JobWriter, write_job
from .integrations.local_s3 import local_s3
from .readers import Snapshot, snapshot

__version__ = "0.1.0"

__all__ = [
    "InvalidCommitData",
    "JobSummary",
    "JobWriter",
    "MagicCommitter",
    "MagicFileSystem",
    "ManifestCommitter",
    "OutputCommitter",
    "Snapshot",
    "TaskAttempt",
    "TaskCommitMessage",
    "committer_for",
    "errors",
    "install",
    "local_s3",
    "paths",
    "records",
    "snapshot",
    "uninstall",
    "write_job",
]
