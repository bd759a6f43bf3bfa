"""What a read by tokens costs, and whether it grows with the history: ``get_history(key,
max_tokens=N)`` of a 1,000- and a 100,000-message session against ``get_history(key,
last=20)`` of the same sessions and the raw floor (``LRANGE -20 -1`` + ``orjson.loads``),
interleaved round by round (the order rotating) on one real Redis, by stores that never read
the sessions (no read cache: each read asks Redis). N is what the newest 20 messages hold, so
that every read returns 20 messages. Medians of wall time, and Redis's time per call of the
``get`` script (``INFO commandstats``, the script and its inner commands). Keys go under a
``bench:<random>:`` prefix, deleted at the end.

    .venv/bin/python bench/bench_max_tokens.py [--url redis://127.0.0.1:6379/0]
        [--rounds 2000]
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import orjson
import redis

from bench.harness.cli import bench_args
from redis_session import Message, RedisStore, Session
from redis_session.keys import KeySchema

SIZES = (1_000, 100_000)
LAST = 20


def fill(store: RedisStore, key: str, size: int, rng: random.Random) -> int:
    """Session ``key`` with ``size`` messages of random counts; what its newest LAST hold."""
    counts = [rng.randrange(10, 400) for _ in range(size)]
    batch = [
        Message(role="user", content=f"m{i} lorem ipsum", tokens=n) for i, n in enumerate(counts)
    ]
    store.create(Session(key=key, history=batch[:1_000]))
    for at in range(1_000, size, 1_000):
        store.append_messages(key, batch[at : at + 1_000])
    return sum(counts[-LAST:])


def by_tokens(reader: RedisStore, key: str, bound: int) -> Callable[[], list[object]]:
    return lambda: list(reader.get_history(key, max_tokens=bound))


def by_count(reader: RedisStore, key: str) -> Callable[[], list[object]]:
    return lambda: list(reader.get_history(key, last=LAST))


def raw_read(raw: redis.Redis, msgs: str) -> Callable[[], list[object]]:
    return lambda: [orjson.loads(e) for e in raw.lrange(msgs, -LAST, -1)]


def script_us(raw: redis.Redis) -> tuple[int, float]:
    """Calls and total µs of EVALSHA so far (commandstats)."""
    stats = raw.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), float(stats.get("usec", 0))


def main(argv: list[str] | None = None) -> int:
    args, prefix = bench_args(__doc__, "rounds", 2000, "reads of each kind", argv)
    writer = RedisStore.from_url(args.url, prefix=prefix)
    raw = redis.Redis.from_url(args.url)
    rng = random.Random(46)
    bounds = {size: fill(writer, f"s{size}", size, rng) for size in SIZES}
    readers = {
        size: RedisStore.from_url(args.url, prefix=prefix, read_cache_bytes=0) for size in SIZES
    }
    cases: dict[str, Callable[[], list[object]]] = {}
    for size in SIZES:
        key, reader = f"s{size}", readers[size]
        cases[f"max_tokens @{size:,}"] = by_tokens(reader, key, bounds[size])
        cases[f"last=20 @{size:,}"] = by_count(reader, key)
        cases[f"LRANGE -20 -1 + orjson @{size:,}"] = raw_read(
            raw, KeySchema(prefix).session(key).msgs
        )
    wall: dict[str, list[int]] = {name: [] for name in cases}
    server: dict[str, float] = dict.fromkeys(cases, 0.0)
    try:
        for name, case in cases.items():  # each path warm: connections, scripts
            got = case()
            assert len(got) == LAST, (name, len(got))
        names = list(cases)
        for i in range(args.rounds):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                before = script_us(raw)[1] if i % 50 == 0 else None
                w = time.perf_counter_ns()
                cases[name]()
                wall[name].append(time.perf_counter_ns() - w)
                if before is not None:
                    server[name] += script_us(raw)[1] - before
    finally:
        for size in SIZES:
            writer.delete(f"s{size}")
            readers[size].close()
        writer.close()
    samples = len(range(0, args.rounds, 50))
    floor = {size: statistics.median(wall[f"LRANGE -20 -1 + orjson @{size:,}"]) for size in SIZES}
    print(
        f"{'read (20 messages each)':34} {'wall µs':>9} {'above floor':>12} {'get script µs':>14}"
    )
    for name in cases:
        size = int(name.rsplit("@", 1)[1].replace(",", ""))
        median = statistics.median(wall[name]) / 1000
        above = median - floor[size] / 1000
        per_call = server[name] / samples
        print(f"{name:34} {median:9.1f} {above:+12.1f} {per_call:14.1f}")
    for kind in ("max_tokens", "last=20"):
        ratio = statistics.median(wall[f"{kind} @100,000"]) / statistics.median(
            wall[f"{kind} @1,000"]
        )
        print(f"{kind}: 100,000 / 1,000 messages = {ratio:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
