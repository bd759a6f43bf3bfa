"""The tokens a session holds (issue #46, items 2-4): ``Session.context_tokens`` is the sum of
its messages' counts, kept exact by the script of every write (appends and their trims by count
and by tokens, compactions with the summary's count, pops, merges, rewinds, branches);
``get_history(max_tokens=N)`` is the longest run of newest messages that fits N, by the token
sums the scripts keep beside each list; ``max_history_tokens`` trims the oldest messages with
the append; a compaction reports its summary's tokens and the tokens it reclaimed. Where the
sums are unknown (a list another program changed, a session stored before them), the store
says so: ``context_tokens`` is None and a read by tokens raises ``TokenCountsUnknown``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from redis_session import (
    ChildSessionConfig,
    InvalidArgument,
    LifecycleEventType,
    Message,
    Session,
    SessionLifecycleEvent,
    TokenCountsUnknown,
)
from tests.conftest import Backend, StoreFactory
from tests.contract.test_event_log import logged

CAP_TURNS = 40
CAP_TOKENS = 3_000


def held(history: list[Message]) -> int:
    """What ``context_tokens`` must be: the sum of the counts (a message without one: 0)."""
    return sum(m.tokens or 0 for m in history)


def said(rng: random.Random, i: int, role: str = "user") -> Message:
    """A message with a count of its own (0..400), or none (the store's estimate counts it)."""
    if rng.random() < 0.2:
        return Message(role=role, content=f"m{i} " + "w" * rng.randrange(200))
    return Message(role=role, content=f"m{i}", tokens=rng.randrange(401))


async def check(store: Any, key: str) -> list[Message]:
    session = await store.get(key)
    history: list[Message] = session.history
    assert session.context_tokens == held(history), key
    return history


async def random_ops(store: Any, ops: int, seed: int) -> dict[str, int]:
    """``ops`` random writes to session "s" (and its children and branches), each followed by
    a read that checks ``context_tokens``; returns how often each kind ran."""
    rng = random.Random(seed)
    ran: dict[str, int] = {}
    await store.create(Session(key="s", history=[said(rng, i) for i in range(rng.randrange(6))]))
    history = await check(store, "s")
    for i in range(ops):
        roll = rng.random()
        kind = "append"
        if roll < 0.30:
            await store.append_message("s", said(rng, i))
        elif roll < 0.45:
            await store.append_messages("s", [said(rng, i * 10 + j) for j in range(1, 5)])
            kind = "append_messages"
        elif roll < 0.55 and history:
            kind = "compact"
            await store.compact_messages("s", rng.randrange(len(history)), "s" * rng.randrange(80))
        elif roll < 0.65 and history:
            kind = "pop"
            await store.pop_message("s")
        elif roll < 0.75 and history:
            kind = "rewind"
            after = history[rng.randrange(len(history))].id
            keep_as = f"kept{i}" if rng.random() < 0.3 else None
            await store.rewind("s", after=after, keep_as=keep_as)
            if keep_as is not None:
                await check(store, keep_as)
        elif roll < 0.90:
            kind = "merge"
            inherit = ChildSessionConfig(inherit_history=rng.randrange(4))
            child = await store.fork_child("s", f"sub{i}", inherit)
            assert (await store.get_child(child.key)).context_tokens == held(
                (await store.get_child(child.key)).history
            )
            work = [said(rng, i * 10 + j, "assistant") for j in range(rng.randrange(1, 4))]
            await store.append_child_messages(child.key, work)
            read = await store.get_child(child.key)
            assert read.context_tokens == held(read.history)
            await store.merge_child(child.key, "" if rng.random() < 0.5 else f"summary {i}")
        else:
            kind = "branch"
            at = history[rng.randrange(len(history))].id if history else None
            await store.branch("s", f"b{i}", at=at)
            await check(store, f"b{i}")
        ran[kind] = ran.get(kind, 0) + 1
        history = await check(store, "s")
        assert len(history) <= CAP_TURNS
        assert held(history) <= CAP_TOKENS or len(history) == 1  # the newest always stays
    return ran


async def test_context_tokens_is_exact_after_a_random_mix_of_writes(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_history_turns=CAP_TURNS, max_history_tokens=CAP_TOKENS)
    ran = await random_ops(store, 200, seed=46)
    assert set(ran) == {"append", "append_messages", "compact", "pop", "rewind", "merge", "branch"}


@pytest.mark.slow  # 2,000 writes and as many reads: the full suite runs it on every backend
async def test_context_tokens_is_exact_after_2000_random_writes(make_store: StoreFactory) -> None:
    store = make_store(max_history_turns=CAP_TURNS, max_history_tokens=CAP_TOKENS)
    ran = await random_ops(store, 2_000, seed=2_000)
    assert sum(ran.values()) == 2_000 and min(ran.values()) > 50


def suffix(counts: list[int], bound: int) -> int:
    """How many of the newest counts sum to at most ``bound``."""
    total = taken = 0
    for count in reversed(counts):
        if total + count > bound:
            break
        total, taken = total + count, taken + 1
    return taken


def test_max_tokens_gives_the_longest_newest_run_that_fits(backend: Backend) -> None:
    store = backend.sync_store()
    rng = random.Random(1_000)
    counts = [rng.choice((0, 1, 7, 50, 300)) for _ in range(1_000)]
    messages = [Message(role="user", content=f"m{i}", tokens=n) for i, n in enumerate(counts)]
    store.create(Session(key="s", history=messages[:500]))
    for at in range(500, 1_000, 100):
        store.append_messages("s", messages[at : at + 100])
    ids = [m.id for m in messages]
    sums = {0}  # every N where the answer changes, and either side of it
    for k in range(1, 1_001):
        sums.add(sum(counts[-k:]))
    bounds = sorted({b + d for b in sums for d in (-1, 0, 1) if b + d >= 0})
    for bound in bounds:
        k = suffix(counts, bound)
        got = store.get_history("s", max_tokens=bound)
        assert [m.id for m in got] == ids[len(ids) - k :], bound
    for bound, last in ((0, 5), (400, 3), (10**9, 20), (10**9, 0)):
        got = store.get_history("s", last=last, max_tokens=bound)
        assert [m.id for m in got] == ids[len(ids) - min(last, suffix(counts, bound)) :]
    assert [m.id for m in store.get_history("s", max_tokens=10**12)] == ids
    held_store = backend.sync_store()  # a reader that holds the session reads the same
    held_store.get("s")
    store.append_message("s", Message(role="user", content="new", tokens=2))
    assert [m.id for m in held_store.get_history("s", max_tokens=2)][-1:] == [
        m.id for m in store.get_history("s", last=1)
    ]
    bads: tuple[Any, ...] = (-1, 1.5, "3", True)
    for bad in bads:
        with pytest.raises(InvalidArgument, match="max_tokens"):
            store.get_history("s", max_tokens=bad)


async def test_max_history_tokens_trims_the_oldest_with_the_append(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_history_tokens=100)
    await store.create(Session(key="s", history=[Message(role="user", content="a", tokens=60)]))
    await store.append_message("s", Message(role="user", content="b", tokens=30))
    assert [m.content for m in await check(store, "s")] == ["a", "b"]  # 90: it fits
    await store.append_message("s", Message(role="user", content="c", tokens=20))
    assert [m.content for m in await check(store, "s")] == ["b", "c"]  # 110: "a" went
    await store.append_messages("s", [Message(role="user", content="d", tokens=500)])
    assert [m.content for m in await check(store, "s")] == ["d"]  # the newest always stays
    await store.append_message("s", Message(role="user", content="e", tokens=0))
    assert [m.content for m in await check(store, "s")] == ["e"]
    assert (await store.get("s")).context_tokens == 0
    with pytest.raises(InvalidArgument, match="max_history_tokens"):
        make_store(max_history_tokens=-1)


async def test_a_compaction_reports_its_summary_and_what_it_reclaimed(
    backend: Backend, make_store: StoreFactory
) -> None:
    seen: list[SessionLifecycleEvent] = []
    store = make_store(lifecycle_hook=seen.append, count_tokens=lambda m: len(m.content))
    history = [Message(role="user", content="x", tokens=n) for n in (10, 20, 30, 40)]
    await store.create(Session(key="s", history=history))
    assert await store.compact_messages("s", 2, "short") == 3
    (event,) = [e for e in seen if e.type == LifecycleEventType.COMPACT]
    summary = len("[Compacted Summary]\nshort")
    assert (event.summary_tokens, event.reclaimed_tokens) == (summary, 60)
    assert (await store.get("s")).context_tokens == summary + 40
    in_log = [e for e in logged(backend, "s") if e.type == "compact"]  # the log says the same
    assert [(e.summary_tokens, e.reclaimed_tokens) for e in in_log] == [(summary, 60)]


async def test_a_list_changed_by_another_program_has_unknown_sums_never_wrong_ones(
    backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(max_history_tokens=50)
    await store.create(Session(key="s", history=[Message(role="user", content="a", tokens=40)]))
    raw = backend.sync_client()
    sk = backend.schema.session("s")
    raw.rpush(sk.msgs, Message(role="user", content="raw", tokens=30).model_dump_json())
    session = await store.get("s")
    assert session.context_tokens is None and len(session.history) == 2
    with pytest.raises(TokenCountsUnknown):
        await store.get_history("s", max_tokens=100)
    await store.append_message("s", Message(role="user", content="b", tokens=5))
    session = await store.get("s")
    assert session.context_tokens is None  # unknown from then on, and appends still work
    assert [m.content for m in session.history] == ["a", "raw", "b"]  # no cap without sums
    await store.create(Session(key="t", history=[Message(role="user", content="a", tokens=4)]))
    raw.hdel(backend.schema.session("t").ids, "sg")  # as a session stored before the sums
    assert (await store.get("t")).context_tokens is None
    await store.pop_message("t")
    assert (await store.get("t")).context_tokens is None


async def test_a_sealed_session_keeps_its_token_sums(make_store: StoreFactory) -> None:
    store = make_store(passphrase="p", kdf_work=10)
    history = [Message(role="user", content=f"m{i}", tokens=i) for i in range(10)]
    await store.create(Session(key="s", history=history))
    await store.append_message("s", Message(role="user", content="n", tokens=100))
    assert (await store.get("s")).context_tokens == 145
    got = await store.get_history("s", max_tokens=117)
    assert [m.content for m in got] == ["m8", "m9", "n"]


async def test_damaged_token_sums_read_as_unknown_and_writes_go_on(
    backend: Backend, make_store: StoreFactory
) -> None:
    raw = backend.sync_client()
    ids = backend.schema.session("s").ids
    damages: list[dict[str, str]] = [
        {"sb": "not a number"},
        {"so": "-3"},
        {"so": "1e300"},
        {"s0": "       1"},  # the tail's field cut short
        {"s0": "garbage that is exactly thirty-two by"},
    ]
    for damage in damages:
        store = make_store()
        await store.delete("s")
        history = [Message(role="user", content=f"m{i}", tokens=i) for i in range(3)]
        await store.create(Session(key="s", history=history))
        raw.hset(ids, mapping=damage)
        assert (await store.get("s")).context_tokens is None, damage
        with pytest.raises(TokenCountsUnknown):
            await store.get_history("s", max_tokens=5)
        assert await store.append_message("s", Message(role="user", content="n", tokens=1))
        assert [m.content for m in await store.get_history("s")][-1] == "n"
