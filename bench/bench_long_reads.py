"""A store's first read of a long session, on one real Redis: wall time, server time and the
longest single command, against ``LRANGE 0 -1`` + ``orjson.loads`` of the same list.

A session of ``--messages`` messages (~470 bytes each as stored) is read whole by stores that
never read it (``read_cache_bytes=0``; each reads ``last=30`` first, so it knows the element
size). Such a read takes one read's budget of messages behind the ``get`` script, then the rest
in plain steps (``LRANGE`` with the list's positions checked behind it). Per read it reports
the wall time, the server time of this run's commands (``INFO commandstats``, all commands and
``EVALSHA`` alone: use a server of its own for exact figures), and the ``SLOWLOG`` entries of
1 ms or more with the longest one (the read must not hold Redis). The floor reads the same
elements raw, interleaved with the store's reads. Keys go under a ``bench:<random>:`` prefix,
deleted at the end; the server's slowlog settings are restored.

    .venv/bin/python bench/bench_long_reads.py [--url redis://127.0.0.1:6379/0]
        [--messages 20000] [--runs 9]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import redis

from redis_session import Message, RedisStore, Session

BATCH = 500
TEXT = "lorem ipsum dolor " * 25


def _usec(raw: Any) -> tuple[int, int]:
    """Server time so far (µs): every command, and EVALSHA alone."""
    stats = raw.info("commandstats")
    total = sum(int(v["usec"]) for v in stats.values())
    return total, int(stats.get("cmdstat_evalsha", {}).get("usec", 0))


def _timed(raw: Any, run: Callable[[], object]) -> tuple[float, float, float]:
    """Wall ms, server ms (all commands) and EVALSHA ms of one call of ``run``."""
    total0, eval0 = _usec(raw)
    started = time.perf_counter_ns()
    run()
    wall = (time.perf_counter_ns() - started) / 1e6
    total1, eval1 = _usec(raw)
    return wall, (total1 - total0) / 1000, (eval1 - eval0) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="Redis to measure")
    parser.add_argument("--messages", type=int, default=20_000, help="messages in the session")
    parser.add_argument("--runs", type=int, default=9, help="cold reads (and floors) timed")
    args = parser.parse_args(argv)
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    raw: Any = redis.Redis.from_url(args.url)
    writer = RedisStore.from_url(args.url, prefix=prefix)
    slowlog = raw.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    try:
        writer.create(Session(key="long"))
        for i in range(0, args.messages, BATCH):
            batch = range(i, min(i + BATCH, args.messages))
            writer.append_messages(
                "long", [Message(role="user", content=f"m{j} {TEXT}") for j in batch]
            )
        msgs = writer._core.schema.session("long").msgs
        raw.config_set("slowlog-log-slower-than", 1000)
        raw.slowlog_reset()
        store_t: list[tuple[float, float, float]] = []
        floor_t: list[tuple[float, float, float]] = []
        count = 0
        for _ in range(args.runs):
            with RedisStore.from_url(args.url, prefix=prefix, read_cache_bytes=0) as store:
                store.get_history("long", last=30)  # it knows the element size now

                def read(store: RedisStore = store) -> None:
                    nonlocal count
                    count = len(store.get("long").history)

                store_t.append(_timed(raw, read))
            floor_t.append(_timed(raw, lambda: [orjson.loads(e) for e in raw.lrange(msgs, 0, -1)]))
        slow = raw.slowlog_get(10_000)
    finally:
        raw.config_set("slowlog-log-slower-than", slowlog)
        keys = list(raw.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            raw.delete(*keys)
        writer.close()
        raw.close()

    def med(rows: list[tuple[float, float, float]], i: int) -> float:
        return statistics.median(r[i] for r in rows)

    print(f"cold get() of {count:,} messages, {args.runs} runs (medians):")
    print(f"  store: wall {med(store_t, 0):.1f} ms, server {med(store_t, 1):.2f} ms "
          f"(EVALSHA {med(store_t, 2):.2f} ms)")  # fmt: skip
    print(f"  floor LRANGE 0 -1 + orjson.loads: wall {med(floor_t, 0):.1f} ms, "
          f"server {med(floor_t, 1):.2f} ms")  # fmt: skip
    print(f"  ratio {med(store_t, 0) / med(floor_t, 0):.2f}x wall")
    floor_cmd = f"LRANGE {msgs} 0 -1".encode()
    for who, entries in (
        ("store", [e for e in slow if bytes(e["command"]) != floor_cmd]),
        ("floor", [e for e in slow if bytes(e["command"]) == floor_cmd]),
    ):
        longest = max((int(e["duration"]) for e in entries), default=0)
        print(f"  SLOWLOG entries >= 1 ms, {who}: {len(entries)}, longest {longest} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
