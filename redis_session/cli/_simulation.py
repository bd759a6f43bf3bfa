"""The demo behind ``redis-session demo``: simulated agent workers sharing one store.

Worker threads create sessions, append turns (a question, an answer with a tool call, the
tool's result), fork sub-agent children and merge them back (alternately as a summary and as the
child's own messages), and compact long histories, while a listener counts lifecycle events.
Every message carries a unique token ``<#…>`` in its content, so the final check can tell, for
every session, that nothing written was lost and nothing was stored twice.
"""

from __future__ import annotations

import random
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import StaleExpectation
from ..extension import Commands, Op
from ..models import ChildSessionConfig, Message, Session, SessionLifecycleEvent, ToolCall
from ..store import RedisStore

T = TypeVar("T")
TOKEN = re.compile(r"<#([^>]+)>")
AGENTS = ("researcher", "coder", "critic")
TOOLS = ("search_docs", "get_weather", "run_sql", "create_ticket")
COUNTED_EVENTS = ("create", "fork", "merge", "compact")
EVENT_WAIT = 10.0
"""Seconds to wait, after the workers finish, for the listener to receive every event."""


@dataclass(frozen=True)
class DemoConfig:
    """The size of a demo run."""

    workers: int = 4
    sessions: int = 8
    turns: int = 30
    """Turns per worker; each appends three messages in one round trip."""
    fork_every: int = 3
    """Every N-th turn of a worker also forks a child, writes to it and merges it."""
    compact_at: int = 30
    """A session's owner compacts it when its history is longer than this."""
    keep: int = 8
    """How many of the newest messages a compaction keeps."""
    seed: int = 0


@dataclass
class DemoResult:
    """What a demo run did and what the final check found."""

    config: DemoConfig
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    """Seconds per store call."""
    counts: Counter[str] = field(default_factory=Counter)
    """Operations done: ``turns``, ``appended`` (messages), ``forks``, ``merges``, ``compactions``,
    ``merged_summaries`` (merges as one summary message), ``compacted`` (messages), ``stale``
    (compactions refused as stale)."""
    events: Counter[str] = field(default_factory=Counter)
    """Lifecycle events the listener received, by type."""
    sessions: int = 0
    messages: int = 0
    """Messages stored at the end, over all sessions."""
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    """Messages stored that no worker wrote, or that a compaction had removed."""
    unmerged: int = 0
    """Children that are not merged at the end, or forks that are missing."""
    errors: list[str] = field(default_factory=list)

    @property
    def expected_events(self) -> Counter[str]:
        """The events the run's successful changes must have published."""
        c = self.counts
        return Counter(
            create=self.config.sessions,
            fork=c["forks"],
            merge=c["merges"],
            compact=c["compactions"],
        )

    @property
    def missing_events(self) -> int:
        """Expected events the listener did not receive."""
        return sum((self.expected_events - self.events).values())

    @property
    def ok(self) -> bool:
        """Whether nothing was lost, duplicated or left behind, and every event arrived."""
        return not (
            self.lost
            or self.duplicated
            or self.unexpected
            or self.unmerged
            or self.missing_events
            or self.errors
        )

    @property
    def ops(self) -> int:
        """Store calls made by the workers."""
        return len(self.latencies)

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the call latencies, in seconds."""
        if not self.latencies:
            return 0.0
        if q == 0.5:
            return statistics.median(self.latencies)
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class _Ledger:
    """What the workers wrote, shared between threads."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.lock = threading.Lock()
        self.written: dict[str, set[str]] = {k: set() for k in keys}
        self.compacted: dict[str, set[str]] = {k: set() for k in keys}
        self.latencies: list[float] = []
        self.counts: Counter[str] = Counter()
        self.forks: dict[str, int] = {k: 0 for k in self.written}
        self.errors: list[str] = []


def token_of(message: Message) -> str | None:
    """The demo token in a message's content, if it has one."""
    found = TOKEN.search(message.content)
    return found.group(1) if found else None


