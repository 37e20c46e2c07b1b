"""PySpark integration: the ``magicfs`` data source and committed per-partition writers.

* :func:`register` — ``df.write.format("magicfs")...save(dest)`` (:mod:`.datasource`);
* :func:`write_partitions` — your own per-partition writer as one committed job;
* :func:`partition_task` — for existing ``foreachPartition`` code (:mod:`.partitions`).

Needs the ``spark`` extra (``pip install 'magicfs[spark]'``).
"""

try:
    import pyspark.sql.datasource  # noqa: F401  (Spark 4's Python data source API)
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"magicfs.spark needs PySpark 4 ({missing}): pip install 'magicfs[spark]'"
    ) from missing

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
