"""``Runner.rewind_async`` and the pause / resume of resumable apps on ``RedisSessionService``,
against ADK's own ``InMemorySessionService``, on every backend.

google-adk's sdist on the package index ships no tests (2.13.0 holds ``src/``, the README, the
licence and ``pyproject.toml`` only), so ADK's runner tests (google/adk-python's
``tests/unittests/runners/test_runner_rewind.py``, ``test_pause_invocation.py`` and
``test_resume_invocation.py``) cannot be had where CI runs. These tests play their scenarios
(written here, not copied) twice: on ADK's ``InMemorySessionService`` (the reference) and on our
service, each side with its own ``InMemoryArtifactService`` and its own scripted models. The two
sides must agree on the session's state, its events (what ADK generates per run, ids and
timestamps, set aside: :func:`comparable`), the rewind event and the artifacts; our side is read
back through a second service with its own client, so what is compared is what Redis holds.
Where google-adk 2.13 does what the upstream test asserts, the reference is held to it too.
The credential test, which upstream runs on ADK's SQLite ``DatabaseSessionService`` as well,
has that service as a third side.

Not re-enacted: what google-adk 2.13 lacks (upstream's newer rewind audit receipt and its
hash test) and the tests upstream marks ``xfail`` or ``skip`` on ADK 2.x (a pause in the second
agent of a sequence or in a loop agent; resuming an invocation older than the latest).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from google.adk.agents import BaseAgent, LlmAgent, ParallelAgent, SequentialAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps.app import App, ResumabilityConfig
from google.adk.artifacts import InMemoryArtifactService
from google.adk.auth.auth_credential import AuthCredential, AuthCredentialTypes, OAuth2Auth
from google.adk.auth.auth_schemes import OpenIdConnectWithConfig
from google.adk.auth.auth_tool import AuthConfig
from google.adk.errors import InvocationNotFoundError
from google.adk.events import Event, EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService, InMemorySessionService
from google.adk.sessions.session import Session as AdkSession
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.base_toolset import BaseToolset
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import Field

from redis_session import AsyncRedisStore
from redis_session.integrations.adk import RedisSessionService
from tests.conftest import BACKENDS

MakeStore = Callable[..., AsyncRedisStore]
APP, USER = "test_app", "test_user"
RUN_TIMEOUT = 20.0
"""Seconds a scenario may take on one side (an agent waiting on a gate never set is cut)."""
pytestmark = [  # ADK's notices on what ADK's own tests of these scenarios use
    pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] :UserWarning"),
    pytest.mark.filterwarnings(
        r"ignore:(Sequential|Parallel)Agent is deprecated:DeprecationWarning"
    ),
]
T = TypeVar("T")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
OAUTH_STATE = re.compile(r'("state": "|[?&]state=)[A-Za-z0-9]+')
"""The random ``state`` of an OAuth authorisation request ADK builds."""


# -- the two sides ------------------------------------------------------------------------------


@dataclass
class Side:
    """One session service with its own artifact service; ``reader`` reads what it stored."""

    name: str
    service: BaseSessionService
    reader: BaseSessionService
    artifacts: InMemoryArtifactService = field(default_factory=InMemoryArtifactService)

    def runner(self, agent: BaseAgent | None = None, *, app: App | None = None) -> Runner:
        if app is not None:
            return Runner(app=app, session_service=self.service, artifact_service=self.artifacts)
        return Runner(
            app_name=APP, agent=agent, session_service=self.service, artifact_service=self.artifacts
        )

    async def artifact(self, name: str) -> types.Part | None:
        """Artifact ``name`` of session ``s``, its newest version."""
        return await self.artifacts.load_artifact(
            app_name=APP, user_id=USER, session_id="s", filename=name
        )

    async def versions(self, name: str) -> list[int]:
        return await self.artifacts.list_versions(
            app_name=APP, user_id=USER, session_id="s", filename=name
        )

    async def read(self, session_id: str) -> AdkSession:
        session = await self.reader.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert session is not None, f"{self.name}: session {session_id} is gone"
        return session


@pytest.fixture
def sides(make_astore: MakeStore) -> list[Side]:
    """ADK's in-memory service (the reference), then ours on the test's backend, read back
    through a second service with a client of its own."""
    reference = InMemorySessionService()
    ours = RedisSessionService(make_astore())
    return [
        Side("in-memory", reference, reference),
        Side("redis", ours, RedisSessionService(make_astore())),
    ]


async def on_each(sides: list[Side], scenario: Callable[[Side], Awaitable[T]]) -> list[T]:
    """``scenario`` played on each side in turn, each bounded by :data:`RUN_TIMEOUT`."""
    results = []
    for side in sides:
        async with asyncio.timeout(RUN_TIMEOUT):
            results.append(await scenario(side))
    return results


def comparable(events: Sequence[Event]) -> list[dict[str, Any]]:
    """``events`` as JSON, without timestamps and with every UUID ADK generated (event ids,
    ``e-…`` invocation ids, ``adk-…`` function call ids) named by its order of appearance, and
    OAuth's random ``state`` left out."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"<uuid {len(names)}>")

    dumped = [e.model_dump(mode="json", exclude={"timestamp"}, exclude_none=True) for e in events]
    text = OAUTH_STATE.sub(r"\1<state>", UUID.sub(rename, json.dumps(dumped)))
    result: list[dict[str, Any]] = json.loads(text)
    return result


