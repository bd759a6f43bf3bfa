"""Verdicts and the forms a finished run is reported in (JSON, plain-text tables)."""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pydantic
import redis
import redis.utils

from .runner import Bench
from .settings import WARMUP


def round_trips_ok(bench: Bench) -> bool:
    """Whether an append took exactly one socket write, in both flavours."""
    rt = bench.extra["round_trips"]
    return bool(
        rt["sync_client_writes_per_append"] == 1 and rt["async_client_writes_per_append"] == 1
    )


def all_targets_pass(bench: Bench) -> bool:
    """Whether every row met its target and an append was one round trip."""
    return round_trips_ok(bench) and all(r.verdict != "FAIL" for r in bench.rows)


def server_info(bench: Bench) -> dict[str, Any]:
    """Versions of the server and of the client stack, for the header and the JSON."""
    info: dict[str, Any] = bench.client.info("server")
    return {
        "url": bench.url,
        "redis_version": info.get("redis_version"),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "pydantic": pydantic.VERSION,
        "orjson": orjson.__version__,
        "hiredis": redis.utils.HIREDIS_AVAILABLE,
    }


def payload(
    bench: Bench, info: dict[str, Any], *, gc_mode: str, passed: bool, total: float
) -> dict[str, Any]:
    """The results of a finished run as one JSON-ready dict."""
    return {
        "url": bench.url,
        "redis_version": info.get("redis_version"),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "rounds": bench.rounds,
        "get_rounds": bench.get_rounds,
        "warmup": WARMUP,
        "gc": gc_mode,
        "floors": [f.as_json() for f in bench.floors],
        "rows": [r.as_json() for r in bench.rows],
        "where_the_time_goes_us": dict(bench.where),
        **bench.extra,
        "all_targets_pass": passed,
        "total_runtime_s": total,
    }


def text_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = []
    for n, line in enumerate([header, *lines]):
        cells = [c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(line)]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def where_lines(where: Sequence[tuple[str, Mapping[str, float]]]) -> list[str]:
    """The "where the time goes" block of a benchmark report, medians in µs."""
    out = ["where the time goes (medians, us; same interleaved loops as above)"]
    for title, parts in where:
        out.append(f"  {title}")
        out += [f"    {name:<56}{value:>10.1f}" for name, value in parts.items()]
    return out
