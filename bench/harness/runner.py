"""One benchmark run: its clients and keys, the set-up, the phases that write (bytes per message,
appends, round trips, the pieces of an append, the profile) and the clean-up. The read phases
are functions of a run in :mod:`.reads`; :mod:`.run` calls them all in order.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import math
import pstats
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import redis
import redis.asyncio

from redis_session import codec
from redis_session._core.core import Core
from redis_session._transport.url import async_client, sync_client
from redis_session.aio import AsyncRedisStore
from redis_session.keys import KeySchema
from redis_session.models import Message, Session
from redis_session.options import StoreOptions
from redis_session.scripts import script_source
from redis_session.store import RedisStore

from .cases import (
    AppendCase,
    AppendTimings,
    append_breakdown,
    async_floor_op,
    async_raw_op,
    async_store_op,
    growth_cap,
    prep_op,
    script_names,
    sync_floor_op,
    sync_raw_op,
    sync_store_op,
)
from .messages import build_messages
from .settings import (
    APPEND_ALLOWANCE_US,
    APPEND_TARGET,
    ASYNC_APPEND_ALLOWANCE_US,
    BYTES_TARGET,
    FLOOR_LUA,
    GRACE,
    MAX_TURNS,
    PREFILL_BATCH,
    TTL,
    WARMUP,
)
from .timing import AsyncOp, Row, SyncOp, Timings, run_interleaved, run_interleaved_async, timed_row
from .wire import (
    AsyncCountingConnection,
    CountingConnection,
    Wire,
    evalsha_stats,
    first_script,
)


class Bench:
    """Holds the clients, the keys and the results of one run."""

    def __init__(self, url: str, rounds: int, get_rounds: int) -> None:
        self.url = url
        self.rounds = rounds
        self.get_rounds = get_rounds
        self.prefix = f"bench:{uuid.uuid4().hex[:8]}:"
        self.schema = KeySchema(self.prefix)
        # the floors run on a plain redis-py client; the stores on the client that
        # RedisStore.from_url builds (its pool packs commands through hiredis)
        self.client = redis.Redis.from_url(url)
        self.store_client: Any = sync_client(url)
        self.store = RedisStore(
            self.store_client, prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS
        )
        self.cold = RedisStore(  # reads as a store that never read the session before
            self.store_client, prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS,
            read_cache_bytes=0,
        )  # fmt: skip
        self.core = Core(StoreOptions(prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS))
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
        """The floor's keys for case ``name`` (one slot, like a session's)."""
        tag = "{" + f"floor-{name}" + "}"
        return [f"{self.prefix}{tag}:msgs", f"{self.prefix}{tag}:meta", f"{self.prefix}{tag}:idx"]

    def floor_args(self, key: str, msg: Message) -> list[bytes | int]:
        """The floor script's ARGV for appending ``msg`` to ``key``."""
        now_us = time.time_ns() // 1000
        ttl_ms = int(TTL.total_seconds() * 1000)
        grace_ms = int(GRACE.total_seconds() * 1000)
        return [
            codec.encode_message(msg),  # the store's own stored form, byte for byte
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
        """Give the floor's keys the same messages as the store's session, in the same bytes
        (the store's stored form: the floor parses exactly what the store decodes).
        """
        raw: Any = self.client
        raw.hset(keys[1], "updated_at", time.time_ns() // 1000)
        for i in range(0, len(messages), PREFILL_BATCH):
            batch = messages[i : i + PREFILL_BATCH]
            raw.rpush(keys[0], *(codec.encode_message(m) for m in batch))

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
            first_script(self.core.sessions.append_message(key, m))
            for key, m in zip(targets, others, strict=True)
        ]
        return AppendCase(size, pool, targets, fkeys, messages, args, raw)

    # -- phases ---------------------------------------------------------------------------------

    def memory(self) -> None:
        """Phase: stored bytes per message against the message's JSON."""
        key = self.sessions[1_000]
        sk = self.schema.session(key)
        raw: Any = self.client
        parts = (("meta", sk.meta), ("msgs", sk.msgs), ("ids", sk.ids))
        per_key = {name: int(raw.memory_usage(k, samples=0)) for name, k in parts}
        count = int(raw.llen(sk.msgs))
        stored = sum(per_key.values()) / count
        json_mean = statistics.fmean(self.json_sizes)
        first = self.store.get_history(key)[0].model_dump_json(exclude_defaults=True).encode()
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
            "stored_form_is_model_dump_json_without_defaults": raw.lindex(sk.msgs, 0) == first,
        }

    def sync_appends(self, cases: list[AppendCase]) -> None:
        """Phase: blocking appends at every size against the floor script."""
        raw: Any = self.client
        rpush_key = f"{self.prefix}{{floor-rpush}}:msgs"
        rpush_args = cases[0].floor_args
        scripts = {
            name: self.client.register_script(script_source(name)) for name in script_names(cases)
        }

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
                (sync_store_op(self.store, case), r.store),
                (sync_floor_op(self.floor_script, case), r.floor),
                (sync_raw_op(scripts, case), r.raw),
                (prep_op(self.core, case.targets, case.messages), r.prep),
            ]
            results.append(r)
        run_interleaved(self.rounds, ops)

        self.floors.append(rpush_t)
        for r in results:
            self.floors.append(r.floor)
            self.rows.append(
                timed_row(
                    f"append_message sync @{r.case.size:,}",
                    r.store,
                    r.floor,
                    APPEND_TARGET,
                    APPEND_ALLOWANCE_US,
                )
            )
        first = results[0]
        self.rows.append(timed_row("  (info) append sync @0 vs RPUSH", first.store, rpush_t, None))
        self.rows.append(timed_row("  (info) EVALSHA floor vs RPUSH", first.floor, rpush_t, None))
        self.where.append(("append_message sync", append_breakdown(results)))
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
        """Phase: asyncio appends at every size against the floor script."""
        client = redis.asyncio.Redis.from_url(self.url)
        store_client: Any = async_client(self.url)
        try:
            store = AsyncRedisStore(
                store_client, prefix=self.prefix, ttl=TTL, max_history_turns=MAX_TURNS
            )
            floor = client.register_script(FLOOR_LUA)
            scripts = {
                name: client.register_script(script_source(name)) for name in script_names(cases)
            }
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
                    (async_store_op(store, case), r.store),
                    (async_floor_op(floor, case), r.floor),
                    (async_raw_op(scripts, case), r.raw),
                ]
                results.append(r)
            await run_interleaved_async(self.rounds, ops)
            for r in results:
                self.floors.append(r.floor)
                self.rows.append(
                    timed_row(
                        f"append_message async @{r.case.size:,}",
                        r.store,
                        r.floor,
                        APPEND_TARGET,
                        ASYNC_APPEND_ALLOWANCE_US,
                    )
                )
            self.where.append(("append_message async", append_breakdown(results)))
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
            await store_client.aclose()

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
            before = evalsha_stats(raw)
            Wire.writes = 0
            for msg in messages[1:]:
                store.append_message(key, msg)
            writes = Wire.writes
            after = evalsha_stats(raw)
            store_calls = after[0] - before[0]
            store_usec = (after[1] - before[1]) / max(1, store_calls)

            big = self.sessions[10_000]
            big_len = int(raw.llen(self.schema.session(big).msgs))
            before = evalsha_stats(raw)
            for msg in build_messages(self.rng, n):
                store.append_message(big, msg)
            after = evalsha_stats(raw)
            big_usec = (after[1] - before[1]) / max(1, after[0] - before[0])

            fkeys = self.floor_keys("round-trips")
            self.prefill_floor(fkeys, [])
            script = client.register_script(FLOOR_LUA)
            args = [self.floor_args(key, m) for m in build_messages(self.rng, n)]
            before = evalsha_stats(raw)
            for a in args:
                script(keys=fkeys, args=a)
            after = evalsha_stats(raw)
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

    def close(self) -> None:
        """Close both clients (the floors' and the stores')."""
        self.client.close()
        self.store_client.close()

    def cleanup(self) -> int:
        """Delete every key of this run; returns how many."""
        raw: Any = self.client
        keys = list(raw.scan_iter(match=f"{self.prefix}*", count=1000))
        for i in range(0, len(keys), 500):
            raw.delete(*keys[i : i + 500])
        return len(keys)
