"""A session tree lives and dies as one, and nothing of it grows without bound (issue #13).

TTL cases use short TTLs and bounded waits; memory bounds are measured with ``MEMORY USAGE``
over every key of the test's prefix (on fakeredis, which has no ``MEMORY`` command, with the
length of ``DUMP``, a close stand-in for what a key holds).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from redis_session import (
    ChildAlreadyMerged,
    ChildNotFound,
    ChildPruned,
    ChildSessionConfig,
    InvalidArgument,
    Message,
    Session,
    SessionExpired,
    codec,
)
from redis_session._core.requests import ScriptCall
from tests.conftest import Backend, StoreFactory


def msg(content: str, role: str = "user") -> Message:
    return Message(role=role, content=content)


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def prefix_keys(backend: Backend) -> list[bytes]:
    raw = backend.sync_client()
    return sorted(bytes(k) for k in raw.scan_iter(match=f"{backend.prefix}*", count=1000))


def prefix_bytes(backend: Backend) -> int:
    """The bytes of the sessions' keys (not the event log, which is bounded by itself)."""
    raw = backend.sync_client()
    keys = backend.session_keys()
    if backend.fake_server is not None:
        return sum(len(raw.dump(k) or b"") for k in keys)
    return sum(int(raw.memory_usage(k, samples=0) or 0) for k in keys)


async def wait_until(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.02)
    return False


def node_of(backend: Backend, key: str) -> Any:
    """A client of the server holding session ``key`` (the one its TTLs run on), made before
    the test's session is: a cluster client's start (its slot map) takes a while on a loaded
    machine, and the session's short TTL must not run meanwhile (it did, once, in CI).
    """
    raw = backend.sync_client()
    if backend.cluster is not None:
        raw = raw.get_redis_connection(raw.get_node_from_key(backend.schema.session(key).meta))
    raw.ping()
    return raw


def past_deadline(backend: Backend, key: str, raw: Any, margin_ms: int = 100) -> Callable[[], bool]:
    """A check that the clock of the server holding session ``key`` (``raw``: :func:`node_of`)
    is ``margin_ms`` past the deadline its tree has now: every key of the tree would be gone by
    then, unless a write moved the deadline meanwhile.
    """
    meta = backend.schema.session(key).meta
    deadline = int(raw.pexpiretime(meta))
    assert deadline > 0, deadline

    def passed() -> bool:
        seconds, micros = raw.time()
        return int(seconds) * 1000 + int(micros) // 1000 > deadline + margin_ms

    return passed


# -- one expiry for the tree ------------------------------------------------------------------

BUSY_TTL = 1.0
"""The TTL of the busy trees below: a write every 0.1 s keeps them alive through any stall of
the test under 0.9 s (with 0.6 s, two fast-tier runs beside other suites, load 6-8, failed 1
and 4 of these tests)."""


async def warm(store: Any) -> None:
    """The store's set-up paid (connections, a cluster's slots, the first load of each script
    the busy-tree tests use) on a tree it deletes, not within a busy tree's TTL."""
    await store.create(Session(key="warm"))
    child = await store.fork_child("warm", "kid")
    await store.append_child_message(child.key, msg("warm"))
    await store.append_message("warm", msg("warm"))
    await store.delete("warm")


async def test_a_busy_parent_keeps_its_children_alive(
    backend: Backend, make_store: StoreFactory
) -> None:
    node = node_of(backend, "p")
    store = make_store(ttl=BUSY_TTL)
    await warm(store)
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "tool-wait")
    await store.append_child_message(child.key, msg("waiting on a tool"))
    passed = past_deadline(backend, "p", node)
    while not passed():  # parent writes, none to the child, till past the tree's first deadline
        await store.append_message("p", msg(f"turn {time.monotonic()}"))
        await asyncio.sleep(0.1)
    assert contents((await store.get_child(child.key)).history) == ["waiting on a tool"]
    assert [c.key for c in await store.children_of("p")] == [child.key]


