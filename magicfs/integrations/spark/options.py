"""Spark data source options -> committer options.

Spark passes options as strings in a case-insensitive map. Options prefixed
``storage_options.`` go to the store's fsspec filesystem; dots nest further
(``storage_options.client_kwargs.endpoint_url``) and values that parse as JSON
(``true``, ``8``, ``{"a": 1}``) are decoded, others stay strings; text that looks like
JSON but does not parse, or is not an object for a ``*_kwargs`` option, is refused
(:mod:`magicfs.integrations.option_values`).

Any other option must be one of :data:`OPTIONS`: Spark accepts every option name
without a word, so a misspelt one (``formt``) or one this source does not implement
would otherwise be ignored and the job write something else than asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..option_values import decode_option

PREFIX = "storage_options."
FORMATS = ("parquet", "csv", "json")
#: The options the data source reads (lower case: Spark's option names are case-insensitive).
OPTIONS = {
    "path": "the destination (.save(path))",
    "format": "parquet (default), csv or json",
    "partitionby": "comma-separated columns: Hive-style col=value/ directories",
    "compression": "parquet: snappy (default), gzip, zstd, lz4_raw, brotli, none; "
    "csv, json: none (default), gzip, bzip2, zstd",
    "conflict_mode": "append (default), fail (mode('overwrite') means replace)",
    "threads": "uploads completed / files renamed at once in job commit (8)",
}


def check_options(options: Mapping[str, str]) -> None:
    """Refuse option names the data source does not read, listing the ones it does."""
    unknown = sorted(
        key for key in options if key.lower() not in OPTIONS and not key.lower().startswith(PREFIX)
    )
    if unknown:
        valid = "; ".join(f"{name}: {meaning}" for name, meaning in OPTIONS.items())
        raise ValueError(
            f"magicfs: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"(nothing was written). Valid options: {valid}; and storage_options.<name> for "
            "the store's fsspec filesystem. (Spark's .partitionBy() and .bucketBy() are not "
            "passed to Python data sources: use .option('partitionBy', 'col1,col2'))"
        )


def storage_options(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``storage_options.*`` options as a nested dict for ``fsspec.filesystem(...)``."""
    result: dict[str, Any] = {}
    for key, value in options.items():
        if not key.lower().startswith(PREFIX):
            continue
        *parents, leaf = key[len(PREFIX) :].split(".")
        target = result
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value if not isinstance(value, str) else _decode(key, value)
    return result


def _decode(key: str, value: str) -> Any:
    try:
        return decode_option(key, value)
    except ValueError as e:
        raise ValueError(f"magicfs: {e} (nothing was written)") from None


def split_columns(value: str | None) -> list[str]:
    """``"year, region"`` -> ``["year", "region"]``."""
    return [column.strip() for column in (value or "").split(",") if column.strip()]


def check_format(value: str | None) -> str:
    fmt = (value or "parquet").lower()
    if fmt not in FORMATS:
        raise ValueError(f"magicfs: unsupported format {value!r}: use one of {', '.join(FORMATS)}")
    return fmt
