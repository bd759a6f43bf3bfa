"""What OpenTelemetry costs a store: an append and a hot read, with no OpenTelemetry, with the
API alone (no SDK configured: spans do not record), and with the SDK and a batch exporter.

Each mode runs in its own subprocess (the SDK is configured process-wide), in turn, for
``--rounds`` rounds against one private redis-server this script starts (and stops); the
"none" mode is the same store with its telemetry switched off, as a store is when the
``otel`` extra is not installed. Two figures per mode and operation:

- ``python``: the store's own cost per call with a stub client that answers at once (no
  network), i.e. what the instrumentation adds, in µs;
- ``wall`` and ``cpu``: per call against the private server (``perf_counter_ns`` and
  ``thread_time_ns``), medians over rounds.

    .venv/bin/python bench/bench_telemetry.py [--rounds 7] [--calls 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.server import private_server

ROOT = Path(__file__).resolve().parent.parent
MODES = ("none", "api", "sdk")


def worker(mode: str, port: int, calls: int) -> dict[str, float]:
    """One round of one mode: per-call costs in µs."""
    import redis

    from redis_session import Message, RedisStore, Session

    if mode == "sdk":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            InMemoryMetricReader,
        )
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        class Dropping(SpanExporter):  # an exporter that sends nowhere: the SDK's own cost
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropping()))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))

    out: dict[str, float] = {}
    prefix = f"bt-{uuid.uuid4().hex[:6]}:"
    store = RedisStore(redis.Redis(port=port), prefix=prefix)
    if mode == "none":
        store._telemetry = None  # as without the otel extra
    store.create(Session(key="k"))
    msgs = [Message(role="user", content=f"message {i} " * 8) for i in range(calls * 2 + 50)]
    for m in msgs[:50]:
        store.append_message("k", m)
    store.get_history("k", last=20)

    def timed(name: str, fn: Any, items: Sequence[Any]) -> None:
        t, c = time.perf_counter_ns(), time.thread_time_ns()
        for item in items:
            fn(item)
        out[f"{name}.wall"] = (time.perf_counter_ns() - t) / len(items) / 1000
        out[f"{name}.cpu"] = (time.thread_time_ns() - c) / len(items) / 1000

    timed("append", lambda m: store.append_message("k", m), msgs[50 : 50 + calls])
    timed("hot_read", lambda _: store.get_history("k", last=20), range(calls))

    class Stub:  # answers an append's script at once: the store's Python cost alone
        def execute_command(self, *args: Any) -> Any:
            return [0, 1, 0]

    real = store._client
    store._client = Stub()  # type: ignore[assignment]
    stub_msgs = msgs[50 + calls :]
    t = time.perf_counter_ns()
    for m in stub_msgs:
        store.append_message("k", m)
    out["append.python"] = (time.perf_counter_ns() - t) / len(stub_msgs) / 1000
    store._client = real
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--worker", choices=MODES)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.port, args.calls)))
        return
    with private_server("telemetry") as port:
        rounds: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", mode, "--port", str(port),
                     "--calls", str(args.calls)],
                    capture_output=True, text=True, check=True, env=env, timeout=600,
                )  # fmt: skip
                rounds[mode].append(json.loads(done.stdout))
        names = sorted(rounds["none"][0])
        print(f"{args.rounds} rounds x {args.calls} calls, redis-server on 127.0.0.1:{port}")
        print(
            f"{'µs per call (median)':<24}"
            + "".join(f"{m:>10}" for m in MODES)
            + "   api-none  sdk-none"
        )
        for name in names:
            med = {m: statistics.median(x[name] for x in rounds[m]) for m in MODES}
            print(
                f"{name:<24}" + "".join(f"{med[m]:>10.1f}" for m in MODES)
                + f"{med['api'] - med['none']:>+10.1f}{med['sdk'] - med['none']:>+10.1f}"
            )  # fmt: skip


if __name__ == "__main__":
    main()
