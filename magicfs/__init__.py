"""magicfs: commit many-file job output to object stores without rename.

The Python counterpart of Hadoop's S3A "magic" committer and manifest committer,
for fsspec, pandas, pyarrow and PySpark. See README.md for the tour.
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

__version__ = "0.1.0"

__all__ = [
    "InvalidCommitData",
    "JobSummary",
    "JobWriter",
    "MagicCommitter",
    "MagicFileSystem",
    "ManifestCommitter",
    "OutputCommitter",
    "TaskAttempt",
    "TaskCommitMessage",
    "committer_for",
    "errors",
    "install",
    "paths",
    "records",
    "uninstall",
    "write_job",
]
