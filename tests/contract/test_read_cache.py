"""Incremental reads: a store that read a session before gets only what was added since, and
every read equals what a fresh store reads at that moment, whatever other workers did.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from redis_session import (
    ChildSessionConfig,
    DuplicateSession,
    Message,
    RedisStore,
    Session,
    SessionNotFound,
    ToolCall,
    codec,
)
from tests.conftest import Backend
from tests.support.clock import wait_gone

WORK = 10


def msg(text: str, role: str = "user") -> Message:
    return Message(role=role, content=text)


def decoded_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many stored messages each read decodes from now on."""
    counts: list[int] = []
    real, real_sized = codec.decode_messages, codec.decode_sized

    def counting(key: str, items: Any, *args: Any, **kwargs: Any) -> Any:
        counts.append(len(items))
        return real(key, items, *args, **kwargs)

    def counting_sized(key: str, items: Any, *args: Any) -> Any:
        counts.append(len(items))
        return real_sized(key, items, *args)

    monkeypatch.setattr(codec, "decode_messages", counting)
    monkeypatch.setattr(codec, "decode_sized", counting_sized)
    return counts


def view(store: RedisStore, key: str) -> Any:
    """What a read of ``key`` says, comparable across stores."""
    try:
        s = store.get(key)
    except SessionNotFound as exc:
        return type(exc).__name__
    return [(m.id, m.content) for m in s.history], s.metadata, store.get_history(key, last=2)


@pytest.mark.parametrize("passphrase", [None, "cache passphrase"], ids=["plain", "sealed"])
def test_a_second_read_decodes_only_the_new_messages(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, passphrase: str | None
) -> None:
    reader = backend.sync_store(passphrase=passphrase, kdf_work=WORK)
    writer = backend.sync_store(passphrase=passphrase, kdf_work=WORK)
    writer.create(Session(key="s", history=[msg(f"m{i}") for i in range(50)]))
    counts = decoded_counts(monkeypatch)
    assert len(reader.get("s").history) == 50
    writer.append_message("s", msg("new one"))
    writer.append_messages("s", [msg("two"), msg("three")])
    history = reader.get("s").history
    assert [m.content for m in history[-3:]] == ["new one", "two", "three"]
    assert len(reader.get_history("s")) == 53 and len(reader.get_history("s", last=5)) == 5
    assert counts == [50, 3, 0, 0]
    assert reader.read_cache_bytes > 0 and len(reader._core.reader.cache) == 1


def test_own_appends_are_read_back_without_parsing_as_a_fresh_store_reads_them(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The agent loop: a worker reads back what it appended. Those elements are not parsed
    # (the store kept their messages at hand), yet a read equals a fresh store's in every
    # field, type and fields-set; what another writer appended is parsed as before.
    store, other = backend.sync_store(), backend.sync_store()
    store.create(Session(key="s"))
    store.get("s")
    counts = decoded_counts(monkeypatch)
    call = ToolCall(id="c1", name="f", input="{}", output="ok", thought_signature=b"\x01")
    store.append_message("s", Message(role="assistant", content="a", tool_calls=[call]))
    store.append_messages("s", [msg("b"), Message(role="user", author="x")])
    own = store.get("s").history
    assert counts == [] and not store._core.reader.own_appends  # none parsed, none kept after
    other.append_message("s", msg("theirs"))
    assert [m.content for m in store.get("s").history] == ["a", "b", "", "theirs"]
    assert counts == [1]
    fresh = backend.sync_store().get("s").history
    assert own == fresh[:3]
    for mine, read in zip(own, fresh, strict=False):
        assert mine.model_dump(exclude_unset=True) == read.model_dump(exclude_unset=True)
        assert mine.model_fields_set == read.model_fields_set
        assert type(mine.timestamp.tzinfo) is type(read.timestamp.tzinfo)


def test_own_appends_kept_at_hand_are_bounded(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="s"))
    store.append_message("s", msg("before"))  # a session it does not hold: its next read
    assert not store._core.reader.own_appends  # is a first read, which parses (a fleet's)
    store.get("s")
    for i in range(300):
        store.append_message("s", msg(f"m{i}"))
    assert 0 < len(store._core.reader.own_appends) <= 256
    assert len(store.get("s").history) == 301
    for kept_none in (backend.sync_store(read_cache_bytes=0),
                      backend.sync_store(passphrase="own appends", kdf_work=WORK)):  # fmt: skip
        kept_none.create(Session(key="t"))
        kept_none.append_message("t", msg("x"))
        kept_none.append_messages("t", [msg("y")])
        assert not kept_none._core.reader.own_appends
        kept_none.delete("t")


