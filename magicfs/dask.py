"""Dask DataFrames written as one committed job (the public name of
:mod:`magicfs.integrations.dask`)."""

from .integrations.dask import PartitionTask, to_csv, to_parquet, write_partition, write_partitions

__all__ = ["PartitionTask", "to_csv", "to_parquet", "write_partition", "write_partitions"]
