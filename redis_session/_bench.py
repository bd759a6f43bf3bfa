"""The benchmark's measuring core: the store against raw redis-py floors on one real Redis.

Used by ``redis-session bench`` and ``bench/bench_store.py`` (whose docstring describes every
case). Each store call is timed interleaved with the raw floor it is compared to, so drift of
the machine or of the server affects both alike. Nothing here is part of the public API.
"""

from __future__ import annotations

import asyncio
import cProfile
import functools
import gc
import io
import math
import platform
import pstats
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import orjson
import pydantic
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection
import redis.utils

from . import codec
from ._core import Commands, Core, Request, ScriptCall
from .aio import AsyncRedisStore
from .keys import KeySchema
from .models import Message, MessageRole, Session, ToolCall
from .scripts import script_source
from .store import RedisStore

TTL = timedelta(hours=1)
GRACE = timedelta(days=1)
MAX_TURNS = 1_000_000  # > any size here: the store's script runs LTRIM but never trims
SIZES = (0, 1_000, 10_000)
PREFILL_BATCH = 500
WARMUP = 200
GET_WARMUP = 20

# Targets: the store's median over the floor's median must be at most this.
APPEND_TARGET = 1.25
GET_TARGET = 2.0
HISTORY_TARGET = 1.3
BYTES_TARGET = 1.1

FLOOR_LUA = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], ARGV[2], -1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('HSET', KEYS[2], 'updated_at', ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[7])
return 1
"""

# -- realistic messages ----------------------------------------------------------------------

_VOCAB = (
    "the a an of to in for on with by from about and or but not this that these those it "
    "we you they our your their is are was were be been can could should would will may "
    "session agent model tool query result cache latency request response user assistant "
    "redis cluster worker queue retry timeout token context window summary history message "
    "deploy config schema index field value key list hash script lua atomic append trim "
    "weather forecast Paris Berlin Tokyo invoice order customer refund shipping address "
    "database table column migration backup restore error warning trace log metric alert "
    "function argument return type string number boolean array object null undefined "
    "please thanks sure here is what I found let me check again quickly carefully "
    "café naïve résumé straße déjà-vu 東京 数据 ユーザー → ✓ 42 3.14 2024-05-01 v1.2.3 200 OK"
)
_WORDS = _VOCAB.split()
_TOOLS = ("search_docs", "get_weather", "run_sql", "read_file", "create_ticket", "fetch_url")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 16))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", ".", "?", "!", ":"))


def _text(rng: random.Random, target: int) -> str:
    out = ""
    while len(out) < target:
        out = f"{out} {_sentence(rng)}" if out else _sentence(rng)
    return out[:target].rstrip()


def build_messages(rng: random.Random, count: int, start: int = 0) -> list[Message]:
    """Messages alternating user/assistant, ~300 chars of content, every 4th one with a call."""
    out: list[Message] = []
    for i in range(start, start + count):
        role = MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT
        calls: list[ToolCall] = []
        if role is MessageRole.ASSISTANT and i % 4 == 1:
            args = {"query": _text(rng, rng.randint(20, 60)), "limit": rng.randint(1, 50)}
            calls.append(
                ToolCall(
                    id=f"call_{rng.getrandbits(64):016x}",
                    name=rng.choice(_TOOLS),
                    input=orjson.dumps(args).decode(),
                    output=_text(rng, rng.randint(60, 160)),
                )
            )
        content = _text(rng, rng.randint(270, 330))
        out.append(Message(role=role, content=content, tool_calls=calls))
    return out


# -- statistics and results -----------------------------------------------------------------


def median_us(ns: Sequence[int]) -> float:
    return statistics.median(ns) / 1000.0


def p99_us(ns: Sequence[int]) -> float:
    ordered = sorted(ns)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] / 1000.0


@dataclass
class Timings:
    """Nanosecond samples of one timed operation."""

    name: str
    ns: list[int] = field(default_factory=list)

    @property
    def median(self) -> float:
        return median_us(self.ns)

    @property
    def p99(self) -> float:
        return p99_us(self.ns)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "n": len(self.ns), "median_us": self.median, "p99_us": self.p99}


@dataclass
class Row:
    """One line of the result table: a store figure against its floor."""

    case: str
    store: float
    floor: float
    target: float | None
    store_p99: float | None = None
    floor_p99: float | None = None
    unit: str = "us"

    @property
    def ratio(self) -> float:
        return self.store / self.floor

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "info"
        return "PASS" if self.ratio <= self.target else "FAIL"

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "unit": self.unit,
            "store_median": self.store,
            "store_p99": self.store_p99,
            "floor_median": self.floor,
            "floor_p99": self.floor_p99,
            "ratio": self.ratio,
            "target": self.target,
            "verdict": self.verdict,
        }


def timed_row(case: str, store: Timings, floor: Timings, target: float | None) -> Row:
    return Row(case, store.median, floor.median, target, store.p99, floor.p99)


SyncOp = Callable[[int], object]
AsyncOp = Callable[[int], Awaitable[object]]


def _rotate(i: int, items: list[Any]) -> list[Any]:
    k = i % len(items)
    return items[k:] + items[:k]


def run_interleaved(rounds: int, ops: list[tuple[SyncOp, Timings]], warmup: int = WARMUP) -> None:
    """Run every op once per round, order rotating each round; record after the warm-up."""
    gc.collect()
    perf = time.perf_counter_ns
    for i in range(warmup + rounds):
        for fn, timings in _rotate(i, ops):
            t0 = perf()
            fn(i)
            dt = perf() - t0
            if i >= warmup:
                timings.ns.append(dt)


async def run_interleaved_async(
    rounds: int, ops: list[tuple[AsyncOp, Timings]], warmup: int = WARMUP
) -> None:
    """:func:`run_interleaved` for coroutines, in the running event loop."""
    gc.collect()
    perf = time.perf_counter_ns
    for i in range(warmup + rounds):
        for fn, timings in _rotate(i, ops):
            t0 = perf()
            await fn(i)
            dt = perf() - t0
            if i >= warmup:
                timings.ns.append(dt)


# -- round-trip counting connections ------------------------------------------------------------


class Wire:
    """How many times a counting connection wrote a request to its socket."""

    writes = 0


class CountingConnection(redis.connection.Connection):
    """A redis-py connection that counts its writes (one per command or per pipeline)."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Wire.writes += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class AsyncCountingConnection(redis.asyncio.connection.Connection):
    """The asyncio flavour of :class:`CountingConnection`."""

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        Wire.writes += 1
        await super().send_packed_command(command, check_health)