# -- rewind (test_runner_rewind.py) -------------------------------------------------------------

Step = tuple[str, dict[str, Any], dict[str, str]]
"""An invocation: its id, its state delta, the artifacts it saves (file name -> text)."""

THREE: list[Step] = [
    ("invocation1", {"k1": "v1"}, {"f1": "f1v0"}),
    ("invocation2", {"k1": "v2", "k2": "v2"}, {"f1": "f1v1", "f2": "f2v0"}),
    ("invocation3", {"k2": "v3"}, {}),
]


@dataclass
class Rewound:
    """What a side holds after a rewind."""

    state: dict[str, Any]
    events: list[dict[str, Any]]
    artifacts: dict[str, types.Part | None]
    versions: dict[str, list[int]]
    rewind: Event


async def play_and_rewind(
    side: Side,
    steps: list[Step],
    before: str,
    *,
    initial: dict[str, Any] | None = None,
    artifacts: InMemoryArtifactService | None = None,
) -> Rewound:
    """Append ``steps`` as one event per invocation (saving their artifacts first), then
    ``rewind_async`` before invocation ``before``."""
    if artifacts is not None:
        side.artifacts = artifacts
    runner = side.runner(BaseAgent(name="test_agent"))
    session = await side.service.create_session(
        app_name=APP, user_id=USER, session_id="s", state=initial
    )
    names: set[str] = set()
    for invocation, delta, saved in steps:
        versions = {}
        for name, body in saved.items():
            versions[name] = await side.artifacts.save_artifact(
                app_name=APP,
                user_id=USER,
                session_id="s",
                filename=name,
                artifact=types.Part.from_text(text=body),
            )
        names.update(saved)
        event = Event(
            invocation_id=invocation,
            author="agent",
            content=types.Content(parts=[types.Part.from_text(text=f"{invocation} says")]),
            actions=EventActions(state_delta=dict(delta), artifact_delta=versions),
        )
        await side.service.append_event(session=session, event=event)
    await runner.rewind_async(user_id=USER, session_id="s", rewind_before_invocation_id=before)
    stored = await side.read("s")
    loaded = {n: await side.artifact(n) for n in sorted(names)}
    versions_of = {n: await side.versions(n) for n in sorted(names)}
    return Rewound(stored.state, comparable(stored.events), loaded, versions_of, stored.events[-1])


def assert_agree(ref: Rewound, ours: Rewound) -> None:
    assert ours.events == ref.events
    assert ours.state == ref.state
    assert ours.artifacts == ref.artifacts
    assert ours.versions == ref.versions
    assert comparable([ours.rewind]) == comparable([ref.rewind])


def text_part(value: str) -> types.Part:
    return types.Part.from_text(text=value)


async def test_rewind_before_the_second_of_three_invocations(sides: list[Side]) -> None:
    """(test_rewind_async_with_state_and_artifacts) State and artifacts go back to what the
    first invocation left; the rewind is one more event, authored by the user."""
    ref, ours = await on_each(sides, lambda side: play_and_rewind(side, THREE, "invocation2"))
    assert_agree(ref, ours)
    for got in (ref, ours):
        assert got.state == {"k1": "v1", "k2": None}
        assert got.artifacts == {"f1": text_part("f1v0"), "f2": None}
        assert len(got.events) == 4
        assert [e["invocation_id"] for e in got.events[:3]] == [s[0] for s in THREE]
        rewind = got.rewind
        assert rewind.author == "user"
        assert rewind.actions.rewind_before_invocation_id == "invocation2"
        assert rewind.actions.state_delta == {"k1": "v1", "k2": None}
        assert set(rewind.actions.artifact_delta) == {"f1", "f2"}


