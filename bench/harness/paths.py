"""The fast path and the public path side by side (issue #42), and what each private piece of
the fast path buys, in one interleaved run.

The two paths are the same store with the fast path's pieces
(``redis_session._transport.fast``) on or off, switched in this process between calls:
``public`` is what a process with
``REDIS_SESSION_PURE_PYTHON=1`` (or a dependency that moved) runs. Each path (or piece left
off) gets its own worker stores and its own sessions, so that read caches and session lengths
evolve alike; the floor is timed in the same rounds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import orjson
import redis

from redis_session import codec
from redis_session._transport import fast as _fast
from redis_session._transport import url as _url
from redis_session._transport.url import sync_client
from redis_session.models import Message, Session
from redis_session.store import RedisStore

from .fleet import FleetSize
from .messages import build_messages
from .runner import Bench
from .settings import (
    APPEND_TARGET,
    FLEET_GET_TARGET,
    FLEET_TARGET,
    HISTORY_TARGET,
    MAX_TURNS,
    PREFILL_BATCH,
    TTL,
)
from .timing import Row, Timings, run_interleaved, timed_row

PUBLIC_FLEET_TARGET = 1.35
PUBLIC_GET_TARGET = 1.5
PUBLIC_APPEND_TARGET = 1.25
PUBLIC_HISTORY_TARGET = 1.3

PATHS: dict[str, frozenset[str]] = {
    "fast": frozenset(),
    "public": frozenset({"decoder", "reclass"}),
}
"""Each path as the pieces it leaves off (the other pieces do not touch these rows)."""
PIECES: dict[str, frozenset[str]] = {
    "all on": frozenset(),
    "decoder off": frozenset({"decoder"}),
    "decoder and reclass off": frozenset({"decoder", "reclass"}),
    "direct requests off": frozenset({"direct"}),
}
"""What ``--pieces`` measures against the fast path with every piece on: each private piece
left off (``reclass`` matters where the C decoder is off: measured with it off too), and the
store's direct requests (public: redis-py's connection methods) sent through redis-py's
pipeline and ``execute_command`` instead, as for a caller's own client."""

_SAVED = (_fast.DECODE, _fast.RECLASS, codec.READ_TZ, _url.sync_replies)


def use(off: frozenset[str]) -> None:
    """Run the pieces in ``off`` as off from here on (the rest as the process probed them)."""
    decode, reclass, tz, replies = _SAVED
    _fast.DECODE = None if "decoder" in off else decode
    _fast.RECLASS = False if "reclass" in off else reclass
    codec.READ_TZ = UTC if not (_fast.DECODE or _fast.RECLASS) else tz
    _url.sync_replies = _no_direct if "direct" in off else replies


def _no_direct(client: Any, commands: Any) -> None:
    return None


@contextmanager
def restored() -> Iterator[None]:
    """Every piece as the process probed it afterwards."""
    try:
        yield
    finally:
        use(frozenset())


@dataclass
class Variant:
    """One path (or set of pieces off) in a fleet: its workers, sessions and new messages."""

    name: str
    off: frozenset[str]
    workers: list[RedisStore]
    keys: list[str]
    new: list[Message]
    hits: list[int]


def _fleet_variants(
    bench: Bench, size: FleetSize, variants: dict[str, frozenset[str]]
) -> tuple[list[Variant], list[Any]]:
    options: dict[str, Any] = {"prefix": bench.prefix, "ttl": TTL, "max_history_turns": MAX_TURNS}
    if size.read_cache_bytes is not None:
        options["read_cache_bytes"] = size.read_cache_bytes
    rng = random.Random(42)
    stored = build_messages(rng, size.messages)
    total = size.warmup + size.turns
    clients: list[Any] = []
    out = []
    for n, (name, off) in enumerate(variants.items()):
        workers = []
        for _ in range(size.workers):
            clients.append(sync_client(bench.url))
            workers.append(RedisStore(clients[-1], **options))
        keys = [f"paths-{n}-{k}" for k in range(size.sessions)]
        for key in keys:
            bench.store.create(Session(key=key, agent_id="bench"))
            for i in range(0, size.messages, PREFILL_BATCH):
                bench.store.append_messages(key, stored[i : i + PREFILL_BATCH])
        new = build_messages(rng, total, start=size.messages + n * total)
        out.append(Variant(name, off, workers, keys, new, [0, 0]))
    return out, clients


