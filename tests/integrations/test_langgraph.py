"""RedisSaver and AsyncRedisSaver beyond the conformance suite: a real graph run by two
processes (interrupt, resume, history, fork), two workers resuming one thread at once, the
thread's TTL as one tree, nothing left behind by delete_thread and prune. Every backend
(tests/conftest.py) unless a test names its own.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import inspect
import re
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    create_checkpoint,
    empty_checkpoint,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from redis_session.errors import InvalidArgument
from redis_session.integrations.langgraph import AsyncRedisSaver, RedisSaver, StepTaken
from redis_session.integrations.langgraph._thread import keys_of, run_registry
from tests.conftest import Backend, _backend, _params
from tests.integrations.conftest import RoundTrips
from tests.support.servers import wait_until

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_workers.py"


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("langgraph_workers", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["langgraph_workers"] = module
    spec.loader.exec_module(module)
    return module


workers = _example()


@pytest.fixture(params=_params(("redis", "cluster")))
def shared_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A real Redis and the real cluster: servers two processes share."""
    yield from _backend(request)


@pytest.mark.timeout(180)
def test_two_processes_interrupt_and_resume_then_fork(shared_backend: Backend) -> None:
    failed = workers.demo(shared_backend.url, shared_backend.prefix)
    assert failed == []
    assert shared_backend.session_keys() == []  # the demo deletes its thread


def _checkpoint(parent: Checkpoint | None, step: int, messages: list[str]) -> Checkpoint:
    base = parent or empty_checkpoint()
    made = create_checkpoint(base, None, step)
    made["channel_values"] = {"messages": messages}
    made["channel_versions"] = {"messages": f"{step + 2:032}.0"}
    return made


