"""What the LangGraph checkpointer costs, on one real Redis, against LangGraph's own savers and a
raw redis-py floor.

Rows (interleaved: each round runs every saver once, in turn, ``--rounds`` rounds; medians):

- ``put`` of the next checkpoint of a ``MessagesState`` thread of 50 messages (~200 bytes each),
  then ``get_tuple`` of the thread's newest checkpoint; the same for 1,000 messages (LangGraph
  stores a channel's whole value at each version: the messages list, serialized by its
  ``JsonPlusSerializer``);
- savers: ``RedisSaver`` (a ``RedisStore`` from the URL), ``InMemorySaver`` (no I/O),
  ``SqliteSaver`` (``:memory:``, one connection), and the raw redis-py floor: the same
  serialization, then one ``HSET`` of the checkpoint record and the channel value (``put``),
  one ``HMGET`` of both then deserialization (``get_tuple``): one round trip each, nothing
  atomic, no index, no TTL.

Then the Redis memory of a thread (``MEMORY USAGE`` of its keys) per checkpoint, after 50
checkpoints that each add one message. Keys go under a ``bench:<random>:`` prefix, deleted at
the end.

    .venv/bin/python bench/bench_langgraph.py [--url redis://127.0.0.1:6379/0] [--rounds 200]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from redis_session import RedisStore
from redis_session.integrations.langgraph import RedisSaver
from redis_session.integrations.langgraph._thread import keys_of

TEXT = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 3  # ~170 characters


def messages(n: int) -> list[BaseMessage]:
    """``n`` alternating user and assistant messages."""
    return [
        HumanMessage(f"{i} {TEXT}", id=f"m{i}")
        if i % 2 == 0
        else AIMessage(f"{i} {TEXT}", id=f"m{i}")
        for i in range(n)
    ]


class Thread:
    """One thread's checkpoints, put one after the other (each adds a message)."""

    def __init__(self, saver: Any, thread_id: str, history: list[BaseMessage]) -> None:
        self.saver, self.thread_id, self.history = saver, thread_id, list(history)
        self.parent: str | None = None
        self.version = 0

    def next_checkpoint(self) -> tuple[RunnableConfig, Checkpoint, dict[str, Any]]:
        self.version += 1
        self.history.append(AIMessage(f"{len(self.history)} {TEXT}", id=f"m{len(self.history)}"))
        self.history.pop(0)  # the thread keeps its size
        cp = empty_checkpoint()
        cp["id"] = str(uuid6(clock_seq=self.version))
        cp["channel_values"] = {"messages": self.history}
        cp["channel_versions"] = {"messages": f"{self.version:032}.0"}
        conf: dict[str, Any] = {"thread_id": self.thread_id, "checkpoint_ns": ""}
        if self.parent:
            conf["checkpoint_id"] = self.parent
        return {"configurable": conf}, cp, {"messages": cp["channel_versions"]["messages"]}

    def put(self) -> None:
        config, cp, versions = self.next_checkpoint()
        metadata: Any = {"source": "loop", "step": self.version, "parents": {}}
        self.saver.put(config, cp, metadata, versions)
        self.parent = cp["id"]

    def get(self) -> None:
        got = self.saver.get_tuple({"configurable": {"thread_id": self.thread_id}})
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == len(
            self.history
        )


class RawFloor:
    """The same serialization and one round trip per call, with redis-py alone."""

    def __init__(self, raw: Any, prefix: str) -> None:
        self.raw, self.prefix, self.serde = raw, prefix, JsonPlusSerializer()

    def put(self, config: RunnableConfig, cp: Checkpoint, metadata: Any, versions: Any) -> None:
        c: dict[str, Any] = dict(cp)
        values = c.pop("channel_values")
        thread = config["configurable"]["thread_id"]
        fields = {
            "c": self._typed(c),
            "m": self._typed(metadata),
            "v": self._typed(values["messages"]),
        }
        self.raw.hset(f"{self.prefix}raw:{thread}", mapping=fields)

    def _typed(self, value: Any) -> bytes:
        t, data = self.serde.dumps_typed(value)
        return t.encode() + b"\0" + data

    def _loads(self, typed: bytes) -> Any:
        t, _, data = typed.partition(b"\0")
        return self.serde.loads_typed((t.decode(), data))

    def get_tuple(self, config: RunnableConfig) -> Any:
        thread = config["configurable"]["thread_id"]
        record, meta, value = self.raw.hmget(f"{self.prefix}raw:{thread}", ["c", "m", "v"])
        cp = self._loads(record)
        self._loads(meta)
        cp["channel_values"] = {"messages": self._loads(value)}

        class Got:
            checkpoint = cp

        return Got()


