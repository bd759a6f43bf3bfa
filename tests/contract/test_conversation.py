"""Branch, rewind and repair a conversation (issue #45): atomic, on every backend, both flavours."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from redis_session import (
    ChildSessionConfig,
    ConcurrentChange,
    DecryptionFailed,
    DuplicateSession,
    InvalidArgument,
    LifecycleEventType,
    Message,
    MessageNotFound,
    Session,
    SessionLifecycleEvent,
    SessionNotFound,
    StaleExpectation,
    ToolCall,
    TurnLost,
)
from redis_session._core.requests import ScriptCall
from redis_session.scripts import script_source
from tests.conftest import Backend, StoreFactory
from tests.contract.test_turns import lease_gone, turn
from tests.support.stepping import run_op
from tests.support.tokens import as_stored, counted


def msgs(n: int, tag: str = "m") -> list[Message]:
    """``n`` messages as the store stores them (with their token counts: what reads return)."""
    return as_stored(
        Message(role="user" if i % 2 == 0 else "assistant", content=f"{tag}{i}") for i in range(n)
    )


def contents(history: list[Message]) -> list[str]:
    return [m.content for m in history]


# -- branch ----------------------------------------------------------------------------------


async def test_a_branch_holds_the_history_up_to_a_message(make_store: StoreFactory) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    history = msgs(10)
    await store.create(
        Session(
            key="s", agent_id="a", model="m", metadata={"lang": "en", "x": "1"}, history=history
        )
    )
    made = await store.branch("s", "b", at=history[4].id, metadata={"x": "2"})
    got = await store.get("b")
    assert got.history == history[:5] == made.history  # ids, timestamps, contents kept
    assert (got.agent_id, got.model, got.metadata) == ("a", "m", {"lang": "en", "x": "2"})
    assert (got.branch_of, got.branch_at) == ("s", history[4].id)
    assert (made.branch_of, made.branch_at) == ("s", history[4].id)
    whole = await store.branch("s", "w")
    assert contents((await store.get("w")).history) == contents(history)
    assert whole.branch_at == history[-1].id
    assert (await store.get("s")).branch_of == ""  # the source is untouched
    # independent: a write to one is not in the other
    await store.append_message("b", Message(role="user", content="only b"))
    assert contents(await store.get_history("s"))[-1] == "m9"
    assert len(await store.get_history("b")) == 6
    branches = [e for e in seen if e.type == LifecycleEventType.BRANCH]
    assert [(e.key, e.branch_of, e.message_id) for e in branches] == [
        ("b", "s", history[4].id),
        ("w", "s", history[-1].id),
    ]
    assert not [e for e in seen if e.type == "create" and e.key in ("b", "w")]


async def test_branch_errors(store: Any) -> None:
    history = msgs(3)
    await store.create(Session(key="s", history=history))
    await store.create(Session(key="taken"))
    with pytest.raises(SessionNotFound):
        await store.branch("nope", "b")
    with pytest.raises(DuplicateSession):
        await store.branch("s", "taken")
    with pytest.raises(MessageNotFound) as caught:
        await store.branch("s", "b", at="no-such-id")
    assert caught.value.message_id == "no-such-id" and isinstance(caught.value, LookupError)
    with pytest.raises(InvalidArgument, match="new_key"):
        await store.branch("s", "s")
    with pytest.raises(InvalidArgument, match="metadata"):
        await store.branch("s", "b", metadata={"x": 1})
    with pytest.raises(SessionNotFound):
        await store.get("b")  # nothing was made by any of them
    assert contents((await store.get("taken")).history) == []


@pytest.mark.slow  # a size (2-4 s on fakeredis): the full suite runs it on every backend
async def test_a_branch_of_10_000_messages_at_5_000(make_store: StoreFactory) -> None:
    store = make_store()
    history = msgs(10_000)
    await store.create(Session(key="big"))
    await store.append_messages("big", history)
    await store.branch("big", "half", at=history[5_000].id)
    got = await store.get_history("half")
    assert [m.id for m in got] == [m.id for m in history[:5_001]]


def test_a_crash_in_a_staged_branch_leaves_nothing_and_its_retry_completes(
    backend: Backend,
) -> None:
    store = backend.sync_store(read_cache_bytes=0)
    history = msgs(1_150)
    store.create(Session(key="src"))
    store.append_messages("src", history)
    store._core.limits.batch_messages = 100  # a staged copy: 12 steps, then the create
    requests: list[Any] = []

    def until_third_stage(request: Any) -> Any:
        staged = [r for r in requests if isinstance(r, ScriptCall) and r.name == "stage_push"]
        if len(staged) == 3:
            raise KeyboardInterrupt  # the process dies here, two steps staged
        return store._execute(request)

    op = store._core.conversation.branch("src", "copy", None, None, "call-1")
    with pytest.raises(KeyboardInterrupt):
        run_op(op, until_third_stage, requests)
    with pytest.raises(SessionNotFound):
        store.get("copy")  # nothing visible
    made = store.branch("src", "copy", idempotency_key="call-1")
    assert [m.id for m in store.get_history("copy")] == [m.id for m in history]
    assert made.branch_of == "src"
    again = store.branch("src", "copy", idempotency_key="call-1")  # done: answered as done
    assert again.key == "copy" and len(store.get_history("copy")) == 1_150
    with pytest.raises(DuplicateSession):
        store.branch("src", "copy")  # another call
    store.close()


async def test_children_are_not_copied(store: Any) -> None:
    await store.create(Session(key="p", history=msgs(2)))
    await store.fork_child("p", "helper", ChildSessionConfig())
    await store.branch("p", "q")
    assert await store.children_of("q") == []
    assert len(await store.children_of("p")) == 1


# -- rewind ----------------------------------------------------------------------------------


async def test_rewind_removes_the_tail_after_a_message(make_store: StoreFactory) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    history = msgs(10)
    await store.create(Session(key="s", history=history))
    before = (await store.get("s")).updated_at
    assert await store.rewind("s", after=history[6].id) == 3
    got = await store.get("s")
    assert got.history == history[:7] and got.updated_at >= before
    assert await store.rewind("s", after=history[6].id) == 0  # nothing after it now
    assert await store.append_message("s", history[8]) is False  # a removed id stays recorded
    assert await store.append_message("s", Message(role="user", content="new")) is True
    assert contents(await store.get_history("s"))[-2:] == ["m6", "new"]
    assert await store.rewind("s", after="") == 8
    assert await store.get_history("s") == []
    rewinds = [e for e in seen if e.type == LifecycleEventType.REWIND]
    assert [(e.key, e.message_id, e.count) for e in rewinds] == [
        ("s", history[6].id, 3),
        ("s", "", 8),
    ]


async def test_rewind_errors(store: Any) -> None:
    history = msgs(4)
    await store.create(Session(key="s", history=history))
    with pytest.raises(SessionNotFound):
        await store.rewind("nope", after="")
    with pytest.raises(MessageNotFound):
        await store.rewind("s", after="no-such-id")
    with pytest.raises(StaleExpectation):
        await store.rewind("s", after=history[1].id, expect_last_id=history[2].id)
    with pytest.raises(InvalidArgument, match="after"):
        await store.rewind("s", after=None)
    with pytest.raises(InvalidArgument, match="keep_as"):
        await store.rewind("s", after="", keep_as="s")
    assert await store.get_history("s") == history  # nothing was removed
    assert await store.rewind("s", after=history[1].id, expect_last_id=history[3].id) == 2


async def test_keep_as_branches_the_session_as_it_was(store: Any) -> None:
    history = msgs(6)
    await store.create(Session(key="s", history=history, metadata={"k": "v"}))
    await store.create(Session(key="taken"))
    assert await store.rewind("s", after=history[2].id, keep_as="before") == 3
    kept = await store.get("before")
    assert kept.history == history and kept.metadata == {"k": "v"}
    assert (kept.branch_of, kept.branch_at) == ("s", history[-1].id)
    assert await store.get_history("s") == history[:3]
    with pytest.raises(DuplicateSession):
        await store.rewind("s", after="", keep_as="taken")
    assert await store.get_history("s") == history[:3]


async def test_another_workers_read_cache_does_not_serve_the_rewound_tail(
    make_store: StoreFactory,
) -> None:
    reader, rewinder = make_store(), make_store()
    history = msgs(300)
    await reader.create(Session(key="s"))
    await reader.append_messages("s", history)
    assert len((await reader.get("s")).history) == 300  # its cache holds 300 now
    assert await rewinder.rewind("s", after=history[199].id, keep_as="all") == 100
    assert (await reader.get("s")).history == history[:200]
    assert len(await reader.get_history("s", last=50)) == 50
    assert (await reader.get("all")).history == history
    # appends after the rewind reach the same positions the old tail held: still not served
    await rewinder.append_messages("s", msgs(150, "n"))
    assert contents(await reader.get_history("s")) == contents(history[:200] + msgs(150, "n"))


async def test_a_rewind_through_a_turn_is_fenced(backend: Backend, make_store: Any) -> None:
    slow, fast = make_store(), make_store()
    history = msgs(4)
    await slow.create(Session(key="s", history=history))
    async with turn(slow, "s", lease=30) as paused:
        assert await paused.rewind(after=history[2].id) == 1
        await paused.renew(0.05)  # the write above is not raced by the lease; now it runs out
        lease_gone(backend, "s")
        async with turn(fast, "s", lease=5):
            with pytest.raises(TurnLost):
                await paused.rewind(after=history[0].id)
            with pytest.raises(TurnLost):
                await slow.rewind("s", after=history[0].id)  # the store's own, in the block
    assert await fast.get_history("s") == history[:3]


def test_a_retried_rewind_script_answers_its_count_and_removes_nothing_more(
    backend: Backend,
) -> None:
    store = backend.sync_store()
    history = msgs(5)
    store.create(Session(key="r", history=history))
    requests: list[Any] = []

    def twice(request: Any) -> Any:
        reply = store._execute(request)
        if isinstance(request, ScriptCall) and request.name == "rewind":
            store.append_message("r", Message(role="user", content="meanwhile"))
            return store._execute(request)  # redis-py's retry after a lost reply
        return reply

    op = store._core.conversation.rewind("r", history[1].id, None, None, "call-r")
    assert run_op(op, twice, requests) == 3
    assert contents(store.get_history("r")) == ["m0", "m1", "meanwhile"]
    store.close()


def test_the_rewind_script_refuses_a_history_that_changed(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="r", history=msgs(3)))
    sk, root = store._core.trees.keys("r")
    keys = [*root, sk.turn, store._core.events.log_of("r")]
    k = backend.schema.session("r")
    script = backend.sync_client().register_script(script_source("rewind"))
    meta = backend.sync_client().hgetall(k.meta)
    g, n = int(meta[b"g"]), int(meta[b"n"])
    base = [0, 0, "0", 1000, "r", "t1", g]
    events = ["", "", 0, 0]
    reply = script(keys=keys, args=[*base, 1, n + 1, b"", *events, b"{}", ""])
    assert reply == [5]  # STALE: the tail is not what the caller read
    reply = script(keys=keys, args=[*base, 1, n, b'{"id":"other",', *events, b"{}", ""])
    assert reply == [5]  # the kept message is not the one named
    assert len(store.get_history("r")) == 3
    store.close()


# -- cleanup_failed_turn ---------------------------------------------------------------------


def calls_message(*answered: bool) -> Message:
    return Message(
        role="assistant",
        tool_calls=[
            ToolCall(id=f"c{i}", name="lookup", input="{}", output="done" if done else "")
            for i, done in enumerate(answered)
        ],
    )


async def test_cleanup_closes_every_open_tool_call_once(make_store: StoreFactory) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    await store.create(Session(key="s", history=[Message(role="user", content="go")]))
    await store.append_message("s", calls_message(False, True, False))
    await store.append_message(
        "s",
        Message(role="tool", tool_calls=[ToolCall(id="c0", name="lookup", input="{}", output="r")]),
    )
    live = await store.fork_child("s", "helper", ChildSessionConfig())
    merged = await store.fork_child("s", "merged", ChildSessionConfig())
    await store.merge_child(merged.key, "")
    assert await store.cleanup_failed_turn("s", reason="cut off") == 1
    closing = (await store.get_history("s"))[-1]
    assert closing.role == "tool"
    assert [(c.id, json.loads(c.output)) for c in closing.tool_calls] == [
        ("c2", {"error": "cut off"})
    ]
    assert await store.cleanup_failed_turn("s") == 0
    assert (await store.get_history("s"))[-1].id == closing.id  # nothing more appended
    with pytest.raises(SessionNotFound):
        await store.get_child(live.key)
    discards = [e.child_key for e in seen if e.type == LifecycleEventType.DISCARD]
    assert discards == [live.key]


async def test_cleanup_after_three_calls_one_answered_closes_two(store: Any) -> None:
    await store.create(Session(key="s", history=[Message(role="user", content="go")]))
    await store.append_message("s", calls_message(False, True, False))
    assert await store.cleanup_failed_turn("s") == 2
    closing = (await store.get_history("s"))[-1]
    assert [c.id for c in closing.tool_calls] == ["c0", "c2"]
    assert {json.loads(c.output)["error"] for c in closing.tool_calls} == {
        "tool call was interrupted and did not complete"
    }
    assert await store.cleanup_failed_turn("s") == 0
    with pytest.raises(SessionNotFound):
        await store.cleanup_failed_turn("nope")


async def test_a_tool_message_answers_its_calls_even_with_an_empty_output(store: Any) -> None:
    await store.create(Session(key="s", history=[calls_message(False, False)]))
    empty = ToolCall(id="c0", name="lookup", input="{}", output="")
    await store.append_message("s", Message(role="tool", tool_calls=[empty]))
    assert await store.cleanup_failed_turn("s") == 1  # c1 only: c0's tool answered ""
    assert [c.id for c in (await store.get_history("s"))[-1].tool_calls] == ["c1"]


async def test_annotate_timeout_can_close_the_tool_calls_in_the_same_append(store: Any) -> None:
    await store.create(Session(key="s", history=[calls_message(False)]))
    assert await store.annotate_timeout("s", "partial", close_tool_calls=True) is True
    tail = (await store.get_history("s"))[-2:]
    assert [m.role for m in tail] == ["tool", "assistant"]
    assert tail[0].tool_calls[0].id == "c0"
    assert tail[1].content.startswith("[This response was interrupted")
    assert await store.cleanup_failed_turn("s") == 0


# -- sealed sessions -------------------------------------------------------------------------

PASSPHRASE, WORK = "correct horse battery staple", 10


async def test_sealed_sessions_branch_and_rewind(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(passphrase=PASSPHRASE, kdf_work=WORK)
    history = msgs(6)
    await store.create(Session(key="s", agent_id="a", metadata={"k": "v"}, history=history))
    await store.branch("s", "b", at=history[3].id)
    assert await store.rewind("s", after=history[1].id, keep_as="kept") == 4
    assert (await store.get("b")).history == history[:4]
    assert (await store.get("b")).metadata == {"k": "v"}
    assert (await store.get("kept")).history == history
    assert await store.get_history("s") == history[:2]
    raw = backend.sync_client()
    b, s = backend.schema.session("b"), backend.schema.session("s")
    # sealed again under the branch's own key: the same message is another ciphertext
    assert raw.lindex(b.msgs, 0) != raw.lindex(s.msgs, 0)
    assert b'"m0"' not in raw.lindex(b.msgs, 0)


async def test_a_branch_does_not_take_a_message_moved_in_from_another_session(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(passphrase=PASSPHRASE, kdf_work=WORK)
    await store.create(Session(key="s", history=[Message(id="m1", role="user", content="mine")]))
    await store.create(Session(key="o", history=[Message(id="m1", role="user", content="theirs")]))
    raw = backend.sync_client()
    s, o = backend.schema.session("s"), backend.schema.session("o")
    raw.lset(s.msgs, 0, raw.lindex(o.msgs, 0))  # a hostile writer moves the element over
    fresh = make_store(passphrase=PASSPHRASE, kdf_work=WORK)  # no read cache of "s"
    with pytest.raises(DecryptionFailed, match="'s'"):
        await fresh.branch("s", "b")
    with pytest.raises(SessionNotFound):
        await fresh.get("b")


async def test_a_rewind_discards_the_children_forked_from_the_tail(
    make_store: StoreFactory,
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append)
    history = msgs(6)
    await store.create(Session(key="p", history=history[:3]))
    early = await store.fork_child("p", "early", ChildSessionConfig())
    await store.append_messages("p", history[3:])
    late = await store.fork_child("p", "late", ChildSessionConfig())
    done = await store.fork_child("p", "done", ChildSessionConfig())
    await store.merge_child(done.key, "")
    forked = {c.key: c.forked_after for c in await store.children_of("p")}
    assert forked == {early.key: history[2].id, late.key: history[5].id, done.key: history[5].id}
    assert await store.rewind("p", after=history[3].id) == 2
    assert {c.key for c in await store.children_of("p")} == {early.key, done.key}
    assert [e.child_key for e in seen if e.type == LifecycleEventType.DISCARD] == [late.key]
    assert await store.rewind("p", after="") == 4  # forked at message 2: now gone too
    assert [c.key for c in await store.children_of("p") if c.merged_at is None] == []


KILLED_BRANCH = """
import os, signal, sys
from redis_session import RedisStore
from redis_session._core.requests import ScriptCall

