"""Several simulated agent workers sharing sessions through one store, then a consistency check.

Runs on the embedded ``memory://`` store by default; ``--url redis://127.0.0.1:6379/0`` runs the
same against a real server. Exit status 0 only when nothing was lost or duplicated.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
import uuid

from redis_session import Message, RedisStore, Session, ToolCall


def worker(
    store: RedisStore, keys: list[str], turns: int, seed: int, latencies: list[float]
) -> dict[str, list[str]]:
    """Append ``turns`` user/assistant turns to random shared sessions; returns what it wrote."""
    rng = random.Random(seed)
    written: dict[str, list[str]] = {}
    for turn in range(turns):
        key = rng.choice(keys)
        question = Message(role="user", content=f"worker {seed} asks #{turn}", author=f"w{seed}")
        answer = Message(
            role="assistant",
            content=f"worker {seed} answers #{turn}",
            author=f"w{seed}",
            tool_calls=[ToolCall(id=f"c{turn}", name="lookup", input='{"q": 1}', output="42")]
            if turn % 3 == 0
            else [],
        )
        started = time.perf_counter()
        store.append_messages(key, [question, answer])
        latencies.append(time.perf_counter() - started)
        written.setdefault(key, []).extend([question.id, answer.id])
    return written


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="memory://", help="store URL (default: memory://)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--turns", type=int, default=200, help="turns per worker")
    args = parser.parse_args(argv)

    prefix = f"demo:{uuid.uuid4().hex[:8]}:"
    store = RedisStore.from_url(args.url, prefix=prefix, ttl=3600)
    keys = [f"chat:{i}" for i in range(args.sessions)]
    for key in keys:
        store.create(Session(key=key, agent_id="demo", channel_type="cli"))

    latencies: list[float] = []
    results: list[dict[str, list[str]]] = []
    lock = threading.Lock()

    def run(seed: int) -> None:
        own: list[float] = []
        out = worker(store, keys, args.turns, seed, own)
        with lock:
            results.append(out)
            latencies.extend(own)

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(w,)) for w in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    elapsed = time.perf_counter() - started

    # Compaction: every session's first half becomes one summary message.
    compacted = 0
    summarised: set[str] = set()
    for key in keys:
        history = store.get_history(key)
        if len(history) >= 4:
            up_to = len(history) // 2 - 1
            compacted += store.compact_messages(
                key, up_to, f"{up_to + 1} messages", expect_id=history[up_to].id
            )
            summarised.update(m.id for m in history[: up_to + 1])

    lost = duplicated = 0
    for key in keys:
        stored = [m.id for m in store.get_history(key)][1:]  # after the summary
        expected = [i for r in results for i in r.get(key, []) if i not in summarised]
        held = set(stored)
        duplicated += len(stored) - len(held)
        lost += sum(1 for i in expected if i not in held)

    total = len(latencies)
    p50 = statistics.median(latencies) * 1e6 if latencies else 0.0
    p99 = sorted(latencies)[int(total * 0.99) - 1] * 1e6 if latencies else 0.0
    print(f"store            {args.url} (prefix {prefix})")
    print(f"workers          {args.workers} threads x {args.turns} turns")
    print(f"sessions         {len(store.list_sessions())}")
    print(f"appends          {total} (2 messages each, one round trip each)")
    print(f"throughput       {total / elapsed:,.0f} appends/s")
    print(f"latency          p50 {p50:,.0f} us, p99 {p99:,.0f} us")
    print(f"compacted        {compacted} messages into {len(keys)} summaries")
    print(f"lost/duplicated  {lost}/{duplicated}")
    for key in keys:
        store.delete(key)
    store.close()
    ok = lost == 0 and duplicated == 0 and len(threads) == args.workers
    print("consistency      OK" if ok else "consistency      FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