async def test_rewind_before_the_last_invocation(sides: list[Side]) -> None:
    """(test_rewind_async_not_first_invocation) Rewinding before the third invocation keeps
    what the first two did."""
    ref, ours = await on_each(sides, lambda side: play_and_rewind(side, THREE, "invocation3"))
    assert_agree(ref, ours)
    for got in (ref, ours):
        assert got.state == {"k1": "v2", "k2": "v2"}
        assert got.artifacts == {"f1": text_part("f1v1"), "f2": text_part("f2v0")}
        assert got.rewind.actions.artifact_delta == {}


INITIAL_STATE_CASES: dict[
    str, tuple[dict[str, Any] | None, list[Step], str, dict[str, Any], dict[str, Any]]
] = {
    # upstream test -> (initial state, invocations, rewind before, expected, kept upstream)
    "preserves_initial_session_state": (
        {"tenant_id": "t1", "user_pref": "dark"},
        [("invocation1", {"k1": "v1"}, {}), ("invocation2", {"k2": "v2"}, {})],
        "invocation2",
        {"k1": "v1", "k2": None},
        {"tenant_id": "t1", "user_pref": "dark"},
    ),
    "before_first_invocation_preserves_initial_state": (
        {"config_key": "config_val"},
        [("invocation1", {"k1": "v1"}, {})],
        "invocation1",
        {"k1": None},
        {"config_key": "config_val"},
    ),
    "restores_initial_value_when_event_overwrote_it": (
        {"tenant_id": "t_initial"},
        [("invocation1", {"tenant_id": "t_event", "k_new": "v_new"}, {})],
        "invocation1",
        {"k_new": None},
        {"tenant_id": "t_initial"},
    ),
    "with_no_initial_session_state": (
        None,
        [("invocation1", {"k1": "v1"}, {}), ("invocation2", {"k2": "v2"}, {})],
        "invocation2",
        {"k1": "v1", "k2": None},
        {},
    ),
}


@pytest.mark.parametrize("case", list(INITIAL_STATE_CASES))
async def test_rewind_with_initial_session_state(sides: list[Side], case: str) -> None:
    """(test_rewind_preserves_initial_session_state and its three neighbours) Keys set by the
    rewound invocations are nulled, earlier ones kept. Upstream, a newer ADK than 2.13 also keeps
    the keys given to ``create_session``; 2.13 nulls them (its rewind replays events only), on
    its own service as on ours, so for those keys the two sides are held to agree only."""
    initial, steps, before, expected, kept_upstream = INITIAL_STATE_CASES[case]
    ref, ours = await on_each(
        sides, lambda side: play_and_rewind(side, steps, before, initial=initial)
    )
    assert_agree(ref, ours)
    for got in (ref, ours):
        assert {k: got.state[k] for k in expected} == expected
        for key, value in kept_upstream.items():  # kept (upstream now) or nulled (2.13)
            assert got.state[key] in (value, None)


class NoFileDataArtifacts(InMemoryArtifactService):
    """Refuses ``file_data`` parts, as ADK's GCS and file artifact services do."""

    async def save_artifact(self, **kwargs: Any) -> int:
        artifact = kwargs["artifact"]
        if isinstance(artifact, types.Part) and artifact.file_data is not None:
            raise NotImplementedError("Saving artifact with file_data is not supported.")
        return await super().save_artifact(**kwargs)


async def test_rewind_restores_an_artifact_by_loading_it(sides: list[Side]) -> None:
    """(TestRunnerRewindNoFileData) An artifact service that refuses ``file_data`` parts: the
    rewind restores f1's first version through ``load_artifact``."""
    steps: list[Step] = [
        ("invocation1", {"k1": "v1"}, {"f1": "f1v0"}),
        ("invocation2", {}, {"f1": "f1v1"}),
    ]

    async def scenario(side: Side) -> Rewound:
        return await play_and_rewind(side, steps, "invocation2", artifacts=NoFileDataArtifacts())

    ref, ours = await on_each(sides, scenario)
    assert_agree(ref, ours)
    for got in (ref, ours):
        assert got.artifacts == {"f1": text_part("f1v0")}
        assert got.versions == {"f1": [0, 1, 2]}


async def test_rewind_to_an_unknown_invocation_changes_nothing(sides: list[Side]) -> None:
    async def scenario(side: Side) -> list[dict[str, Any]]:
        runner = side.runner(BaseAgent(name="test_agent"))
        session = await side.service.create_session(app_name=APP, user_id=USER, session_id="s")
        event = Event(invocation_id="invocation1", author="agent", actions=EventActions())
        await side.service.append_event(session=session, event=event)
        with pytest.raises(InvocationNotFoundError):
            await runner.rewind_async(
                user_id=USER, session_id="s", rewind_before_invocation_id="nope"
            )
        return comparable((await side.read("s")).events)

    ref, ours = await on_each(sides, scenario)
    assert ours == ref
    assert len(ref) == 1


# -- a scripted model ---------------------------------------------------------------------------