def _put(saver: RedisSaver, thread: str, parent: RunnableConfig | None, cp: Checkpoint,
         step: int, ns: str = "", run: str = "run-1") -> RunnableConfig:  # fmt: skip
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if parent is not None:
        conf["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    versions = cp["channel_versions"]
    metadata: Any = {"source": "loop", "step": step, "parents": {}, "run_id": run}
    return saver.put({"configurable": conf}, cp, metadata, dict(versions))


def test_delete_thread_leaves_no_key_and_prune_no_orphan_value(backend: Backend) -> None:
    saver = RedisSaver(backend.sync_store())
    thread = "t/1:child:x"  # a key the store would otherwise take for a child's
    parent = None
    cps = []
    last: Checkpoint | None = None
    for step in range(5):
        for ns in ("", "sub:1"):
            cp = _checkpoint(last, step, [f"m{i}" for i in range(step + 1)])
            config = _put(saver, thread, parent if ns == "" else None, cp, step, ns, f"run-{step}")
            saver.put_writes(config, [("messages", f"w{step}"), ("__error__", "e")], "task-1")
            if ns == "":
                parent, last = config, cp
            cps.append(config)
    keys = keys_of(saver.store.extension, thread)
    raw = backend.sync_client()
    assert raw.exists(keys.data, keys.order) == 2
    schema = saver.store.extension.schema  # the doctor knows them for the store's
    assert schema.expected_type(keys.data) == "hash" == raw.type(keys.data).decode()
    assert schema.expected_type(keys.order) == "zset" == raw.type(keys.order).decode()
    registry = run_registry(saver.store.extension, "run-0")
    assert schema.expected_type(registry) == "set" == raw.type(registry).decode()
    saver.prune([thread], strategy="keep_latest")
    listed = list(saver.list({"configurable": {"thread_id": thread}}))
    assert len(listed) == 2 and {t.config["configurable"]["checkpoint_ns"] for t in listed} == {
        "",
        "sub:1",
    }
    # left: per kept checkpoint c, r, one value b and its count n, two writes; the kept root
    # checkpoint's s (its parent's guard field is gone with the parent: none was written)
    assert raw.hlen(keys.data) == 2 * (2 + 2 + 2)
    # c, two writes, its run's u; and g per run the thread held (5)
    assert raw.zcard(keys.order) == 2 * (1 + 2 + 1) + 5
    assert listed[0].checkpoint["channel_values"] == {"messages": [f"m{i}" for i in range(5)]}
    # a copy's checkpoints belong to their runs too: delete_for_runs finds them in both threads
    saver.copy_thread(thread, "copy")
    copied = list(saver.list({"configurable": {"thread_id": "copy"}}))
    assert [t.checkpoint["id"] for t in copied] == [t.checkpoint["id"] for t in listed]
    saver.delete_for_runs(["run-4"])
    assert list(saver.list({"configurable": {"thread_id": "copy"}})) == []
    assert list(saver.list({"configurable": {"thread_id": thread}})) == []
    saver.delete_thread(thread)
    saver.delete_thread("copy")
    assert backend.session_keys() == []
    assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
    saver.store.close()


@pytest.mark.timeout(60)
def test_a_thread_expires_as_one_tree_refreshed_by_writes_and_reads(backend: Backend) -> None:
    store = backend.sync_store(ttl=2, expired_grace=1)
    saver = RedisSaver(store, ttl_config={"default_ttl": 2 / 60, "refresh_on_read": True})
    raw = backend.sync_client()
    raw.ping()
    # the saver's set-up (connections, a cluster's slots, the scripts' loads) paid on a thread
    # it deletes, not within t1's 2 s
    _put(saver, "warm", None, _checkpoint(None, 0, ["hi"]), 0)
    assert saver.get_tuple({"configurable": {"thread_id": "warm"}}) is not None
    saver.delete_thread("warm")
    config = _put(saver, "t1", None, _checkpoint(None, 0, ["hi"]), 0)
    keys = keys_of(store.extension, "t1")
    meta = store.extension.schema.session(keys.session).meta

    def deadlines() -> set[int]:
        return {int(raw.pexpiretime(k)) for k in (meta, keys.data, keys.order)}

    first = deadlines()
    assert len(first) == 1 and min(first) > 0  # one deadline for the whole tree
    # a read refreshes it once a 16th of the TTL has passed (the store's own rule)
    assert wait_until(
        lambda: (
            saver.get_tuple({"configurable": {"thread_id": "t1"}}) is not None
            and deadlines() != first
        ),
        5,
    )
    assert len(deadlines()) == 1
    saver.put_writes(config, [("messages", "w")], "task")
    assert len(deadlines()) == 1
    # then the whole tree goes at its deadline: what is left under the prefix is the expiry
    # marker (it outlives the tree by a grace period, so that "expired" is told from "none")
    # and the run's registry (twice the TTL): each going by its own TTL
    assert wait_until(lambda: raw.exists(meta, keys.data, keys.order) == 0, 10, interval=0.05)
    assert saver.get_tuple({"configurable": {"thread_id": "t1"}}) is None
    # (the index of sessions, store-wide, names it until the reaper or a listing drops it)
    index = store.extension.schema.index_of(keys.session)

    def left() -> set[str]:
        return {bytes(k).decode() for k in backend.session_keys()} - {index}

    mark = store.extension.schema.session(keys.session).mark
    assert left() <= {mark, run_registry(store.extension, "run-1")}, left()
    assert all(raw.pttl(k) > 0 for k in left())  # each goes by its own TTL
    store.close()


@pytest.mark.timeout(60)
def test_two_workers_resuming_one_thread_at_once_cannot_both_write_the_step(
    backend: Backend,
) -> None:
    """LangGraph leaves a thread's runs to the application (its server queues them per
    thread); with ``exclusive_steps`` the saver holds it: the second worker's checkpoint that
    continues from the same parent is refused (StepTaken) and stores nothing."""
    thread = f"race-{uuid.uuid4().hex[:6]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    start = RedisSaver(backend.sync_store(), exclusive_steps=True)
    graph = workers.build(start, [workers.asks_for("Paris", "call-1")])
    graph.invoke({"messages": [HumanMessage("Weather in Paris?")]}, config)
    interrupted = start.get_tuple(config)
    assert interrupted is not None

    barrier = threading.Barrier(2, timeout=20)
    outcomes: list[Any] = [None, None]

    def resume(i: int) -> None:
        saver = RedisSaver(backend.sync_store(), exclusive_steps=True)  # a store each
        g = workers.build(saver, [AIMessage(f"worker {i}: sunny")])
        original = g.nodes["approve"].bound.func

        def approve(state: Any) -> Any:  # both pass the interrupt, then write together
            out = original(state)
            barrier.wait()
            return out

        g.nodes["approve"].bound.func = approve
        try:
            outcomes[i] = g.invoke(Command(resume="yes"), interrupted.config)
        except StepTaken as exc:
            outcomes[i] = exc

    runners = [threading.Thread(target=resume, args=(i,)) for i in range(2)]
    for r in runners:
        r.start()
    for r in runners:
        r.join(30)
    refused = [o for o in outcomes if isinstance(o, StepTaken)]
    finished = [o for o in outcomes if isinstance(o, dict)]
    assert len(refused) == 1 and len(finished) == 1, outcomes
    children = [
        t
        for t in start.list(config)
        if t.parent_config
        and t.parent_config["configurable"]["checkpoint_id"]
        == interrupted.config["configurable"]["checkpoint_id"]
    ]
    assert len(children) == 1  # one step written after the interrupt, not two
    assert (
        finished[0]["messages"][-1].content
        == start.get_tuple(config)
        .checkpoint[  # type: ignore[union-attr]
            "channel_values"
        ]["messages"][-1]
        .content
    )
    # a fork (update_state) from the same checkpoint is never refused
    forked = graph.update_state(interrupted.config, {"messages": [HumanMessage("Rome?")]})
    assert forked["configurable"]["checkpoint_id"]


def test_two_new_inputs_on_one_thread_at_once_one_is_refused(backend: Backend) -> None:
    """Two workers each starting a run on the thread's newest checkpoint (an ``input``
    checkpoint each, the same parent): under ``exclusive_steps`` the second is refused."""
    one = RedisSaver(backend.sync_store(), exclusive_steps=True)
    two = RedisSaver(backend.sync_store(), exclusive_steps=True)
    head = _put(one, "inputs", None, _checkpoint(None, 0, ["a"]), 0)
    cp = _checkpoint(None, 1, ["a", "b"])
    metadata: Any = {"source": "input", "step": 1, "parents": {}}
    versions = dict(cp["channel_versions"])
    one.put(head, cp, metadata, versions)
    one.put(head, cp, metadata, versions)  # the same checkpoint again (a retry): stored
    with pytest.raises(StepTaken) as taken:
        two.put(head, _checkpoint(None, 1, ["a", "c"]), metadata, versions)
    assert taken.value.child == cp["id"]
    update: Any = {"source": "update", "step": 1, "parents": {}}
    two.put(head, _checkpoint(None, 1, ["a", "d"]), update, versions)  # a fork: stored
    assert len(list(one.list({"configurable": {"thread_id": "inputs"}}))) == 3


async def test_the_async_saver_runs_a_graph_and_its_blocking_methods_from_a_thread(
    backend: Backend,
) -> None:
    store = backend.async_store()
    saver = AsyncRedisSaver(store)
    graph = workers.build(saver, [workers.asks_for("Paris", "c1"), AIMessage("Sunny.")])
    config: RunnableConfig = {"configurable": {"thread_id": "a1"}}
    out = await graph.ainvoke({"messages": [HumanMessage("Weather?")]}, config)
    assert out["__interrupt__"]
    out = await graph.ainvoke(Command(resume="yes"), config)
    assert out["messages"][-1].content == "Sunny."
    history = [s async for s in graph.aget_state_history(config)]
    assert len(history) == 6
    got = await asyncio.to_thread(saver.get_tuple, config)  # blocking, off the loop's thread
    assert got is not None and got.config == history[0].config
    with pytest.raises(asyncio.InvalidStateError):
        saver.get_tuple(config)
    await saver.adelete_thread("a1")
    started = time.monotonic()
    assert [s async for s in graph.aget_state_history(config)] == []
    assert time.monotonic() - started < 5
    await store.close()


def test_ttl_config_is_the_store_s_ttl() -> None:
    saver = RedisSaver.from_url(f"memory://{uuid.uuid4().hex}", ttl_config={"default_ttl": 2})
    assert saver.store.ttl is not None and saver.store.ttl.total_seconds() == 120
    with pytest.raises(InvalidArgument):
        RedisSaver(saver.store, ttl_config={"default_ttl": 5})  # not the store's
    with pytest.raises(InvalidArgument):
        RedisSaver.from_url("memory://", ttl=60, ttl_config={"default_ttl": 1})  # given twice
    saver.store.close()


@pytest.fixture(params=_params(("fake", "redis")))
def counted_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """fakeredis and one real Redis (a cluster and Sentinel route the same calls)."""
    yield from _backend(request)


async def test_a_put_a_put_writes_and_a_get_tuple_are_one_round_trip_each(
    counted_backend: Backend, round_trips: RoundTrips
) -> None:
    store = counted_backend.async_store()
    saver = AsyncRedisSaver(store)
    first = _checkpoint(None, 0, ["hi"])
    metadata: Any = {"source": "loop", "step": 0, "parents": {}, "run_id": "r"}
    base: RunnableConfig = {"configurable": {"thread_id": "rt", "checkpoint_ns": ""}}
    config = await saver.aput(base, first, metadata, dict(first["channel_versions"]))
    await saver.aput_writes(config, [("messages", "w0")], "task-0")
    await saver.aget_tuple(config)  # the scripts loaded, the run registered
    nxt = _checkpoint(first, 1, ["hi", "there"])
    round_trips.reset()
    config = await saver.aput(config, nxt, metadata, dict(nxt["channel_versions"]))
    assert round_trips.count == 1
    round_trips.reset()
    await saver.aput_writes(config, [("messages", "w"), ("__interrupt__", "i")], "task")
    assert round_trips.count == 1
    round_trips.reset()
    got = await saver.aget_tuple({"configurable": {"thread_id": "rt"}})
    assert round_trips.count == 1
    assert got is not None and got.checkpoint["channel_values"] == {"messages": ["hi", "there"]}
    # in LangGraph's order (writes_sort_key: a special write's negative index first)
    writes = [w[1:] for w in got.pending_writes or []]
    assert writes == [("__interrupt__", "i"), ("messages", "w")]
    await saver.adelete_thread("rt")
    await store.close()


def _append(state: list[Any] | None, writes: Sequence[list[Any]]) -> list[Any]:
    out = list(state or [])
    for w in writes:
        out.extend(w)
    return out


class DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(_append, snapshot_frequency=3)]
    odd: Annotated[list[int], DeltaChannel(_append, snapshot_frequency=4)]
    n: int


