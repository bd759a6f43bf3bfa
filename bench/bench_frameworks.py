"""One agent turn through each framework's own Runner, our session store against theirs.

Two phases in one run, each a loop of interleaved rounds (the stores of a phase take one turn
each per round, their order rotating every round, so drift of the machine or of the server
affects them alike):

  openai-agents  ``Runner.run(agent, input, session=...)``: the session's whole history is
                 read, the scripted model answers, the new input and the answer are saved.
                 Stores: ours (``integrations.openai_agents.RedisAgentSession``), the SDK's
                 ``agents.extensions.memory.redis_session.RedisSession`` (the base of the
                 ratios) and, for reference, the SDK's ``SQLiteSession`` and a run with no
                 session at all (the framework's own cost of a turn).
  adk            one ``google.adk.runners.Runner.run_async`` invocation with a new user
                 message: ``get_session`` (every event), the user's event appended, the
                 scripted model's answer appended. Stores: ours
                 (``integrations.adk.RedisSessionService``), ADK's ``DatabaseSessionService``
                 on SQLite through aiosqlite (the base of the ratios; it needs SQLAlchemy,
                 ``pip install 'google-adk[db]'`` -- without it ``SqliteSessionService`` is the
                 base) and, for reference, ADK's ``SqliteSessionService`` and
                 ``InMemorySessionService``.

Models are scripted (no network): a ``Model`` / ``BaseLlm`` subclass answering with a fixed
text. Every session starts with ``--events`` items / events of a realistic mix (user
question, function call, function result, assistant answer; 200-600 characters of text
each), the same for every store. A turn adds two, so each store spreads its turns over a pool
of identical pre-filled sessions, none growing by more than 10% (200 -> 220).

Per turn: wall time (``time.perf_counter_ns``), client CPU (``time.process_time_ns``, every
thread of the process: aiosqlite's included), the store's part of the turn (the time spent
inside the session's / the service's methods the Runner called), and for the Redis stores the
round trips (socket writes of redis-py asyncio connections), commands sent (client side), and
the server's calls and time (``INFO commandstats`` delta around the turn, without INFO;
commands run by Lua scripts count as calls). The tables give median and p90 in microseconds
and the ratio of the medians to the framework's own store. SQLite is in-memory (``:memory:``)
unless ``--sqlite file`` (files in a temporary directory). After the loops, every session is
read back and its length checked (events + 2 per turn it took).

Redis keys live under ``bench:<uuid8>:`` and are deleted at the end (SCAN + DEL). Every turn
is bounded by a timeout (``TURN_TIMEOUT``; pre-fill, read-back and close by ``SETUP_TIMEOUT``;
Redis sockets by 10 s), rounds and events by ``MAX_ROUNDS`` / ``MAX_EVENTS``.

    .venv/bin/python bench/bench_frameworks.py [--url redis://127.0.0.1:6379/0] [--rounds 30]
        [--events 200] [--sqlite memory|file] [--json out.json] [--markdown] [--quick]

``--quick`` (3 rounds after 1 warm-up, 20-event sessions) is a smoke test of the whole path.
The default of 30 rounds takes about a minute on a 2-core VM (ADK turns are ~50 ms each).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import orjson
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.utils
from agents import Agent, RunConfig, Runner, SQLiteSession, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.extensions.memory.redis_session import RedisSession
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory import Session as AgentSession
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner as AdkRunner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam

import redis_session
from bench.harness import text_table
from redis_session import AsyncRedisStore
from redis_session._async import connect as _connect_async
from redis_session.integrations.adk import RedisSessionService
from redis_session.integrations.openai_agents import RedisAgentSession

WARMUP = 3
"""Rounds run before the timed ones (connections, scripts loaded, caches warm)."""
GROWTH = 0.10
"""How much a pre-filled session may grow over the turns it takes (10%: 200 -> 220)."""
TURN_TIMEOUT = 30.0
"""Seconds one turn may take before the run is abandoned."""
SETUP_TIMEOUT = 600.0
"""Seconds a store's pre-fill, read-back or close may take before the run is abandoned."""
MAX_ROUNDS = 10_000
MAX_EVENTS = 10_000
PREFILL_BATCH = 50
ANSWER = "Done: the order ships on Tuesday, and I have emailed you the tracking number."
QUESTION = "Can you check on my order and tell me when it ships?"
APP = "bench-app"
USER = "bench-user"
AGENT = "assistant"