class _Worker:
    """One simulated agent worker (a thread)."""

    def __init__(
        self,
        n: int,
        store: RedisStore,
        keys: list[str],
        config: DemoConfig,
        ledger: _Ledger,
        on_turn: Callable[[], object],
    ) -> None:
        self.n = n
        self.store = store
        self.keys = keys
        self.config = config
        self.ledger = ledger
        self.on_turn = on_turn
        self.rng = random.Random(config.seed * 1_000 + n)
        self.latencies: list[float] = []
        self.counts: Counter[str] = Counter()

    def timed(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        started = time.perf_counter()
        result = call(*args, **kwargs)
        self.latencies.append(time.perf_counter() - started)
        return result

    def wrote(self, key: str, tokens: Iterable[str]) -> None:
        with self.ledger.lock:
            self.ledger.written[key].update(tokens)

    def owns(self, key: str) -> bool:
        return self.keys.index(key) % self.config.workers == self.n

    def create_own(self) -> None:
        for key in self.keys:
            if self.owns(key):
                session = Session(key=key, agent_id="demo", channel_type="cli", model="demo-1")
                self.timed(self.store.create, session)

    def turn(self, t: int) -> None:
        key = self.rng.choice(self.keys)
        tag = f"w{self.n}-t{t}"
        tool = self.rng.choice(TOOLS)
        call = ToolCall(id=f"call-{tag}", name=tool, input=f'{{"turn": {t}}}', output="ok")
        batch = [
            Message(role="user", content=f"<#{tag}-q> question {t}", author="user"),
            Message(
                role="assistant",
                content=f"<#{tag}-a> calling {tool}",
                author=f"worker-{self.n}",
                tool_calls=[call],
            ),
            Message(role="tool", content=f"<#{tag}-r> {tool} returned ok"),
        ]
        self.counts["appended"] += self.timed(self.store.append_messages, key, batch)
        self.wrote(key, [f"{tag}-q", f"{tag}-a", f"{tag}-r"])
        if t % self.config.fork_every == self.config.fork_every - 1:
            self.sub_agent(key, tag, t)
        if self.owns(key):
            self.maybe_compact(key, tag)
        self.counts["turns"] += 1

    def sub_agent(self, key: str, tag: str, t: int) -> None:
        agent = AGENTS[(t // self.config.fork_every) % len(AGENTS)]
        child = self.timed(self.store.fork_child, key, agent, ChildSessionConfig(inherit_history=2))
        with self.ledger.lock:
            self.ledger.forks[key] += 1
        self.counts["forks"] += 1
        notes = [
            Message(role="assistant", content=f"<#{tag}-c1> {agent} looked it up", author=agent),
            Message(
                role="assistant", content=f"<#{tag}-c2> {agent} found the answer", author=agent
            ),
        ]
        self.timed(self.store.append_child_messages, child.key, notes)
        if t % 2:  # alternate: merge as one summary message, or as the child's own messages
            self.timed(self.store.merge_child, child.key, f"<#{tag}-s> {agent}: all done")
            self.wrote(key, [f"{tag}-s"])
            self.counts["merged_summaries"] += 1
        else:
            self.timed(self.store.merge_child, child.key, "")
            self.wrote(key, [f"{tag}-c1", f"{tag}-c2"])
        self.counts["merges"] += 1

    def maybe_compact(self, key: str, tag: str) -> None:
        history = self.timed(self.store.get_history, key)
        if len(history) <= self.config.compact_at:
            return
        up_to = len(history) - self.config.keep - 1
        gone = [token_of(m) for m in history[: up_to + 1]]
        summary = f"<#{tag}-k> {up_to + 1} earlier messages"
        try:
            self.timed(
                self.store.compact_messages, key, up_to, summary, expect_id=history[up_to].id
            )
        except StaleExpectation:
            self.counts["stale"] += 1
            return
        with self.ledger.lock:
            self.ledger.compacted[key].update(g for g in gone if g is not None)
            self.ledger.written[key].add(f"{tag}-k")
        self.counts["compactions"] += 1
        self.counts["compacted"] += up_to + 1

    def run(self, barrier: threading.Barrier) -> None:
        try:
            self.create_own()
            barrier.wait(timeout=60)
            for t in range(self.config.turns):
                self.turn(t)
                self.on_turn()
        except Exception as exc:
            barrier.abort()
            with self.ledger.lock:
                self.ledger.errors.append(f"worker {self.n}: {type(exc).__name__}: {exc}")
        finally:
            with self.ledger.lock:
                self.ledger.latencies.extend(self.latencies)
                self.ledger.counts.update(self.counts)


def _listen(
    store: RedisStore,
    result: DemoResult,
    stop: threading.Event,
    ready: threading.Event,
    on_event: Callable[[SessionLifecycleEvent], object],
) -> None:
    with store.listen() as listener:
        ready.set()
        while not stop.is_set():
            event = listener.get(timeout=0.05)
            if event is not None:
                result.events[str(event.type)] += 1
                on_event(event)


def run_demo(
    store: RedisStore,
    config: DemoConfig,
    *,
    on_event: Callable[[SessionLifecycleEvent], object] = lambda event: None,
    on_turn: Callable[[], object] = lambda: None,
) -> DemoResult:
    """Run the workers over ``store``, then check every session; the store is left as it is.

    ``on_event`` is called (from the listener's thread) with each lifecycle event, ``on_turn``
    (from the workers' threads) after each turn.
    """
    if config.workers < 1 or config.sessions < 1 or config.turns < 0:
        raise ValueError("workers and sessions must be >= 1, turns >= 0")
    if config.fork_every < 1 or config.keep < 1 or config.compact_at <= config.keep:
        raise ValueError("fork_every and keep must be >= 1, compact_at > keep")
    keys = [f"chat:{i}" for i in range(config.sessions)]
    result = DemoResult(config)
    ledger = _Ledger(keys)
    stop, ready = threading.Event(), threading.Event()
    listener = threading.Thread(
        target=_listen, args=(store, result, stop, ready, on_event), daemon=True
    )
    listener.start()
    if not ready.wait(timeout=30):
        raise RuntimeError("the event listener did not subscribe within 30 s")
    barrier = threading.Barrier(config.workers)
    workers = [_Worker(n, store, keys, config, ledger, on_turn) for n in range(config.workers)]
    threads = [threading.Thread(target=w.run, args=(barrier,), daemon=True) for w in workers]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    result.elapsed = time.perf_counter() - started
    if any(thread.is_alive() for thread in threads):
        ledger.errors.append("a worker did not finish within 300 s")
    result.latencies = ledger.latencies
    result.counts = ledger.counts
    result.errors = ledger.errors

    deadline = time.monotonic() + EVENT_WAIT
    while time.monotonic() < deadline and result.missing_events and not result.errors:
        time.sleep(0.02)
    stop.set()
    listener.join(timeout=5)
    _check(store, keys, ledger, result)
    return result


def _check(store: RedisStore, keys: list[str], ledger: _Ledger, result: DemoResult) -> None:
    """Compare every stored session with what the workers wrote."""
    for key in keys:
        history = store.get_history(key)
        tokens = [token_of(m) for m in history]
        held = {t for t in tokens if t is not None}
        expected = ledger.written[key] - ledger.compacted[key]
        result.sessions += 1
        result.messages += len(history)
        result.duplicated += len([t for t in tokens if t is not None]) - len(held)
        result.lost += len(expected - held)
        result.unexpected += len(held - expected) + tokens.count(None)
        children = store.children_of(key)
        result.unmerged += sum(1 for c in children if not c.is_merged())
        # The newest keep_merged_children merged children stay whole; older ones are pruned
        # (a merge that raced a change of the tree leaves the pruning to the next one).
        forks = ledger.forks[key]
        result.unmerged += len(children) > forks or len(children) < min(forks, 1)


def cleanup(store: RedisStore, config: DemoConfig) -> int:
    """Delete the demo's sessions (and their children), then the event logs of its prefix
    and the deletes' call tokens (which outlive sessions, the tokens for a minute: the demo's
    prefix is its own); returns how many existed.
    """
    keys = [f"chat:{i}" for i in range(config.sessions)]
    existed = sum(store.delete(key) for key in keys)
    logs = sorted({store.extension.log_of(key) for key in keys})
    tokens = [store.extension.schema.session(key).gone for key in keys]
    store.run(_commands([("DEL", name) for name in (*logs, *tokens)]))
    return existed


def _commands(commands: list[tuple[Any, ...]]) -> Op[Any]:
    return (yield Commands(commands))