async def test_a_busy_child_keeps_its_parent_and_siblings_alive(
    backend: Backend, make_store: StoreFactory
) -> None:
    node = node_of(backend, "p")
    store = make_store(ttl=BUSY_TTL)
    await warm(store)
    await store.create(Session(key="p", history=[msg("question")]))
    busy = await store.fork_child("p", "busy")
    idle = await store.fork_child("p", "idle")
    passed = past_deadline(backend, "p", node)
    while not passed():
        await store.append_child_message(busy.key, msg(f"step {time.monotonic()}"))
        await asyncio.sleep(0.1)
    assert contents(await store.get_history("p")) == ["question"]
    assert (await store.get_child(idle.key)).history == []
    assert {c.key for c in await store.children_of("p")} == {busy.key, idle.key}


async def test_a_worker_that_does_not_know_the_children_still_keeps_them_alive(
    backend: Backend, make_store: StoreFactory
) -> None:
    node = node_of(backend, "p")
    forker, appender = make_store(ttl=BUSY_TTL), make_store(ttl=BUSY_TTL)
    # The appender pays its set-up on a session of its own, not within the tree's 1 s (a CI
    # run under load expired "p" before the appender's first append); the forker too.
    await warm(appender)
    await warm(forker)
    await forker.create(Session(key="p"))
    await appender.append_message("p", msg("first"))  # learns a tree without children
    child = await forker.fork_child("p", "late")  # the appender does not hear of it
    passed = past_deadline(backend, "p", node)
    while not passed():
        await appender.append_message("p", msg(f"turn {time.monotonic()}"))
        await asyncio.sleep(0.1)
    assert (await forker.get_child(child.key)).merged_at is None


async def _grow_tree(store: Any, key: str) -> tuple[Any, Any]:
    """A tree with every kind of key: a live child with messages, a merged and a discarded
    child, and the pop key a retry reads."""
    await store.create(Session(key=key, history=[msg("q")], metadata={"a": "1"}))
    live = await store.fork_child(key, "live", ChildSessionConfig(inherit_history=1))
    await store.append_child_message(live.key, msg("work"))
    merged = await store.fork_child(key, "merged")
    await store.merge_child(merged.key, "done")
    gone = await store.fork_child(key, "gone")
    await store.discard_child(gone.key)
    await store.pop_message(key)
    return live, merged


async def test_the_whole_tree_goes_at_once_and_leaves_only_its_marker(
    backend: Backend, make_store: StoreFactory
) -> None:
    # The tree lives 1.2 s after its last write. The store pays its first calls' set-up (a
    # cluster's slots and connections, each script's load) on a tree of its own first, not
    # within p's 1.2 s: a fresh-clone CI run under load expired p during that set-up
    # ([cluster-async]). The marker outlives the tree by a grace no stall reaches, so the
    # poll below sees it; when it goes is read from the server (its expiry time), not waited
    # for; the waits are bounds, not sleeps.
    grace = 30
    store = make_store(ttl=1.2, expired_grace=grace, keep_merged_children=1)
    await _grow_tree(store, "w")
    live, merged = await _grow_tree(store, "p")
    ps = [k for k in prefix_keys(backend) if b"{p}" in k]
    assert len(ps) > 6, ps
    deadline = int(backend.sync_client().hget(backend.schema.session("p").meta, "x"))
    indexes = {backend.schema.index_of(k).encode() for k in ("p", "w")}

    async def only_markers() -> bool:
        return all(b":mark:" in k or k in indexes for k in backend.session_keys())

    assert await wait_until(only_markers, 5.0)
    markers = [k for k in prefix_keys(backend) if b":mark:{p}" in k]
    assert markers, "the marker went with the tree"
    raw = backend.sync_client()
    assert [raw.pexpiretime(k) for k in markers] == [deadline + grace * 1000] * len(markers)
    with pytest.raises(SessionExpired):
        await store.get("p")
    for key in (live.key, merged.key):
        with pytest.raises(ChildNotFound):
            await store.get_child(key)
    assert await store.list_sessions() == []


# -- merged and discarded children are bounded ------------------------------------------------