def test_returned_messages_cannot_change_a_later_read(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="s", history=[msg("a"), msg("b")]))
    first = store.get_history("s")
    with pytest.raises(ValueError):  # pydantic's ValidationError: frozen
        first[0].content = "changed"
    first.append(msg("not stored"))
    first.clear()
    session = store.get("s")
    session.history.pop()
    assert [m.content for m in store.get_history("s")] == ["a", "b"]
    assert store.get_history("s")[0].model_copy(update={"content": "x"}).content == "x"


def test_a_message_changed_after_its_append_reads_back_as_stored(backend: Backend) -> None:
    # A store keeps its own appends' decoded twins for its next read: taken when the append
    # encoded them, so a change made to the caller's message afterwards (past its frozen
    # guard) never reaches a read, which equals a fresh store's.
    store = backend.sync_store()
    store.create(Session(key="s"))
    store.get("s")
    one, two = msg("one"), msg("two")
    store.append_message("s", one)
    store.append_messages("s", [two])
    for changed in (one, two):
        object.__setattr__(changed, "content", "changed")
    assert [m.content for m in store.get("s").history] == ["one", "two"]
    assert store.get("s") == backend.sync_store().get("s")


def test_the_cache_is_bounded_and_can_be_off(backend: Backend) -> None:
    writer = backend.sync_store()
    for i in range(6):
        writer.create(Session(key=f"s{i}", history=[msg("x" * 1000) for _ in range(10)]))
    small = backend.sync_store(read_cache_bytes=35_000)
    for i in range(6):
        small.get(f"s{i}")
        small.get(f"s{i}")  # a full cache holds a session from its second read
    reads = small._core.reader.cache
    assert reads.size <= 35_000 and 1 <= len(reads) < 6
    assert reads.get("s5") is not None and reads.get("s0") is None  # least recently read go
    off = backend.sync_store(read_cache_bytes=0)
    off.get("s0")
    assert len(off._core.reader.cache) == 0 and off.read_cache_bytes == 0
    with pytest.raises(ValueError, match="read_cache_bytes"):
        backend.sync_store(read_cache_bytes=-1)


def test_a_full_cache_holds_a_session_from_its_second_read(backend: Backend) -> None:
    writer = backend.sync_store()
    keys = [f"s{i}" for i in range(6)]
    for key in keys:
        writer.create(Session(key=key, history=[msg("x" * 1000) for _ in range(10)]))
    small = backend.sync_store(read_cache_bytes=35_000)
    reads = small._core.reader.cache
    for key in keys:
        assert small.get(key) == writer.get(key)
    held = [key for key in keys if reads.get(key) is not None]
    assert 1 <= len(held) < 6 and held == keys[: len(held)]  # one-off reads evict none
    writer.append_message(keys[-1], msg("new"))
    assert small.get(keys[-1]) == writer.get(keys[-1])  # its second read: held
    assert reads.get(keys[-1]) is not None and reads.get(keys[0]) is None
    assert reads.size <= 35_000
    assert small.get(keys[-1]) == writer.get(keys[-1])  # and read incrementally


def test_delete_recreate_and_expiry_are_never_served_from_the_cache(backend: Backend) -> None:
    reader = backend.sync_store()
    writer = backend.sync_store(ttl=0.6, expired_grace=0.0)
    # Each store pays its set-up (connections, a cluster's slots, each script's first load)
    # before the short TTL runs: a reader's first read must come within it of the create.
    with pytest.raises(SessionNotFound):
        reader.get("warm")
    writer.create(Session(key="warm", history=[msg("warm")]))
    writer.delete("warm")
    writer.create(Session(key="s", history=[msg("first life")]))
    assert [m.content for m in reader.get_history("s")] == ["first life"]
    writer.delete("s")
    writer.create(Session(key="s", history=[msg("second life")]))
    assert [m.content for m in reader.get_history("s")] == ["second life"]
    wait_gone(backend.sync_client(), backend.schema.session("s").meta)
    with pytest.raises(SessionNotFound):  # expired on the server: the cache serves nothing
        reader.get("s")
    writer.create(Session(key="s", history=[msg("third life")]))
    assert [m.content for m in reader.get_history("s")] == ["third life"]