def _evalsha_stats(client: Any) -> tuple[int, int]:
    stats: dict[str, Any] = client.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(entry["calls"]), int(entry["usec"])


def _first_request(op: Generator[Request, Any, Any]) -> Request:
    """The request an operation of the store's core would send first (no I/O)."""
    request = next(op)
    op.close()
    return request


def _first_script(op: Generator[Request, Any, Any]) -> ScriptCall:
    """:func:`_first_request` of an operation that starts with a Lua script."""
    request = _first_request(op)
    assert isinstance(request, ScriptCall), request
    return request


def _first_commands(op: Generator[Request, Any, Any]) -> Commands:
    """:func:`_first_request` of an operation that starts with plain commands."""
    request = _first_request(op)
    assert isinstance(request, Commands), request
    return request


def _bare_commands(client: Any, request: Commands) -> Callable[[], list[Any]]:
    """Send ``request``'s commands as plain redis-py would: one pipeline (MULTI/EXEC with
    ``transaction``), the commands' own reply parsing, errors as values when it asks so.
    """
    commands = [tuple(c) for c in request.commands]
    transaction = request.transaction
    raise_on_error = not request.errors_as_values

    def send() -> list[Any]:
        pipe = client.pipeline(transaction=transaction)
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=raise_on_error)  # type: ignore[no-any-return]

    return send


# -- the benchmark ------------------------------------------------------------------------------


@dataclass
class AppendCase:
    """One session the store appends to, the floor keys of the same size and prebuilt inputs."""

    size: int
    pool: list[str]  # sessions pre-filled to ``size``; each takes a few rounds' appends
    targets: list[str]  # the session of round i
    floor_keys: list[str]
    messages: list[Message]  # one new Message per store call
    floor_args: list[list[bytes | int]]  # the floor's ARGV (pre-serialized JSON)
    raw_requests: list[ScriptCall]  # the store's own request for other new messages


@dataclass
class AppendTimings:
    """Timings of one append case."""

    case: AppendCase
    store: Timings
    floor: Timings
    raw: Timings
    prep: Timings | None = None


