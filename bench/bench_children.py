"""Cost of child-session operations against an append, on one real Redis, interleaved.

Measures, in one run: append_message (the reference), fork_child (no inheritance and
inheriting 20 messages), merge_child of a 100-message child (its messages appended to the
parent), merge_child with a summary, and discard_child; medians and p99 in microseconds, each
as a ratio to the append median, and the number of round trips each makes (socket writes).

Then the cost of the tree's expiry (one deadline for a session and its children): an append
to a parent with 0, 1, 4, 16 and 64 live children, when the tree's deadline is not due (most
appends: no TTL is touched) and when it is due (the append moves every key of the tree, three
per live child: the cost per live child is the slope), each with its server time per call
(``INFO commandstats``: the EVALSHA usec of this run's calls only, so use a server of its own
for exact figures) and round trips.

    .venv/bin/python bench/bench_children.py [--url redis://127.0.0.1:6379/0] [--rounds 300]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import redis.connection

from redis_session import ChildSessionConfig, Message, RedisStore, Session

CHILD_MESSAGES = 100


class RoundTrips:
    """Counts socket writes of redis-py connections (one per round trip for these calls)."""

    def __init__(self) -> None:
        self.count = 0
        self._original: Any = redis.connection.AbstractConnection.send_packed_command

    def __enter__(self) -> RoundTrips:
        original = self._original

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            self.count += 1
            original(conn, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        redis.connection.AbstractConnection.send_packed_command = self._original  # type: ignore[method-assign]


def text(i: int) -> str:
    return f"message {i}: " + "the quick brown fox jumps over the lazy dog " * 6


def evalsha_usec(client: Any) -> tuple[int, int]:
    stats: dict[str, Any] = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def tree_expiry(store: RedisStore, rounds: int) -> None:
    """Append to parents with N live children, the tree's deadline due or not, interleaved."""
    raw: Any = store.client
    sizes = (0, 1, 4, 16, 64)
    parents = {n: f"tree{n}" for n in sizes}
    for n, key in parents.items():
        store.create(Session(key=key))
        for i in range(n):
            child = store.fork_child(key, f"sub{i}")
            store.append_child_message(child.key, Message(role="assistant", content=text(i)))
    cases = [(n, due) for n in sizes for due in (False, True)]
    timings: dict[tuple[int, bool], list[float]] = {c: [] for c in cases}
    server: dict[tuple[int, bool], list[int]] = {c: [0, 0] for c in cases}
    trips: dict[tuple[int, bool], int] = {}
    metas = {n: store._core.schema.session(k).meta for n, k in parents.items()}
    for r in range(rounds):
        shift = r % len(cases)
        for n, due in cases[shift:] + cases[:shift]:
            if due:  # the deadline is closer than the TTL: this append moves the whole tree
                raw.hset(metas[n], "x", int(time.time() * 1000))
            msg = Message(role="user", content=text(r))
            calls0, usec0 = evalsha_usec(raw)
            with RoundTrips() as rt:
                t0 = time.perf_counter_ns()
                store.append_message(parents[n], msg)
                timings[(n, due)].append((time.perf_counter_ns() - t0) / 1000)
            calls1, usec1 = evalsha_usec(raw)
            server[(n, due)][0] += calls1 - calls0
            server[(n, due)][1] += usec1 - usec0
            trips[(n, due)] = rt.count
    print()
    print("append_message to a parent with N live children (ttl set; server = EVALSHA usec/call)")
    header = ("live children", "deadline", "median us", "p99 us", "server us", "round trips")
    print(
        f"{header[0]:>13s} {header[1]:>9s} {header[2]:>10s} {header[3]:>9s} {header[4]:>10s} "
        f"{header[5]:>12s}"
    )
    for n, due in cases:
        values = sorted(timings[(n, due)])
        calls, usec = server[(n, due)]
        print(
            f"{n:13d} {'due' if due else 'not due':>9s} {statistics.median(values):10.1f} "
            f"{values[int(len(values) * 0.99) - 1]:9.1f} {usec / max(calls, 1):10.1f} "
            f"{trips[(n, due)]:12d}"
        )
    due_0 = server[(0, True)][1] / max(server[(0, True)][0], 1)
    due_64 = server[(64, True)][1] / max(server[(64, True)][0], 1)
    print(
        f"server time per live child when the deadline moves: {(due_64 - due_0) / 64:.2f} us "
        "(once per ttl/16 per tree); when it does not: none"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    prefix = f"benchkids:{uuid.uuid4().hex[:8]}:"
    store = RedisStore.from_url(args.url, prefix=prefix, ttl=3600)
    started = time.perf_counter()
    try:
        store.create(
            Session(
                key="parent", history=[Message(role="user", content=text(i)) for i in range(50)]
            )
        )
        names = ("append", "fork", "fork+inherit 20", "merge 100 msgs", "merge summary", "discard")
        timings: dict[str, list[float]] = {n: [] for n in names}
        trips: dict[str, int] = {}

        def timed(name: str, call: Callable[[], object]) -> None:
            with RoundTrips() as rt:
                t0 = time.perf_counter_ns()
                call()
                timings[name].append((time.perf_counter_ns() - t0) / 1000)
            trips[name] = rt.count

        for r in range(args.rounds):
            # Untimed setup for this round: a child of 100 messages to merge back.
            full = store.fork_child("parent", "worker")
            store.append_child_messages(
                full.key,
                [Message(role="assistant", content=text(i)) for i in range(CHILD_MESSAGES)],
            )
            summary_child = store.fork_child("parent", "summariser")
            spare = store.fork_child("parent", "spare")
            msg = Message(role="user", content=text(r))
            inherit = ChildSessionConfig(inherit_history=20)
            order: list[tuple[str, Callable[[], object]]] = [
                ("append", partial(store.append_message, "parent", msg)),
                ("fork", partial(store.fork_child, "parent", "a")),
                ("fork+inherit 20", partial(store.fork_child, "parent", "b", inherit)),
                ("merge 100 msgs", partial(store.merge_child, full.key, "")),
                ("merge summary", partial(store.merge_child, summary_child.key, "done")),
                ("discard", partial(store.discard_child, spare.key)),
            ]
            shift = r % len(order)
            for name, call in order[shift:] + order[:shift]:
                timed(name, call)
            if r % 20 == 19:  # keep the parent's history and children from growing without end
                store.delete("parent")
                store.create(
                    Session(
                        key="parent",
                        history=[Message(role="user", content=text(i)) for i in range(50)],
                    )
                )
        ref = statistics.median(timings["append"])
        print(
            f"redis_session child operations vs append_message ({args.rounds} rounds, {args.url})"
        )
        header = ("operation", "median us", "p99 us", "x append", "round trips")
        print(f"{header[0]:18s} {header[1]:>10s} {header[2]:>9s} {header[3]:>9s} {header[4]:>12s}")
        for name, values in timings.items():
            values.sort()
            med = statistics.median(values)
            p99 = values[int(len(values) * 0.99) - 1]
            print(f"{name:18s} {med:10.1f} {p99:9.1f} {med / ref:8.2f}x {trips[name]:12d}")
        tree_expiry(store, args.rounds)
        print(f"total runtime {time.perf_counter() - started:.1f}s")
    finally:
        raw: Any = store.client
        for key in raw.scan_iter(match=f"{prefix}*", count=1000):
            raw.delete(key)
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