# -- scripted models ------------------------------------------------------------------------------


class ScriptedModel(Model):
    """An OpenAI Agents model that answers every request with :data:`ANSWER`, no network."""

    def __init__(self) -> None:
        self._ids = itertools.count()

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """One assistant message holding :data:`ANSWER`."""
        text = ResponseOutputText(type="output_text", text=ANSWER, annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_scripted_{next(self._ids)}",
            type="message",
            role="assistant",
            status="completed",
            content=[text],
        )
        usage = Usage(requests=1, input_tokens=1000, output_tokens=20, total_tokens=1020)
        return ModelResponse(output=[message], usage=usage, response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Not used: the benchmark runs ``Runner.run``, never streams."""
        raise NotImplementedError("the scripted model does not stream")
        yield  # an async generator, as the interface expects


class ScriptedLlm(BaseLlm):
    """An ADK model that answers every request with :data:`ANSWER`, no network."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """One final response (not partial) holding :data:`ANSWER`."""
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=ANSWER)]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1000, candidates_token_count=20, total_token_count=1020
            ),
        )


# -- the pre-filled history ------------------------------------------------------------------------


def _text(i: int) -> str:
    """200-600 characters of text, varying with ``i``."""
    words = ("the", "order", "was", "placed", "on", "Monday", "and", "the", "parcel", "left")
    out = f"message {i}:"
    while len(out) < 200 + (i * 97) % 400:
        out += " " + words[(i + len(out)) % len(words)]
    return out


def openai_items(count: int) -> list[TResponseInputItem]:
    """``count`` input items: user question, function call, its output, assistant answer."""
    items: list[TResponseInputItem] = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            items.append({"role": "user", "content": _text(i)})
        elif kind == 1:
            args = json.dumps({"order": f"A-{i}", "detail": "status"})
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"call_{i}",
                    "name": "lookup",
                    "arguments": args,
                }
            )
        elif kind == 2:
            items.append(
                {"type": "function_call_output", "call_id": f"call_{i - 1}", "output": _text(i)}
            )
        else:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{i}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": _text(i), "annotations": []}],
                }
            )
    return items


def adk_events(count: int) -> list[Event]:
    """``count`` events of the same mix, as ADK's own flows would store them."""
    events: list[Event] = []
    for i in range(count):
        kind, invocation = i % 4, f"e-{i // 4}"
        if kind == 0:
            content = types.Content(role="user", parts=[types.Part(text=_text(i))])
            events.append(Event(invocation_id=invocation, author="user", content=content))
            continue
        if kind == 1:
            call = types.FunctionCall(
                id=f"adk-call-{i}", name="lookup", args={"order": f"A-{i}", "detail": "status"}
            )
            content = types.Content(role="model", parts=[types.Part(function_call=call)])
        elif kind == 2:
            result = types.FunctionResponse(
                id=f"adk-call-{i - 1}", name="lookup", response={"result": _text(i)}
            )
            content = types.Content(role="user", parts=[types.Part(function_response=result)])
        else:
            content = types.Content(role="model", parts=[types.Part(text=_text(i))])
        events.append(Event(invocation_id=invocation, author=AGENT, content=content))
    return events


# -- counting and clocks ---------------------------------------------------------------------------


class Wire:
    """Socket writes (round trips) and commands of every redis-py asyncio connection."""

    writes = 0
    commands = 0
    direct = False
    """Inside the store's direct path's packing, which counts its commands itself."""

    @classmethod
    def install(cls) -> Callable[[], None]:
        """Count from now on; returns the function that restores redis-py's methods (and the
        store's direct path's packing, which may pack in C without them)."""
        conn = redis.asyncio.connection.AbstractConnection
        send, pack = conn.send_packed_command, conn.pack_command
        direct_path: Any = _connect_async  # its packed(): set back by restore()
        packed = direct_path.packed

        async def counting_send(self: Any, command: Any, check_health: bool = True) -> None:
            cls.writes += 1
            await send(self, command, check_health)

        def counting_pack(self: Any, *args: Any) -> Any:
            if not cls.direct:
                cls.commands += 1  # once per command, pipelines' (pack_commands calls it)
            return pack(self, *args)

        def counting_packed(connection: Any, commands: Sequence[tuple[Any, ...]]) -> Any:
            cls.commands += len(commands)
            cls.direct = True
            try:
                return packed(connection, commands)
            finally:
                cls.direct = False

        conn.send_packed_command = counting_send  # type: ignore[method-assign]
        conn.pack_command = counting_pack  # type: ignore[method-assign]
        direct_path.packed = counting_packed

        def restore() -> None:
            conn.send_packed_command = send  # type: ignore[method-assign]
            conn.pack_command = pack  # type: ignore[method-assign]
            direct_path.packed = packed

        return restore


class StoreClock:
    """Time spent inside a store's methods (outermost calls only) since the last reset."""

    def __init__(self) -> None:
        self.ns = 0
        self._depth = 0

    def wrap(self, obj: object, *names: str) -> None:
        """Replace ``obj.<name>`` (coroutine methods) by timed versions, on this instance."""
        for name in names:
            setattr(obj, name, self._timed(getattr(obj, name)))

    def _timed(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return await fn(*args, **kwargs)
            self._depth += 1
            t0 = time.perf_counter_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.ns += time.perf_counter_ns() - t0
                self._depth -= 1

        return timed


class ServerStats:
    """``INFO commandstats`` totals (calls, usec) of the server, INFO itself left out."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=10)

    def snapshot(self) -> tuple[int, int]:
        """Calls and µs of every command but INFO so far."""
        stats: dict[str, Any] = self.client.info("commandstats")
        calls = usec = 0
        for name, entry in stats.items():
            if name != "cmdstat_info":
                calls += int(entry["calls"])
                usec += int(entry["usec"])
        return calls, usec


# -- samples and rows ------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def _p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]) if ordered else math.nan


@dataclass
class Samples:
    """Per-turn figures of one store: wall and CPU ns, store part ns, wire and server counts."""

    wall_ns: list[int] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    store_ns: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)
    commands: list[int] = field(default_factory=list)
    server_calls: list[int] = field(default_factory=list)
    server_usec: list[int] = field(default_factory=list)


@dataclass
class Row:
    """One line of a result table: a store's turn against the framework's own store's."""

    framework: str
    store: str
    role: str
    """``ours``, ``framework`` (the base of the ratios) or ``reference``."""
    on_redis: bool
    n: int
    median: float
    p90: float
    base_median: float
    cpu: float
    store_part: float | None
    round_trips: tuple[int, int] | None
    """Fewest and most round trips of a turn (Redis stores only)."""
    commands: tuple[int, int] | None
    server_calls: float | None
    server_us: float | None

    @property
    def ratio(self) -> float:
        """This store's median turn over the framework's own store's."""
        return self.median / self.base_median

    def as_json(self) -> dict[str, Any]:
        """The row as a JSON-ready dict (µs)."""
        return {
            "framework": self.framework,
            "store": self.store,
            "role": self.role,
            "on_redis": self.on_redis,
            "n": self.n,
            "median_us": self.median,
            "p90_us": self.p90,
            "ratio_to_framework_store": self.ratio,
            "client_cpu_median_us": self.cpu,
            "store_part_median_us": self.store_part,
            "round_trips_min": None if self.round_trips is None else self.round_trips[0],
            "round_trips_max": None if self.round_trips is None else self.round_trips[1],
            "commands_min": None if self.commands is None else self.commands[0],
            "commands_max": None if self.commands is None else self.commands[1],
            "server_calls_median": self.server_calls,
            "server_us_median": self.server_us,
        }


# -- the stores under test -------------------------------------------------------------------------


class Case:
    """One store of a phase: its sessions, its turn, its samples."""

    framework = ""

    def __init__(self, name: str, role: str, *, on_redis: bool) -> None:
        self.name, self.role, self.on_redis = name, role, on_redis
        self.samples = Samples()
        self.clock = StoreClock()
        self.turns_per_session = 1

    async def prepare(self, sessions: int, events: int, turns_per_session: int) -> None:
        """Create and pre-fill ``sessions`` sessions of ``events`` items each."""
        raise NotImplementedError

    async def turn(self, i: int) -> None:
        """One Runner turn on the session whose turn ``i`` is."""
        raise NotImplementedError

    async def lengths(self) -> list[int] | None:
        """Items / events stored per session (None: the case keeps no session)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release clients and connections."""


class OpenAICase(Case):
    """``Runner.run`` with a session made by ``make`` (None: without a session)."""

    framework = "openai-agents"

    def __init__(
        self,
        name: str,
        role: str,
        make: Callable[[str], AgentSession] | None,
        *,
        on_redis: bool,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(name, role, on_redis=on_redis)
        self._make, self._close = make, close
        self.sessions: list[AgentSession] = []
        self.agent = Agent(name=AGENT, instructions="Answer briefly.", model=ScriptedModel())
        self.config = RunConfig(tracing_disabled=True)

    async def prepare(self, sessions: int, events: int, turns_per_session: int) -> None:
        self.turns_per_session = turns_per_session
        if self._make is None:
            return
        items = openai_items(events)
        for j in range(sessions):
            session = self._make(f"s{j}")
            for k in range(0, len(items), PREFILL_BATCH):
                await session.add_items(items[k : k + PREFILL_BATCH])
            self.clock.wrap(session, "get_items", "add_items", "pop_item")
            self.sessions.append(session)

    async def turn(self, i: int) -> None:
        session = self.sessions[i // self.turns_per_session] if self.sessions else None
        result = await Runner.run(self.agent, QUESTION, session=session, run_config=self.config)
        if result.final_output != ANSWER:
            raise AssertionError(f"{self.name}: unexpected answer {result.final_output!r}")

    async def lengths(self) -> list[int] | None:
        if self._make is None:
            return None
        return [len(await s.get_items()) for s in self.sessions]

    async def close(self) -> None:
        for session in self.sessions:
            if isinstance(session, SQLiteSession):
                session.close()
        if self._close is not None:
            await self._close()


class AdkCase(Case):
    """One ``Runner.run_async`` invocation over ``service``."""

    framework = "adk"

    def __init__(
        self,
        name: str,
        role: str,
        service: BaseSessionService,
        *,
        on_redis: bool,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(name, role, on_redis=on_redis)
        self.service, self._close = service, close
        self.session_ids: list[str] = []
        agent = LlmAgent(name=AGENT, model=ScriptedLlm(model="scripted"), instruction="Be brief.")
        self.runner = AdkRunner(app_name=APP, agent=agent, session_service=service)

    async def prepare(self, sessions: int, events: int, turns_per_session: int) -> None:
        self.turns_per_session = turns_per_session
        for j in range(sessions):
            session = await self.service.create_session(
                app_name=APP, user_id=USER, session_id=f"s{j}"
            )
            for event in adk_events(events):  # new ids and timestamps for each session
                await self.service.append_event(session, event)
            self.session_ids.append(session.id)
        self.clock.wrap(self.service, "get_session", "append_event")

    async def turn(self, i: int) -> None:
        message = types.Content(role="user", parts=[types.Part(text=QUESTION)])
        last: Event | None = None
        async for event in self.runner.run_async(
            user_id=USER,
            session_id=self.session_ids[i // self.turns_per_session],
            new_message=message,
        ):
            last = event
        parts = last.content.parts if last is not None and last.content is not None else None
        if not parts or parts[0].text != ANSWER:
            raise AssertionError(f"{self.name}: unexpected last event {last!r}")

    async def lengths(self) -> list[int] | None:
        out = []
        for session_id in self.session_ids:
            session = await self.service.get_session(
                app_name=APP, user_id=USER, session_id=session_id
            )
            out.append(-1 if session is None else len(session.events))
        return out

    async def close(self) -> None:
        await self.runner.close()
        if self._close is not None:
            await self._close()


def _has_sqlalchemy() -> bool:
    try:
        import sqlalchemy.ext.asyncio  # noqa: F401
    except ImportError:
        return False
    return True


def openai_cases(url: str, prefix: str, sqlite_dir: str | None) -> list[Case]:
    """Ours, the SDK's RedisSession (base), SQLiteSession and no session."""
    store = AsyncRedisStore.from_url(url, prefix=f"{prefix}oa-ours:")
    sdk_client = redis.asyncio.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)
    sqlite_path = ":memory:" if sqlite_dir is None else os.path.join(sqlite_dir, "agents.db")
    return [
        OpenAICase(
            "ours: RedisAgentSession",
            "ours",
            lambda sid: RedisAgentSession(sid, store),
            on_redis=True,
            close=store.close,
        ),
        OpenAICase(
            "SDK RedisSession",
            "framework",
            lambda sid: RedisSession(sid, redis_client=sdk_client, key_prefix=f"{prefix}oa-sdk"),
            on_redis=True,
            close=sdk_client.aclose,
        ),
        OpenAICase(
            f"SDK SQLiteSession ({'in-memory' if sqlite_dir is None else 'file'})",
            "reference",
            lambda sid: SQLiteSession(sid, db_path=sqlite_path),
            on_redis=False,
        ),
        OpenAICase("no session (framework alone)", "reference", None, on_redis=False),
    ]


def adk_cases(url: str, prefix: str, sqlite_dir: str | None) -> list[Case]:
    """Ours, DatabaseSessionService (base; if SQLAlchemy), SqliteSessionService, in-memory."""
    store = AsyncRedisStore.from_url(url, prefix=f"{prefix}adk-ours:")
    memory = sqlite_dir is None
    kind = "in-memory" if memory else "file"
    cases: list[Case] = [
        AdkCase(
            "ours: RedisSessionService",
            "ours",
            RedisSessionService(store),
            on_redis=True,
            close=store.close,
        )
    ]
    if _has_sqlalchemy():
        from google.adk.sessions import DatabaseSessionService

        db_url = (
            "sqlite+aiosqlite:///:memory:"
            if sqlite_dir is None
            else f"sqlite+aiosqlite:///{os.path.join(sqlite_dir, 'adk-db.sqlite')}"
        )
        db = DatabaseSessionService(db_url)
        cases.append(
            AdkCase(
                f"DatabaseSessionService (sqlite+aiosqlite, {kind})",
                "framework",
                db,
                on_redis=False,
                close=db.close,
            )
        )
    sqlite_path = ":memory:" if sqlite_dir is None else os.path.join(sqlite_dir, "adk.sqlite")
    sqlite = SqliteSessionService(sqlite_path)
    cases.append(
        AdkCase(
            f"SqliteSessionService (aiosqlite, {kind})",
            "reference" if len(cases) > 1 else "framework",
            sqlite,
            on_redis=False,
            close=sqlite.close,
        )
    )
    cases.append(
        AdkCase("InMemorySessionService", "reference", InMemorySessionService(), on_redis=False)
    )
    return cases


# -- the interleaved loop --------------------------------------------------------------------------


def _rotate(i: int, items: list[Case]) -> list[Case]:
    k = i % len(items)
    return items[k:] + items[:k]


async def run_phase(
    cases: list[Case], *, rounds: int, warmup: int, events: int, stats: ServerStats
) -> dict[str, Any]:
    """Pre-fill, then run every case once per round (rotating order); returns phase facts."""
    total = warmup + rounds
    per_session = max(1, int(events * GROWTH) // 2)
    sessions = math.ceil(total / per_session)
    started = time.perf_counter()
    for case in cases:
        async with asyncio.timeout(SETUP_TIMEOUT):
            await case.prepare(sessions, events, per_session)
    prefill_s = time.perf_counter() - started
    gc.collect()
    gc.freeze()  # the pre-filled inputs: collections scan only what the turns allocate
    foreign_calls = 0
    try:
        previous = stats.snapshot()
        for i in range(total):
            for case in _rotate(i, cases):
                writes, commands = Wire.writes, Wire.commands
                case.clock.ns = 0
                cpu0 = time.process_time_ns()
                t0 = time.perf_counter_ns()
                async with asyncio.timeout(TURN_TIMEOUT):
                    await case.turn(i)
                wall = time.perf_counter_ns() - t0
                cpu = time.process_time_ns() - cpu0
                current = stats.snapshot()
                calls, usec = current[0] - previous[0], current[1] - previous[1]
                previous = current
                if not case.on_redis:
                    foreign_calls += calls  # another client's commands: noise on the server
                if i < warmup:
                    continue
                s = case.samples
                s.wall_ns.append(wall)
                s.cpu_ns.append(cpu)
                s.store_ns.append(case.clock.ns)
                s.writes.append(Wire.writes - writes)
                s.commands.append(Wire.commands - commands)
                s.server_calls.append(calls)
                s.server_usec.append(usec)
    finally:
        gc.unfreeze()
    expected = [
        events + 2 * sum(1 for i in range(total) if i // per_session == j) for j in range(sessions)
    ]
    checks = {}
    for case in cases:
        async with asyncio.timeout(SETUP_TIMEOUT):
            found = await case.lengths()
        checks[case.name] = found is None or found == expected
    return {
        "sessions_per_store": sessions,
        "turns_per_session": per_session,
        "session_length_after": {"min": min(expected), "max": max(expected)},
        "prefill_s": prefill_s,
        "server_calls_during_non_redis_turns": foreign_calls,
        "lengths_ok": checks,
    }


def rows_of(cases: Sequence[Case]) -> list[Row]:
    """One row per case, ratios to the case whose role is ``framework``."""
    base = next(c for c in cases if c.role == "framework")
    base_median = _median(base.samples.wall_ns) / 1000
    rows = []
    for c in cases:
        s = c.samples
        redis_only = c.on_redis
        rows.append(
            Row(
                framework=c.framework,
                store=c.name,
                role=c.role,
                on_redis=c.on_redis,
                n=len(s.wall_ns),
                median=_median(s.wall_ns) / 1000,
                p90=_p90(s.wall_ns) / 1000,
                base_median=base_median,
                cpu=_median(s.cpu_ns) / 1000,
                store_part=_median(s.store_ns) / 1000 if any(s.store_ns) else None,
                round_trips=(min(s.writes), max(s.writes)) if redis_only else None,
                commands=(min(s.commands), max(s.commands)) if redis_only else None,
                server_calls=_median(s.server_calls) if redis_only else None,
                server_us=_median(s.server_usec) if redis_only else None,
            )
        )
    return rows


# -- output ----------------------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.0f}"


def _span(value: tuple[int, int] | None) -> str:
    if value is None:
        return "-"
    low, high = value
    return f"{low}" if low == high else f"{low}-{high}"


HEADER = (
    "store",
    "turn med",
    "turn p90",
    "ratio",
    "client CPU",
    "store part",
    "round trips",
    "commands",
    "server calls",
    "server us",
)


def _cells(r: Row) -> list[str]:
    return [
        r.store,
        _us(r.median),
        _us(r.p90),
        f"{r.ratio:.2f}x",
        _us(r.cpu),
        _us(r.store_part),
        _span(r.round_trips),
        _span(r.commands),
        "-" if r.server_calls is None else f"{r.server_calls:.0f}",
        "-" if r.server_us is None else f"{r.server_us:,.0f}",
    ]


def render(rows: Sequence[Row]) -> str:
    """A plain-text table of one phase (µs)."""
    return text_table(HEADER, [_cells(r) for r in rows])


def markdown(rows: Sequence[Row]) -> str:
    """The same table in Markdown (µs; numbers right-aligned)."""
    out = ["| " + " | ".join(HEADER) + " |", "|" + "|".join([":---"] + ["---:"] * 9) + "|"]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    return "\n".join(out)


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _commit() -> dict[str, Any]:
    """The commit of the redis_session package measured, and whether its code is modified."""
    root = Path(redis_session.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "redis_session", "lua"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return {"head": None, "code_modified": None, "path": str(root)}
    return {"head": head or None, "code_modified": bool(dirty), "path": str(root)}


def cleanup(url: str, prefix: str) -> tuple[int, int]:
    """Delete every key under ``prefix``; returns (deleted, left)."""
    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        deleted = 0
        for key in list(client.scan_iter(match=f"{prefix}*", count=1000)):
            deleted += int(client.delete(key))
        left = sum(1 for _ in client.scan_iter(match=f"{prefix}*", count=1000))
        return deleted, left
    finally:
        client.close()


async def run(args: argparse.Namespace, prefix: str, sqlite_dir: str | None) -> dict[str, Any]:
    """Both phases; returns the results as one JSON-ready dict."""
    stats = ServerStats(args.url)
    restore = Wire.install()
    phases: dict[str, Any] = {}
    try:
        for title, make in (("openai_agents", openai_cases), ("adk", adk_cases)):
            cases = make(args.url, prefix, sqlite_dir)
            started = time.perf_counter()
            try:
                facts = await run_phase(
                    cases,
                    rounds=args.rounds,
                    warmup=args.warmup,
                    events=args.events,
                    stats=stats,
                )
            finally:
                for case in cases:
                    async with asyncio.timeout(SETUP_TIMEOUT):
                        await case.close()
            rows = rows_of(cases)
            facts["seconds"] = time.perf_counter() - started
            phases[title] = {"rows": rows, **facts}
            print(f"{title}: {facts['seconds']:.1f}s (pre-fill {facts['prefill_s']:.1f}s)")
    finally:
        restore()
        stats.client.close()
    return phases


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="Redis to measure")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per phase")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="rounds before the timed ones")
    parser.add_argument("--events", type=int, default=200, help="items / events per session")
    parser.add_argument(
        "--sqlite",
        choices=("memory", "file"),
        default="memory",
        help="SQLite stores in memory (default) or in files of a temporary directory",
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--markdown", action="store_true", help="also print Markdown tables")
    parser.add_argument(
        "--quick", action="store_true", help="3 rounds, 1 warm-up, 20 events: a smoke test"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.events = 3, 1, 20
    if not 1 <= args.rounds <= MAX_ROUNDS or not 0 <= args.warmup <= MAX_ROUNDS:
        parser.error(f"--rounds must be 1..{MAX_ROUNDS}, --warmup 0..{MAX_ROUNDS}")
    if not 1 <= args.events <= MAX_EVENTS:
        parser.error(f"--events must be 1..{MAX_EVENTS}")
    if args.url.startswith("memory://"):
        parser.error("the SDK's RedisSession needs a real Redis server (not memory://)")
    logging.getLogger("google_adk").setLevel(logging.ERROR)  # e.g. app-name mismatch notes

    started = time.perf_counter()
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    probe = redis.Redis.from_url(args.url, socket_timeout=10)
    try:
        server = probe.info("server")
    finally:
        probe.close()
    versions = {
        name: _version(name)
        for name in ("openai-agents", "google-adk", "redis", "sqlalchemy", "aiosqlite")
    }
    info = {
        "url": args.url,
        "redis_version": server.get("redis_version"),
        "python": platform.python_version(),
        "hiredis": redis.utils.HIREDIS_AVAILABLE,
        **versions,
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }
    print(
        f"redis {info['redis_version']} at {args.url} | python {info['python']} | openai-agents "
        f"{versions['openai-agents']} | google-adk {versions['google-adk']} | redis-py "
        f"{versions['redis']} | hiredis {info['hiredis']} | sqlalchemy {versions['sqlalchemy']}"
        f" | aiosqlite {versions['aiosqlite']} | commit {info['commit']['head']}"
        f"{' (redis_session/ or lua/ modified)' if info['commit']['code_modified'] else ''}"
    )
    print(
        f"prefix {prefix} | rounds {args.rounds} (+{args.warmup} warm-up) | {args.events} "
        f"events per session | sqlite {args.sqlite} | {info['cpus']} CPUs, load "
        f"{' '.join(f'{x:.2f}' for x in info['loadavg_start'])}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-frameworks-") as tmp:
        try:
            phases = asyncio.run(run(args, prefix, tmp if args.sqlite == "file" else None))
        finally:
            deleted, left = cleanup(args.url, prefix)
            print(f"cleanup: deleted {deleted} keys under {prefix} ({left} left)")

    ok = True
    titles = {"openai_agents": "OpenAI Agents Runner.run", "adk": "ADK Runner.run_async"}
    for title, phase in phases.items():
        base = next(r for r in phase["rows"] if r.role == "framework")
        print()
        print(
            f"{titles[title]}: one turn on a {args.events}-item session "
            f"(-> {phase['session_length_after']['max']} at most); us; ratio = median / "
            f"{base.store}'s median"
        )
        print(render(phase["rows"]))
        if args.markdown:
            print()
            print(markdown(phase["rows"]))
        bad = [name for name, good in phase["lengths_ok"].items() if not good]
        ok = ok and not bad
        print(
            f"sessions per store {phase['sessions_per_store']} x {phase['turns_per_session']} "
            f"turns | lengths after the run: {'OK' if not bad else 'WRONG: ' + ', '.join(bad)}"
            f" | server calls during non-Redis turns (other clients): "
            f"{phase['server_calls_during_non_redis_turns']}"
        )
    total = time.perf_counter() - started
    info["loadavg_end"] = os.getloadavg()
    print(f"\ntotal runtime: {total:.1f}s | load at the end {info['loadavg_end'][0]:.2f}")
    if args.json:
        data = {
            **info,
            "prefix": prefix,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "events": args.events,
            "sqlite": args.sqlite,
            "phases": {
                title: {**phase, "rows": [r.as_json() for r in phase["rows"]]}
                for title, phase in phases.items()
            },
            "cleanup": {"deleted": deleted, "left": left},
            "lengths_ok": ok,
            "total_runtime_s": total,
        }
        args.json.write_text(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        print(f"wrote {args.json}")
    return 0 if ok and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