def measure_fleet_variants(
    bench: Bench, size: FleetSize, variants: dict[str, frozenset[str]], target: float | None
) -> dict[str, Timings]:
    """The fleet loop of :mod:`.fleet` once per variant and its floor, turn by turn in one
    run; a row per variant, each against the floor.
    """
    raw: Any = bench.client
    loads = orjson.loads
    made, clients = _fleet_variants(bench, size, variants)
    floors = [bench.floor_keys(f"paths-floor-{n}")[0] for n in range(size.sessions)]
    stored = build_messages(random.Random(42), size.messages)
    for lst in floors:
        bench.prefill_floor([lst, f"{lst}:meta"], stored)
    total = size.warmup + size.turns
    rng = random.Random(32)
    bodies = [codec.encode_message(m) for m in build_messages(rng, total, start=10**7)]
    turns = [rng.randrange(size.sessions) for _ in range(total)]
    routed = [rng.randrange(size.workers) for _ in range(total)]

    def turn(v: Variant) -> Callable[[int], object]:
        def run(i: int) -> object:
            use(v.off)
            store, key = v.workers[routed[i]], v.keys[turns[i]]
            if i >= size.warmup:
                v.hits[0 if store._core.reader.cache.holds(key) else 1] += 1
            store.append_message(key, v.new[i])
            return store.get(key)

        return run

    def floor(i: int) -> object:
        lst = floors[turns[i]]
        raw.rpush(lst, bodies[i])
        return [loads(x) for x in raw.lrange(lst, 0, -1)]

    timings = {v.name: Timings(v.name) for v in made}
    floor_t = Timings("floor")
    ops = [(turn(v), timings[v.name]) for v in made] + [(floor, floor_t)]
    with restored():
        try:
            run_interleaved(size.turns, ops, warmup=size.warmup)
        finally:
            for c in clients:
                c.close()
    what = f"{size.workers}x{size.sessions}x{size.messages}"
    for v in made:
        row_target = target if v.name in ("fast", "all on") else None
        if v.name == "public":
            row_target = PUBLIC_FLEET_TARGET
        case = f"fleet loop {what}, {v.name} ({v.hits[0]} hits, {v.hits[1]} misses)"
        bench.rows.append(timed_row(case, timings[v.name], floor_t, row_target))
    timings["floor"] = floor_t
    return timings


def _filled(bench: Bench, key: str, size: int) -> str:
    """Session ``key`` of ``size`` messages and its floor's list of the same bytes (returned)."""
    stored = bench.prefill(key, size)
    floor_list = bench.floor_keys(key)[0]
    bench.prefill_floor([floor_list, f"{floor_list}:meta"], stored)
    return floor_list


def measure_cold_get_variants(
    bench: Bench, variants: dict[str, frozenset[str]], fast_target: float | None
) -> None:
    """A cold ``get`` of 1,000 mixed messages per variant against LRANGE + ``orjson``."""
    raw: Any = bench.client
    loads = orjson.loads
    key = "paths-cold-1k"
    floor_list = _filled(bench, key, 1_000)
    cold = bench.cold

    def get(off: frozenset[str]) -> Callable[[int], object]:
        def run(_: int) -> object:
            use(off)
            return cold.get(key)

        return run

    t = {name: Timings(name) for name in variants}
    floor_t = Timings("floor")
    ops = [(get(off), t[name]) for name, off in variants.items()]
    ops.append((lambda _: [loads(x) for x in raw.lrange(floor_list, 0, -1)], floor_t))
    with restored():
        run_interleaved(bench.get_rounds, ops, warmup=20)
    for name in variants:
        target = PUBLIC_GET_TARGET if name == "public" else fast_target
        if name not in ("fast", "public", "all on"):
            target = None
        bench.rows.append(timed_row(f"cold get (1,000 mixed), {name}", t[name], floor_t, target))


