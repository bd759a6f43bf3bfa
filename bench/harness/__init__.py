"""The benchmark's measuring core: the store against raw redis-py floors on one real Redis.

A tool of the repository, not of the library: it is not in the wheel, and nothing in
``redis_session`` imports it but ``redis-session bench``, when that command runs (from a
checkout or an editable install, where the repository's root is importable). Used by
``bench/bench_store.py`` (whose docstring describes every case) and the other scripts of
``bench/``. Each store call is timed interleaved with the raw floor it is compared to, so drift
of the machine or of the server affects both alike.

One module per concern, imports pointing one way: :mod:`.settings` (sizes, targets, the floor
script), :mod:`.messages` (realistic inputs), :mod:`.timing` (samples, rows, interleaved loops),
:mod:`.wire` (counting round trips, the core's requests taken without I/O), :mod:`.cases`
(append cases and their timed operations), :mod:`.runner` (one run's set-up, its writing phases
and clean-up), :mod:`.reads` (the read phases of a run), :mod:`.run` (a whole run) and
:mod:`.report` (verdicts, JSON, text tables).
"""

from __future__ import annotations

from .cases import AppendCase, AppendTimings, growth_cap, prep_op
from .messages import build_messages
from .report import all_targets_pass, payload, round_trips_ok, server_info, text_table, where_lines
from .run import GC_MODES, PHASE_COUNT, run_phases
from .runner import Bench
from .settings import (
    APPEND_TARGET,
    BYTES_TARGET,
    FLOOR_LUA,
    GET_TARGET,
    GET_WARMUP,
    GRACE,
    HISTORY_TARGET,
    MAX_TURNS,
    PREFILL_BATCH,
    SIZES,
    TTL,
    WARMUP,
)
from .timing import (
    AsyncOp,
    Row,
    SyncOp,
    Timings,
    median_us,
    p99_us,
    run_interleaved,
    run_interleaved_async,
    timed_row,
)
from .wire import AsyncCountingConnection, CountingConnection, Wire

__all__ = [
    "APPEND_TARGET",
    "BYTES_TARGET",
    "FLOOR_LUA",
    "GC_MODES",
    "GET_TARGET",
    "GET_WARMUP",
    "GRACE",
    "HISTORY_TARGET",
    "MAX_TURNS",
    "PHASE_COUNT",
    "PREFILL_BATCH",
    "SIZES",
    "TTL",
    "WARMUP",
    "AppendCase",
    "AppendTimings",
    "AsyncCountingConnection",
    "AsyncOp",
    "Bench",
    "CountingConnection",
    "Row",
    "SyncOp",
    "Timings",
    "Wire",
    "all_targets_pass",
    "build_messages",
    "growth_cap",
    "median_us",
    "p99_us",
    "payload",
    "prep_op",
    "round_trips_ok",
    "run_interleaved",
    "run_interleaved_async",
    "run_phases",
    "server_info",
    "text_table",
    "timed_row",
    "where_lines",
]
