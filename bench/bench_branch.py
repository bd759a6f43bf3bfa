"""What a branch and a rewind cost, on one real Redis, against a raw copy of the same list.

Rows (interleaved with their floors, ``--runs`` times each, medians):

- ``branch`` of a session of 1,000 and of 10,000 messages (~200 bytes each as stored) under a
  new key, by a store that read it before (its read cache holds it, as a worker's would) and by
  one that never read it (``read_cache_bytes=0``), against the raw floor: ``LRANGE 0 -1`` of
  the list and ``RPUSH`` of its elements to a new key in batches of 1,000, one pipeline;
- ``rewind`` of the newest 100 messages of a 1,000-message session, against ``LTRIM`` (the
  session is refilled between runs, untimed).

Wall time per call (ms) and the server time of its commands (``INFO commandstats``: use a
server of its own for exact figures), and the longest script of the branches (``SLOWLOG``, to show
no script of theirs holds Redis). Keys go under a ``bench:<random>:`` prefix, deleted at the end.

    .venv/bin/python bench/bench_branch.py [--url redis://127.0.0.1:6379/0] [--runs 7]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

from bench.harness.cli import bench_args
from redis_session import Message, RedisStore, Session

TEXT = "lorem ipsum dolor sit amet " * 4


def _server_us(raw: Any) -> int:
    return sum(int(v["usec"]) for v in raw.info("commandstats").values())


def _timed(raw: Any, run: Callable[[], object]) -> tuple[float, float]:
    """Wall ms and server ms of one call of ``run``."""
    before = _server_us(raw)
    started = time.perf_counter_ns()
    run()
    wall = (time.perf_counter_ns() - started) / 1e6
    return wall, (_server_us(raw) - before) / 1000


def _raw_copy(raw: Any, source: str, target: str) -> None:
    elements = raw.lrange(source, 0, -1)
    pipe = raw.pipeline(transaction=False)
    for i in range(0, len(elements), 1000):
        pipe.rpush(target, *elements[i : i + 1000])
    pipe.execute()


def main(argv: list[str] | None = None) -> int:
    args, prefix = bench_args(__doc__, "runs", 7, "timed calls of each row", argv)
    raw: Any = redis.Redis.from_url(args.url)
    warm = RedisStore.from_url(args.url, prefix=prefix)
    cold = RedisStore.from_url(args.url, prefix=prefix, read_cache_bytes=0)
    slowlog = raw.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    raw.config_set("slowlog-log-slower-than", 1000)
    raw.slowlog_reset()
    rows: list[tuple[str, list[tuple[float, float]], list[tuple[float, float]]]] = []
    try:
        for size in (1_000, 10_000):
            key = f"s{size}"
            warm.create(Session(key=key))
            history = [Message(role="user", content=f"{i} {TEXT}") for i in range(size)]
            for i in range(0, size, 5_000):
                warm.append_messages(key, history[i : i + 5_000])
            source = warm.extension.schema.session(key).msgs
            for label, store in (
                (f"branch of {size:,} (warm)", warm),
                (f"branch of {size:,} (cold)", cold),
            ):
                store.get_history(key)
                mine, floor = [], []
                for run in range(args.runs):
                    target = f"{prefix}raw:{size}:{run}"
                    floor.append(_timed(raw, partial(_raw_copy, raw, source, target)))
                    raw.delete(target)
                    new_key = f"b{size}:{label[-5:-1]}:{run}"
                    mine.append(_timed(raw, partial(store.branch, key, new_key)))
                    store.delete(new_key)
                rows.append((label, mine, floor))
        key = "rw"
        warm.create(Session(key=key))
        history = [Message(role="user", content=f"{i} {TEXT}") for i in range(1_000)]
        warm.append_messages(key, history)
        msgs = warm.extension.schema.session(key).msgs
        mine, floor = [], []
        for _ in range(args.runs):
            floor.append(_timed(raw, lambda: raw.ltrim(msgs, 0, 899)))
            # the session again as it was (the floor's LTRIM broke its positions: recreate)
            warm.delete(key)
            warm.create(Session(key=key, history=history))
            warm.get_history(key)
            mine.append(_timed(raw, lambda: warm.rewind(key, after=history[899].id)))
            warm.delete(key)
            warm.create(Session(key=key, history=history))
        rows.append(("rewind of 100 of 1,000", mine, floor))
        branches = [e for e in raw.slowlog_get(1024) if b":{b" in e["command"]]
        longest = max((e["duration"] for e in branches), default=0)
    finally:
        raw.config_set("slowlog-log-slower-than", slowlog)
        for name in raw.scan_iter(match=f"{prefix}*", count=1000):
            raw.delete(name)
        warm.close()
        cold.close()
    head = ("row", "store ms", "floor ms", "ratio", "server ms", "floor srv")
    print(f"{head[0]:<28} {head[1]:>9} {head[2]:>9} {head[3]:>6} {head[4]:>10} {head[5]:>9}")
    for label, mine, floor in rows:
        wall = statistics.median(w for w, _ in mine)
        base = statistics.median(w for w, _ in floor)
        srv = statistics.median(s for _, s in mine)
        base_srv = statistics.median(s for _, s in floor)
        ratio = wall / base
        print(f"{label:<28} {wall:>9.2f} {base:>9.2f} {ratio:>5.2f}x {srv:>10.2f} {base_srv:>9.2f}")
    print(f"longest script of a branch in SLOWLOG (>= 1 ms): {longest / 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