def _delta_graph(saver: Any) -> Any:
    def step(state: DeltaState) -> dict[str, Any]:
        n = state["n"]
        return {"items": [f"i{n}"], "odd": [n] if n % 2 else [], "n": n + 1}

    graph = StateGraph(DeltaState)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: END if s["n"] >= 120 else "step")
    return graph.compile(checkpointer=saver)


@pytest.mark.timeout(60)
def test_delta_channels_rebuild_as_in_memory_and_the_walk_is_langgraph_s(
    backend: Backend,
) -> None:
    """LangGraph's DeltaChannel (values stored every few steps, writes replayed between): the
    whole history reads back as on InMemorySaver, and the override of
    get_delta_channel_history (100 ancestors a script) answers what LangGraph's default walk
    (one get_tuple an ancestor) does, a channel never seeded included (a walk to the root over
    two pages)."""
    memory, saver = InMemorySaver(), RedisSaver(backend.sync_store())
    config: RunnableConfig = {"configurable": {"thread_id": "delta"}, "recursion_limit": 500}
    for s in (memory, saver):
        _delta_graph(s).invoke({"items": [], "odd": [], "n": 0}, config)
    expected = [h.values for h in _delta_graph(memory).get_state_history(config)]
    history = list(_delta_graph(saver).get_state_history(config))
    assert [h.values for h in history] == expected and len(expected) == 122
    channels = ["items", "odd", "never"]
    for cfg in [config, *(h.config for h in history[::25])]:
        got = saver.get_delta_channel_history(config=cfg, channels=channels)
        walked = BaseCheckpointSaver.get_delta_channel_history(saver, config=cfg, channels=channels)
        assert got == walked
    saver.store.close()


