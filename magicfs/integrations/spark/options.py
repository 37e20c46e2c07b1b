"""Spark data source options -> committer options.

Spark passes options as strings in a case-insensitive map. Options prefixed
``storage_options.`` go to the store's fsspec filesystem; dots nest further
(``storage_options.client_kwargs.endpoint_url``) and values that parse as JSON
(``true``, ``8``, ``{"a": 1}``) are decoded, others stay strings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PREFIX = "storage_options."
FORMATS = ("parquet", "csv", "json")


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
        target[leaf] = _decode(value)
    return result


def _decode(value: str) -> Any:
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def split_columns(value: str | None) -> list[str]:
    """``"year, region"`` -> ``["year", "region"]``."""
    return [column.strip() for column in (value or "").split(",") if column.strip()]


def check_format(value: str | None) -> str:
    fmt = (value or "parquet").lower()
    if fmt not in FORMATS:
        raise ValueError(f"magicfs: unsupported format {value!r}: use one of {', '.join(FORMATS)}")
    return fmt