class ScriptedLlm(BaseLlm):
    """Answers each request with the next part of ``replies`` (no network); keeps requests."""

    model: str = "scripted"
    replies: list[types.Part] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        reply = self.replies.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[reply]))


def scripted(*replies: types.Part | str) -> ScriptedLlm:
    return ScriptedLlm(replies=[text_part(r) if isinstance(r, str) else r for r in replies])


def user_text(value: str) -> types.Content:
    return types.Content(role="user", parts=[text_part(value)])


async def run(
    runner: Runner, message: types.Content | None, *, invocation_id: str | None = None
) -> list[Event]:
    return [
        e
        async for e in runner.run_async(
            user_id=USER, session_id="s", new_message=message, invocation_id=invocation_id
        )
    ]


# -- rewind through a runner (issue #45: the check behind "already behaves") --------------------


def write_report(text: str, tool_context: ToolContext) -> dict[str, Any]:
    """Saves a report."""
    tool_context.state["reports"] = int(tool_context.state.get("reports", 0)) + 1
    return {"saved": text}


async def test_runner_after_a_rewind(sides: list[Side]) -> None:
    """Three invocations of an agent whose tool and ``output_key`` change state and whose
    callback saves an artifact, a rewind before the second, a fourth invocation: the same
    events, state, artifacts, and the same history given to the model after the rewind."""

    async def scenario(side: Side) -> tuple[Any, ...]:
        llm = scripted(
            types.Part.from_function_call(name="write_report", args={"text": "one"}),
            "answer 1",
            types.Part.from_function_call(name="write_report", args={"text": "two"}),
            "answer 2",
            "answer 3",
            "answer 4",
        )

        async def save(callback_context: Any) -> None:
            n = len(llm.requests)
            await callback_context.save_artifact("notes.txt", text_part(f"after {n} requests"))

        agent = LlmAgent(
            name="writer",
            model=llm,
            tools=[write_report],
            output_key="last",
            after_agent_callback=save,
        )
        runner = side.runner(agent)
        await side.service.create_session(app_name=APP, user_id=USER, session_id="s")
        invocations = []
        for n in range(3):
            events = await run(runner, user_text(f"question {n}"))
            invocations.append(events[0].invocation_id)
        await runner.rewind_async(
            user_id=USER, session_id="s", rewind_before_invocation_id=invocations[1]
        )
        rewound = await side.read("s")
        notes = [await side.artifact("notes.txt")]
        await run(runner, user_text("question 3"))
        final = await side.read("s")
        notes.append(await side.artifact("notes.txt"))
        seen = [c.model_dump(mode="json", exclude_none=True) for c in llm.requests[-1].contents]
        return (
            rewound.state,
            comparable(rewound.events),
            final.state,
            comparable(final.events),
            notes,
            json.loads(UUID.sub("<uuid>", json.dumps(seen))),
        )

    ref, ours = await on_each(sides, scenario)
    assert ours == ref
    rewound_state, _events, final_state, _final, notes, seen = ref
    assert rewound_state == {"reports": 1, "last": "answer 1"}
    assert final_state == {"reports": 1, "last": "answer 4"}
    assert notes == [text_part("after 2 requests"), text_part("after 6 requests")]
    texts = [p.get("text") for c in seen for p in c["parts"] if p.get("text")]
    assert texts == ["question 0", "answer 1", "question 3"]


# -- pause (test_pause_invocation.py) -----------------------------------------------------------


def pending_tool() -> None:
    """A long-running operation that is still pending."""
    return None


def long_running() -> LongRunningFunctionTool:
    return LongRunningFunctionTool(func=pending_tool)


CALL = types.Part.from_function_call(name="pending_tool", args={})


def transfer(agent_name: str) -> types.Part:
    return types.Part.from_function_call(
        name="transfer_to_agent", args={"agent_name": agent_name, "transfer_reason": "test"}
    )


END = "<end of agent>"


def behaviour(events: Sequence[Event]) -> list[tuple[str, str]]:
    """``(author, what)`` per event, ``agent_state`` checkpoints left out (as upstream
    filters them): a text, ``call name``, ``response name``, or :data:`END`."""
    out: list[tuple[str, str]] = []
    for e in events:
        if e.actions.end_of_agent:
            out.append((e.author, END))
            continue
        for part in (e.content.parts or []) if e.content else []:
            if part.text:
                out.append((e.author, part.text))
            elif part.function_call:
                out.append((e.author, f"call {part.function_call.name}"))
            elif part.function_response:
                out.append((e.author, f"response {part.function_response.name}"))
    return out