async def _cycles(store: Any, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        child = await store.fork_child("p", "sub", ChildSessionConfig(inherit_history=20))
        await store.append_child_messages(
            child.key, [msg(f"c{i}.{j}", "assistant") for j in range(2)]
        )
        await store.merge_child(child.key, "" if i % 2 else f"summary {i}")
        spare = await store.fork_child("p", "spare")
        await store.discard_child(spare.key)


async def test_fork_merge_cycles_do_not_grow_the_tree(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(max_history_turns=100)
    history = [msg(f"p{i} " + "lorem ipsum dolor sit amet " * 8) for i in range(100)]
    await store.create(Session(key="p", history=history))
    await _cycles(store, 10)
    keys_10, bytes_10 = len(backend.session_keys()), prefix_bytes(backend)
    await _cycles(store, 40, start=10)  # 5 times as many: a tree that grew with them shows
    keys_50, bytes_50 = len(backend.session_keys()), prefix_bytes(backend)
    print(f"\n10 cycles: {keys_10} keys, {bytes_10:,} B; 50: {keys_50} keys, {bytes_50:,} B")
    assert keys_50 <= keys_10 + 5
    assert bytes_50 <= 1.6 * bytes_10
    kept = await store.children_of("p")
    assert len(kept) == store.keep_merged_children and all(c.is_merged() for c in kept)


async def test_a_pruned_child_says_it_was_merged(make_store: StoreFactory) -> None:
    store = make_store(keep_merged_children=1)
    await store.create(Session(key="p"))
    first = await store.fork_child("p", "a")
    await store.append_child_message(first.key, msg("a's work"))
    await store.merge_child(first.key, "")
    assert contents((await store.get_child(first.key)).history) == ["a's work"]  # kept whole
    second = await store.fork_child("p", "b")
    await store.merge_child(second.key, "b's summary")
    with pytest.raises(ChildPruned) as info:
        await store.get_child(first.key)
    assert isinstance(info.value, ChildNotFound) and info.value.key == first.key
    assert "merged" in str(info.value) and info.value.merged_at.year >= 2024
    assert [c.key for c in await store.children_of("p")] == [second.key]
    assert contents(await store.get_history("p")) == ["a's work", "b's summary"]


async def test_keep_nothing_prunes_at_merge(make_store: StoreFactory) -> None:
    store = make_store(keep_merged_children=0)
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "a")
    assert await store.merge_child(child.key, "s") == 1
    with pytest.raises(ChildPruned):
        await store.get_child(child.key)
    assert await store.children_of("p") == []


async def test_a_discarded_child_is_gone_at_once(backend: Backend, store: Any) -> None:
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "a")
    await store.append_child_message(child.key, msg("x"))
    await store.discard_child(child.key)
    ck = backend.schema.child(child.key)
    raw = backend.sync_client()
    assert not any(raw.exists(name) for name in (ck.meta, ck.msgs, ck.ids))
    with pytest.raises(ChildNotFound) as info:
        await store.get_child(child.key)
    assert type(info.value) is ChildNotFound


# -- idempotency with bounded memory ----------------------------------------------------------