url, prefix = sys.argv[1], sys.argv[2]
store = RedisStore.from_url(url, prefix=prefix, read_cache_bytes=0)
store._core.limits.batch_messages = 100
run = store._execute
staged = []

def execute(request):
    reply = run(request)
    if isinstance(request, ScriptCall) and request.name == "stage_push":
        staged.append(reply)
        if len(staged) == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies, two steps staged
    return reply

store._execute = execute
store.branch("src", "copy", idempotency_key="call-k")
"""


def test_a_process_killed_in_a_staged_branch_leaves_nothing_and_the_retry_completes(
    server_backend: Backend,
) -> None:
    store = server_backend.sync_store(read_cache_bytes=0)
    history = msgs(1_150)
    store.create(Session(key="src"))
    store.append_messages("src", history)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BRANCH, server_backend.url, server_backend.prefix],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with pytest.raises(SessionNotFound):
        store.get("copy")
    stage = [k for k in server_backend.session_keys() if b"stage" in k]
    assert stage, "the dead process staged two steps"  # under a lease, never visible
    store._core.limits.batch_messages = 100
    store.branch("src", "copy", idempotency_key="call-k")
    assert [m.id for m in store.get_history("copy")] == [m.id for m in history]
    assert not [k for k in server_backend.session_keys() if b"stage" in k]
    store.close()


# -- what an adversarial review found (each once wrong) --------------------------------------


def test_a_keep_as_rewind_retried_after_a_crash_loses_nothing(backend: Backend) -> None:
    store = backend.sync_store()
    history = msgs(5)
    store.create(Session(key="s", history=history))
    requests: list[Any] = []

    def die_before_the_rewind(request: Any) -> Any:
        if isinstance(request, ScriptCall) and request.name == "rewind":
            raise KeyboardInterrupt  # the process dies after the branch, before the rewind
        return store._execute(request)

    op = store._core.conversation.rewind("s", history[1].id, "kept", None, "call-k")
    with pytest.raises(KeyboardInterrupt):
        run_op(op, die_before_the_rewind, requests)
    late = counted(Message(role="user", content="late"))
    store.append_message("s", late)  # another worker, meanwhile
    with pytest.raises(ConcurrentChange, match="kept"):
        store.rewind("s", after=history[1].id, keep_as="kept", idempotency_key="call-k")
    assert store.get_history("s") == [*history, late]  # nothing rewound, nothing lost
    assert store.get_history("kept") == history
    store.close()


def test_a_rewind_retried_after_another_rewind_answers_its_own_count(backend: Backend) -> None:
    store = backend.sync_store()
    history = msgs(8)
    store.create(Session(key="s", history=history))
    assert store.rewind("s", after=history[5].id, idempotency_key="mine") == 2
    assert store.rewind("s", after=history[3].id) == 2  # another worker's, between
    store.append_messages("s", msgs(2, "n"))
    assert store.rewind("s", after=history[5].id, idempotency_key="mine") == 2  # its answer
    assert contents(store.get_history("s")) == ["m0", "m1", "m2", "m3", "n0", "n1"]
    long_key = "k" * 128  # the longest idempotency key, with keep_as too
    assert store.rewind("s", after=history[3].id, keep_as="b", idempotency_key=long_key) == 2
    store.close()


async def test_repairs_and_rewinds_through_a_lost_turn_change_nothing(
    backend: Backend, make_store: Any
) -> None:
    slow, fast = make_store(), make_store()
    history = msgs(4)
    await slow.create(Session(key="s", history=[*history, calls_message(False)]))
    child = await slow.fork_child("s", "helper")
    async with turn(slow, "s", lease=0.5) as paused:
        lease_gone(backend, "s")
        async with turn(fast, "s", lease=5):
            with pytest.raises(TurnLost):
                await slow.cleanup_failed_turn("s")
            with pytest.raises(TurnLost):
                await slow.annotate_timeout("s", "cut", close_tool_calls=True)
            with pytest.raises(TurnLost):
                await paused.rewind(after=history[0].id, keep_as="kept")
    assert len(await fast.get_history("s")) == 5  # nothing appended, nothing removed
    assert (await fast.get_child(child.key)).merged_at is None  # not discarded
    with pytest.raises(SessionNotFound):
        await fast.get("kept")


def test_a_repair_is_one_script_and_follows_children_changed_meanwhile(
    backend: Backend,
) -> None:
    store, other = backend.sync_store(), backend.sync_store()
    store.create(Session(key="s", history=[calls_message(False, False)]))
    first = store.fork_child("s", "first")
    second = store.fork_child("s", "second")
    requests: list[Any] = []
    raced = False

    def racing(request: Any) -> Any:
        nonlocal raced
        if isinstance(request, ScriptCall) and request.name == "cleanup_failed_turn" and not raced:
            raced = True
            other.discard_child(first.key)  # another repair's discard came first
        return store._execute(request)

    op = store._core.conversation.cleanup_failed_turn("s")
    assert run_op(op, racing, requests) == 2
    writes = [r.name for r in requests if isinstance(r, ScriptCall) and r.write]
    assert writes == ["cleanup_failed_turn", "cleanup_failed_turn"]  # the tree changed: again
    assert store.children_of("s") == []
    with pytest.raises(SessionNotFound):
        store.get_child(second.key)
    assert store.cleanup_failed_turn("s") == 0
    store.close()
    other.close()


async def test_a_branch_stages_large_messages_a_mebibyte_at_a_time(backend: Backend) -> None:
    store = backend.sync_store()
    big = [Message(role="user", content=f"{i}" + "x" * 8_000) for i in range(300)]  # 2.4 MB
    store.create(Session(key="s"))
    store.append_messages("s", big)
    requests: list[Any] = []
    op = store._core.conversation.branch("s", "b", None, None, None)
    run_op(op, store._execute, requests)
    staged = [r for r in requests if isinstance(r, ScriptCall) and r.name == "stage_push"]
    sizes = [sum(len(a) for a in r.args[2:] if isinstance(a, bytes)) for r in staged]
    assert len(staged) == 3 and max(sizes) <= 1024 * 1024, sizes
    assert [m.id for m in store.get_history("b")] == [m.id for m in big]
    store.close()


async def test_a_retried_branch_answers_the_branch_as_stored(store: Any) -> None:
    history = msgs(3)
    await store.create(Session(key="s", history=history))
    await store.branch("s", "b", idempotency_key="once")
    await store.append_message("s", Message(role="user", content="later"))
    again = await store.branch("s", "b", idempotency_key="once")
    assert again.history == history == (await store.get("b")).history
    assert again.branch_at == history[-1].id


async def test_bad_keys_are_named(store: Any) -> None:
    await store.create(Session(key="s"))
    with pytest.raises(InvalidArgument, match="new_key"):
        await store.branch("s", "")
    with pytest.raises(InvalidArgument, match="keep_as"):
        await store.rewind("s", after="", keep_as="")
