"""The soak workload: one OS process per worker, a realistic mix of operations on sessions
shared by all workers and on private ones, and a ledger of everything acknowledged.

Designed to be checkable: every message content is unique; each shared session is compacted
by one worker only (its "owner"), with ``expect_id``, so the messages a compaction removed are
exactly those it read (others only append at the tail); private sessions belong to one worker.
Deleted sessions are never re-created (fresh keys), so "nothing of it remains" is checkable.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis

from redis_session import (
    ChildSessionConfig,
    DuplicateSession,
    Message,
    RedisStore,
    Session,
    SessionError,
)
from redis_session.keys import KeySchema
from tests.support.consistency import Ledger
from tests.support.servers import wait_until

COMPACT_PREFIX = "[Compacted Summary]\n"


@dataclass
class Plan:
    port: int
    prefix: str
    worker: int
    shared: list[str]
    max_ops: int
    seconds: float
    ttl: float
    out: str
    seed: int = 0
    dedup_window: int = 1000


@dataclass
class WorkerReport:
    worker: int
    ops: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    anomalies: list[str] = field(default_factory=list)
    created_shared: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    """shared session → the value of this worker's own metadata entry last acknowledged."""
    metadata_unsure: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    finished_at: float = 0.0
    """Wall-clock time the worker stopped writing: its private session expires TTL after."""
    crashed: str = ""


