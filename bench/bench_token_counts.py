"""What the default token count costs an append: ``append_message`` of a message without
``tokens`` by a store with the default ``count_tokens`` (``estimate_tokens``) against a store
told ``count_tokens=None``, interleaved (the order alternating each round), on one real Redis;
medians of client CPU (``thread_time``) and wall time per append. Keys go under a
``bench:<random>:`` prefix, deleted at the end.

    .venv/bin/python bench/bench_token_counts.py [--url redis://127.0.0.1:6379/0]
        [--rounds 6000]
"""

from __future__ import annotations

import statistics
import time

from bench.harness.cli import bench_args
from redis_session import Message, RedisStore, Session

TEXT = "lorem ipsum dolor " * 16


def main(argv: list[str] | None = None) -> int:
    args, prefix = bench_args(__doc__, "rounds", 6000, "appends of each store", argv)
    counting = RedisStore.from_url(args.url, prefix=prefix)
    plain = RedisStore.from_url(args.url, prefix=prefix, count_tokens=None)
    sides = {"counted (estimate_tokens)": (counting, "a"), "count_tokens=None": (plain, "b")}
    cpu: dict[str, list[int]] = {name: [] for name in sides}
    wall: dict[str, list[int]] = {name: [] for name in sides}
    try:
        for store, key in sides.values():
            store.create(Session(key=key))
        names = list(sides)
        for i in range(args.rounds):
            for name in names if i % 2 else names[::-1]:
                store, key = sides[name]
                msg = Message(role="user", content=TEXT)
                c, w = time.thread_time_ns(), time.perf_counter_ns()
                store.append_message(key, msg)
                cpu[name].append(time.thread_time_ns() - c)
                wall[name].append(time.perf_counter_ns() - w)
    finally:
        for store, key in sides.values():
            store.delete(key)
            store.close()
    for name in sides:
        print(
            f"{name:28} client CPU {statistics.median(cpu[name]) / 1000:7.1f} µs"
            f"   wall {statistics.median(wall[name]) / 1000:7.1f} µs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