def test_a_child_read_twice_decodes_only_what_was_added(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.sync_store()
    store.create(Session(key="p", history=[msg(f"p{i}") for i in range(5)]))
    child = store.fork_child("p", "helper", ChildSessionConfig(inherit_history=3, max_messages=4))
    counts = decoded_counts(monkeypatch)
    assert len(store.get_child(child.key).history) == 3
    store.append_child_message(child.key, msg("c1"))
    store.append_child_message(child.key, msg("c2"))  # the oldest one is trimmed (max 4)
    again = store.get_child(child.key)
    assert [m.content for m in again.history] == ["p3", "p4", "c1", "c2"]
    assert counts == [3, 2]
    fresh = backend.sync_store().get_child(child.key)
    assert [m.id for m in fresh.history] == [m.id for m in again.history]


def test_a_rekey_and_reseal_leave_a_cached_reader_right(backend: Backend) -> None:
    reader = backend.sync_store(passphrase="one", kdf_work=WORK)
    writer = backend.sync_store(passphrase="one", kdf_work=WORK)
    writer.create(Session(key="s", history=[msg("a")], metadata={"k": "v"}))
    assert [m.content for m in reader.get_history("s")] == ["a"]
    writer.rekey("two")
    writer.append_message("s", msg("b"))
    assert [m.content for m in reader.get("s").history] == ["a", "b"]
    fresh = backend.sync_store(passphrase="two")
    assert view(fresh, "s") == view(reader, "s")


KEYS = ("a", "b")


class CachedReads(RuleBasedStateMachine):
    """A reader that keeps reading, two writers (one trims to 5 messages) doing everything a
    session can undergo; after every step the reader's view equals a fresh store's.
    """

    backend: Backend

    @initialize()
    def stores(self) -> None:
        b = self.backend
        b.prefix = b.prefix.rstrip(":") + f"-{time.monotonic_ns()}:"
        self.reader = b.sync_store(prefix=b.prefix)
        # No cache, but it knows the element size: every read of it is a first read (the
        # get script with an LRANGE behind it), with a cap of ~30 so that longer ones step.
        self.cold = b.sync_store(prefix=b.prefix, read_cache_bytes=0)
        self.cold._core.reader.element_bytes = 120
        self.cold._core.limits.read_budget = 30 * 120
        # A cache of a few hundred bytes: full at once, so that reads are turned away, held
        # from their second read, evicted, and held again.
        self.small = b.sync_store(prefix=b.prefix, read_cache_bytes=400)
        # With a TTL (long: the expire rule ends a tree as its deadline does), so that each
        # tree has an expiry marker and an expired session reads as expired, not as absent.
        self.writers = [
            b.sync_store(prefix=b.prefix, ttl=3600),
            b.sync_store(prefix=b.prefix, ttl=3600, max_history_turns=5),
        ]
        self.children: dict[str, str] = {}
        self.n = 0

    def _text(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def _writer(self, w: int) -> RedisStore:
        return self.writers[w]

    @rule(key=st.sampled_from(KEYS), w=st.integers(0, 1), size=st.integers(0, 3))
    def create(self, key: str, w: int, size: int) -> None:
        history = [msg(self._text()) for _ in range(size)]
        with contextlib.suppress(DuplicateSession):
            self._writer(w).create(Session(key=key, history=history, metadata={"m": "0"}))

    @rule(key=st.sampled_from(KEYS), w=st.integers(0, 1), count=st.integers(1, 3))
    def append(self, key: str, w: int, count: int) -> None:
        with contextlib.suppress(SessionNotFound):
            if count == 1:
                self._writer(w).append_message(key, msg(self._text()))
            else:
                self._writer(w).append_messages(key, [msg(self._text()) for _ in range(count)])

    @rule(key=st.sampled_from(KEYS), w=st.integers(0, 1), upto=st.integers(0, 3))
    def compact(self, key: str, w: int, upto: int) -> None:
        with contextlib.suppress(SessionNotFound, ValueError):
            self._writer(w).compact_messages(key, upto, self._text())

    @rule(key=st.sampled_from(KEYS), w=st.integers(0, 1))
    def pop(self, key: str, w: int) -> None:
        with contextlib.suppress(SessionNotFound):
            self._writer(w).pop_message(key)

    @rule(key=st.sampled_from(KEYS), w=st.integers(0, 1))
    def fork_work_merge(self, key: str, w: int) -> None:
        store = self._writer(w)
        try:
            child = store.fork_child(key, "helper", ChildSessionConfig(inherit_history=2))
        except SessionNotFound:
            return
        store.append_child_message(child.key, msg(self._text(), "assistant"))
        self.children[key] = child.key
        assert self.reader.get_child(child.key).history == store.get_child(child.key).history
        store.merge_child(child.key, self._text())

    @rule(key=st.sampled_from(KEYS), w=st.integers(0, 1))
    def metadata(self, key: str, w: int) -> None:
        with contextlib.suppress(SessionNotFound):
            self._writer(w).update_metadata(key, set={"m": self._text()})

    @rule(key=st.sampled_from(KEYS), w=st.integers(0, 1))
    def delete(self, key: str, w: int) -> None:
        self._writer(w).delete(key)

    @rule(key=st.sampled_from(KEYS))
    def expire(self, key: str) -> None:
        # The tree's deadline come: every key of the session and of its children gone at
        # once, the expiry marker (it outlives the deadline by a grace) naming a past deadline.
        raw = self.backend.sync_client()
        tree = [bytes(k) for k in raw.scan_iter(match=f"{self.backend.prefix}*{{{key}}}*")]
        mark = self.writers[0]._core.schema.session(key).mark.encode()
        if mark not in tree:
            return  # no session there (or not one written with a TTL)
        for k in tree:
            if k != mark:
                raw.delete(k)
        raw.set(mark, int(time.time() * 1000) - 1, keepttl=True)

    @rule(key=st.sampled_from(KEYS), last=st.one_of(st.none(), st.integers(0, 4)))
    def read(self, key: str, last: int | None) -> None:
        with contextlib.suppress(SessionNotFound):
            self.reader.get_history(key, last=last)
        with contextlib.suppress(SessionNotFound):
            self.small.get_history(key, last=last)

    @invariant()
    def reads_equal_a_fresh_stores(self) -> None:
        if not hasattr(self, "reader"):
            return
        fresh = self.backend.sync_store(prefix=self.backend.prefix)
        for key in KEYS:
            assert view(self.reader, key) == view(fresh, key) == view(self.cold, key)
            assert view(self.small, key) == view(fresh, key)

    def teardown(self) -> None:
        if hasattr(self, "reader"):
            for key in KEYS:
                self.writers[0].delete(key)


def _run(backend: Backend, examples: int, steps: int) -> None:
    CachedReads.backend = backend
    machine = CachedReads.TestCase
    machine.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    machine().runTest()


@pytest.mark.slow  # a state machine of many steps: ~10 s, out of the fast tier
def test_every_read_equals_a_fresh_stores_read(backend: Backend) -> None:
    examples, steps = (40, 30) if backend.name == "fake" else (12, 25)
    if backend.name == "cluster":
        examples, steps = 6, 20
    _run(backend, examples, steps)


def test_threads_sharing_a_store_read_whole_prefixes(backend: Backend) -> None:
    """Readers of one store race each other (and a writer): every read is the history as it
    was at some moment (a prefix of the final one), never one with a hole or a repeat.
    """
    store = backend.sync_store()
    writer = backend.sync_store()
    store.create(Session(key="s", history=[msg("m0")]))
    stop = threading.Event()
    reads: list[list[str]] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while not stop.is_set():
                reads.append([m.id for m in store.get_history("s")])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(1, 80):
        writer.append_message("s", msg(f"m{i}"))
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors and not any(t.is_alive() for t in threads)
    final = [m.id for m in backend.sync_store().get_history("s")]
    assert len(final) == 80 and len(reads) > 10
    assert all(r == final[: len(r)] for r in reads)


async def test_an_async_store_reads_incrementally_too(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = backend.async_store()
    writer = backend.async_store(max_history_turns=4)
    try:
        await writer.create(Session(key="s", history=[msg(f"m{i}") for i in range(4)]))
        counts = decoded_counts(monkeypatch)
        assert len(await reader.get_history("s")) == 4
        await writer.append_message("s", msg("m4"))  # trims m0
        history = await reader.get_history("s")
        assert [m.content for m in history] == ["m1", "m2", "m3", "m4"] and counts == [4, 1]
        fresh = backend.async_store()
        assert [m.id for m in await fresh.get_history("s")] == [m.id for m in history]
        await fresh.close()
    finally:
        await reader.close()
        await writer.close()