async def test_the_id_window_stops_the_session_growing(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(max_history_turns=50)
    await store.create(Session(key="s"))
    body = "the quick brown fox jumps over the lazy dog " * 5

    async def append(first: int, n: int) -> None:
        for i in range(first, first + n, 10):  # ten messages per call, 10 ids each
            await store.append_messages("s", [msg(f"{j} {body}") for j in range(i, i + 10)])

    await append(0, 2_000)  # twice the window (1,000 ids): full, as it stays
    after_2k = prefix_bytes(backend)
    await append(2_000, 8_000)  # 5 times as many appends: a size that grew with them shows
    after_10k = prefix_bytes(backend)
    print(f"\nafter 2,000 appends {after_2k:,} B, after 10,000 {after_10k:,} B")
    assert after_10k <= 1.25 * after_2k + 4096
    assert len(await store.get_history("s")) == 50


async def test_a_retry_within_the_window_is_stored_once_and_an_older_one_again(
    make_store: StoreFactory,
) -> None:
    store = make_store(dedup_window=64)
    await store.create(Session(key="s"))
    early = msg("early")
    await store.append_message("s", early)
    for i in range(63):  # early is still among the newest 64 ids
        await store.append_message("s", msg(str(i)))
    assert await store.append_message("s", early) is False
    for i in range(64, 200):  # now it is not
        await store.append_message("s", msg(str(i)))
    assert await store.append_message("s", early) is True  # documented: stored again
    assert contents(await store.get_history("s")).count("early") == 2


async def test_merges_and_batches_use_the_same_window(make_store: StoreFactory) -> None:
    store = make_store(dedup_window=64)
    await store.create(Session(key="p"))
    child = await store.fork_child("p", "a")
    work = [msg(f"w{i}", "assistant") for i in range(3)]
    await store.append_child_messages(child.key, work)
    assert await store.merge_child(child.key, "") == 3
    assert await store.append_messages("p", work) == 0  # the merged ids are in the window
    batch = [msg("b0"), msg("b1")]
    assert await store.append_messages("p", batch) == 2
    assert await store.append_messages("p", [*batch, msg("b2")]) == 1


def _same_bucket(msg_id: str, n: int, tag: str) -> list[Message]:
    """``n`` messages whose ids' digests fall in the window bucket of ``msg_id``'s (the
    prelude's bucket_of: the digest's first byte % 128)."""
    bucket = codec.message_digest(msg_id)[0] % 128
    ids = (f"{tag}{i}" for i in range(100_000))
    chosen = [i for i in ids if codec.message_digest(i)[0] % 128 == bucket][:n]
    return [Message(id=i, role="assistant", content=i) for i in chosen]


@pytest.mark.parametrize("mode", ["history", "staged"])
async def test_a_merge_keeps_the_ids_already_in_the_window(
    make_store: StoreFactory, mode: str
) -> None:
    """A merge adds its child's ids to buckets it had not read: before, it rewrote such a
    bucket with its own ids only, so that a retried append of an id in it (redis-py's retry
    after a lost reply) was stored twice (found by the soak: one message in a read twice)."""
    store = make_store(dedup_window=64)
    if mode == "staged":
        _core_of(store).limits.step_messages = 2  # a child of more: merged in steps
    await store.create(Session(key="p"))
    early = msg("early")
    await store.append_message("p", early)
    child = await store.fork_child("p", "a")
    await store.append_child_messages(child.key, _same_bucket(early.id, 3, "c"))
    assert await store.merge_child(child.key, "") == 3
    assert await store.append_message("p", early) is False  # still in the window
    assert contents(await store.get_history("p")).count("early") == 1


@pytest.mark.parametrize("mode", ["history", "staged"])
async def test_a_merge_skips_a_child_message_whose_id_the_parent_holds(
    make_store: StoreFactory, mode: str
) -> None:
    store = make_store(dedup_window=64)
    if mode == "staged":
        _core_of(store).limits.step_messages = 1
    await store.create(Session(key="p"))
    both = msg("both")
    await store.append_message("p", both)
    child = await store.fork_child("p", "a")
    await store.append_child_messages(child.key, [both, msg("own", "assistant")])
    assert await store.merge_child(child.key, "") == 1  # "both" is in the parent's window
    assert contents(await store.get_history("p")) == ["both", "own"]


# -- popped content, metadata limits ----------------------------------------------------------


async def test_popped_content_leaves_the_meta_hash_and_goes_after_the_retry_window(
    backend: Backend, store: Any
) -> None:
    await store.create(Session(key="p", history=[msg("keep"), msg("secret to pop")]))
    popped = await store.pop_message("p")
    assert popped is not None and popped.content == "secret to pop"
    raw = backend.sync_client()
    keys = backend.schema.session("p")
    assert not any(b"secret" in v for v in raw.hgetall(keys.meta).values())
    assert 0 < raw.pttl(keys.pop) <= 60_000  # kept for a retry of the pop, then gone


async def test_metadata_limits(make_store: StoreFactory) -> None:
    store = make_store(max_metadata_bytes=1000, max_metadata_value_bytes=300)
    big = "x" * 400
    with pytest.raises(InvalidArgument, match=r"session.metadata\['a'\].*max_metadata_value"):
        await store.create(Session(key="s", metadata={"a": big}))
    with pytest.raises(InvalidArgument, match="session.metadata.*max_metadata_bytes"):
        await store.create(Session(key="s", metadata={f"k{i}": "y" * 200 for i in range(5)}))
    await store.create(Session(key="s", metadata={"a": "y" * 200}))
    with pytest.raises(InvalidArgument, match=r"set\['b'\].*max_metadata_value"):
        await store.update_metadata("s", set={"b": big})
    for i in range(3):
        await store.update_metadata("s", set={f"b{i}": "z" * 200})
    with pytest.raises(InvalidArgument, match="set.*max_metadata_bytes"):
        await store.update_metadata("s", set={"b9": "z" * 200})
    with pytest.raises(InvalidArgument, match="metadata.*max_metadata_bytes"):
        await store.append_message("s", msg("m"), metadata={"b9": "z" * 200})
    assert (await store.get("s")).history == []  # the refused append wrote nothing
    await store.update_metadata("s", set={"b2": "short"}, delete=["b0"])  # shrinks: fine
    await store.update_metadata("s", set={"b9": "z" * 200})
    assert sorted((await store.get("s")).metadata) == ["a", "b1", "b2", "b9"]
    with pytest.raises(InvalidArgument, match="max_metadata_bytes"):
        make_store(max_metadata_bytes=-1)


# -- long histories are read in steps ---------------------------------------------------------


def _small_reads(store: Any, budget: int) -> None:
    core = store._core if hasattr(store, "_core") else store.sync._core
    core.limits.read_budget = budget


async def test_a_long_history_is_read_in_steps_as_one_snapshot(make_store: StoreFactory) -> None:
    store = make_store()
    history = [msg(f"m{i} " + "x" * 100) for i in range(60)]
    await store.create(Session(key="s", history=history))
    child = await store.fork_child("s", "a", ChildSessionConfig(inherit_history=60))
    _small_reads(store, 1_000)  # ~8 messages per step
    assert contents(await store.get_history("s")) == contents(history)
    assert contents((await store.get("s")).history) == contents(history)
    assert contents(await store.get_history("s", last=25)) == contents(history[-25:])
    assert contents((await store.get_child(child.key)).history) == contents(history)


def test_a_read_in_steps_that_sees_the_list_change_reads_again(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="s", history=[msg(f"m{i} " + "x" * 100) for i in range(40)]))
    store._core.limits.read_budget = 1_000
    op = store._core.sessions.get_history("s")
    request = next(op)
    request = op.send(store._execute(request))  # the first step: a read_range comes next
    assert isinstance(request, ScriptCall) and request.name == "read_range"
    store.compact_messages("s", 9, "summary")  # a new generation meanwhile
    reply = store._execute(request)
    while True:
        try:
            request = op.send(reply)
        except StopIteration as done:
            got = done.value
            break
        reply = store._execute(request)
    assert contents(got)[0] == "[Compacted Summary]\nsummary" and len(got) == 31


