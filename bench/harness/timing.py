"""Samples, medians and result rows, and the interleaved loops that take the samples."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .settings import WARMUP


def median_us(ns: Sequence[int]) -> float:
    """The median of nanosecond samples, in µs."""
    return statistics.median(ns) / 1000.0


def p99_us(ns: Sequence[int]) -> float:
    """The 99th percentile of nanosecond samples, in µs."""
    ordered = sorted(ns)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] / 1000.0


@dataclass
class Timings:
    """Nanosecond samples of one timed operation."""

    name: str
    ns: list[int] = field(default_factory=list)

    @property
    def median(self) -> float:
        """The median sample, µs."""
        return median_us(self.ns)

    @property
    def p99(self) -> float:
        """The 99th percentile, µs."""
        return p99_us(self.ns)

    def as_json(self) -> dict[str, Any]:
        """The samples' count, median and p99 as a JSON-ready dict."""
        return {"name": self.name, "n": len(self.ns), "median_us": self.median, "p99_us": self.p99}


@dataclass
class Row:
    """One line of the result table: a store figure against its floor."""

    case: str
    store: float
    floor: float
    target: float | None
    store_p99: float | None = None
    floor_p99: float | None = None
    unit: str = "us"
    allowance: float | None = None
    """An absolute cost above the floor (µs) that passes too: the store adds a roughly
    constant cost per call, so a ratio alone is stricter on a fast loopback than a slow one."""

    @property
    def ratio(self) -> float:
        """The store's figure over the floor's."""
        return self.store / self.floor

    @property
    def verdict(self) -> str:
        """``PASS`` / ``FAIL`` against the target; ``info`` for a row without one."""
        if self.target is None:
            return "info"
        if self.ratio <= self.target:
            return "PASS"
        if self.allowance is not None and self.store - self.floor <= self.allowance:
            return "PASS"
        return "FAIL"

    @property
    def target_text(self) -> str:
        """The target as the tables print it (``-`` for none)."""
        if self.target is None:
            return "-"
        text = f"<= {self.target:.2f}x"
        return text if self.allowance is None else f"{text} or +{self.allowance:.0f} us"

    def as_json(self) -> dict[str, Any]:
        """The row as a JSON-ready dict."""
        return {
            "case": self.case,
            "unit": self.unit,
            "store_median": self.store,
            "store_p99": self.store_p99,
            "floor_median": self.floor,
            "floor_p99": self.floor_p99,
            "ratio": self.ratio,
            "target": self.target,
            "allowance_us": self.allowance,
            "verdict": self.verdict,
        }


def timed_row(
    case: str,
    store: Timings,
    floor: Timings,
    target: float | None,
    allowance: float | None = None,
) -> Row:
    """A row of the store's timings against the floor's (medians and p99s)."""
    return Row(case, store.median, floor.median, target, store.p99, floor.p99, allowance=allowance)


SyncOp = Callable[[int], object]
AsyncOp = Callable[[int], Awaitable[object]]


def _rotate(i: int, items: list[Any]) -> list[Any]:
    k = i % len(items)
    return items[k:] + items[:k]


def run_interleaved(rounds: int, ops: list[tuple[SyncOp, Timings]], warmup: int = WARMUP) -> None:
    """Run every op once per round, order rotating each round; record after the warm-up."""
    gc.collect()
    perf = time.perf_counter_ns
    for i in range(warmup + rounds):
        for fn, timings in _rotate(i, ops):
            t0 = perf()
            fn(i)
            dt = perf() - t0
            if i >= warmup:
                timings.ns.append(dt)


async def run_interleaved_async(
    rounds: int, ops: list[tuple[AsyncOp, Timings]], warmup: int = WARMUP
) -> None:
    """:func:`run_interleaved` for coroutines, in the running event loop."""
    gc.collect()
    perf = time.perf_counter_ns
    for i in range(warmup + rounds):
        for fn, timings in _rotate(i, ops):
            t0 = perf()
            await fn(i)
            dt = perf() - t0
            if i >= warmup:
                timings.ns.append(dt)