TWINS = [
    "get_tuple", "list", "put", "put_writes", "delete_thread", "delete_for_runs", "copy_thread",
    "prune", "get_delta_channel_history",
]  # fmt: skip


BLOCKING = [
    ("async def a", "def "), ("async for ", "for "), ("await ", ""),
    ("self._run(", "self.store.run("), ("AsyncIterator[", "Iterator["),
]  # fmt: skip


def _as_blocking(method: Any) -> str:
    """An async method's source as its blocking twin would read (``await``, ``async`` and
    the ``a`` of the names gone, the store's driver called as the blocking saver calls it)."""
    source = textwrap.dedent(inspect.getsource(method))
    for old, new in BLOCKING:
        source = source.replace(old, new)
    source = re.sub(r"self\.a(" + "|".join(TWINS) + r")\(", r"self.\1(", source)
    return ast.dump(ast.parse(source))


@pytest.mark.parametrize("name", TWINS)
def test_the_two_savers_are_twins(name: str) -> None:
    """Hand-written twins that cannot drift: RedisSaver's blocking method and
    AsyncRedisSaver's async one are the same code but for ``await`` (and the same docstring,
    signature); each saver's other flavour of it has the same signature too."""
    blocking, asynchronous = getattr(RedisSaver, name), getattr(AsyncRedisSaver, "a" + name)
    assert name in vars(RedisSaver) and "a" + name in vars(AsyncRedisSaver)
    assert "a" + name in vars(RedisSaver) and name in vars(AsyncRedisSaver)
    assert _as_blocking(asynchronous) == ast.dump(
        ast.parse(textwrap.dedent(inspect.getsource(blocking)))
    )
    for flavour in (name, "a" + name):
        assert inspect.signature(getattr(RedisSaver, flavour)) == inspect.signature(
            getattr(AsyncRedisSaver, flavour)
        )


