"""The fleet rows of issue #32: workers without session affinity, each turn appending one
message and reading the whole history (most reads cold, or a few turns behind), a cold
``get`` of 1,000 mixed messages, and an append through a ``RedisStore`` over the caller's own
``redis.Redis`` client, each against its raw floor, interleaved.
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from redis_session import codec
from redis_session._transport.url import sync_client
from redis_session.models import Message, Session
from redis_session.store import RedisStore

from .messages import build_messages
from .runner import Bench
from .settings import FLEET_GET_TARGET, FLEET_TARGET, MAX_TURNS, PREFILL_BATCH, TTL
from .timing import SyncOp, Timings, run_interleaved, timed_row

ROUTINGS = ("random", "sticky")


@dataclass
class FleetSize:
    """How big a fleet to measure (each settable from the command line)."""

    workers: int = 16
    sessions: int = 400
    messages: int = 300
    turns: int = 3_000
    warmup: int = 2_000
    routing: str = "random"
    """``random``: each turn goes to any worker (no session affinity); ``sticky``: a session's
    turns always go to the same worker (a load balancer with affinity)."""
    read_cache_bytes: int | None = None
    """Each worker's read cache (None: the store's default)."""


def measure_fleet(bench: Bench, size: FleetSize) -> None:
    """``size.workers`` stores (each its own client and read cache, as separate processes
    would have) serve turns of ``size.sessions`` sessions of ``size.messages`` messages; each
    turn appends one message and reads the whole session (``get``). The floor, interleaved
    turn by turn: RPUSH of the same JSON, LRANGE 0 -1 and ``orjson.loads`` of every element.
    Adds the row, the µs above the floor (wall and client CPU) and the read cache's hits and
    misses (a read is a hit when the worker held the session: only what was added since
    travelled).
    """
    if size.routing not in ROUTINGS:
        raise ValueError(f"routing: one of {', '.join(ROUTINGS)}, not {size.routing!r}")
    raw: Any = bench.client
    loads = orjson.loads
    clients = [sync_client(bench.url) for _ in range(size.workers)]
    options: dict[str, Any] = {"prefix": bench.prefix, "ttl": TTL, "max_history_turns": MAX_TURNS}
    if size.read_cache_bytes is not None:
        options["read_cache_bytes"] = size.read_cache_bytes
    workers = [RedisStore(c, **options) for c in clients]
    rng = random.Random(32)
    keys = [f"fleet-{n}" for n in range(size.sessions)]
    floors = [bench.floor_keys(f"fleet-{n}")[0] for n in range(size.sessions)]
    stored = build_messages(rng, size.messages)
    for key, lst in zip(keys, floors, strict=True):
        bench.store.create(Session(key=key, agent_id="bench"))
        for i in range(0, size.messages, PREFILL_BATCH):
            bench.store.append_messages(key, stored[i : i + PREFILL_BATCH])
        bench.prefill_floor([lst, f"{lst}:meta"], stored)
    total = size.warmup + size.turns
    new = build_messages(rng, total, start=size.messages)
    bodies = [codec.encode_message(m) for m in new]
    turns = [rng.randrange(size.sessions) for _ in range(total)]
    routed = [
        rng.randrange(size.workers) if size.routing == "random" else s % size.workers for s in turns
    ]
    hits = [0, 0]  # held, not held
    t = (Timings("fleet"), Timings("fleet floor"), Timings("fleet cpu"), Timings("floor cpu"))

    def turn(i: int) -> object:
        c0 = time.thread_time_ns()
        store, key = workers[routed[i]], keys[turns[i]]
        held = store._core.reader.cache.holds(key)
        store.append_message(key, new[i])
        out = store.get(key)
        t[2].ns.append(time.thread_time_ns() - c0)
        if i >= size.warmup:
            hits[0 if held else 1] += 1
        return out

    def floor(i: int) -> object:
        c0 = time.thread_time_ns()
        lst = floors[turns[i]]
        raw.rpush(lst, bodies[i])
        out = [loads(x) for x in raw.lrange(lst, 0, -1)]
        t[3].ns.append(time.thread_time_ns() - c0)
        return out

    def timed(op: SyncOp) -> SyncOp:
        return lambda i: op(size.warmup + i)

    try:
        # The warm-up fills the workers' read caches; what they hold then is frozen, so that
        # the collector's full passes walk what the timed turns allocate, not the heaps of
        # all the workers at once (each of which would be a process of its own).
        run_interleaved(size.warmup, [(turn, Timings("")), (floor, Timings(""))], warmup=0)
        gc.collect()
        gc.freeze()
        run_interleaved(size.turns, [(timed(turn), t[0]), (timed(floor), t[1])], warmup=0)
    finally:
        for c in clients:
            c.close()
    name = (
        f"fleet loop: {size.workers} workers x {size.sessions} sessions of "
        f"{size.messages}, {size.routing}"
    )
    bench.rows.append(timed_row(name, t[0], t[1], FLEET_TARGET))
    cpu = (t[2].ns[-size.turns :], t[3].ns[-size.turns :])
    bench.extra["fleet"] = {
        "size": size.__dict__,
        "above_floor_us": {
            "wall": t[0].median - t[1].median,
            "client_cpu": Timings("", cpu[0]).median - Timings("", cpu[1]).median,
        },
        "read_cache_hits": hits[0],
        "read_cache_misses": hits[1],
    }


def measure_cold_get(bench: Bench, rounds: int) -> None:
    """A cold ``get`` of 1,000 mixed messages (a store with no read cache) against LRANGE 0 -1
    + ``orjson.loads`` of every element, and the decoding alone against ``orjson`` alone.
    """
    raw: Any = bench.client
    loads = orjson.loads
    key = "fleet-cold-1k"
    stored = bench.prefill(key, 1_000)
    floor_list = bench.floor_keys("fleet-cold-1k")[0]
    bench.prefill_floor([floor_list, f"{floor_list}:meta"], stored)
    items: list[bytes] = raw.lrange(floor_list, 0, -1)
    cold = bench.cold
    cold.get(key)
    t = {n: Timings(n) for n in ("get", "floor", "decode", "orjson")}
    run_interleaved(
        rounds,
        [
            (lambda _: cold.get(key), t["get"]),
            (lambda _: [loads(x) for x in raw.lrange(floor_list, 0, -1)], t["floor"]),
            (lambda _: codec.decode_messages(key, items), t["decode"]),
            (lambda _: [loads(x) for x in items], t["orjson"]),
        ],
        warmup=20,
    )
    bench.rows.append(
        timed_row("cold get (1,000 mixed msgs)", t["get"], t["floor"], FLEET_GET_TARGET)
    )
    bench.rows.append(
        timed_row("  (info) decode 1,000 vs orjson.loads x1000", t["decode"], t["orjson"], None)
    )


def measure_own_client(bench: Bench, rounds: int) -> None:
    """``append_message`` through a ``RedisStore`` over the caller's own ``redis.Redis``
    (``redis.Redis.from_url``, as a caller builds it) and over ``from_url``'s client, against
    one RPUSH of the same JSON on a plain client, interleaved.
    """
    raw: Any = bench.client
    own_client = redis.Redis.from_url(bench.url)
    own = RedisStore(own_client, prefix=bench.prefix, ttl=TTL, max_history_turns=MAX_TURNS)
    ours = RedisStore(bench.store_client, prefix=bench.prefix, ttl=TTL, max_history_turns=MAX_TURNS)
    pool = [f"fleet-own-{n}" for n in range(8)]
    for key in pool:
        bench.store.create(Session(key=key))
    total = 200 + rounds
    msgs: list[list[Message]] = [build_messages(bench.rng, total) for _ in range(2)]
    bodies = [codec.encode_message(m) for m in build_messages(bench.rng, total)]
    rpush_key = bench.floor_keys("fleet-own")[0]
    t = {n: Timings(n) for n in ("own", "from_url", "rpush")}
    try:
        run_interleaved(
            rounds,
            [
                (lambda i: own.append_message(pool[i % 8], msgs[0][i]), t["own"]),
                (lambda i: ours.append_message(pool[i % 8], msgs[1][i]), t["from_url"]),
                (lambda i: raw.rpush(rpush_key, bodies[i]), t["rpush"]),
            ],
        )
    finally:
        own_client.close()
    bench.rows.append(timed_row("append, the caller's redis.Redis", t["own"], t["rpush"], None))
    bench.rows.append(timed_row("append, from_url's client", t["from_url"], t["rpush"], None))


def run_fleet(bench: Bench, size: FleetSize) -> None:
    """The fleet rows in order (cold get, fleet loop, the caller's own client), with the
    prebuilt inputs frozen for the collector (as :func:`.run.run_phases` does); adds them to
    ``bench.rows``. The caller runs :meth:`Bench.cleanup`.
    """
    gc.collect()
    gc.freeze()
    try:
        measure_cold_get(bench, bench.get_rounds)
        measure_fleet(bench, size)
        measure_own_client(bench, bench.rounds)
    finally:
        gc.unfreeze()


def parse_size(text: str) -> tuple[int, int, int]:
    """``WORKERSxSESSIONSxMESSAGES`` (e.g. ``16x400x300``) as three positive integers."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"fleet size: WORKERSxSESSIONSxMESSAGES, e.g. 16x400x300, not {text!r}")
    workers, sessions, messages = map(int, parts)
    return workers, sessions, messages
