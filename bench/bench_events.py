"""What the durable event log (#29) costs and delivers: bytes per logged event and a full log,
the extra cost of each lifecycle call with the log against the same store with
``event_log_max=0``, listener replay throughput (sync, async, a consumer group with acks), and
the delay from a session's deadline to its ``expire`` event.

It starts a private redis-server (and stops it), or uses ``--url`` (a server it may write
under a random prefix; it never flushes it). Cases with and without the log are interleaved
in one run, in alternating order, and reported as medians over ``--rounds``.

    .venv/bin/python bench/bench_events.py [--rounds 9] [--calls 200] [--events 20000]
        [--before /tmp/before]   # append_message against the code before the log too
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from bench.harness.server import private_server
from redis_session import AsyncRedisStore, Message, RedisStore, Session

ROOT = Path(__file__).resolve().parent.parent
OPS = ("create", "fork_child", "merge_child", "end", "delete", "append_message")


def key(i: int, tag: str) -> str:
    """A realistic session key, 64 characters."""
    return f"tenant-acme:slack:C04{tag}:user-U02ABCDEF:thread-{1_700_000_000 + i}.{i:06d}"


@contextmanager
def server(url: str | None) -> Iterator[str]:
    """A private redis-server (or ``url``)."""
    if url:
        yield url
        return
    with private_server("events") as port:
        yield f"redis://127.0.0.1:{port}/0"


def memory(url: str, fill: int) -> dict[str, float]:
    """Bytes per logged event with every type, then a log filled to ``fill`` entries."""
    client: Any = redis.Redis.from_url(url)  # untyped replies: xrange's are a union
    prefix = f"be-{uuid.uuid4().hex[:6]}:"
    store = RedisStore(client, prefix=prefix)
    msg = Message(role="user", content="hello " * 20)
    for i in range(200):
        k = key(i, "MEM")
        store.create(Session(key=k))
        store.append_message(k, msg)
        a = store.fork_child(k, "researcher")
        store.merge_child(a.key, "found it")
        b = store.fork_child(k, "critic")
        store.discard_child(b.key)
        store.append_message(k, msg)
        store.compact_messages(k, 1, "summary")
        store.end(k)
        if i % 2:
            store.delete(k)
    log = f"{prefix}log"
    n = int(client.xlen(log))
    used = int(client.memory_usage(log, samples=0) or 0)
    out = {"mixed.events": n, "mixed.bytes_per_event": used / n}
    # a full log: entries shaped as real ones (a copy of a logged create, keys varied)
    sample = client.xrange(log, count=1)[0][1]
    fullkey = f"{prefix}full:log"
    info0 = client.info("memory")
    pipe = client.pipeline(transaction=False)
    for i in range(fill):
        fields = dict(sample)
        for f, v in fields.items():
            if v.startswith(b"tenant-acme"):
                fields[f] = key(i, "FUL").encode()
        pipe.xadd(fullkey, fields, maxlen=fill, approximate=True)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    info1 = client.info("memory")
    out["full.entries"] = int(client.xlen(fullkey))
    out["full.mb"] = int(client.memory_usage(fullkey, samples=0) or 0) / 1e6
    out["full.used_memory_mb"] = (info1["used_memory"] - info0["used_memory"]) / 1e6
    out["full.rss_mb"] = (info1["used_memory_rss"] - info0["used_memory_rss"]) / 1e6
    client.delete(fullkey)
    store.close()
    return out


def one_round(st: RedisStore, keys: list[str], msg: Message) -> dict[str, float]:
    """One round of every op on ``keys``: µs per call."""
    kids: list[str] = []

    def timed(fn: Callable[[int], Any]) -> float:
        t = time.perf_counter_ns()
        for i in range(len(keys)):
            fn(i)
        return (time.perf_counter_ns() - t) / len(keys) / 1000

    return {
        "create": timed(lambda i: st.create(Session(key=keys[i]))),
        "append_message": timed(lambda i: st.append_message(keys[i], msg)),
        "fork_child": timed(lambda i: kids.append(st.fork_child(keys[i], "sub").key)),
        "merge_child": timed(lambda i: st.merge_child(kids[i], "done")),
        "end": timed(lambda i: st.end(keys[i])),
        "delete": timed(lambda i: st.delete(keys[i])),
    }


def costs(url: str, rounds: int, calls: int) -> dict[str, dict[str, list[float]]]:
    """µs per call of each lifecycle op, with the log (default) and with event_log_max=0."""
    modes = {
        "log": RedisStore.from_url(url, prefix=f"bl-{uuid.uuid4().hex[:6]}:"),
        "nolog": RedisStore.from_url(url, prefix=f"bn-{uuid.uuid4().hex[:6]}:", event_log_max=0),
    }
    res: dict[str, dict[str, list[float]]] = {m: {op: [] for op in OPS} for m in modes}
    msg = Message(role="assistant", content="a reply of a few words " * 10)

    for r in range(rounds + 1):  # round 0 warms up
        order = list(modes) if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            got = one_round(modes[mode], [key(i, f"{r:03d}") for i in range(calls)], msg)
            if r:
                for op, v in got.items():
                    res[mode][op].append(v)
    for st in modes.values():
        st.close()
    return res


def append_worker(url: str, calls: int) -> float:
    """µs per ``append_message`` of the code on PYTHONPATH (run in a subprocess)."""
    store = RedisStore.from_url(url, prefix=f"ba-{uuid.uuid4().hex[:6]}:")
    k = key(0, "APP")
    store.create(Session(key=k))
    msg = Message(role="assistant", content="a reply of a few words " * 10)
    for _ in range(50):
        store.append_message(k, msg)
    t = time.perf_counter_ns()
    for _ in range(calls):
        store.append_message(k, msg)
    took = (time.perf_counter_ns() - t) / calls / 1000
    store.delete(k)
    store.close()
    return took


def before_after(url: str, before: str, rounds: int, calls: int) -> dict[str, list[float]]:
    """``append_message`` of this checkout against the checkout at ``before``, in turns."""
    trees = {"now": str(ROOT), "before": before}
    out: dict[str, list[float]] = {m: [] for m in trees}
    for r in range(rounds):
        for mode in list(trees) if r % 2 == 0 else list(reversed(trees)):
            done = subprocess.run(
                [sys.executable, __file__, "--append-worker", "--url", url, "--calls", str(calls)],
                capture_output=True, text=True, check=True, timeout=600,
                env={**os.environ, "PYTHONPATH": trees[mode]}, cwd=trees[mode],
            )  # fmt: skip
            out[mode].append(float(done.stdout))
    return out


def replay(url: str, events: int) -> dict[str, float]:
    """Events/s read back from a log of ``events`` entries: sync, async, a group with acks."""
    prefix = f"br-{uuid.uuid4().hex[:6]}:"
    store = RedisStore.from_url(url, prefix=prefix)
    for i in range(events // 2):
        store.create(Session(key=key(i, "RPL")))
        store.end(key(i, "RPL"))
    n = int(store.client.xlen(f"{prefix}log"))
    out: dict[str, float] = {"events": n}

    t = time.perf_counter()
    with store.listen(since="earliest") as lst:
        for _ in range(n):
            assert lst.get(timeout=10) is not None
    out["sync"] = n / (time.perf_counter() - t)

    t = time.perf_counter()
    with store.listen(group="bench", consumer="c1", since="earliest") as grp:
        for _ in range(n):
            ev = grp.get(timeout=10)
            assert ev is not None
            grp.ack(ev)
    out["group"] = n / (time.perf_counter() - t)
    store.close()

    async def arun() -> float:
        astore = AsyncRedisStore.from_url(url, prefix=prefix)
        t = time.perf_counter()
        async with await astore.listen(since="earliest") as alst:
            for _ in range(n):
                assert await alst.get(timeout=10) is not None
        took = time.perf_counter() - t
        await astore.close()
        return n / took

    out["async"] = asyncio.run(arun())
    return out


def expire_delay(url: str, sessions: int, ttl: float) -> dict[str, float]:
    """Seconds from each deadline (last write + ttl) to its ``expire`` event at a listener."""
    store = RedisStore.from_url(url, prefix=f"bx-{uuid.uuid4().hex[:6]}:", ttl=int(ttl))
    deadline: dict[str, float] = {}
    delays: list[float] = []
    with store.listen(since="latest", types={"expire"}) as lst:
        for i in range(sessions):
            k = key(i, "EXP")
            store.create(Session(key=k))
            deadline[k] = time.time() + ttl
            time.sleep(ttl / sessions)  # spread deadlines over one ttl
        end = time.time() + ttl * 3 + 10
        while len(delays) < sessions and time.time() < end:
            ev = lst.get(timeout=1)
            if ev is not None and ev.key in deadline:
                delays.append(time.time() - deadline.pop(ev.key))
    store.close()
    return {
        "got": len(delays),
        "median": statistics.median(delays) if delays else float("nan"),
        "max": max(delays) if delays else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a server to use instead of a private one")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200, help="calls per op per round")
    parser.add_argument("--events", type=int, default=20_000, help="log size for replay")
    parser.add_argument("--fill", type=int, default=100_000, help="entries of the full log")
    parser.add_argument("--sessions", type=int, default=20, help="sessions left to expire")
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument(
        "--before",
        help="a checkout of the code before the log (git worktree add /tmp/before 3c8c33b^): "
        "append_message against it, each in its own process",
    )
    parser.add_argument("--append-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.append_worker:
        print(append_worker(args.url, args.calls))
        return
    with server(args.url) as url:
        info = redis.Redis.from_url(url).info("server")
        print(f"redis {info['redis_version']} at {url}\n")
        mem = memory(url, args.fill)
        print("| memory | figure |\n| --- | --- |")
        print(f"| bytes per event, mixed types ({mem['mixed.events']:,} events) "
              f"| {mem['mixed.bytes_per_event']:.0f} B |")  # fmt: skip
        per = mem["full.mb"] * 1e6 / mem["full.entries"]
        print(f"| full log ({mem['full.entries']:,} entries): MEMORY USAGE | "
              f"{mem['full.mb']:.1f} MB ({per:.0f} B/entry) |")  # fmt: skip
        print(f"| full log: used_memory / RSS delta | {mem['full.used_memory_mb']:.1f} / "
              f"{mem['full.rss_mb']:.1f} MB |\n")  # fmt: skip

        res = costs(url, args.rounds, args.calls)
        print(f"| µs per call, median of {args.rounds} rounds x {args.calls} | log | "
              "event_log_max=0 | above | ratio |\n| --- | --- | --- | --- | --- |")  # fmt: skip
        for op in OPS:
            a = statistics.median(res["log"][op])
            b = statistics.median(res["nolog"][op])
            print(f"| `{op}` | {a:.0f} | {b:.0f} | {a - b:+.0f} | {a / b:.2f}x |")
        print()

        if args.before:
            n = args.calls * 10
            ba = before_after(url, args.before, args.rounds, n)
            now, old = statistics.median(ba["now"]), statistics.median(ba["before"])
            print(f"| `append_message` µs, {args.rounds} rounds x {n}, a process each | now | "
                  "before the log | above | ratio |\n| --- | --- | --- | --- | --- |")  # fmt: skip
            print(f"| sync | {now:.0f} | {old:.0f} | {now - old:+.0f} | {now / old:.2f}x |\n")

        rp = replay(url, args.events)
        print(f"| replay of {rp['events']:,} logged events | events/s |\n| --- | --- |")
        print(f"| `listen(since='earliest')` sync | {rp['sync']:,.0f} |")
        print(f"| `listen(since='earliest')` async | {rp['async']:,.0f} |")
        print(f"| `listen(group=, consumer=)` sync, get + ack | {rp['group']:,.0f} |\n")

        ex = expire_delay(url, args.sessions, args.ttl)
        bound = args.ttl / 16 + 1.0
        print(f"| expire, ttl={args.ttl:g} s, listener poll 1 s | s |\n| --- | --- |")
        print(f"| events received | {ex['got']:.0f} of {args.sessions} |")
        print(f"| delay after deadline: median / max | {ex['median']:.2f} / {ex['max']:.2f} |")
        print(f"| documented bound ttl/16 + poll | {bound:.3f} |")
        print(f"| goal 2 s + ttl/16 | {2 + args.ttl / 16:.3f} |")


if __name__ == "__main__":
    main()