class Gated(BaseAgent):
    """Yields one text once ``gate`` (if any) is set, then sets ``done`` (if any)."""

    gate: asyncio.Event | None = None
    done: asyncio.Event | None = None
    message: str = "Delayed message"
    escalate: bool = False
    follow_up: bool = False

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        if self.gate is not None:
            await self.gate.wait()
        yield Event(
            author=self.name,
            branch=ctx.branch,
            invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[text_part(self.message)]),
            actions=EventActions(escalate=True) if self.escalate else EventActions(),
        )
        if self.done is not None:
            self.done.set()
        if self.follow_up:
            yield Event(
                author=self.name,
                invocation_id=ctx.invocation_id,
                content=types.Content(role="model", parts=[text_part("not emitted")]),
            )


def resumable(root: BaseAgent, *, is_resumable: bool = True) -> App:
    return App(
        name=APP, root_agent=root, resumability_config=ResumabilityConfig(is_resumable=is_resumable)
    )


@dataclass
class Paused:
    """What one side saw and stored in one run of a resumable app."""

    yielded: list[dict[str, Any]]
    stored: list[dict[str, Any]]
    behaviour: list[tuple[str, str]]
    state: dict[str, Any]


async def paused_run(side: Side, agent: BaseAgent, *, message: str = "test") -> Paused:
    await side.service.create_session(app_name=APP, user_id=USER, session_id="s")
    events = await run(side.runner(app=resumable(agent)), user_text(message))
    stored = await side.read("s")
    return Paused(comparable(events), comparable(stored.events), behaviour(events), stored.state)


