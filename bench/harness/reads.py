"""The read phases of a run (a :class:`.runner.Bench`): ``get`` of 1,000 messages and
``get_history(last=20)`` at 1,000 and 10,000 messages, and the agent loop (append, then read the
whole session), each against its raw floor, with where the time goes.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from redis_session import codec, contracts
from redis_session._core.requests import ScriptCall

from .cases import history_ops
from .messages import build_messages
from .runner import Bench
from .settings import (
    GET_TARGET,
    GET_WARMUP,
    HISTORY_ALLOWANCE_US,
    HISTORY_TARGET,
    LOOP_FLATNESS,
    LOOP_ROUNDS,
    LOOP_TARGET,
)
from .timing import Row, SyncOp, Timings, run_interleaved, timed_row
from .wire import bare_request, bare_script, first_request, first_script


def measure_reads(bench: Bench) -> None:
    """Time ``get`` and ``get_history(last=20)`` against their floors; adds the rows, the
    "where the time goes" tables and the 10k/1k flatness to ``bench``.
    """
    raw: Any = bench.client
    store = bench.store
    loads = orjson.loads
    key_1k, key_10k = bench.sessions[1_000], bench.sessions[10_000]
    msgs_1k = bench.schema.session(key_1k).msgs
    msgs_10k = bench.schema.session(key_10k).msgs
    # A store that read nothing yet sends one read-only script: the meta hash, the list's
    # positions and its elements (through Lua)
    get_req = first_script(bench.core.sessions.get(key_1k))
    script_bare = bare_script(raw, get_req)
    get_reply = script_bare()
    get_read = contracts.parsed(contracts.Read, get_reply)
    get_meta = get_read.meta
    items_1k: list[bytes] = list(get_read.elements)
    assert len(store.get(key_1k).history) == 1_000 == len(items_1k)
    # one that read something (it knows the element size): the get script for the positions
    # only, with LRANGE and HGETALL behind it in one pipeline
    cold = bench.cold
    cold.get(key_1k)
    cold_req = first_request(cold._core.sessions.get(key_1k))
    assert isinstance(cold_req, ScriptCall)
    sent = cold_req.after
    assert any(c[0] == "LRANGE" for c in sent), (
        "a first read of 1,000 messages takes them by LRANGE"
    )
    get_bare = bare_request(raw, cold_req)

    def store_get(_: int) -> object:
        return cold.get(key_1k)

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

    sk_1k = bench.schema.session(key_1k)

    def multi_get(_: int) -> object:
        pipe = raw.pipeline(transaction=True)
        pipe.exists(sk_1k.meta).hgetall(sk_1k.meta).lrange(sk_1k.msgs, 0, -1)
        return pipe.execute()

    def script_only(_: int) -> object:
        return script_bare()

    names = ("store", "floor", "lrange", "script", "decode", "orjson", "multi", "lua")
    g = {n: Timings(n) for n in names}
    run_interleaved(
        bench.get_rounds,
        [
            (store_get, g["store"]),
            (floor_get, g["floor"]),
            (lrange_get, g["lrange"]),
            (script_get, g["script"]),
            (decode_get, g["decode"]),
            (orjson_get, g["orjson"]),
            (multi_get, g["multi"]),
            (script_only, g["lua"]),
        ],
        warmup=GET_WARMUP,
    )
    bench.rows.append(
        timed_row("cold get (1,000 msgs) vs LRANGE+orjson", g["store"], g["floor"], GET_TARGET)
    )
    bench.where.append(
        (
            "get (1,000 msgs)",
            {
                "raw LRANGE 0 -1 (no parsing)": g["lrange"].median,
                "floor: LRANGE + orjson.loads per item": g["floor"].median,
                "orjson.loads x1000 alone (no I/O)": g["orjson"].median,
                "store's request, bare (the get script, LRANGE and HGETALL behind it)": g[
                    "script"
                ].median,
                "codec.decode_session alone (no I/O)": g["decode"].median,
                "store.get (cold: a store that never read it)": g["store"].median,
                "-> server+transfer extra (bare - LRANGE)": g["script"].median - g["lrange"].median,
                "-> decode extra (decode - orjson)": g["decode"].median - g["orjson"].median,
                "-> rest (store - bare - decode)": g["store"].median
                - g["script"].median
                - g["decode"].median,
                "alternative read, no Lua: MULTI EXISTS+HGETALL+LRANGE": g["multi"].median,
                "get script alone, elements via Lua (first read ever)": g["lua"].median,
            },
        )
    )

    hist: dict[int, dict[str, Timings]] = {}
    ops: list[tuple[SyncOp, Timings]] = []
    for size, key, msgs in ((10_000, key_10k, msgs_10k), (1_000, key_1k, msgs_1k)):
        req = first_script(bench.core.sessions.get_history(key, 20))
        meta = bench.core.schema.session(key).meta
        parts = ("store", "floor", "script", "decode", "multi")
        h = {n: Timings(f"{n}@{size}") for n in parts}
        hist[size] = h
        ops += history_ops(store, raw, bare_script(raw, req), meta, key, msgs, h)
        assert len(store.get_history(key, last=20)) == 20
    orj20 = Timings("orjson20")
    items_20 = items_1k[-20:]
    ops.append((lambda _: [loads(x) for x in items_20], orj20))
    run_interleaved(bench.rounds, ops)
    for size in (10_000, 1_000):
        h = hist[size]
        bench.rows.append(
            timed_row(
                f"get_history(last=20) @{size:,}",
                h["store"],
                h["floor"],
                HISTORY_TARGET,
                HISTORY_ALLOWANCE_US,
            )
        )
        bench.where.append(
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
                    "alternative read, no Lua: MULTI EXISTS+LRANGE (no parse)": h["multi"].median,
                },
            )
        )
    bench.extra["history_flatness_10k_over_1k"] = (
        hist[10_000]["store"].median / hist[1_000]["store"].median
    )


def measure_agent_loop(bench: Bench) -> None:
    """The agent loop at 1,000 and 10,000 messages: ``append_message`` then ``get`` of the
    whole session (the store read it before: only the new message travels and is decoded),
    against RPUSH + LRANGE -1 -1 + orjson.loads of the newest element, interleaved; adds the
    rows, the 10k/1k flatness and the absolute cost above the floor (µs, client CPU too).
    """
    raw: Any = bench.client
    store = bench.store
    loads = orjson.loads
    messages = build_messages(bench.rng, 2 * (GET_WARMUP + LOOP_ROUNDS + 1))
    bodies = [codec.encode_message(m) for m in messages]
    ops: list[tuple[SyncOp, Timings]] = []
    loops: dict[int, tuple[Timings, Timings, Timings, Timings]] = {}
    for n, size in enumerate((1_000, 10_000)):
        key = f"agent-loop-{size}"
        floor_keys = bench.floor_keys(f"loop{size}")
        bench.prefill_floor(floor_keys, bench.prefill(key, size))
        floor_list = floor_keys[0]
        assert len(store.get(key).history) >= size  # read once: the store holds it now
        t = (Timings(f"loop@{size}"), Timings(f"floor@{size}"),
             Timings(f"loop cpu@{size}"), Timings(f"floor cpu@{size}"))  # fmt: skip
        loops[size] = t
        offset = n * (GET_WARMUP + LOOP_ROUNDS + 1)

        def loop(i: int, key: str = key, offset: int = offset, cpu: Timings = t[2]) -> object:
            c0 = time.thread_time_ns()
            store.append_message(key, messages[offset + i])
            out = store.get(key)
            cpu.ns.append(time.thread_time_ns() - c0)
            return out

        def floor(
            i: int, lst: str = floor_list, offset: int = offset, cpu: Timings = t[3]
        ) -> object:
            c0 = time.thread_time_ns()
            raw.rpush(lst, bodies[offset + i])
            out = [loads(x) for x in raw.lrange(lst, -1, -1)]
            cpu.ns.append(time.thread_time_ns() - c0)
            return out

        ops += [(loop, t[0]), (floor, t[1])]
    run_interleaved(LOOP_ROUNDS, ops, warmup=GET_WARMUP)
    for size, (loop_t, floor_t, loop_cpu, floor_cpu) in loops.items():
        bench.rows.append(
            timed_row(f"agent loop @{size:,} vs RPUSH+LRANGE -1", loop_t, floor_t, LOOP_TARGET)
        )
        bench.extra[f"agent_loop_{size}_above_floor_us"] = {
            "wall": loop_t.median - floor_t.median,
            "client_cpu": loop_cpu.median - floor_cpu.median,
        }
    flat = loops[10_000][0].median / loops[1_000][0].median
    bench.extra["agent_loop_flatness_10k_over_1k"] = flat
    bench.rows.append(
        Row("agent loop flatness: 10,000 / 1,000", flat, 1.0, LOOP_FLATNESS, unit="x")
    )
