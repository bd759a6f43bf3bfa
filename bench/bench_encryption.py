"""Benchmark encryption at rest (issues #4, #15): the same store with and without a passphrase.

Two stores on one real Redis, under two prefixes of one run: ``RedisStore.from_url(url,
prefix=..., passphrase=..., kdf_work=15)`` and the same without a passphrase (both with a TTL and
a ``max_history_turns`` that never trims, as in ``bench/bench_store.py``; no read cache, so
every ``get`` reads and opens the whole session). Every encrypted call is
timed INTERLEAVED with the unencrypted one it is compared to: one loop, the operations of a round
run round-robin (their order rotates every round), so drift of the machine or of the server
affects both alike. Timings are ``time.perf_counter_ns`` around one call; the table gives medians
(and p99) in microseconds and the ratio of the medians encrypted/plain.

Targets (issue #15: each session sealed with its own data key, every value authenticated),
all measured in one run
  append      encrypted ``append_message`` <= 1.25x the unencrypted one (rounds spread over a
              pool of sessions, <= 50 appends each; messages ~300 chars, a third with a tool
              call)
  get         encrypted ``get`` of a 1,000-message session <= 1.6x the unencrypted one
  KDF         scrypt is paid once per store: the first operation of a FRESH encrypted store
              (new client, keyring already in Redis) against its later operations and against a
              fresh plain store's first operation; ``redis_session.crypto.derive_kek`` is wrapped
              to count its calls (1 per fresh store, 0 in every later and every timed operation)

To show where the time goes, the same loops also time (interleaved, no I/O): an append's
client-side preparation (the store core's request built: validation, serialization, digest and,
encrypted, AES-GCM sealing), the read's bare MULTI/EXEC sent with plain redis-py, the decoding
of its reply (``codec.decode_session``) and, encrypted, the opening of the 1,000 elements alone
(``Opener.message``).
All keys live under ``bench:<uuid8>:`` and are deleted at the end (SCAN + DEL).

    .venv/bin/python bench/bench_encryption.py [--url redis://127.0.0.1:6379/0] [--rounds N]
        [--get-rounds N] [--kdf-stores N] [--kdf-work W] [--json out.json] [--profile]
        [--gc freeze|on|off] [--check]

The default of 2,000 rounds takes ~15-25 s on a 2-core VM.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import math
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.harness import (
    GC_MODES,
    GET_WARMUP,
    MAX_TURNS,
    TTL,
    WARMUP,
    Bench,
    Row,
    SyncOp,
    Timings,
    build_messages,
    growth_cap,
    prep_op,
    run_interleaved,
    server_info,
    text_table,
    timed_row,
    where_lines,
)
from redis_session import codec, crypto
from redis_session.crypto import Passphrase
from redis_session.keys import KeySchema
from redis_session.models import Message, Session
from redis_session.store import RedisStore

APPEND_TARGET = 1.25
GET_TARGET = 1.6
GET_SIZE = 1_000
KDF_SESSION_SIZE = 20  # the session the fresh stores read
KDF_LATER = 50  # later operations timed on each fresh store
PASSPHRASE = "bench: correct horse battery staple"
METADATA = {"tenant": "acme-corp", "topic": "refund for order 4821", "locale": "fr-FR"}


# -- counting the KDF ---------------------------------------------------------------------------


class KdfCounter:
    """Wraps ``redis_session.crypto.derive_kek``: counts its calls and times each one.

    The keyring module calls it as ``crypto.derive_kek``, so replacing the module's attribute
    sees every scrypt run of every store.
    """

    def __init__(self) -> None:
        self.original = crypto.derive_kek
        self.ns: list[int] = []

    @property
    def calls(self) -> int:
        return len(self.ns)

    def __call__(self, passphrase: Passphrase, salt: bytes, work: int) -> bytes:
        t0 = time.perf_counter_ns()
        try:
            return self.original(passphrase, salt, work)
        finally:
            self.ns.append(time.perf_counter_ns() - t0)

    def install(self) -> None:
        crypto.derive_kek = self

    def restore(self) -> None:
        crypto.derive_kek = self.original


# -- the benchmark ------------------------------------------------------------------------------


class EncBench:
    """The two stores, their keys, and the results of one run."""

    def __init__(self, url: str, rounds: int, get_rounds: int, kdf_work: int) -> None:
        self.base = Bench(url, rounds, get_rounds)  # prefix, raw client, rng, cleanup
        self.url = url
        self.rounds = rounds
        self.get_rounds = get_rounds
        self.kdf_work = kdf_work
        self.plain_prefix = f"{self.base.prefix}plain:"
        self.enc_prefix = f"{self.base.prefix}enc:"
        self.plain = self.store(encrypted=False)
        self.enc = self.store(encrypted=True)
        self.rows: list[Row] = []
        self.where: list[tuple[str, dict[str, float]]] = []
        self.extra: dict[str, Any] = {}

    def store(self, *, encrypted: bool) -> RedisStore:
        """A new store (and a new client) over the plain or the encrypted prefix."""
        if encrypted:
            return RedisStore.from_url(
                self.url,
                prefix=self.enc_prefix,
                ttl=TTL,
                max_history_turns=MAX_TURNS,
                passphrase=PASSPHRASE,
                kdf_work=self.kdf_work,
                read_cache_bytes=0,  # every get reads and opens the whole session
            )
        return RedisStore.from_url(
            self.url, prefix=self.plain_prefix, ttl=TTL, max_history_turns=MAX_TURNS,
            read_cache_bytes=0,
        )  # fmt: skip

    def prefill(self, store: RedisStore, key: str, messages: Sequence[Message]) -> None:
        store.create(Session(key=key, agent_id="bench", model="bench-model", metadata=METADATA))
        for i in range(0, len(messages), 500):
            store.append_messages(key, messages[i : i + 500])

    # -- KDF: paid once per store --------------------------------------------------------------

    def keyring_creation(self, kdf: KdfCounter) -> None:
        """The first operation of the first encrypted store: it creates the keyring."""
        before = kdf.calls
        t0 = time.perf_counter_ns()
        self.enc.create(Session(key="kdf-first", agent_id="bench"))
        dt = time.perf_counter_ns() - t0
        self.extra["keyring_creation"] = {
            "first_op_us": dt / 1000,
            "derive_kek_calls": kdf.calls - before,
        }

    def kdf(self, kdf: KdfCounter, stores: int) -> None:
        """First operation of fresh stores vs their later ones, fresh plain stores alongside."""
        messages = build_messages(self.base.rng, KDF_SESSION_SIZE)
        key = "kdf-read"
        self.prefill(self.plain, key, messages)
        self.prefill(self.enc, key, messages)
        first = {"plain": Timings("first op, fresh plain"), "enc": Timings("first op, fresh enc")}
        later = {"plain": Timings("later ops, plain"), "enc": Timings("later ops, enc")}
        calls_first: list[int] = []
        calls_later = 0
        for n in range(stores):
            order = ("plain", "enc") if n % 2 == 0 else ("enc", "plain")
            for flavour in order:
                store = self.store(encrypted=flavour == "enc")
                try:
                    before = kdf.calls
                    t0 = time.perf_counter_ns()
                    store.get(key)
                    first[flavour].ns.append(time.perf_counter_ns() - t0)
                    if flavour == "enc":
                        calls_first.append(kdf.calls - before)
                    before = kdf.calls
                    for _ in range(KDF_LATER):
                        t0 = time.perf_counter_ns()
                        store.get(key)
                        later[flavour].ns.append(time.perf_counter_ns() - t0)
                    if flavour == "enc":
                        calls_later += kdf.calls - before
                finally:
                    store.client.close()
        scrypt = kdf.ns[-stores:] if kdf.ns else []
        self.extra["kdf"] = {
            "kdf_work": self.kdf_work,
            "fresh_stores": stores,
            "session_messages": KDF_SESSION_SIZE,
            "first_op_enc_us": first["enc"].median,
            "first_op_plain_us": first["plain"].median,
            "later_op_enc_us": later["enc"].median,
            "later_op_plain_us": later["plain"].median,
            "later_ops_per_store": KDF_LATER,
            "derive_kek_calls_first_op": calls_first,
            "derive_kek_calls_later_ops": calls_later,
            "derive_kek_us": statistics.median(scrypt) / 1000 if scrypt else None,
            "paid_once_per_store": all(c == 1 for c in calls_first) and calls_later == 0,
        }

    # -- append -------------------------------------------------------------------------------

    def appends(self) -> None:
        """append_message on the encrypted store vs the plain one, plus their preparation."""
        total = WARMUP + self.rounds
        per_session = growth_cap(0)
        pool = [f"append-{n}" for n in range(math.ceil(total / per_session))]
        for key in pool:
            for store in (self.plain, self.enc):
                store.create(Session(key=key, agent_id="bench", model="bench-model"))
        targets = [pool[i // per_session] for i in range(total)]
        messages = build_messages(self.base.rng, total)
        # Other messages (ids) for the preparation ops, whose requests are never sent.
        prep_messages = build_messages(self.base.rng, total)
        self.extra["message_json_bytes"] = {
            "min": min(len(m.model_dump_json()) for m in messages),
            "median": statistics.median(len(m.model_dump_json()) for m in messages),
            "max": max(len(m.model_dump_json()) for m in messages),
            "with_tool_calls": sum(1 for m in messages if m.tool_calls),
            "count": len(messages),
        }

        def store_op(store: RedisStore) -> SyncOp:
            def op(i: int) -> object:
                return store.append_message(targets[i], messages[i])

            return op

        t = {
            name: Timings(name)
            for name in ("plain", "enc", "plain prep", "enc prep", "seal only (AES-GCM)")
        }
        assert not self.enc._core.keyring.locked  # the keyring is open: no unlock inside the loop
        sealer = self.enc._core.keyring.sealer(pool[0])
        assert sealer is not None
        bodies = [codec.encode_message(m) for m in prep_messages]

        def seal_op(i: int) -> object:
            return sealer.message(prep_messages[i].id, bodies[i])

        run_interleaved(
            self.rounds,
            [
                (store_op(self.plain), t["plain"]),
                (store_op(self.enc), t["enc"]),
                (prep_op(self.plain._core, targets, prep_messages), t["plain prep"]),
                (prep_op(self.enc._core, targets, prep_messages), t["enc prep"]),
                (seal_op, t["seal only (AES-GCM)"]),
            ],
        )
        self.rows.append(timed_row("append_message", t["enc"], t["plain"], APPEND_TARGET))
        self.where.append(
            (
                "append_message",
                {
                    "plain append_message": t["plain"].median,
                    "encrypted append_message": t["enc"].median,
                    "-> difference": t["enc"].median - t["plain"].median,
                    "plain preparation (no I/O)": t["plain prep"].median,
                    "encrypted preparation (no I/O)": t["enc prep"].median,
                    "-> difference (prep)": t["enc prep"].median - t["plain prep"].median,
                    "   of which Sealer.message alone (AES-GCM + bound data)": t[
                        "seal only (AES-GCM)"
                    ].median,
                    "I/O + server, plain (append - prep)": t["plain"].median
                    - t["plain prep"].median,
                    "I/O + server, encrypted (append - prep)": t["enc"].median
                    - t["enc prep"].median,
                },
            )
        )
        self.extra["append_sessions"] = {"sessions": len(pool), "max_appends_each": per_session}

    # -- get ----------------------------------------------------------------------------------

    def reads(self) -> None:
        """get() of a 1,000-message session, encrypted vs plain, plus its pieces."""
        key = "get-1k"
        messages = build_messages(self.base.rng, GET_SIZE)
        self.prefill(self.plain, key, messages)
        self.prefill(self.enc, key, messages)
        raw: Any = self.base.client
        core = self.enc._core
        self.enc.get(key, 0)  # the session's key opened and cached
        session_key = core.keyring.session_keys[key]
        opener = core.keyring.opener(key, session_key)

        def bare(prefix: str) -> Callable[[], list[Any]]:
            sk = KeySchema(prefix).session(key)

            def send() -> list[Any]:
                pipe = raw.pipeline(transaction=True)
                pipe.hgetall(sk.meta).lrange(sk.msgs, 0, -1).hexists(sk.ids, "c")
                return pipe.execute()  # type: ignore[no-any-return]

            return send

        bare_plain, bare_enc = bare(self.plain_prefix), bare(self.enc_prefix)
        meta_p, items_p, _ = bare_plain()
        meta_e, items_e, _ = bare_enc()
        parts = crypto.split_element(items_e[0])
        assert len(items_e) == GET_SIZE and parts is not None and parts[1][0] == crypto.V2
        assert crypto.split_element(items_p[0]) is None  # cleartext
        self.extra["get_reply_bytes"] = {
            "plain": sum(len(x) for x in items_p),
            "encrypted": sum(len(x) for x in items_e),
        }
        t = {
            name: Timings(name)
            for name in (
                "plain",
                "enc",
                "plain bare",
                "enc bare",
                "plain decode",
                "enc decode",
                "enc open only",
            )
        }

        def plain_op(_: int) -> object:
            return self.plain.get(key)

        def enc_op(_: int) -> object:
            return self.enc.get(key)

        def plain_decode(_: int) -> object:
            return codec.decode_session(key, meta_p, items_p, None)

        def enc_decode(_: int) -> object:
            return codec.decode_session(key, meta_e, items_e, opener)

        def enc_open(_: int) -> object:
            return [opener.message(m, key, i) for i, m in enumerate(items_e)]

        run_interleaved(
            self.get_rounds,
            [
                (plain_op, t["plain"]),
                (enc_op, t["enc"]),
                (lambda _: bare_plain(), t["plain bare"]),
                (lambda _: bare_enc(), t["enc bare"]),
                (plain_decode, t["plain decode"]),
                (enc_decode, t["enc decode"]),
                (enc_open, t["enc open only"]),
            ],
            warmup=GET_WARMUP,
        )
        self.rows.append(timed_row(f"get ({GET_SIZE:,} msgs)", t["enc"], t["plain"], GET_TARGET))
        self.where.append(
            (
                f"get ({GET_SIZE:,} msgs)",
                {
                    "plain get": t["plain"].median,
                    "encrypted get": t["enc"].median,
                    "-> difference": t["enc"].median - t["plain"].median,
                    "bare MULTI/EXEC, plain (I/O + server, no decode)": t["plain bare"].median,
                    "bare MULTI/EXEC, encrypted": t["enc bare"].median,
                    "decode_session, plain (no I/O)": t["plain decode"].median,
                    "decode_session, encrypted (no I/O)": t["enc decode"].median,
                    "   of which opening 1,000 elements (AES-GCM + aad)": t["enc open only"].median,
                    "   per element opened": t["enc open only"].median / GET_SIZE,
                },
            )
        )

    # -- profile ------------------------------------------------------------------------------

    def profile(self, n: int = 2000) -> str:
        """cProfile of encrypted appends and encrypted get(1k): top functions by own time."""
        key, key_1k = "profile", "get-1k"
        self.enc.create(Session(key=key, agent_id="bench"))
        messages = build_messages(self.base.rng, n)
        out = io.StringIO()
        runs: list[tuple[str, Callable[[], object]]] = [
            (
                "encrypted append_message",
                lambda: [self.enc.append_message(key, m) for m in messages],
            ),
            (
                f"encrypted get ({GET_SIZE:,} msgs)",
                lambda: [self.enc.get(key_1k) for _ in range(n // 20)],
            ),
        ]
        for title, run in runs:
            prof = cProfile.Profile()
            prof.runcall(run)
            out.write(f"\n--- cProfile: {title} (tottime, top 14) ---\n")
            pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime").print_stats(14)
        return out.getvalue()

    def close(self) -> int:
        deleted = self.base.cleanup()
        for store in (self.plain, self.enc):
            store.client.close()
        self.base.close()
        return deleted


# -- output ---------------------------------------------------------------------------------------


def render(rows: Sequence[Row]) -> str:
    header = (
        "operation",
        "plain us",
        "encrypted us",
        "plain p99",
        "enc p99",
        "ratio",
        "target",
        "",
    )
    lines = [
        (
            r.case,
            f"{r.floor:,.1f}",
            f"{r.store:,.1f}",
            f"{r.floor_p99 or 0:,.1f}",
            f"{r.store_p99 or 0:,.1f}",
            f"{r.ratio:.2f}x",
            "-" if r.target is None else f"<= {r.target:.2f}x",
            "met" if r.verdict == "PASS" else "MISSED" if r.verdict == "FAIL" else "info",
        )
        for r in rows
    ]
    return text_table(header, lines)


def kdf_lines(bench: EncBench) -> list[str]:
    k = bench.extra["kdf"]
    c = bench.extra["keyring_creation"]
    scrypt = "-" if k["derive_kek_us"] is None else f"{k['derive_kek_us'] / 1000:,.1f} ms"
    return [
        f"KDF (scrypt n=2^{k['kdf_work']}, r=8, p=1): derive_kek {scrypt} a call | first op of a "
        f"fresh encrypted store {k['first_op_enc_us'] / 1000:,.1f} ms vs later ops "
        f"{k['later_op_enc_us']:,.1f} us (fresh plain store: first {k['first_op_plain_us']:,.1f}"
        f" us, later {k['later_op_plain_us']:,.1f} us) | get of {k['session_messages']} msgs, "
        f"medians over {k['fresh_stores']} fresh stores",
        f"KDF calls: {k['derive_kek_calls_first_op']} in the first op of each fresh store, "
        f"{k['derive_kek_calls_later_ops']} in their "
        f"{k['fresh_stores'] * k['later_ops_per_store']} later ops, "
        f"{bench.extra['derive_kek_calls_timed_phases']} during the timed append/get loops | "
        f"paid once per store: {'yes' if k['paid_once_per_store'] else 'NO'}",
        f"keyring creation (first op of the first store on a new prefix): "
        f"{c['first_op_us'] / 1000:,.1f} ms, derive_kek calls {c['derive_kek_calls']}",
    ]


def report(bench: EncBench, profile_text: str) -> bool:
    """Print every table; True when every target is met."""
    print()
    print("all times in microseconds (us), medians; ratio = encrypted median / plain median")
    print(render(bench.rows))
    print()
    for line in kdf_lines(bench):
        print(line)
    m = bench.extra["message_json_bytes"]
    rb = bench.extra["get_reply_bytes"]
    print(
        f"messages: {m['count']} appended, JSON {m['min']}..{m['max']} B (median "
        f"{m['median']:.0f}), {m['with_tool_calls']} with a tool call | get reply: "
        f"{rb['plain']:,} B plain, {rb['encrypted']:,} B encrypted"
    )
    print()
    print("\n".join(where_lines(bench.where)))
    if profile_text:
        print(profile_text)
    return (
        all(r.verdict != "FAIL" for r in bench.rows) and bench.extra["kdf"]["paid_once_per_store"]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="Redis to measure")
    parser.add_argument("--rounds", type=int, default=2000, help="timed rounds of the append case")
    parser.add_argument(
        "--get-rounds", type=int, default=0, help="rounds of the get(1k) case (0 = rounds/10)"
    )
    parser.add_argument(
        "--kdf-stores", type=int, default=5, help="fresh stores of each kind for the KDF case"
    )
    parser.add_argument(
        "--kdf-work", type=int, default=crypto.DEFAULT_WORK, help="scrypt work (log2 n)"
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--profile", action="store_true", help="also print cProfile top lists")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--gc",
        choices=GC_MODES,
        default="freeze",
        help="garbage collector while timing: freeze (default: gc.freeze() the prebuilt inputs), "
        "on or off",
    )
    args = parser.parse_args(argv)
    rounds: int = args.rounds
    get_rounds: int = args.get_rounds or max(50, rounds // 10)

    started = time.perf_counter()
    kdf = KdfCounter()
    kdf.install()
    bench = EncBench(args.url, rounds, get_rounds, args.kdf_work)
    info = server_info(bench.base)
    print(
        f"redis {info['redis_version']} at {args.url} | python {info['python']} "
        f"| redis-py {info['redis_py']} | pydantic {info['pydantic']} | orjson "
        f"{info['orjson']} | hiredis {info['hiredis']}"
    )
    print(
        f"prefix {bench.base.prefix} | rounds {rounds} (+{WARMUP} warm-up), get rounds "
        f"{get_rounds} (+{GET_WARMUP}) | gc {args.gc} | kdf_work {args.kdf_work} | store "
        f"ttl={TTL}, max_history_turns={MAX_TURNS:,}"
    )
    profile_text = ""
    try:
        phases: list[tuple[str, Callable[[], object]]] = [
            ("keyring creation", lambda: bench.keyring_creation(kdf)),
            ("KDF: fresh stores", lambda: bench.kdf(kdf, args.kdf_stores)),
        ]
        for name, phase in phases:
            t = time.perf_counter()
            phase()
            print(f"{name}: {time.perf_counter() - t:.1f}s")
        before = kdf.calls
        gc.collect()
        if args.gc == "freeze":
            gc.freeze()
        elif args.gc == "off":
            gc.disable()
        for name, phase in (("appends", bench.appends), ("reads", bench.reads)):
            t = time.perf_counter()
            phase()
            print(f"{name}: {time.perf_counter() - t:.1f}s")
        bench.extra["derive_kek_calls_timed_phases"] = kdf.calls - before
        gc.unfreeze()
        gc.enable()
        if args.profile:
            profile_text = bench.profile()
    finally:
        gc.unfreeze()
        gc.enable()
        kdf.restore()
        deleted = bench.close()
        print(f"cleanup: deleted {deleted} keys under {bench.base.prefix}")

    passed = report(bench, profile_text)
    total = time.perf_counter() - started
    print(f"\nall targets met: {'yes' if passed else 'NO'} | total runtime: {total:.1f}s")
    if args.json:
        data = {
            **info,
            "rounds": rounds,
            "get_rounds": get_rounds,
            "warmup": WARMUP,
            "gc": args.gc,
            "rows": [r.as_json() | {"plain": r.floor, "encrypted": r.store} for r in bench.rows],
            "where_the_time_goes_us": dict(bench.where),
            **bench.extra,
            "all_targets_met": passed,
            "total_runtime_s": total,
        }
        args.json.write_text(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        print(f"wrote {args.json}")
    return 1 if args.check and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
