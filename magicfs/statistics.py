"""IOStatistics: Hadoop's statistics model, as a JSON snapshot and a live, thread-safe store.

Every commit record embeds an ``"iostatistics"`` object with five maps (counters,
gauges, minimums, maximums, meanstatistics). The snapshot class here reads and writes
exactly that shape so Hadoop tools print our statistics and we aggregate theirs.

The live :class:`IOStatisticsStore` is what committers and writers update while they
work. Its naming follows Hadoop: a duration-tracked operation ``op`` produces counters
``op`` / ``op.failures``, minimums ``op.min`` / ``op.failures.min``, maximums ``op.max``
/ ``op.failures.max`` and means ``op.mean`` / ``op.failures.mean`` (milliseconds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: Uploads a job's clean-up aborted that the job did not start (no record of it names them:
#: another tool's multipart upload under the destination; see ``stores/s3/sweep.py``).
FOREIGN_UPLOADS_ABORTED = "committer_foreign_uploads_aborted"


@dataclass
class MeanStatistic:
    """A mean kept as sum and sample count, so means aggregate exactly."""

    samples: int = 0
    sum: int = 0

    @property
    def mean(self) -> float:
        return self.sum / self.samples if self.samples else 0.0

    def add(self, other: MeanStatistic) -> None:
        self.samples += other.samples
        self.sum += other.sum

    def to_dict(self) -> dict[str, int]:
        return {"samples": self.samples, "sum": self.sum}


@dataclass
class IOStatisticsSnapshot:
    """Hadoop's ``IOStatisticsSnapshot``: five maps of named int64 statistics."""

    counters: dict[str, int] = field(default_factory=dict)
    gauges: dict[str, int] = field(default_factory=dict)
    minimums: dict[str, int] = field(default_factory=dict)
    maximums: dict[str, int] = field(default_factory=dict)
    meanstatistics: dict[str, MeanStatistic] = field(default_factory=dict)

    def aggregate(self, other: IOStatisticsSnapshot | None) -> IOStatisticsSnapshot:
        """Merge ``other`` into this snapshot as Hadoop does; returns ``self``.

        Counters, gauges and mean samples/sums add up; minimums keep the smaller
        value and maximums the larger.
        """
        if other is None:
            return self
        for name, value in other.counters.items():
            self.counters[name] = self.counters.get(name, 0) + value
        for name, value in other.gauges.items():
            self.gauges[name] = self.gauges.get(name, 0) + value
        for name, value in other.minimums.items():
            current = self.minimums.get(name)
            self.minimums[name] = value if current is None else min(current, value)
        for name, value in other.maximums.items():
            current = self.maximums.get(name)
            self.maximums[name] = value if current is None else max(current, value)
        for name, mean in other.meanstatistics.items():
            self.meanstatistics.setdefault(name, MeanStatistic()).add(mean)
        return self

    def is_empty(self) -> bool:
        return not (
            self.counters or self.gauges or self.minimums or self.maximums or self.meanstatistics
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "gauges": dict(self.gauges),
            "minimums": dict(self.minimums),
            "maximums": dict(self.maximums),
            "meanstatistics": {k: v.to_dict() for k, v in self.meanstatistics.items()},
        }

    def copy(self) -> IOStatisticsSnapshot:
        return IOStatisticsSnapshot().aggregate(self)

    def pretty(self) -> str:
        """Hadoop's ``ioStatisticsToPrettyString``: all five sections, always, separated by
        blank lines (an empty one is ``gauges=();``); zero counters and gauges, negative
        minimums and maximums and empty means are left out."""
        entries = {
            "counters": [(k, v) for k, v in sorted(self.counters.items()) if v],
            "gauges": [(k, v) for k, v in sorted(self.gauges.items()) if v],
            "minimums": [(k, v) for k, v in sorted(self.minimums.items()) if v >= 0],
            "maximums": [(k, v) for k, v in sorted(self.maximums.items()) if v >= 0],
        }
        sections = [
            f"{title}=({chr(10).join(f'({k}={v})' for k, v in values)});"
            for title, values in entries.items()
        ]
        means = [(k, v) for k, v in sorted(self.meanstatistics.items()) if v.samples]
        body = "\n".join(
            f"({k}=(samples={v.samples}, sum={v.sum}, mean={v.mean:.4f}))" for k, v in means
        )
        sections.append(f"means=({body});")
        return "\n\n".join(sections)


class IOStatisticsStore:
    """Thread-safe live statistics; :meth:`snapshot` gives the JSON-ready copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = IOStatisticsSnapshot()

    def increment(self, name: str, value: int = 1) -> None:
        with self._lock:
            self._stats.counters[name] = self._stats.counters.get(name, 0) + value

    def counter(self, name: str) -> int:
        with self._lock:
            return self._stats.counters.get(name, 0)

    def set_gauge(self, name: str, value: int) -> None:
        with self._lock:
            self._stats.gauges[name] = value

    def add_sample(self, name: str, value: int) -> None:
        """Record one sample of ``name`` in every map, under its bare name (Hadoop style)."""
        with self._lock:
            stats = self._stats
            stats.counters[name] = stats.counters.get(name, 0) + 1
            stats.minimums[name] = min(stats.minimums.get(name, value), value)
            stats.maximums[name] = max(stats.maximums.get(name, value), value)
            stats.meanstatistics.setdefault(name, MeanStatistic()).add(MeanStatistic(1, value))

    def record_duration(self, name: str, millis: int, failed: bool = False) -> None:
        key = f"{name}.failures" if failed else name
        with self._lock:
            stats = self._stats
            stats.counters[key] = stats.counters.get(key, 0) + 1
            stats.minimums[f"{key}.min"] = min(stats.minimums.get(f"{key}.min", millis), millis)
            stats.maximums[f"{key}.max"] = max(stats.maximums.get(f"{key}.max", millis), millis)
            stats.meanstatistics.setdefault(f"{key}.mean", MeanStatistic()).add(
                MeanStatistic(1, millis)
            )

    @contextmanager
    def track(self, name: str) -> Iterator[None]:
        """Time the block as operation ``name``; a raised exception counts as a failure."""
        start = time.monotonic()
        try:
            yield
        except BaseException:
            self.record_duration(name, _millis_since(start), failed=True)
            raise
        self.record_duration(name, _millis_since(start))

    def merge(self, snapshot: IOStatisticsSnapshot | None) -> None:
        with self._lock:
            self._stats.aggregate(snapshot)

    def snapshot(self) -> IOStatisticsSnapshot:
        with self._lock:
            return self._stats.copy()

    def counters(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._stats.counters)


def _millis_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)