def measure_appends_and_history(bench: Bench) -> None:
    """``append_message`` and ``get_history(last=20)`` of 10,000 messages on each path,
    through ``from_url``'s client and through the caller's own ``redis.Redis``, against the
    raw six-command script (appends) and ``LRANGE -20 -1`` + ``orjson`` (history).
    """
    own_client = redis.Redis.from_url(bench.url)
    options: dict[str, Any] = {"prefix": bench.prefix, "ttl": TTL, "max_history_turns": MAX_TURNS}
    stores = {"from_url": RedisStore(bench.store_client, **options),
              "own client": RedisStore(own_client, **options)}  # fmt: skip
    rounds = bench.rounds
    total = 200 + rounds
    pool = [f"paths-append-{n}" for n in range(16)]
    for key in pool:
        bench.store.create(Session(key=key))
    floor_keys = bench.floor_keys("paths-append")
    floor_msgs = build_messages(bench.rng, total)
    floor_args = [bench.floor_args(floor_keys[0], m) for m in floor_msgs]
    t: dict[str, Timings] = {}
    ops: list[tuple[Callable[[int], object], Timings]] = []
    for path, off in PATHS.items():
        for where, store in stores.items():
            msgs = build_messages(bench.rng, total)

            def append(i: int, off: frozenset[str] = off, store: RedisStore = store,
                       msgs: list[Message] = msgs) -> object:  # fmt: skip
                use(off)
                return store.append_message(pool[i % 16], msgs[i])

            name = f"append, {where}, {path}"
            t[name] = Timings(name)
            ops.append((append, t[name]))
    t["script"] = Timings("script")
    ops.append((lambda i: bench.floor_script(keys=floor_keys, args=floor_args[i]), t["script"]))
    with restored():
        try:
            run_interleaved(rounds, ops)
        finally:
            own_client.close()
    for name, timings in t.items():
        if name != "script":
            target = PUBLIC_APPEND_TARGET if name.endswith("public") else APPEND_TARGET
            bench.rows.append(timed_row(f"{name} vs the raw script", timings, t["script"], target))
    _history(bench, stores)


def _history(bench: Bench, stores: dict[str, RedisStore]) -> None:
    raw: Any = bench.client
    loads = orjson.loads
    key = "paths-history-10k"
    floor_list = _filled(bench, key, 10_000)
    t: dict[str, Timings] = {}
    ops: list[tuple[Callable[[int], object], Timings]] = []
    for path, off in PATHS.items():
        for where, store in stores.items():

            def read(_: int, off: frozenset[str] = off, store: RedisStore = store) -> object:
                use(off)
                return store.get_history(key, last=20)

            name = f"get_history(last=20) of 10,000, {where}, {path}"
            t[name] = Timings(name)
            ops.append((read, t[name]))
    t["floor"] = Timings("floor")
    ops.append((lambda _: [loads(x) for x in raw.lrange(floor_list, -20, -1)], t["floor"]))
    with restored():
        run_interleaved(bench.rounds, ops)
    for name, timings in t.items():
        if name != "floor":
            target = PUBLIC_HISTORY_TARGET if name.endswith("public") else HISTORY_TARGET
            bench.rows.append(timed_row(name, timings, t["floor"], target))


def run_paths(bench: Bench, size: FleetSize) -> None:
    """Both paths' rows (``bench_store.py --paths``)."""
    started = time.perf_counter()
    measure_cold_get_variants(bench, PATHS, FLEET_GET_TARGET)
    measure_fleet_variants(bench, size, PATHS, FLEET_TARGET)
    measure_appends_and_history(bench)
    bench.extra["paths_seconds"] = time.perf_counter() - started


def run_pieces(bench: Bench, size: FleetSize) -> None:
    """Each private piece's share (``bench_store.py --pieces``)."""
    measure_cold_get_variants(bench, PIECES, FLEET_GET_TARGET)
    measure_fleet_variants(bench, size, PIECES, FLEET_TARGET)


def shares(rows: list[Row]) -> list[str]:
    """Each variant's cost against ``all on`` in the same table, in % and µs."""
    out = []
    for prefix in ("cold get (1,000 mixed), ", "fleet loop "):
        group = [r for r in rows if r.case.startswith(prefix)]
        base = next((r for r in group if "all on" in r.case), None)
        if base is None:
            continue
        for r in group:
            if r is not base:
                delta = r.store - base.store
                out.append(f"{r.case}: {delta:+.1f} us ({delta / base.store * 100:+.1f}%)")
    return out