# -- large operations go in steps -------------------------------------------------------------


def _core_of(store: Any) -> Any:
    return store._core if hasattr(store, "_core") else store.sync._core


async def test_a_large_merge_goes_in_steps_and_lands_whole(make_store: StoreFactory) -> None:
    store = make_store()
    core = _core_of(store)
    core.limits.step_messages, core.limits.read_budget = 5, 400  # tiny steps: many of them
    await store.create(Session(key="p", history=[msg(f"p{i}") for i in range(7)]))
    child = await store.fork_child("p", "a", ChildSessionConfig(inherit_history=3))
    work = [msg(f"c{i}", "assistant") for i in range(23)]
    await store.append_child_messages(child.key, work)
    assert await store.merge_child(child.key, "") == 23
    expected = [f"p{i}" for i in range(7)] + [f"c{i}" for i in range(23)]
    assert contents(await store.get_history("p")) == expected
    assert (await store.get_child(child.key)).is_merged()
    assert await store.append_messages("p", work[-3:]) == 0  # the merged ids are in the window
    with pytest.raises(ChildAlreadyMerged):
        await store.merge_child(child.key, "")


def test_appends_during_a_merge_in_steps_are_kept(backend: Backend) -> None:
    store = backend.sync_store()
    store._core.limits.step_messages, store._core.limits.read_budget = 5, 400
    store.create(Session(key="p", history=[msg(f"p{i}") for i in range(6)]))
    child = store.fork_child("p", "a")
    store.append_child_messages(child.key, [msg(f"c{i}", "assistant") for i in range(12)])
    op = store._core.children.merge_child(child.key, "")
    request, steps = next(op), 0
    while True:
        reply = store._execute(request)
        if isinstance(request, ScriptCall) and request.name == "merge_stage":
            steps += 1
            if steps == 3:  # a parent append, and a reader, while the staging goes on
                store.append_message("p", msg("during"))
                assert contents(store.get_history("p"))[-1] == "during"  # not half merged
            if steps == 4:
                with pytest.raises(ChildAlreadyMerged):  # the child takes nothing meanwhile
                    store.append_child_message(child.key, msg("late"))
        try:
            request = op.send(reply)
        except StopIteration as done:
            assert done.value == 12
            break
    got = contents(store.get_history("p"))
    assert got == [f"p{i}" for i in range(6)] + [f"c{i}" for i in range(12)] + ["during"]
    assert steps > 4


