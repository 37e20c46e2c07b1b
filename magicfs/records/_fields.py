"""Strict, typed reading of JSON commit records, with errors that name file and field.

Records come from storage that other people can write to, so nothing is trusted:
the document must be UTF-8 JSON of bounded size, without duplicate keys or NaN, and
each field is read with its expected type. Nothing is evaluated; values are only
ever compared, stored and sent back to the store as request parameters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NoReturn

from ..errors import InvalidCommitData
from ..statistics import IOStatisticsSnapshot, MeanStatistic

#: Longest string accepted in any identifying field (keys, ids, URIs, etags).
MAX_STRING = 8192
#: Longest free-text field (diagnostics, stack traces).
MAX_TEXT = 1 << 20
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_document(data: bytes | str, source: str | None, max_bytes: int) -> dict[str, Any]:
    """Parse one JSON object; reject empty, oversized, non-UTF-8 or odd JSON."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if not raw:
        raise InvalidCommitData(source, None, "file is empty (zero bytes)")
    if len(raw) > max_bytes:
        raise InvalidCommitData(
            source, None, f"file is larger than the {max_bytes}-byte limit for this record"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidCommitData(
            source, None, f"not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    try:
        document = json.loads(
            text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as e:
        raise InvalidCommitData(
            source, None, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except _DuplicateKey as e:
        raise InvalidCommitData(source, str(e), "key appears more than once") from None
    except _BadConstant as e:
        raise InvalidCommitData(source, None, f"malformed JSON: {e} is not allowed") from None
    except RecursionError:
        raise InvalidCommitData(source, None, "JSON is nested too deeply") from None
    if not isinstance(document, dict):
        raise InvalidCommitData(
            source, None, f"expected a JSON object, found {_json_type(document)}"
        )
    return document


class _DuplicateKey(Exception):
    pass


class _BadConstant(Exception):
    pass


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _reject_constant(name: str) -> NoReturn:
    raise _BadConstant(name)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


_MISSING = object()


class FieldReader:
    """Reads typed fields out of one JSON object; errors name ``source`` and the field path."""

    def __init__(self, data: Mapping[str, Any], source: str | None, prefix: str = ""):
        self.data = data
        self.source = source
        self.prefix = prefix

    def fail(self, key: str | None, problem: str) -> NoReturn:
        name = f"{self.prefix}{key}" if key is not None else (self.prefix.rstrip(".") or None)
        raise InvalidCommitData(self.source, name, problem)

    def _get(self, key: str, required: bool) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            if required:
                self.fail(key, "required field is missing")
            return _MISSING
        return value

    def string(
        self,
        key: str,
        *,
        required: bool = True,
        nullable: bool = False,
        nonempty: bool = False,
        default: str | None = "",
        max_length: int = MAX_STRING,
        control_chars: bool = False,
    ) -> str | None:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if value is None:
            if nullable:
                return None
            self.fail(key, "must be a string, found null")
        if not isinstance(value, str):
            self.fail(key, f"must be a string, found {_json_type(value)}")
        if nonempty and not value:
            self.fail(key, "must not be empty")
        if len(value) > max_length:
            self.fail(key, f"is longer than {max_length} characters")
        if not control_chars and _CONTROL.search(value):
            self.fail(key, "contains control characters")
        return value

    def integer(
        self,
        key: str,
        *,
        required: bool = True,
        default: int = 0,
        minimum: int = INT64_MIN,
        maximum: int = INT64_MAX,
    ) -> int:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, found {_json_type(value)}")
        if value < minimum:
            self.fail(key, f"must be >= {minimum}, found {value}")
        if value > maximum:
            self.fail(key, f"must be <= {maximum}, found {value}")
        return value

    def boolean(self, key: str, *, required: bool = True, default: bool = False) -> bool:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, found {_json_type(value)}")
        return value

    def _list(self, key: str, required: bool, max_items: int) -> list[Any] | None:
        value = self._get(key, required)
        if value is _MISSING:
            return None
        if not isinstance(value, list):
            self.fail(key, f"must be a list, found {_json_type(value)}")
        if len(value) > max_items:
            self.fail(key, f"has {len(value)} entries, more than the limit of {max_items}")
        return value

    def string_list(
        self,
        key: str,
        *,
        required: bool = True,
        nonempty_items: bool = False,
        max_items: int = 1_000_000,
        max_length: int = MAX_STRING,
    ) -> list[str]:
        values = self._list(key, required, max_items)
        if values is None:
            return []
        for index, value in enumerate(values):
            where = f"{key}[{index}]"
            if not isinstance(value, str):
                self.fail(where, f"must be a string, found {_json_type(value)}")
            if nonempty_items and not value:
                self.fail(where, "must not be empty")
            if len(value) > max_length:
                self.fail(where, f"is longer than {max_length} characters")
            if _CONTROL.search(value):
                self.fail(where, "contains control characters")
        return list(values)

    def objects(
        self, key: str, *, required: bool = True, max_items: int = 10_000_000
    ) -> list[FieldReader]:
        """The list under ``key`` as one :class:`FieldReader` per element."""
        values = self._list(key, required, max_items)
        if values is None:
            return []
        readers = []
        for index, value in enumerate(values):
            if not isinstance(value, dict):
                self.fail(f"{key}[{index}]", f"must be an object, found {_json_type(value)}")
            readers.append(FieldReader(value, self.source, f"{self.prefix}{key}[{index}]."))
        return readers

    def object(self, key: str, *, required: bool = True) -> FieldReader | None:
        value = self._get(key, required)
        if value is _MISSING or (value is None and not required):
            return None
        if not isinstance(value, dict):
            self.fail(key, f"must be an object, found {_json_type(value)}")
        return FieldReader(value, self.source, f"{self.prefix}{key}.")

    def string_map(
        self, key: str, *, required: bool = False, max_length: int = MAX_TEXT
    ) -> dict[str, str]:
        reader = self.object(key, required=required)
        if reader is None:
            return {}
        return {
            name: reader.string(name, max_length=max_length, control_chars=True) or ""
            for name in reader.data
        }

    def int_map(self, key: str, *, required: bool = False) -> dict[str, int]:
        reader = self.object(key, required=required)
        if reader is None:
            return {}
        return {name: reader.integer(name) for name in reader.data}

    def iostatistics(self, key: str = "iostatistics") -> IOStatisticsSnapshot:
        """Read an embedded IOStatisticsSnapshot; absent or null gives an empty one."""
        reader = self.object(key, required=False)
        if reader is None:
            return IOStatisticsSnapshot()
        means = {}
        mean_reader = reader.object("meanstatistics", required=False)
        if mean_reader is not None:
            for name in mean_reader.data:
                entry = mean_reader.object(name)
                assert entry is not None
                means[name] = MeanStatistic(
                    samples=entry.integer("samples", minimum=0), sum=entry.integer("sum")
                )
        return IOStatisticsSnapshot(
            counters=reader.int_map("counters"),
            gauges=reader.int_map("gauges"),
            minimums=reader.int_map("minimums"),
            maximums=reader.int_map("maximums"),
            meanstatistics=means,
        )

    def expect_constant(self, key: str, expected: Any) -> None:
        value = self._get(key, True)
        if value != expected or isinstance(value, bool) != isinstance(expected, bool):
            self.fail(key, f"expected {expected!r}, found {value!r}")
