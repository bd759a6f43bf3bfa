"""Benchmark redis_session's store against raw redis-py floors on one real Redis.

Every store call is timed INTERLEAVED with the raw floor it is compared to: one loop, the
operations of a round run round-robin (their order rotates every round), so drift of the machine
or of the server affects store and floor alike. Timings are ``time.perf_counter_ns`` around one
call; the tables give median and p99 in microseconds and the ratio of the medians store/floor.

Cases
  floors      (1a) one RPUSH of a message's JSON, (1b) EVALSHA of a raw 6-command Lua script
              (RPUSH, LTRIM, PEXPIRE, PEXPIRE, HSET updated_at, ZADD; keys in one hash tag)
  append      RedisStore.append_message vs floor 1b, at 0 / 1,000 / 10,000 stored messages
              (each case spreads its rounds over a pool of identical pre-filled sessions, so
              that none grows by more than 20% -- or 50 messages for the empty ones)
  async       AsyncRedisStore.append_message vs the same script through redis.asyncio
  get         cold get() of a 1,000-message session (a store that never read it: no read
              cache) vs LRANGE 0 -1 + orjson.loads per item; messages mixed, a third with a
              tool call
  agent loop  append_message + get() of the whole session at 1,000 and 10,000 messages (the
              store read it before: only the new message travels and is decoded) vs RPUSH +
              LRANGE -1 -1 + orjson.loads of the newest element; and the 10k/1k flatness
  history     get_history(last=20) at 10,000 and 1,000 messages vs LRANGE -20 -1 + orjson.loads
  bytes       MEMORY USAGE (SAMPLES 0) of meta+msgs+ids per message vs the mean compact JSON
  round trips writes on the socket per append (client side) and EVALSHA calls per append
              (INFO commandstats delta, server side)

Fleet mode (``--fleet``, issue #32) runs three rows only: the cold get above against the
issue's target (1.5x); the fleet loop -- ``--workers`` stores (each its own client and read
cache) serve turns of ``--sessions`` sessions of ``--messages`` messages, routed ``--routing
random`` (no affinity) or ``sticky``, each turn ``append_message`` + ``get`` of the whole
session, vs RPUSH + LRANGE 0 -1 + orjson.loads of every element, after ``--fleet-warmup``
untimed turns, with the read cache's hits and misses over the timed turns (``--read-cache-bytes``
sizes each worker's cache); and ``append_message`` through a ``RedisStore`` over the caller's
own ``redis.Redis`` and over ``from_url``'s client, vs one RPUSH.

Paths mode (``--paths``, issue #42) runs the store on the fast path and on the public path
(``redis_session._transport.fast``'s pieces off, as with ``REDIS_SESSION_PURE_PYTHON=1``) side by
side, switched between calls in one process, each with its own workers and sessions: the cold get,
the fleet loop (the fleet options above), ``append_message`` through ``from_url``'s client and
through the caller's own ``redis.Redis`` against the raw six-command script, and
``get_history(last=20)`` of 10,000 messages against LRANGE -20 -1 + orjson.loads. Pieces mode
(``--pieces``) measures the cold get and the fleet loop with each private piece left off in turn,
and prints each one's cost against all on.

To show where the store's time goes, the same loops also time (interleaved, same conditions):
the store's OWN request sent bare with plain redis-py -- its Lua script by EVALSHA with the exact
KEYS/ARGV the store would send, or for get() its MULTI/EXEC pipeline of the same commands
(built beforehand) --, the client-side preparation of an append without I/O (validation,
serialization, digest) and the decoding of a read's reply without I/O.

The store runs with a TTL and ``max_history_turns`` (large enough never to trim) so that its
script does the same work as the floor: append, LTRIM, PEXPIRE, updated_at, index ZADD.
All keys live under ``bench:<uuid8>:`` and are deleted at the end (SCAN + DEL); the run
holds up to ~130 MB in Redis meanwhile (the pre-filled session pools).

    .venv/bin/python bench/bench_store.py [--url redis://127.0.0.1:6379/0] [--rounds N]
        [--get-rounds N] [--json out.json] [--profile] [--gc freeze|on|off] [--check]
    .venv/bin/python bench/bench_store.py --fleet [--workers 16] [--sessions 400]
        [--messages 300] [--turns 3000] [--fleet-warmup 2000] [--routing random|sticky]
        [--read-cache-bytes N] [--rounds N] [--get-rounds N] [--check]
    .venv/bin/python bench/bench_store.py --paths|--pieces [the fleet options] [--rounds N]

The default of 3,000 rounds takes 30-40 s on a 2-core VM (of which ~14 s for get).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from bench.harness import (
    GET_WARMUP,
    MAX_TURNS,
    TTL,
    WARMUP,
    Bench,
    Row,
    all_targets_pass,
    chart,
    payload,
    round_trips_ok,
    run_phases,
    server_info,
    text_table,
    where_lines,
)
from bench.harness.fleet import ROUTINGS, FleetSize, run_fleet
from bench.harness.paths import run_paths, run_pieces, shares

# -- output ---------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = "us") -> str:
    if value is None:
        return "-"
    if unit == "x":  # a ratio of its own (the agent loop's flatness)
        return f"{value:.2f}x"
    return f"{value:,.1f}" if unit == "us" else f"{value:,.1f}B"


def render(rows: Sequence[Row]) -> str:
    header = (
        "case",
        "store med",
        "store p99",
        "floor med",
        "floor p99",
        "store-floor",
        "ratio",
        "target",
        "verdict",
    )
    lines = [
        (
            r.case,
            _fmt(r.store, r.unit),
            _fmt(r.store_p99, r.unit),
            _fmt(r.floor, r.unit),
            _fmt(r.floor_p99, r.unit),
            _fmt(r.store - r.floor, r.unit),
            f"{r.ratio:.2f}x",
            r.target_text,
            r.verdict,
        )
        for r in rows
    ]
    return text_table(header, lines)


def report(bench: Bench, profile_text: str) -> bool:
    """Print every table; True when all targets pass."""
    rt = bench.extra["round_trips"]
    mem = bench.extra["memory"]
    print()
    print("floors (us)                      median      p99")
    for f in bench.floors:
        print(f"  {f.name:<30}{f.median:>9.1f}{f.p99:>9.1f}")
    print()
    print("all times in microseconds (us); ratio = store median / floor median")
    print(render(bench.rows))
    print()
    rt_ok = round_trips_ok(bench)
    print(
        f"round trips per append: client socket writes sync "
        f"{rt['sync_client_writes_per_append']:.2f}, async "
        f"{rt['async_client_writes_per_append']:.2f}; server EVALSHA calls/append "
        f"{rt['server_evalsha_calls_per_append']:.2f} (INFO commandstats delta over "
        f"{rt['appends']} appends, all clients) | target = 1 | {'PASS' if rt_ok else 'FAIL'}"
    )
    print(
        f"server time per script call (commandstats usec/calls): store append script "
        f"{rt['server_usec_per_store_append_script']:.1f} us on a new session, "
        f"{rt['server_usec_per_store_append_script_big']:.1f} us on one of "
        f"{rt['big_session_length']:,} messages; 6-command floor script "
        f"{rt['server_usec_per_floor_script']:.1f} us"
    )
    print(
        f"bytes: MEMORY USAGE {mem['memory_usage_bytes']} over {mem['messages']} messages; "
        f"message JSON {mem['json_min_bytes']}..{mem['json_max_bytes']} B; "
        f"stored form == model_dump_json(exclude_defaults=True): "
        f"{mem['stored_form_is_model_dump_json_without_defaults']}"
    )
    above = [
        f"@{size:,}: {bench.extra[f'agent_loop_{size}_above_floor_us']['wall']:.1f} us wall, "
        f"{bench.extra[f'agent_loop_{size}_above_floor_us']['client_cpu']:.1f} us client CPU"
        for size in (1_000, 10_000)
    ]
    print(f"agent loop above its floor (medians): {'; '.join(above)}")
    pools = ", ".join(
        f"{name}: {p['sessions']} x {p['start_length']:,}->{p['max_end_length']:,}"
        for name, p in bench.extra["append_sessions"].items()
    )
    print(f"append sessions (count x length before->max after): {pools}")
    print(
        f"get_history(last=20) store median @10,000 / @1,000: "
        f"{bench.extra['history_flatness_10k_over_1k']:.2f}x (flat = ~1.0)"
    )
    print()
    print("\n".join(where_lines(bench.where)))
    print("  append preparation pieces (no I/O)")
    for name, value in bench.extra["append_prep_pieces_us"].items():
        print(f"    {name:<56}{value:>10.1f}")
    if profile_text:
        print(profile_text)
    return all_targets_pass(bench)


def fleet_main(url: str, size: FleetSize, get_rounds: int, rounds: int, check: bool) -> int:
    """The fleet rows alone (``--fleet``): print them; 1 with ``check`` when a target fails."""
    started = time.perf_counter()
    bench = Bench(url, rounds, get_rounds)
    try:
        run_fleet(bench, size)
    finally:
        deleted = bench.cleanup()
        bench.close()
    print("all times in microseconds (us); ratio = store median / floor median")
    print(render(bench.rows))
    fl = bench.extra["fleet"]
    print(
        f"fleet above its floor (medians): {fl['above_floor_us']['wall']:.1f} us wall, "
        f"{fl['above_floor_us']['client_cpu']:.1f} us client CPU; read cache over the timed "
        f"turns: {fl['read_cache_hits']} hits, {fl['read_cache_misses']} misses"
    )
    print(f"cleanup: deleted {deleted} keys; total {time.perf_counter() - started:.1f}s")
    return 1 if check and any(r.verdict == "FAIL" for r in bench.rows) else 0


def paths_main(
    url: str,
    size: FleetSize,
    get_rounds: int,
    rounds: int,
    check: bool,
    pieces: bool,
    chart_path: Path | None = None,
) -> int:
    """Both paths (``--paths``) or each private piece (``--pieces``): print the rows."""
    started = time.perf_counter()
    bench = Bench(url, rounds, get_rounds)
    info = server_info(bench)
    print(
        f"redis {info['redis_version']} | python {info['python']} | redis-py {info['redis_py']}"
        f" | pydantic {info['pydantic']} | hiredis {info['hiredis']}"
    )
    try:
        (run_pieces if pieces else run_paths)(bench, size)
    finally:
        deleted = bench.cleanup()
        bench.close()
    print("all times in microseconds (us); ratio = store median / floor median")
    print(render(bench.rows))
    for line in shares(bench.rows):
        print(line)
    if chart_path is not None and not pieces:
        day = time.strftime("%Y-%m-%d")
        title = f"redis_session against raw redis-py, {day}, Redis {info['redis_version']}"
        chart.write(bench.rows, chart_path, title)
        print(f"wrote {chart_path}")
    print(f"cleanup: deleted {deleted} keys; total {time.perf_counter() - started:.1f}s")
    return 1 if check and any(r.verdict == "FAIL" for r in bench.rows) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="Redis to measure")
    parser.add_argument(
        "--rounds", type=int, default=3000, help="timed rounds per append/history case"
    )
    parser.add_argument(
        "--get-rounds", type=int, default=0, help="rounds of the get(1k) case (0 = rounds/10)"
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--profile", action="store_true", help="also print cProfile top lists")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    parser.add_argument(
        "--gc",
        choices=("freeze", "on", "off"),
        default="freeze",
        help="garbage collector while timing: freeze (default: gc.freeze() the prebuilt inputs "
        "so collections scan only what the timed calls allocate), on (the prebuilt inputs stay "
        "collectable: rare full collections of the whole heap land in some calls' p99) or off",
    )
    fleet = parser.add_argument_group(
        "fleet mode (issue #32): --fleet runs only the cold get, the fleet loop and the append "
        "over the caller's own client, each against its floor"
    )
    fleet.add_argument("--fleet", action="store_true", help="run the fleet rows only")
    fleet.add_argument(
        "--paths",
        action="store_true",
        help="the fast path and the public path side by side (cold get, fleet loop, appends, "
        "get_history(last=20)), interleaved, each against its floor",
    )
    fleet.add_argument(
        "--chart",
        type=Path,
        help="with --paths: also draw the rows as an SVG chart there (docs/img/figures.svg)",
    )
    fleet.add_argument(
        "--pieces",
        action="store_true",
        help="each private piece of the fast path left off in turn (cold get, fleet loop)",
    )
    size = FleetSize()
    fleet.add_argument("--workers", type=int, default=size.workers, help="worker stores")
    fleet.add_argument("--sessions", type=int, default=size.sessions, help="sessions")
    fleet.add_argument("--messages", type=int, default=size.messages, help="messages each")
    fleet.add_argument("--turns", type=int, default=size.turns, help="timed turns")
    fleet.add_argument("--fleet-warmup", type=int, default=size.warmup, help="turns untimed")
    fleet.add_argument("--routing", choices=ROUTINGS, default=size.routing, help="turn routing")
    fleet.add_argument("--read-cache-bytes", type=int, help="each worker's read cache bound")
    args = parser.parse_args(argv)
    if args.paths or args.pieces:
        size = FleetSize(
            args.workers, args.sessions, args.messages, args.turns, args.fleet_warmup,
            args.routing, args.read_cache_bytes,
        )  # fmt: skip
        return paths_main(
            args.url, size, args.get_rounds or 300, args.rounds, args.check, args.pieces,
            args.chart,
        )  # fmt: skip
    if args.fleet:
        size = FleetSize(
            args.workers, args.sessions, args.messages, args.turns, args.fleet_warmup,
            args.routing, args.read_cache_bytes,
        )  # fmt: skip
        return fleet_main(args.url, size, args.get_rounds or 300, args.rounds, args.check)
    rounds: int = args.rounds
    get_rounds: int = args.get_rounds or max(50, rounds // 10)

    started = time.perf_counter()
    bench = Bench(args.url, rounds, get_rounds)
    info = server_info(bench)
    print(
        f"redis {info['redis_version']} at {args.url} | python {info['python']} "
        f"| redis-py {info['redis_py']} | pydantic {info['pydantic']} | orjson "
        f"{info['orjson']} | hiredis {info['hiredis']}"
    )
    print(
        f"prefix {bench.prefix} | rounds {rounds} (+{WARMUP} warm-up), get rounds {get_rounds} "
        f"(+{GET_WARMUP}) | gc {args.gc} | store ttl={TTL}, max_history_turns={MAX_TURNS:,}"
    )
    try:
        profile_text = run_phases(
            bench,
            gc_mode=args.gc,
            profile=args.profile,
            on_phase=lambda name, seconds: print(f"{name}: {seconds:.1f}s"),
        )
    finally:
        deleted = bench.cleanup()
        bench.close()
        print(f"cleanup: deleted {deleted} keys under {bench.prefix}")

    passed = report(bench, profile_text)
    total = time.perf_counter() - started
    print(f"\ntotal runtime: {total:.1f}s")
    if args.json:
        data = payload(bench, info, gc_mode=args.gc, passed=passed, total=total)
        args.json.write_text(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        print(f"wrote {args.json}")
    return 1 if args.check and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
