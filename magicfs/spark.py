"""PySpark's ``magicfs`` data source and committed per-partition writers (public name;
see :mod:`magicfs.integrations.spark`). Needs the ``spark`` extra."""

from .integrations.spark import (
    MagicfsCommitMessage,
    MagicfsDataSource,
    MagicfsWriter,
    PartitionTask,
    partition_task,
    register,
    write_partitions,
)

__all__ = [
    "MagicfsCommitMessage",
    "MagicfsDataSource",
    "MagicfsWriter",
    "PartitionTask",
    "partition_task",
    "register",
    "write_partitions",
]
