"""DuckDB's ``COPY ... TO`` as committed jobs (public name; see
:mod:`magicfs.integrations.duckdb`)."""

from .integrations.duckdb import FORMATS, CopyJob, copy, copy_job

__all__ = ["FORMATS", "CopyJob", "copy", "copy_job"]