def test_a_thread_s_lifecycle_events_are_the_store_s(backend: Backend) -> None:
    """A thread's first put logs its session's ``create``, a copy a ``branch``, a delete a
    ``delete``; puts and writes log nothing (as the store's metadata updates)."""
    events: list[Any] = []
    saver = RedisSaver(backend.sync_store(lifecycle_hook=events.append))
    config = _put(saver, "ev", None, _checkpoint(None, 0, ["a"]), 0)
    saver.put_writes(config, [("messages", "w")], "task")
    _put(saver, "ev", config, _checkpoint(None, 1, ["a", "b"]), 1)
    saver.copy_thread("ev", "ev2")
    saver.delete_thread("ev")
    saver.delete_thread("ev2")
    assert [(e.type, e.key, e.branch_of) for e in events] == [
        ("create", "langgraph/ev", ""),
        ("branch", "langgraph/ev2", "langgraph/ev"),
        ("delete", "langgraph/ev", ""),
        ("delete", "langgraph/ev2", ""),
    ]
    saver.store.close()


async def test_langgraph_checkpoint_redis_s_way_in_works_as_written() -> None:
    """What a user of ``langgraph-checkpoint-redis`` wrote, the import changed."""
    url = f"memory://{uuid.uuid4().hex}"
    ttl_config: Any = {"default_ttl": 60, "refresh_on_read": True}
    with RedisSaver.from_conn_string(url, ttl=ttl_config) as checkpointer:
        checkpointer.setup()
        assert checkpointer.store.ttl is not None and checkpointer.store.ttl.total_seconds() == 3600
        config = _put(checkpointer, "m", None, _checkpoint(None, 0, ["a"]), 0)
        assert checkpointer.get_tuple(config) is not None
        checkpointer.delete_thread("m")
    async with AsyncRedisSaver.from_conn_string(url, ttl=ttl_config) as acheckpointer:
        await acheckpointer.asetup()
        assert await acheckpointer.aget_tuple({"configurable": {"thread_id": "m"}}) is None
