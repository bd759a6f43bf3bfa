"""What many workers in one session pay for safety, on one real Redis, interleaved in one run:
a plain ``append_message``, one with ``expect_last_id``, one through a held turn, a claim +
release of a turn (two round trips, no wait), and a plain ``RPUSH`` (the floor).

Each round runs every case ``--batch`` times in turn (ABCDE ABCDE ...), so a slower minute of
the machine weighs on all of them alike; the median of the rounds' per-call means is
reported, with the absolute cost above the plain append. Keys go under a ``bench:<random>:``
prefix, deleted at the end.

    .venv/bin/python bench/bench_turns.py [--url redis://127.0.0.1:6379/0] [--rounds 15]
        [--batch 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import redis

from redis_session import Message, RedisStore, Session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=200)
    options = parser.parse_args()
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    store = RedisStore.from_url(options.url, prefix=prefix, max_history_turns=100)
    raw = redis.Redis.from_url(options.url)
    for key in ("plain", "expect", "turn", "claim"):
        store.create(Session(key=key))
    newest = {"expect": ""}
    counter = [0]

    def message() -> Message:
        counter[0] += 1
        return Message(role="user", content=f"message {counter[0]}")

    def plain() -> None:
        store.append_message("plain", message())

    def expect() -> None:
        m = message()
        store.append_message("expect", m, expect_last_id=newest["expect"])
        newest["expect"] = m.id

    def claim_release() -> None:
        with store.turn("claim", lease=10):
            pass

    def floor() -> None:
        pipe = raw.pipeline(transaction=False)  # one round trip, as an append is
        pipe.rpush(f"{prefix}floor", f"message {counter[0]}")
        pipe.ltrim(f"{prefix}floor", -100, -1)
        pipe.execute()

    results: dict[str, list[float]] = {}
    with store.turn("turn", lease=3600) as held:

        def through_turn() -> None:
            held.append_message(message())

        cases: dict[str, Callable[[], None]] = {
            "RPUSH + LTRIM (floor)": floor,
            "append_message": plain,
            "append_message(expect_last_id=...)": expect,
            "turn.append_message": through_turn,
            "turn claim + release": claim_release,
        }
        for fn in cases.values():  # warm up: scripts loaded, connections open
            for _ in range(20):
                fn()
        for _ in range(options.rounds):
            for name, fn in cases.items():
                started = time.perf_counter_ns()
                for _ in range(options.batch):
                    fn()
                spent = (time.perf_counter_ns() - started) / options.batch / 1000
                results.setdefault(name, []).append(spent)
    base = statistics.median(results["append_message"])
    print(f"{options.rounds} rounds x {options.batch} calls, {options.url}")
    print(f"{'case':40s} {'median us':>10s} {'range':>17s} {'vs append':>10s}")
    for name, values in results.items():
        median = statistics.median(values)
        spread = f"{min(values):.1f}-{max(values):.1f}"
        print(f"{name:40s} {median:10.1f} {spread:>17s} {median - base:+10.1f}")
    for key in raw.scan_iter(match=f"{prefix}*", count=1000):
        raw.delete(key)
    store.close()


if __name__ == "__main__":
    main()
