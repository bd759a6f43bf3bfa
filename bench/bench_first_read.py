"""A store's first read of a session, on one real Redis: Redis's time, wall time and client CPU
per read, for ``get`` and ``get_history``.

``--sessions`` sessions of ``--messages`` messages (~330 bytes each as stored) are read by a
store without a read cache that has read one already (so it knows the element size: the
``get`` script with ``LRANGE`` behind it), ``--rounds`` reads of each kind in turn over the
sessions. Redis's time is the sum of ``INFO commandstats`` over this run's commands (a
script's inner commands count in the script's time and again in their own; use a server of
its own for exact figures). To compare two versions of the code, run this script alternately
from a worktree of each (``PYTHONPATH=<worktree>``) against the same server. Keys go under a
``bench:<random>:`` prefix, deleted at the end.

    .venv/bin/python bench/bench_first_read.py [--url redis://127.0.0.1:6379/0]
        [--sessions 200] [--messages 300] [--rounds 600] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from redis_session import Message, RedisStore, Session

TEXT = "lorem ipsum dolor " * 16


def _server_seconds(raw: Any) -> float:
    stats = raw.info("commandstats")
    return sum(int(v["usec"]) for k, v in stats.items() if "info" not in k) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="Redis to measure")
    parser.add_argument("--sessions", type=int, default=200, help="sessions read in turn")
    parser.add_argument("--messages", type=int, default=300, help="messages in each")
    parser.add_argument("--rounds", type=int, default=600, help="reads of each kind")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    raw: Any = redis.Redis.from_url(args.url)
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    writer = RedisStore.from_url(args.url, prefix=prefix)
    keys = [f"s{i}" for i in range(args.sessions)]
    history = [Message(role="user", content=TEXT) for _ in range(args.messages)]
    for key in keys:
        writer.create(Session(key=key, metadata={"a": "1", "b": "2"}, history=history))
    reader = RedisStore.from_url(args.url, prefix=prefix, read_cache_bytes=0)
    reader.get(keys[0])  # it learns the element size
    out: dict[str, dict[str, float]] = {}

    def timed(name: str, read: Callable[[str], object]) -> None:
        server, wall, cpu = _server_seconds(raw), time.perf_counter(), time.thread_time()
        for i in range(args.rounds):
            read(keys[i % len(keys)])
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        server = _server_seconds(raw) - server
        out[name] = {
            k: round(v / args.rounds * 1e6, 1)
            for k, v in (("server_us", server), ("wall_us", wall), ("client_us", cpu))
        }

    try:
        timed("get", reader.get)
        timed("get_history", reader.get_history)
    finally:
        for key in keys:
            writer.delete(key)
        reader.close()
        writer.close()
    if args.json:
        print(json.dumps(out))
    else:
        for name, figures in out.items():
            print(f"{name:12} " + "  ".join(f"{k} {v:8.1f}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
