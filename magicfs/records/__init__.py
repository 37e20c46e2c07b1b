"""Hadoop-compatible commit records: ``.pending``, ``.pendingset``, ``_SUCCESS``, task manifests.

Each record class has ``to_json()``, ``from_json(text, source)`` and ``load(fs, path)``;
loading validates and raises :class:`magicfs.errors.InvalidCommitData` naming the file
and the field.
"""

from ..statistics import IOStatisticsSnapshot, MeanStatistic
from .manifest import (
    MANIFEST_TYPE,
    DirEntry,
    EntryStatus,
    FileEntry,
    TaskManifest,
    path_to_uri,
    uri_to_path,
)
from .pending import (
    CHECKSUM_ALGORITHM_KEY,
    TASK_ATTEMPT_ID_KEY,
    PendingSet,
    SinglePendingCommit,
    check_checksums_agree,
    declared_checksums,
)
from .success import (
    MANIFEST_COMMITTER_CLASS,
    MAX_FILENAMES,
    SUCCESS_NAME,
    ManifestSuccessData,
    SuccessData,
)

__all__ = [
    "CHECKSUM_ALGORITHM_KEY",
    "MANIFEST_COMMITTER_CLASS",
    "MANIFEST_TYPE",
    "MAX_FILENAMES",
    "SUCCESS_NAME",
    "TASK_ATTEMPT_ID_KEY",
    "DirEntry",
    "EntryStatus",
    "FileEntry",
    "IOStatisticsSnapshot",
    "ManifestSuccessData",
    "MeanStatistic",
    "PendingSet",
    "SinglePendingCommit",
    "SuccessData",
    "TaskManifest",
    "check_checksums_agree",
    "declared_checksums",
    "path_to_uri",
    "uri_to_path",
]