async def test_a_large_inheritance_is_copied_in_steps(make_store: StoreFactory) -> None:
    store = make_store(ttl=60)
    core = _core_of(store)
    core.limits.step_messages, core.limits.read_budget = 4, 300
    history = [msg(f"p{i}") for i in range(30)]
    await store.create(Session(key="p", history=history))
    child = await store.fork_child("p", "a", ChildSessionConfig(inherit_history=17))
    assert contents(child.history) == [f"p{i}" for i in range(13, 30)]
    assert contents((await store.get_child(child.key)).history) == contents(child.history)
    await store.append_child_message(child.key, msg("own", "assistant"))
    assert await store.merge_child(child.key, "") == 1  # the inherited ones are not merged back


async def test_a_long_history_is_created_in_steps_and_appears_at_once(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(ttl=60)
    core = _core_of(store)
    core.limits.batch_messages = 7
    history = [msg(f"h{i}") for i in range(30)]
    created = await store.create(Session(key="s", history=history))
    assert contents(created.history) == contents(history)
    assert contents(await store.get_history("s")) == contents(history)
    assert await store.append_message("s", history[-1]) is False  # its id is in the window
    assert not [k for k in prefix_keys(backend) if b"stage:" in k]  # the staging list went
    sk = backend.schema.session("s")
    raw = backend.sync_client()
    assert raw.pexpiretime(sk.msgs) == int(raw.hget(sk.meta, "x"))


async def test_a_batch_larger_than_one_atomic_append_is_refused(make_store: StoreFactory) -> None:
    store = make_store()
    core = _core_of(store)
    core.limits.batch_messages = 5
    await store.create(Session(key="s"))
    child = await store.fork_child("s", "a")
    with pytest.raises(InvalidArgument, match="messages.*batch_messages=5"):
        await store.append_messages("s", [msg(str(i)) for i in range(6)])
    with pytest.raises(InvalidArgument, match="messages.*batch_messages=5"):
        await store.append_child_messages(child.key, [msg(str(i)) for i in range(6)])
    assert await store.append_messages("s", [msg(str(i)) for i in range(5)]) == 5


async def test_children_of_reads_long_children_in_steps(make_store: StoreFactory) -> None:
    store = make_store()
    _core_of(store).read_budget = 500
    await store.create(Session(key="p"))
    short = await store.fork_child("p", "short")
    await store.append_child_message(short.key, msg("s"))
    long = await store.fork_child("p", "long")
    await store.append_child_messages(long.key, [msg(f"l{i} " + "y" * 80) for i in range(20)])
    got = {c.key: contents(c.history) for c in await store.children_of("p")}
    assert got[short.key] == ["s"] and len(got[long.key]) == 20
