"""PySpark integration: the ``magicfs`` data source and committed per-partition writers.

* :func:`register` — ``df.write.format("magicfs")...save(dest)`` (:mod:`.datasource`);
* :func:`write_partitions` — your own per-partition writer as one committed job;
* :func:`partition_task` — for existing ``foreachPartition`` code (:mod:`.partitions`).

Needs the ``spark`` extra (``pip install 'magicfs[spark]'``).
"""

from ..engines import PartitionTask
from .datasource import MagicfsCommitMessage, MagicfsDataSource, MagicfsWriter, register
from .partitions import partition_task, write_partitions

__all__ = [
    "MagicfsCommitMessage",
    "MagicfsDataSource",
    "MagicfsWriter",
    "PartitionTask",
    "partition_task",
    "register",
    "write_partitions",
]