def _us(run: Callable[[], None]) -> float:
    started = time.perf_counter_ns()
    run()
    return (time.perf_counter_ns() - started) / 1000


def measure(savers: dict[str, Any], size: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Median put and get_tuple µs of each saver on a thread of ``size`` messages."""
    threads = {
        name: Thread(s, f"bench-{size}-{uuid.uuid4().hex[:6]}", messages(size))
        for name, s in savers.items()
    }
    for t in threads.values():
        t.put()  # the thread exists before the timed rounds
    puts: dict[str, list[float]] = {n: [] for n in savers}
    gets: dict[str, list[float]] = {n: [] for n in savers}
    names = list(savers)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # turn the order
            puts[name].append(_us(threads[name].put))
            gets[name].append(_us(threads[name].get))
    return {n: (statistics.median(puts[n]), statistics.median(gets[n])) for n in savers}


def memory_per_checkpoint(store: RedisStore, raw: redis.Redis, count: int) -> tuple[float, float]:
    """Redis bytes per checkpoint of a thread of ``count`` checkpoints (each adding one
    message: a new version of the messages channel each), and the serialized bytes of the
    channel values per checkpoint (what any saver storing every version holds)."""
    saver = RedisSaver(store)
    thread = Thread(saver, f"mem-{uuid.uuid4().hex[:6]}", [])
    serialized = 0.0
    for _ in range(count):
        thread.history.append(HumanMessage(f"{len(thread.history)} {TEXT}"))
        thread.put()
        serialized += len(JsonPlusSerializer().dumps_typed(thread.history)[1])
    keys = keys_of(store.extension, thread.thread_id)
    meta = store.extension.schema.session(keys.session)
    used = sum(
        raw.memory_usage(k, samples=0) or 0 for k in (keys.data, keys.order, meta.meta, meta.ids)
    )
    return used / count, serialized / count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="Redis to measure")
    parser.add_argument("--rounds", type=int, default=200, help="rounds at 50 messages")
    parser.add_argument("--rounds-large", type=int, default=30, help="rounds at 1,000 messages")
    args = parser.parse_args(argv)
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    raw = redis.Redis.from_url(args.url)
    store = RedisStore.from_url(args.url, prefix=prefix)
    sqlite = sqlite3.connect(":memory:", check_same_thread=False)
    savers: dict[str, BaseCheckpointSaver[Any] | RawFloor] = {
        "raw redis-py floor": RawFloor(raw, prefix),
        "RedisSaver": RedisSaver(store),
        "InMemorySaver": InMemorySaver(),
        "SqliteSaver (:memory:)": SqliteSaver(sqlite),
    }
    try:
        for size, rounds in ((50, args.rounds), (1000, args.rounds_large)):
            got = measure(savers, size, rounds)
            floor_put, floor_get = got["raw redis-py floor"]
            print(f"\n{size} messages, {rounds} rounds (median µs)")
            print(f"{'saver':24} {'put':>9} {'get_tuple':>10} {'put+get':>9} {'above floor':>12}")
            for name, (put, get) in got.items():
                above = put + get - floor_put - floor_get
                print(f"{name:24} {put:9.0f} {get:10.0f} {put + get:9.0f} {above:+12.0f}")
        per, value_bytes = memory_per_checkpoint(store, raw, 50)
        print(
            f"\nRedis memory per checkpoint, a thread of 50 checkpoints each adding a message: "
            f"{per:,.0f} bytes (its channel value, serialized: {value_bytes:,.0f} bytes on average)"
        )
    finally:
        for key in raw.scan_iter(match=f"{prefix}*", count=1000):
            raw.delete(key)
        store.close()
        raw.close()
        sqlite.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