class Worker:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.p = plan.worker
        self.rng = random.Random(plan.seed * 1000 + plan.worker)
        # The constructor, not from_url: redis-py 8.1's Redis.from_url gives connections no
        # retries at all, while Redis(...) retries connection errors and timeouts 10x.
        client = redis.Redis(host="127.0.0.1", port=plan.port)
        self.store = RedisStore(
            client, prefix=plan.prefix, ttl=plan.ttl, dedup_window=plan.dedup_window
        )
        self.ledger = Ledger()
        self.report = WorkerReport(worker=plan.worker)
        self.seq = 0
        self.private: str | None = None
        self.private_n = 0
        self.owned = [s for i, s in enumerate(plan.shared) if i % 4 == plan.worker % 4]
        self.lingering: dict[str, tuple[str, list[str], bool]] = {}
        """shared session -> (a child this worker keeps for the whole run, written rarely, and
        merged at the end: the tree's expiry must keep it alive while its parent is written;
        its contents; whether a write to it had an unknown outcome)."""

    def content(self, tag: str) -> str:
        self.seq += 1
        return f"w{self.p}:{tag}:{self.seq}"

    def call(self, op: str, fn: Any) -> tuple[bool, Any]:
        """Run one store call; (True, result) or (False, None) after logging the error."""
        self.report.ops[op] += 1
        try:
            return True, fn()
        except (redis.RedisError, SessionError) as exc:
            self.report.errors[f"{op}: {type(exc).__name__}"] += 1
            return False, None

    # -- operations -------------------------------------------------------------------------

    def create_shared(self) -> None:
        for key in self.plan.shared:
            init = f"init:{key}:w{self.p}"
            self.report.ops["create"] += 1
            try:
                self.store.create(Session(key=key, history=[Message(role="user", content=init)]))
            except DuplicateSession:
                continue
            except (redis.RedisError, SessionError) as exc:
                self.report.errors[f"create: {type(exc).__name__}"] += 1
                self.ledger.maybe(key, init)
                continue
            self.report.created_shared.append(key)
            self.ledger.ack(key, "create", init)
        for key in self.plan.shared:
            self.ledger.live.add(key)
        meta = [KeySchema(self.plan.prefix).session(k).meta for k in self.plan.shared]
        client: Any = self.store.client
        if not wait_until(lambda: client.exists(*meta) == len(meta), 20):
            raise RuntimeError("the shared sessions were not created")

    def append(self, key: str, stream: str) -> None:
        c = self.content("m")
        msg = Message(role="user", content=c)
        ok, new = self.call("append", lambda: self.store.append_message(key, msg))
        if ok:
            self.ledger.ack(key, stream, c)
            if not new:  # a fresh message: redis-py's retry found its first attempt stored
                self.report.ops["append answered False (retried)"] += 1
        else:
            self.ledger.maybe(key, c)

    def read(self, key: str) -> None:
        if self.rng.random() < 0.2:
            ok, got = self.call("get", lambda: self.store.get(key).history)
        else:
            ok, got = self.call("get_history", lambda: self.store.get_history(key, last=20))
        if ok:
            contents = [m.content for m in got]
            if len(set(contents)) != len(contents):
                self.report.anomalies.append(self.repeated(key, contents))

    def repeated(self, key: str, contents: list[str]) -> str:
        """The anomaly of a read that held a content twice: which, where, and whether the
        stored list holds it twice too (read by a store without a read cache)."""
        twice = sorted({c for c in contents if contents.count(c) > 1})
        where = [i for i, c in enumerate(contents) if c in twice]
        fresh = RedisStore(self.store.client, prefix=self.plan.prefix, read_cache_bytes=0)
        try:
            stored = [m.content for m in fresh.get_history(key)]
            also = f"stored {max(stored.count(c) for c in twice)} times"
        except (redis.RedisError, SessionError) as exc:
            also = f"stored list not read: {exc!r}"
        return f"a read of {key} held {twice} twice (at {where} of {len(contents)}); {also}"

    def set_metadata(self, key: str) -> None:
        """Each worker writes its own entry; concurrent partial updates must keep them all."""
        value = self.content("meta")
        ok, _ = self.call(
            "update_metadata", lambda: self.store.update_metadata(key, set={f"w{self.p}": value})
        )
        if ok:
            self.report.metadata[key] = value
        else:
            self.report.metadata_unsure.append(key)

    def compact(self, key: str) -> None:
        ok, history = self.call("get_history", lambda: self.store.get_history(key))
        if not ok or len(history) < 4:
            return
        contents = [m.content for m in history]
        if len(set(contents)) != len(contents):  # a compaction would hide it from the end check
            self.report.anomalies.append(self.repeated(key, contents))
        upto = self.rng.randrange(1, len(history) - 1)
        summary = self.content("sum")
        ok, n = self.call(
            "compact",
            lambda: self.store.compact_messages(key, upto, summary, expect_id=history[upto].id),
        )
        cut = {m.content for m in history[: upto + 1]}
        if ok:
            self.ledger.removed.setdefault(key, set()).update(cut)
            self.ledger.ack(key, "compact", COMPACT_PREFIX + summary)
            if n == 0:  # redis-py's retry found this very compaction done (by its summary id)
                self.report.ops["compact answered 0 (retried)"] += 1
            elif n != upto + 1:
                self.report.anomalies.append(f"compaction of {key} removed {n}, not {upto + 1}")
        else:
            self.ledger.maybe_removed.setdefault(key, set()).update(cut)
            self.ledger.maybe(key, COMPACT_PREFIX + summary)

    def child_round(self, parent: str) -> None:
        """Fork, append 1-4 messages to the child, then merge (history or summary) or
        discard it."""
        agent = f"agent{self.p}"
        ok, child = self.call(
            "fork",
            lambda: self.store.fork_child(parent, agent, ChildSessionConfig(inherit_history=2)),
        )
        if not ok:
            return
        written: list[str] = []
        doubtful = False
        for _ in range(self.rng.randint(1, 4)):
            c = self.content("c")
            ok, _ = self.call(
                "append_child",
                lambda c=c: self.store.append_child_message(
                    child.key, Message(role="user", content=c)
                ),
            )
            written.append(c)
            doubtful |= not ok
        roll = self.rng.random()
        stream = f"merge:{child.key}"
        if roll < 0.5:
            ok, _ = self.call("merge", lambda: self.store.merge_child(child.key, ""))
            if ok and not doubtful:
                self.ledger.ack(parent, stream, *written)
                self.ledger.contiguous.add((parent, stream))
            else:
                self.ledger.maybe(parent, *written)
        elif roll < 0.75:
            summary = f"msum:{child.key}"
            ok, _ = self.call("merge", lambda: self.store.merge_child(child.key, summary))
            self.ledger.absent.setdefault(parent, set()).update(written)
            if ok:
                self.ledger.ack(parent, stream, summary)
            else:
                self.ledger.maybe(parent, summary)
        else:
            ok, _ = self.call("discard", lambda: self.store.discard_child(child.key))
            if ok:
                self.ledger.absent.setdefault(parent, set()).update(written)
            else:
                self.ledger.maybe(parent, *written)

    def linger_start(self) -> None:
        for key in self.plan.shared:
            agent = f"linger{self.p}"
            ok, child = self.call("fork", lambda key=key: self.store.fork_child(key, agent))
            if ok:
                self.lingering[key] = (child.key, [], False)
                self.linger_write(key)

    def linger_write(self, key: str) -> None:
        if key not in self.lingering:
            return
        child, written, doubtful = self.lingering[key]
        c = self.content("l")
        ok, _ = self.call(
            "append_child",
            lambda: self.store.append_child_message(child, Message(role="user", content=c)),
        )
        written.append(c)
        self.lingering[key] = (child, written, doubtful or not ok)

    def linger_end(self) -> None:
        """Merge every lingering child: each must have outlived several TTLs of no writes."""
        for key, (child, written, doubtful) in self.lingering.items():
            ok, _ = self.call("merge", lambda child=child: self.store.merge_child(child, ""))
            if ok and not doubtful:
                self.ledger.ack(key, f"merge:{child}", *written)
                self.ledger.contiguous.add((key, f"merge:{child}"))
            else:
                self.ledger.maybe(key, *written)
                try:
                    self.store.get_child(child)
                except SessionError as exc:
                    self.report.anomalies.append(f"lingering child {child} is gone: {exc}")

    def private_step(self) -> None:
        if self.private is None:
            self.private_n += 1
            key = f"priv:w{self.p}:{self.private_n}"
            init = f"init:{key}"
            ok, _ = self.call(
                "create",
                lambda: self.store.create(
                    Session(key=key, history=[Message(role="user", content=init)])
                ),
            )
            if ok:
                self.private = key
                self.ledger.ack(key, "create", init)
                self.ledger.live.add(key)
            return
        key = self.private
        roll = self.rng.random()
        if roll < 0.6:
            self.append(key, f"w{self.p}")
        elif roll < 0.75:
            self.compact(key)
        elif roll < 0.9:
            self.child_round(key)
        else:
            if self.rng.random() < 0.5:  # leave an unmerged child for the delete to remove
                self.call("fork", lambda: self.store.fork_child(key, f"left{self.p}"))
            ok, _ = self.call("delete", lambda: self.store.delete(key))
            self.ledger.live.discard(key)
            if ok:
                self.ledger.deleted.add(key)
                self.ledger.streams.pop(key, None)
                ok, rows = self.call("list", lambda: self.store.list_sessions())
                if ok and any(r.key == key for r in rows):
                    self.report.anomalies.append(f"{key} listed after its delete")
            self.private = None

    def run(self) -> None:
        start = time.monotonic()
        deadline = start + self.plan.seconds
        self.create_shared()
        self.linger_start()
        done = 0
        while done < self.plan.max_ops and time.monotonic() < deadline:
            before = sum(self.report.ops.values())
            roll = self.rng.random()
            shared = self.rng.choice(self.plan.shared)
            if roll < 0.002:
                self.linger_write(shared)
            elif roll < 0.40:
                self.append(shared, f"w{self.p}")
            elif roll < 0.55:
                self.read(shared)
            elif roll < 0.62:
                self.child_round(shared)
            elif roll < 0.65 and self.owned:
                self.compact(self.rng.choice(self.owned))
            elif roll < 0.68:
                self.set_metadata(shared)
            else:
                self.private_step()
            done += sum(self.report.ops.values()) - before
        self.linger_end()
        self.report.elapsed = time.monotonic() - start
        self.report.finished_at = time.time()


def run_worker(plan_json: str) -> None:
    """Entry point of a worker process (``multiprocessing``, spawn): runs the plan and writes
    ``{"report": ..., "ledger": ...}`` to ``plan.out``."""
    plan = Plan(**json.loads(plan_json))
    worker = Worker(plan)
    try:
        worker.run()
    except Exception:
        worker.report.crashed = traceback.format_exc()
    finally:
        worker.store.close()
    with open(plan.out, "w") as f:
        report = {**vars(worker.report), "ops": dict(worker.report.ops)}
        report["errors"] = dict(worker.report.errors)
        json.dump({"report": report, "ledger": worker.ledger.to_json()}, f)