def by_author(seen: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Each author's own sequence (parallel branches interleave as the event loop runs them)."""
    out: dict[str, list[str]] = {}
    for author, what in seen:
        out.setdefault(author, []).append(what)
    return out


def assert_same_run(ref: Paused, ours: Paused, *, parallel: bool = False) -> None:
    if parallel:
        assert by_author(ours.behaviour) == by_author(ref.behaviour)
        key = json.dumps
        assert sorted(map(key, ours.stored)) == sorted(map(key, ref.stored))
    else:
        assert ours.yielded == ref.yielded
        assert ours.stored == ref.stored
    assert ours.state == ref.state


async def test_pause_a_single_llm_agent(sides: list[Side]) -> None:
    """(TestPauseInvocationWithSingleLlmAgent) The long-running call ends the invocation."""

    async def scenario(side: Side) -> Paused:
        return await paused_run(
            side, LlmAgent(name="root_agent", model=scripted(CALL), tools=[long_running()])
        )

    ref, ours = await on_each(sides, scenario)
    assert_same_run(ref, ours)
    assert ref.behaviour == [("root_agent", "call pending_tool")]


async def test_pause_the_first_agent_of_a_sequence(sides: list[Side]) -> None:
    """(TestPauseInvocationWithSequentialAgent, its first test) The second agent never runs."""

    async def scenario(side: Side) -> Paused:
        subs = [
            LlmAgent(name=f"sub_agent_{n}", model=scripted(CALL), tools=[long_running()])
            for n in (1, 2)
        ]
        return await paused_run(side, SequentialAgent(name="root_agent", sub_agents=subs))

    ref, ours = await on_each(sides, scenario)
    assert_same_run(ref, ours)
    assert ref.behaviour == [("sub_agent_1", "call pending_tool")]


async def test_pause_in_a_parallel_agent(sides: list[Side]) -> None:
    """(TestPauseInvocationWithParallelAgent) The sibling's event is kept with the pause; the
    sibling is let go once the long-running call was yielded, not after a delay."""

    async def scenario(side: Side) -> Paused:
        called = asyncio.Event()
        pausing = LlmAgent(
            name="sub_agent_1",
            model=scripted(CALL),
            tools=[long_running()],
            after_model_callback=lambda callback_context, llm_response: called.set(),
        )
        sibling = Gated(name="sub_agent_2", gate=called)
        return await paused_run(
            side, ParallelAgent(name="root_agent", sub_agents=[pausing, sibling])
        )

    ref, ours = await on_each(sides, scenario)
    assert_same_run(ref, ours, parallel=True)
    assert ("sub_agent_1", "call pending_tool") in ref.behaviour
    assert ("sub_agent_2", "Delayed message") in ref.behaviour


@pytest.mark.parametrize("calls", ["one", "two"])
async def test_pause_in_a_nested_parallel_agent(sides: list[Side], calls: str) -> None:
    """(TestPauseInvocationWithNestedParallelAgent, both tests) A long-running call in a nested
    parallel agent, and (``two``) another one in the outer agent: neither caller ends."""

    async def scenario(side: Side) -> Paused:
        nested = ParallelAgent(
            name="nested_parallel_agent",
            sub_agents=[
                LlmAgent(name="nested_sub_agent_1", model=scripted(CALL), tools=[long_running()]),
                Gated(name="nested_sub_agent_2"),
            ],
        )
        first: BaseAgent = (
            Gated(name="sub_agent_1")
            if calls == "one"
            else LlmAgent(name="sub_agent_1", model=scripted(CALL), tools=[long_running()])
        )
        return await paused_run(side, ParallelAgent(name="root_agent", sub_agents=[first, nested]))

    ref, ours = await on_each(sides, scenario)
    assert_same_run(ref, ours, parallel=True)
    assert ("nested_sub_agent_1", "call pending_tool") in ref.behaviour
    if calls == "one":
        assert ("sub_agent_1", "Delayed message") in ref.behaviour
        assert ("nested_sub_agent_2", "Delayed message") in ref.behaviour
    else:
        assert ("sub_agent_1", "call pending_tool") in ref.behaviour
        assert ("sub_agent_1", END) not in ref.behaviour
        assert ("nested_sub_agent_1", END) not in ref.behaviour


TRANSFERS = {
    # (TestPauseInvocationWithLlmAgentTree) root -> sub 1 -> sub 2, which pauses
    "tree": (["sub_llm_agent_1", "sub_llm_agent_2"], "sub_llm_agent_2"),
    # (TestPauseInvocationWithWithTransferLoop) root -> sub 1 -> sub 2 -> root, which pauses
    "loop": (["sub_llm_agent_1", "sub_llm_agent_2", "root_agent"], "root_agent"),
}


@pytest.mark.parametrize("shape", list(TRANSFERS))
async def test_pause_after_transfers(sides: list[Side], shape: str) -> None:
    """Agents transfer along a chain; the last one's long-running call pauses the run."""
    chain, pauser = TRANSFERS[shape]

    async def scenario(side: Side) -> Paused:
        hops = ["root_agent", *chain]
        replies: dict[str, list[types.Part | str]] = {}
        for frm, to in itertools.pairwise(hops):
            replies.setdefault(frm, []).append(transfer(to))
        replies.setdefault(pauser, []).append(CALL)

        def agent(name: str, **kwargs: Any) -> LlmAgent:
            tools = [long_running()] if name == pauser else []
            model = scripted(*replies[name], "llm response not used")
            return LlmAgent(name=name, model=model, tools=tools, **kwargs)

        subs = [agent("sub_llm_agent_1"), agent("sub_llm_agent_2")]
        return await paused_run(side, agent("root_agent", sub_agents=subs))

    ref, ours = await on_each(sides, scenario)
    assert_same_run(ref, ours)
    hops = ["root_agent", *chain]
    expected = []
    for frm in hops[:-1]:
        expected += [
            (frm, "call transfer_to_agent"),
            (frm, "response transfer_to_agent"),
            (frm, END),
        ]
    expected.append((pauser, "call pending_tool"))
    assert ref.behaviour == expected


# -- resume (test_resume_invocation.py) ---------------------------------------------------------


def responding(call: types.FunctionCall, response: dict[str, Any]) -> types.Content:
    """The user's message answering function call ``call`` with ``response``."""
    answer = types.FunctionResponse(id=call.id, name=call.name, response=response)
    return types.Content(role="user", parts=[types.Part(function_response=answer)])


def call_named(events: Sequence[Event], name: str) -> tuple[Event, types.FunctionCall]:
    found = [(e, c) for e in events for c in e.get_function_calls() if c.name == name]
    assert len(found) == 1, behaviour(events)
    return found[0]


@dataclass
class Runs:
    """What one side yielded in each run of a scenario, and stored in the end (as read, and in
    the order of ADK's database service: by timestamp, ties by event id)."""

    yielded: list[list[dict[str, Any]]]
    seen: list[list[tuple[str, str]]]
    stored: list[dict[str, Any]]
    in_database_order: list[dict[str, Any]]
    state: dict[str, Any]


async def runs(side: Side, runs_yielded: list[list[Event]]) -> Runs:
    stored = await side.read("s")
    return Runs(
        [comparable(r) for r in runs_yielded],
        [behaviour(r) for r in runs_yielded],
        comparable(stored.events),
        comparable(sorted(stored.events, key=lambda e: (e.timestamp, e.id))),
        stored.state,
    )


@pytest.mark.parametrize("start", ["root", "sub_agent"])
async def test_resume_with_the_long_running_response(sides: list[Side], start: str) -> None:
    """A paused invocation resumed by its id with the function's response: the model answers
    and the agent ends, within the paused invocation. ``root``: the plain pause and resume each
    test of the file builds on; ``sub_agent``: test_resume_invocation_from_sub_agent (a first
    invocation transfers to the sub-agent, the second starts there and pauses)."""

    async def scenario(side: Side) -> Runs:
        if start == "root":
            model = scripted(CALL, "response after resume")
            root = LlmAgent(name="root_agent", model=model, tools=[long_running()])
        else:
            model = scripted("first response", CALL, "response after resume")
            sub = LlmAgent(name="sub_agent", model=model, tools=[long_running()])
            root = LlmAgent(name="root_agent", model=scripted(transfer(sub.name)), sub_agents=[sub])
        runner = side.runner(app=resumable(root))
        await side.service.create_session(app_name=APP, user_id=USER, session_id="s")
        yielded = []
        if start == "sub_agent":
            yielded.append(await run(runner, user_text("test user query")))
        paused = await run(runner, user_text("test user query 2"))
        yielded.append(paused)
        event, call = call_named(paused, "pending_tool")
        assert call.id is not None and call.id in (event.long_running_tool_ids or set())
        resumed = await run(
            runner,
            responding(call, {"result": "test tool update"}),
            invocation_id=paused[0].invocation_id,
        )
        assert {e.invocation_id for e in resumed} == {paused[0].invocation_id}
        yielded.append(resumed)
        return await runs(side, yielded)

    ref, ours = await on_each(sides, scenario)
    assert ours == ref
    agent = "root_agent" if start == "root" else "sub_agent"
    if start == "sub_agent":
        assert ref.seen[0] == [
            ("root_agent", "call transfer_to_agent"),
            ("root_agent", "response transfer_to_agent"),
            ("root_agent", END),
            ("sub_agent", "first response"),
            ("sub_agent", END),
        ]
    assert ref.seen[-2] == [(agent, "call pending_tool")]
    # upstream (written for ADK 1.x, xfail on 2.x) also expects the function response first
    assert ref.seen[-1][-2:] == [(agent, "response after resume"), (agent, END)]


async def test_parallel_escalation_ends_the_persisted_run(sides: list[Side]) -> None:
    """(test_resumable_parallel_agent_escalation_short_circuits_persisted_run) An escalation in
    a parallel agent ends the run: the fast and the escalating agents' events are stored, the
    slow one's never (it waits on a gate nobody sets, and is cancelled), and resuming the
    finished invocation yields nothing. Ordered by gates, not by delays."""

    async def scenario(side: Side) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        fast_done, never = asyncio.Event(), asyncio.Event()
        agents = [
            Gated(name="fast_agent", message="fast response", done=fast_done),
            Gated(
                name="escalating_agent",
                message="escalating response",
                gate=fast_done,
                escalate=True,
                follow_up=True,
            ),
            Gated(name="slow_agent", message="slow response", gate=never),
        ]
        runner = side.runner(app=resumable(ParallelAgent(name="root_agent", sub_agents=agents)))
        await side.service.create_session(app_name=APP, user_id=USER, session_id="s")
        events = await run(runner, user_text("test user query"))
        again = await run(runner, None, invocation_id=events[0].invocation_id)
        stored = [e for e in (await side.read("s")).events if e.author != "user"]
        assert behaviour(events) == [
            ("fast_agent", "fast response"),
            ("escalating_agent", "escalating response"),
            ("root_agent", END),
        ]
        assert comparable(stored) == comparable(events)
        return comparable(events), comparable(stored), len(again)

    ref, ours = await on_each(sides, scenario)
    assert ours == ref
    assert ref[2] == 0
    assert all(e["author"] != "slow_agent" for e in ref[1])


# -- authentication resumes its owner (test_resume_invocation.py) --------------------------------

AUTH = AuthConfig(
    auth_scheme=OpenIdConnectWithConfig(
        authorization_endpoint="https://issuer.example/authorize",
        token_endpoint="https://issuer.example/token",
        scopes=["openid"],
    ),
    raw_auth_credential=AuthCredential(
        auth_type=AuthCredentialTypes.OAUTH2,
        oauth2=OAuth2Auth(client_id="client", client_secret="secret"),
    ),
    credential_key="test-credential",
)


AUTH_STAGES = ("tool", "toolset")


def auth_cases() -> list[Any]:
    """Upstream's eight cases (resumable or not, the tool or its toolset asking, the sub-agent
    reached directly or through another) on ``fake`` and ``redis``; on the other backends the
    case with the most steps (resumable, toolset, nested): the cases differ in ADK's paths, not
    in what reaches the session service, and each takes ~0.25 s.
    """
    cases = []
    for name in BACKENDS:
        for is_resumable, stage, nested in itertools.product(
            (False, True), AUTH_STAGES, (False, True)
        ):
            if name in ("fake", "redis") or (is_resumable, stage, nested) == (
                True,
                "toolset",
                True,
            ):
                label = f"{name}-{('plain', 'resumable')[is_resumable]}-{stage}-"
                label += ("direct", "nested")[nested]
                marks = getattr(pytest.mark, name)
                cases.append(pytest.param(name, is_resumable, stage, nested, marks=marks, id=label))
    return cases


@pytest.mark.parametrize(
    ("backend", "is_resumable", "auth_stage", "nested"), auth_cases(), indirect=["backend"]
)
async def test_auth_response_resumes_a_restricted_sub_agent(
    sides: list[Side], is_resumable: bool, auth_stage: str, nested: bool
) -> None:
    """(test_auth_response_resumes_restricted_sub_agent) A sub-agent that may not transfer
    back asks for a credential; the user's answer resumes that sub-agent (on its branch), its
    tool runs once, and the next ordinary message goes to the root agent.

    Played, as upstream does, on ADK's ``DatabaseSessionService`` (SQLite) too, which ours
    matches exactly. ADK 2.13 appends the credential request before the function response it
    was made from, which is timestamped earlier: the in-memory service keeps the order of the
    appends, the database service and ours read by timestamp, so against the in-memory side
    the stored events are compared in that order."""

    async def scenario(side: Side) -> tuple[Runs, list[str], str | None]:
        used: list[str] = []

        def protected_tool(tool_context: ToolContext) -> dict[str, str]:
            """A tool behind an OpenID Connect credential."""
            if auth_stage == "tool":
                credential = tool_context.get_auth_response(AUTH)
            else:
                context = tool_context.get_invocation_context()
                credential = context.credential_by_key.get(AUTH.credential_key or "")
            token = credential.oauth2.access_token if credential and credential.oauth2 else None
            if not token:
                tool_context.request_credential(AUTH)
                return {"status": "authorization_required"}
            used.append(token)
            return {"status": "ok"}

        class AuthToolset(BaseToolset):
            def get_auth_config(self) -> AuthConfig:
                return AUTH

            async def get_tools(self, readonly_context: Any = None) -> list[BaseTool]:
                return [FunctionTool(protected_tool)]

            async def close(self) -> None:
                pass

        tools: list[Any] = [protected_tool] if auth_stage == "tool" else [AuthToolset()]
        child = LlmAgent(
            name="worker",
            disallow_transfer_to_parent=True,
            disallow_transfer_to_peers=True,
            model=scripted(
                types.Part.from_function_call(name="protected_tool", args={}), "child completed"
            ),
            tools=tools,
        )
        delegate = child
        if nested:
            delegate = LlmAgent(
                name="middle",
                disallow_transfer_to_parent=True,
                model=scripted(transfer(child.name)),
                sub_agents=[child],
            )
        root = LlmAgent(
            name="root",
            model=scripted(transfer(delegate.name), "root handles next message"),
            sub_agents=[delegate],
        )
        runner = side.runner(app=resumable(root, is_resumable=is_resumable))
        await side.service.create_session(app_name=APP, user_id=USER, session_id="s")
        try:
            asked = await run(runner, user_text("run protected tool"))
            request, call = call_named(asked, "adk_request_credential")
            assert call.id in (request.long_running_tool_ids or set())
            assert call.args is not None and not used
            config = AuthConfig.model_validate(call.args["authConfig"])
            config.exchanged_auth_credential = AuthCredential(
                auth_type=AuthCredentialTypes.OAUTH2, oauth2=OAuth2Auth(access_token="test-token")
            )
            answer = config.model_dump(mode="json", by_alias=True)
            resumed = await run(runner, responding(call, answer))
            following = await run(runner, user_text("a new request"))
        finally:
            await runner.close()
        branches = {e.branch for e in resumed if e.author == child.name and e.content}
        assert branches == {request.branch}
        return await runs(side, [asked, resumed, following]), used, request.branch

    database = DatabaseSessionService("sqlite+aiosqlite:///:memory:")
    try:
        ref, ours, sqlite = await on_each([*sides, Side("sqlite", database, database)], scenario)
    finally:
        await database.close()
    assert ours == sqlite
    assert ours[0].stored == ours[0].in_database_order
    assert (ours[0].yielded, ours[0].seen, ours[0].state) == (
        ref[0].yielded,
        ref[0].seen,
        ref[0].state,
    )
    assert ours[0].stored == ref[0].in_database_order
    assert ours[1:] == ref[1:]
    runs_seen, used, _branch = ref
    assert used == ["test-token"]
    _asked, resumed, following = runs_seen.seen
    assert ("worker", "child completed") in resumed
    assert not any(what == "call adk_request_credential" for _, what in resumed + following)
    assert ("root", "root handles next message") in following