class Bench:
    """Holds the clients, the keys and the results of one run."""

    def __init__(self, url: str, rounds: int, get_rounds: int) -> None:
        self.url = url
        self.rounds = rounds
        self.get_rounds = get_rounds
        self.prefix = f"bench:{uuid.uuid4().hex[:8]}:"
        self.schema = KeySchema(self.prefix)
        self.client = redis.Redis.from_url(url)
        self.store = RedisStore(
            self.client, prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS
        )
        self.core = Core(prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS)
        self.floor_script = self.client.register_script(FLOOR_LUA)
        self.rng = random.Random(20240501)
        self.rows: list[Row] = []
        self.floors: list[Timings] = []
        self.extra: dict[str, Any] = {}
        self.where: list[tuple[str, dict[str, float]]] = []  # decomposition tables
        self.sessions: dict[int, str] = {}  # size -> key of the sync session read before appends
        self.json_sizes: list[int] = []

    # -- setup ----------------------------------------------------------------------------------

    def floor_keys(self, name: str) -> list[str]:
        tag = "{" + f"floor-{name}" + "}"
        return [f"{self.prefix}{tag}:msgs", f"{self.prefix}{tag}:meta", f"{self.prefix}{tag}:idx"]

    def floor_args(self, key: str, msg: Message) -> list[bytes | int]:
        now_us = time.time_ns() // 1000
        ttl_ms = int(TTL.total_seconds() * 1000)
        grace_ms = int(GRACE.total_seconds() * 1000)
        return [
            msg.model_dump_json().encode(),
            -MAX_TURNS,
            ttl_ms,
            ttl_ms + grace_ms,
            now_us,
            now_us // 1000,
            key.encode(),
        ]

    def prefill(
        self, key: str, size: int, messages: Sequence[Message] | None = None
    ) -> Sequence[Message]:
        """Create session ``key`` and append ``size`` messages in batches of 500."""
        self.store.create(Session(key=key, agent_id="bench", model="bench-model"))
        if messages is None:
            messages = build_messages(self.rng, size)
        for i in range(0, size, PREFILL_BATCH):
            self.store.append_messages(key, messages[i : i + PREFILL_BATCH])
        return messages

    def prefill_floor(self, keys: list[str], messages: Sequence[Message]) -> None:
        raw: Any = self.client
        raw.hset(keys[1], "updated_at", time.time_ns() // 1000)
        for i in range(0, len(messages), PREFILL_BATCH):
            batch = messages[i : i + PREFILL_BATCH]
            raw.rpush(keys[0], *(m.model_dump_json().encode() for m in batch))

    def append_case(self, flavour: str, size: int) -> AppendCase:
        """Sessions of ``size`` messages for one append case, and its prebuilt inputs.

        Each round appends twice (the store's call and the bare script), so a session would
        grow by thousands over the run. Rounds are spread over a pool of identical sessions so
        that none grows by more than :func:`growth_cap` (the script's cost grows with the
        number of message ids a session holds).
        """
        total = WARMUP + self.rounds
        per_session = max(1, growth_cap(size) // 2)
        count = math.ceil(total / per_session)
        pool = [f"{flavour}-append-{size}-{n}" for n in range(count)]
        stored = build_messages(self.rng, size)
        for key in pool:
            self.prefill(key, size, stored)
        if flavour == "sync":
            self.sessions[size] = pool[0]
            if size == 1_000:
                self.json_sizes = [len(m.model_dump_json().encode()) for m in stored]
        targets = [pool[i // per_session] for i in range(total)]
        fkeys = self.floor_keys(f"{flavour}-{size}")
        self.prefill_floor(fkeys, stored)
        messages = build_messages(self.rng, total, start=size)
        # the floor pushes the same JSON, pre-serialized
        args = [self.floor_args(key, m) for key, m in zip(targets, messages, strict=True)]
        others = build_messages(self.rng, total, start=size)
        raw = [
            _first_script(self.core.append_message(key, m))
            for key, m in zip(targets, others, strict=True)
        ]
        return AppendCase(size, pool, targets, fkeys, messages, args, raw)

    # -- phases ---------------------------------------------------------------------------------

    def memory(self) -> None:
        key = self.sessions[1_000]
        sk = self.schema.session(key)
        raw: Any = self.client
        parts = (("meta", sk.meta), ("msgs", sk.msgs), ("ids", sk.ids))
        per_key = {name: int(raw.memory_usage(k, samples=0)) for name, k in parts}
        count = int(raw.llen(sk.msgs))
        stored = sum(per_key.values()) / count
        json_mean = statistics.fmean(self.json_sizes)
        first = self.store.get_history(key)[0].model_dump_json().encode()
        self.rows.append(
            Row(f"bytes/message ({count:,} msgs)", stored, json_mean, BYTES_TARGET, unit="B")
        )
        self.extra["memory"] = {
            "messages": count,
            "memory_usage_bytes": per_key,
            "stored_bytes_per_message": stored,
            "json_mean_bytes": json_mean,
            "json_min_bytes": min(self.json_sizes),
            "json_max_bytes": max(self.json_sizes),
            "stored_form_is_model_dump_json": raw.lindex(sk.msgs, 0) == first,
        }

    def reads(self) -> None:
        raw: Any = self.client
        store = self.store
        loads = orjson.loads
        key_1k, key_10k = self.sessions[1_000], self.sessions[10_000]
        msgs_1k = self.schema.session(key_1k).msgs
        msgs_10k = self.schema.session(key_10k).msgs
        # get() sends no script: one MULTI/EXEC of HGETALL meta, LRANGE msgs, HEXISTS ids
        get_req = _first_commands(self.core.get(key_1k))
        get_bare = _bare_commands(raw, get_req)
        get_reply = get_bare()
        assert not any(isinstance(x, Exception) for x in get_reply), get_reply
        get_meta: dict[bytes, bytes] = get_reply[0]
        items_1k: list[bytes] = list(get_reply[1])
        assert len(store.get(key_1k).history) == 1_000 == len(items_1k)

        def store_get(_: int) -> object:
            return store.get(key_1k)

        def floor_get(_: int) -> object:
            return [loads(x) for x in raw.lrange(msgs_1k, 0, -1)]

        def lrange_get(_: int) -> object:
            return raw.lrange(msgs_1k, 0, -1)

        def script_get(_: int) -> object:
            return get_bare()

        def decode_get(_: int) -> object:
            return codec.decode_session(key_1k, get_meta, items_1k)

        def orjson_get(_: int) -> object:
            return [loads(x) for x in items_1k]

        sk_1k = self.schema.session(key_1k)

        def multi_get(_: int) -> object:
            pipe = raw.pipeline(transaction=True)
            pipe.exists(sk_1k.meta).hgetall(sk_1k.meta).lrange(sk_1k.msgs, 0, -1)
            return pipe.execute()

        names = ("store", "floor", "lrange", "script", "decode", "orjson", "multi")
        g = {n: Timings(n) for n in names}
        run_interleaved(
            self.get_rounds,
            [
                (store_get, g["store"]),
                (floor_get, g["floor"]),
                (lrange_get, g["lrange"]),
                (script_get, g["script"]),
                (decode_get, g["decode"]),
                (orjson_get, g["orjson"]),
                (multi_get, g["multi"]),
            ],
            warmup=GET_WARMUP,
        )
        self.rows.append(
            timed_row("get (1,000 msgs) vs LRANGE+orjson", g["store"], g["floor"], GET_TARGET)
        )
        self.where.append(
            (
                "get (1,000 msgs)",
                {
                    "raw LRANGE 0 -1 (no parsing)": g["lrange"].median,
                    "floor: LRANGE + orjson.loads per item": g["floor"].median,
                    "orjson.loads x1000 alone (no I/O)": g["orjson"].median,
                    "store's get MULTI/EXEC, bare redis-py (no decode)": g["script"].median,
                    "codec.decode_session alone (no I/O)": g["decode"].median,
                    "store.get": g["store"].median,
                    "-> server+transfer extra (bare - LRANGE)": g["script"].median
                    - g["lrange"].median,
                    "-> decode extra (decode - orjson)": g["decode"].median - g["orjson"].median,
                    "-> rest (store - bare - decode)": g["store"].median
                    - g["script"].median
                    - g["decode"].median,
                    "alternative read, no Lua: MULTI EXISTS+HGETALL+LRANGE": g["multi"].median,
                },
            )
        )

        hist: dict[int, dict[str, Timings]] = {}
        ops: list[tuple[SyncOp, Timings]] = []
        for size, key, msgs in ((10_000, key_10k, msgs_10k), (1_000, key_1k, msgs_1k)):
            req = _first_commands(self.core.get_history(key, 20))
            (command,) = req.commands
            meta = self.core.schema.session(key).meta
            parts = ("store", "floor", "script", "decode", "multi")
            h = {n: Timings(f"{n}@{size}") for n in parts}
            hist[size] = h
            ops += _history_ops(
                store, raw, functools.partial(raw.execute_command, *command), meta, key, msgs, h
            )
            assert len(store.get_history(key, last=20)) == 20
        orj20 = Timings("orjson20")
        items_20 = items_1k[-20:]
        ops.append((lambda _: [loads(x) for x in items_20], orj20))
        run_interleaved(self.rounds, ops)
        for size in (10_000, 1_000):
            h = hist[size]
            self.rows.append(
                timed_row(f"get_history(last=20) @{size:,}", h["store"], h["floor"], HISTORY_TARGET)
            )
            self.where.append(
                (
                    f"get_history(last=20) @{size:,}",
                    {
                        "floor: LRANGE -20 -1 + orjson.loads per item": h["floor"].median,
                        "store's get_history request, bare redis-py": h["script"].median,
                        "store.get_history": h["store"].median,
                        "codec.decode_messages x20 alone (no I/O)": h["decode"].median,
                        "orjson.loads x20 alone (no I/O)": orj20.median,
                        "-> request extra (bare - floor + orjson)": h["script"].median
                        - (h["floor"].median - orj20.median),
                        "-> decode extra (decode - orjson)": h["decode"].median - orj20.median,
                        "-> rest (store - bare - decode)": h["store"].median
                        - h["script"].median
                        - h["decode"].median,
                        "alternative read, no Lua: MULTI EXISTS+LRANGE (no parse)": h[
                            "multi"
                        ].median,
                    },
                )
            )
        self.extra["history_flatness_10k_over_1k"] = (
            hist[10_000]["store"].median / hist[1_000]["store"].median
        )

    def sync_appends(self, cases: list[AppendCase]) -> None:
        raw: Any = self.client
        rpush_key = f"{self.prefix}{{floor-rpush}}:msgs"
        rpush_args = cases[0].floor_args
        scripts = {name: self.client.register_script(script_source(name)) for name in _names(cases)}

        def rpush(i: int) -> object:
            return raw.rpush(rpush_key, rpush_args[i][0])

        rpush_t = Timings("RPUSH (1a)")
        ops: list[tuple[SyncOp, Timings]] = [(rpush, rpush_t)]
        results: list[AppendTimings] = []
        for case in cases:
            r = AppendTimings(
                case,
                Timings(f"append sync @{case.size}"),
                Timings(f"EVALSHA floor @{case.size}"),
                Timings(f"store script raw @{case.size}"),
                Timings(f"prep @{case.size}"),
            )
            assert r.prep is not None
            ops += [
                (_sync_store_op(self.store, case), r.store),
                (_sync_floor_op(self.floor_script, case), r.floor),
                (_sync_raw_op(scripts, case), r.raw),
                (prep_op(self.core, case.targets, case.messages), r.prep),
            ]
            results.append(r)
        run_interleaved(self.rounds, ops)

        self.floors.append(rpush_t)
        for r in results:
            self.floors.append(r.floor)
            self.rows.append(
                timed_row(f"append_message sync @{r.case.size:,}", r.store, r.floor, APPEND_TARGET)
            )
        first = results[0]
        self.rows.append(timed_row("  (info) append sync @0 vs RPUSH", first.store, rpush_t, None))
        self.rows.append(timed_row("  (info) EVALSHA floor vs RPUSH", first.floor, rpush_t, None))
        self.where.append(("append_message sync", _append_breakdown(results)))
        for r in results:
            pool = r.case.pool
            lengths = [int(raw.llen(self.schema.session(k).msgs)) for k in pool]
            expected = len(pool) * r.case.size + 2 * (WARMUP + self.rounds)
            assert sum(lengths) == expected, (pool[0], sum(lengths), expected)
            self.extra.setdefault("append_sessions", {})[f"sync@{r.case.size}"] = {
                "sessions": len(pool),
                "start_length": r.case.size,
                "max_end_length": max(lengths),
            }

    async def async_appends(self, cases: list[AppendCase]) -> None:
        client = redis.asyncio.Redis.from_url(self.url)
        try:
            store = AsyncRedisStore(
                client, prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS
            )
            floor = client.register_script(FLOOR_LUA)
            scripts = {name: client.register_script(script_source(name)) for name in _names(cases)}
            ops: list[tuple[AsyncOp, Timings]] = []
            results: list[AppendTimings] = []
            for case in cases:
                r = AppendTimings(
                    case,
                    Timings(f"append async @{case.size}"),
                    Timings(f"async EVALSHA floor @{case.size}"),
                    Timings(f"async store script raw @{case.size}"),
                )
                ops += [
                    (_async_store_op(store, case), r.store),
                    (_async_floor_op(floor, case), r.floor),
                    (_async_raw_op(scripts, case), r.raw),
                ]
                results.append(r)
            await run_interleaved_async(self.rounds, ops)
            for r in results:
                self.floors.append(r.floor)
                self.rows.append(
                    timed_row(
                        f"append_message async @{r.case.size:,}", r.store, r.floor, APPEND_TARGET
                    )
                )
            self.where.append(("append_message async", _append_breakdown(results)))
            raw: Any = self.client
            for r in results:
                lengths = [int(raw.llen(self.schema.session(k).msgs)) for k in r.case.pool]
                self.extra.setdefault("append_sessions", {})[f"async@{r.case.size}"] = {
                    "sessions": len(r.case.pool),
                    "start_length": r.case.size,
                    "max_end_length": max(lengths),
                }
        finally:
            await client.aclose()

    def round_trips(self, n: int = 200) -> None:
        """Writes per append on the client's socket; EVALSHA calls and µs per call on the server."""
        pool = redis.ConnectionPool.from_url(self.url, connection_class=CountingConnection)
        client = redis.Redis(connection_pool=pool)
        raw: Any = self.client
        try:
            store = RedisStore(client, prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS)
            key = "round-trips"
            self.prefill(key, 0)
            messages = build_messages(self.rng, n + 1)
            store.append_message(key, messages[0])  # connect (HELLO/SETINFO) outside the count
            before = _evalsha_stats(raw)
            Wire.writes = 0
            for msg in messages[1:]:
                store.append_message(key, msg)
            writes = Wire.writes
            after = _evalsha_stats(raw)
            store_calls = after[0] - before[0]
            store_usec = (after[1] - before[1]) / max(1, store_calls)

            big = self.sessions[10_000]
            big_len = int(raw.llen(self.schema.session(big).msgs))
            before = _evalsha_stats(raw)
            for msg in build_messages(self.rng, n):
                store.append_message(big, msg)
            after = _evalsha_stats(raw)
            big_usec = (after[1] - before[1]) / max(1, after[0] - before[0])

            fkeys = self.floor_keys("round-trips")
            self.prefill_floor(fkeys, [])
            script = client.register_script(FLOOR_LUA)
            args = [self.floor_args(key, m) for m in build_messages(self.rng, n)]
            before = _evalsha_stats(raw)
            for a in args:
                script(keys=fkeys, args=a)
            after = _evalsha_stats(raw)
            floor_calls = after[0] - before[0]
            floor_usec = (after[1] - before[1]) / max(1, floor_calls)
        finally:
            client.close()
            pool.disconnect()  # a pool passed in is not closed with its client
        async_writes = asyncio.run(self._async_round_trips(n))
        self.extra["round_trips"] = {
            "appends": n,
            "sync_client_writes_per_append": writes / n,
            "async_client_writes_per_append": async_writes / n,
            "server_evalsha_calls_per_append": store_calls / n,
            "server_usec_per_store_append_script": store_usec,
            "server_usec_per_store_append_script_big": big_usec,
            "big_session_length": big_len,
            "server_usec_per_floor_script": floor_usec,
            "server_evalsha_calls_per_floor_call": floor_calls / n,
        }

    async def _async_round_trips(self, n: int) -> int:
        pool = redis.asyncio.ConnectionPool.from_url(
            self.url, connection_class=AsyncCountingConnection
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        try:
            store = AsyncRedisStore(
                client, prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS
            )
            key = "round-trips-async"
            self.prefill(key, 0)
            messages = build_messages(self.rng, n + 1)
            await store.append_message(key, messages[0])
            Wire.writes = 0
            for msg in messages[1:]:
                await store.append_message(key, msg)
            return Wire.writes
        finally:
            await client.aclose()
            await pool.disconnect()  # a pool passed in is not closed with its client

    def micro(self, n: int = 3000) -> None:
        """Pieces of an append's preparation, no I/O, interleaved among themselves."""
        messages = build_messages(self.rng, n)
        t = {x: Timings(x) for x in ("encode", "digest", "model_dump+orjson")}

        def encode(i: int) -> object:
            return codec.encode_message(messages[i])

        def digest(i: int) -> object:
            return codec.message_digest(messages[i].id)

        def dump(i: int) -> object:
            return orjson.dumps(messages[i].model_dump(mode="json"))

        run_interleaved(
            n - 100,
            [(encode, t["encode"]), (digest, t["digest"]), (dump, t["model_dump+orjson"])],
            warmup=100,
        )
        self.extra["append_prep_pieces_us"] = {
            "codec.encode_message (pydantic dump_json)": t["encode"].median,
            "codec.message_digest (blake2b)": t["digest"].median,
            "for comparison: model_dump() + orjson.dumps": t["model_dump+orjson"].median,
        }

    def profile(self, n: int = 2000) -> str:
        """A cProfile of sync appends, get(1k) and get_history(last=20): top functions."""
        key, key_1k = "profile", "profile-1k"
        self.prefill(key, 0)
        self.prefill(key_1k, 1_000)  # the sync sessions grew during the append phase
        messages = build_messages(self.rng, n)
        key_10k = self.sessions[10_000]
        out = io.StringIO()
        for title, run in (
            ("append_message sync", lambda: [self.store.append_message(key, m) for m in messages]),
            ("get (1,000 msgs)", lambda: [self.store.get(key_1k) for _ in range(n // 10)]),
            (
                "get_history(last=20) @10,000+",
                lambda: [self.store.get_history(key_10k, last=20) for _ in range(n)],
            ),
        ):
            prof = cProfile.Profile()
            prof.runcall(run)
            out.write(f"\n--- cProfile: {title} (tottime, top 14) ---\n")
            stats = pstats.Stats(prof, stream=out)
            stats.strip_dirs().sort_stats("tottime").print_stats(14)
        return out.getvalue()

    def cleanup(self) -> int:
        raw: Any = self.client
        keys = list(raw.scan_iter(match=f"{self.prefix}*", count=1000))
        for i in range(0, len(keys), 500):
            raw.delete(*keys[i : i + 500])
        return len(keys)


def growth_cap(size: int) -> int:
    """How many messages an append case may add to one of its sessions: 20%, or 50 if empty."""
    return max(50, size // 5)


def _names(cases: Sequence[AppendCase]) -> set[str]:
    return {req.name for case in cases for req in case.raw_requests}


def _append_breakdown(results: Sequence[AppendTimings]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in results:
        at = f"@{r.case.size:,}"
        client_side = r.store.median - r.raw.median
        out[f"floor: 6-command EVALSHA {at}"] = r.floor.median
        out[f"store's append script, bare EVALSHA {at}"] = r.raw.median
        out[f"store.append_message {at}"] = r.store.median
        out[f"-> server-side script extra (bare - floor) {at}"] = r.raw.median - r.floor.median
        out[f"-> client-side Python (store - bare) {at}"] = client_side
        if r.prep is not None:
            out[f"   of which prep: validate+dump_json+digest {at}"] = r.prep.median
            out[f"   of which driver/redis-py/check rest {at}"] = client_side - r.prep.median
    return out


def _history_ops(
    store: RedisStore,
    raw: Any,
    bare: Callable[[], Any],
    meta: str,
    key: str,
    msgs: str,
    h: dict[str, Timings],
) -> list[tuple[SyncOp, Timings]]:
    loads = orjson.loads
    items: list[bytes] = list(bare())

    def store_op(_: int) -> object:
        return store.get_history(key, last=20)

    def floor_op(_: int) -> object:
        return [loads(x) for x in raw.lrange(msgs, -20, -1)]

    def script_op(_: int) -> object:
        return bare()

    def decode_op(_: int) -> object:
        return codec.decode_messages(key, items)

    def multi_op(_: int) -> object:
        pipe = raw.pipeline(transaction=True)
        pipe.exists(meta).lrange(msgs, -20, -1)
        return pipe.execute()

    return [
        (store_op, h["store"]),
        (floor_op, h["floor"]),
        (script_op, h["script"]),
        (decode_op, h["decode"]),
        (multi_op, h["multi"]),
    ]


def _sync_store_op(store: RedisStore, case: AppendCase) -> SyncOp:
    targets, messages = case.targets, case.messages

    def op(i: int) -> object:
        return store.append_message(targets[i], messages[i])

    return op


def _sync_floor_op(script: Any, case: AppendCase) -> SyncOp:
    keys, args = case.floor_keys, case.floor_args

    def op(i: int) -> object:
        return script(keys=keys, args=args[i])

    return op


def _sync_raw_op(scripts: dict[str, Any], case: AppendCase) -> SyncOp:
    prepared = [(scripts[r.name], list(r.keys), list(r.args)) for r in case.raw_requests]

    def op(i: int) -> object:
        script, keys, args = prepared[i]
        return script(keys=keys, args=args)

    return op


def prep_op(core: Core, targets: Sequence[str], messages: Sequence[Message]) -> SyncOp:
    """An op that runs ``append_message``'s preparation (checks, encoding, digest, sealing)
    up to its request, without I/O: round ``i`` appends ``messages[i]`` to ``targets[i]``.
    """

    def op(i: int) -> object:
        # Closed at once: thousands of suspended generators kept alive would make every
        # garbage collection in the loop (of all the ops timed in it) walk their frames.
        gen = core.append_message(targets[i], messages[i])
        request = next(gen)
        gen.close()
        return request

    return op


def _async_store_op(store: AsyncRedisStore, case: AppendCase) -> AsyncOp:
    targets, messages = case.targets, case.messages

    async def op(i: int) -> object:
        return await store.append_message(targets[i], messages[i])

    return op


def _async_floor_op(script: Any, case: AppendCase) -> AsyncOp:
    keys, args = case.floor_keys, case.floor_args

    async def op(i: int) -> object:
        return await script(keys=keys, args=args[i])

    return op


def _async_raw_op(scripts: dict[str, Any], case: AppendCase) -> AsyncOp:
    prepared = [(scripts[r.name], list(r.keys), list(r.args)) for r in case.raw_requests]

    async def op(i: int) -> object:
        script, keys, args = prepared[i]
        return await script(keys=keys, args=args)

    return op


# -- a whole run ----------------------------------------------------------------------------------

GC_MODES = ("freeze", "on", "off")


def run_phases(
    bench: Bench,
    *,
    gc_mode: str = "freeze",
    profile: bool = False,
    on_phase: Callable[[str, float], object] | None = None,
) -> str:
    """Build the inputs, then run every phase; ``on_phase(name, seconds)`` after each one.

    ``gc_mode``: ``freeze`` (``gc.freeze()`` the prebuilt inputs, so collections scan only what
    the timed calls allocate), ``on`` or ``off``; the collector is restored afterwards. Returns
    the cProfile text (empty unless ``profile``). The caller runs :meth:`Bench.cleanup`.
    """
    if gc_mode not in GC_MODES:
        raise ValueError(f"gc_mode: must be one of {', '.join(GC_MODES)}, got {gc_mode!r}")
    report = on_phase or (lambda name, seconds: None)
    profile_text = ""
    try:
        t = time.perf_counter()
        sync_cases = [bench.append_case("sync", s) for s in SIZES]
        async_cases = [bench.append_case("async", s) for s in SIZES]
        gc.collect()
        if gc_mode == "freeze":
            gc.freeze()
        elif gc_mode == "off":
            gc.disable()
        report("setup (messages built, sessions pre-filled)", time.perf_counter() - t)
        phases: list[tuple[str, Callable[[], object]]] = [
            ("bytes/message", bench.memory),
            ("reads", bench.reads),
            ("sync appends", lambda: bench.sync_appends(sync_cases)),
            ("async appends", lambda: asyncio.run(bench.async_appends(async_cases))),
            ("round trips", bench.round_trips),
            ("append preparation pieces", bench.micro),
        ]
        if profile:

            def do_profile() -> None:
                nonlocal profile_text
                profile_text = bench.profile()

            phases.append(("profile", do_profile))
        for name, phase in phases:
            t = time.perf_counter()
            phase()
            report(name, time.perf_counter() - t)
    finally:
        gc.unfreeze()
        gc.enable()
    return profile_text


PHASE_COUNT = 7
"""How many times :func:`run_phases` calls ``on_phase`` without ``profile`` (setup included)."""


def round_trips_ok(bench: Bench) -> bool:
    """Whether an append took exactly one socket write, in both flavours."""
    rt = bench.extra["round_trips"]
    return bool(
        rt["sync_client_writes_per_append"] == 1 and rt["async_client_writes_per_append"] == 1
    )


def all_targets_pass(bench: Bench) -> bool:
    """Whether every row met its target and an append was one round trip."""
    return round_trips_ok(bench) and all(r.verdict != "FAIL" for r in bench.rows)


def server_info(bench: Bench) -> dict[str, Any]:
    """Versions of the server and of the client stack, for the header and the JSON."""
    info: dict[str, Any] = bench.client.info("server")
    return {
        "url": bench.url,
        "redis_version": info.get("redis_version"),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "pydantic": pydantic.VERSION,
        "orjson": orjson.__version__,
        "hiredis": redis.utils.HIREDIS_AVAILABLE,
    }


def payload(
    bench: Bench, info: dict[str, Any], *, gc_mode: str, passed: bool, total: float
) -> dict[str, Any]:
    """The results of a finished run as one JSON-ready dict."""
    return {
        "url": bench.url,
        "redis_version": info.get("redis_version"),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "rounds": bench.rounds,
        "get_rounds": bench.get_rounds,
        "warmup": WARMUP,
        "gc": gc_mode,
        "floors": [f.as_json() for f in bench.floors],
        "rows": [r.as_json() for r in bench.rows],
        "where_the_time_goes_us": dict(bench.where),
        **bench.extra,
        "all_targets_pass": passed,
        "total_runtime_s": total,
    }


def text_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = []
    for n, line in enumerate([header, *lines]):
        cells = [c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(line)]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def where_lines(where: Sequence[tuple[str, Mapping[str, float]]]) -> list[str]:
    """The "where the time goes" block of a benchmark report, medians in µs."""
    out = ["where the time goes (medians, us; same interleaved loops as above)"]
    for title, parts in where:
        out.append(f"  {title}")
        out += [f"    {name:<56}{value:>10.1f}" for name, value in parts.items()]
    return out
