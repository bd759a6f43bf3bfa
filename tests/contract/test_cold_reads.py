"""A store's first read of a session, in one round trip with no elements and no meta field
through Lua: the ``get`` script for the positions (a zero byte budget) with a plain LRANGE and
the positions again behind it (a plain HGETALL of the meta hash where the read wants it,
else an HMGET of the positions), on every backend. They are not atomic: a change between
them must be seen, and the read then falls back to the script alone; what a store does not
write the script names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from redis_session import CorruptData, Message, RedisStore, Session, codec
from redis_session._core.reads import SMALL_READ
from redis_session._core.requests import Commands, ScriptCall
from tests.conftest import Backend
from tests.support.stepping import in_steps, run_op, step_names, steps


def msg(text: str, role: str = "user") -> Message:
    return Message(role=role, content=text)


def filled(backend: Backend, key: str, count: int) -> RedisStore:
    writer = backend.sync_store()
    writer.create(Session(key=key, metadata={"m": "1"}))
    writer.append_messages(key, [msg(f"m{i}") for i in range(count)])
    return writer


def cold_store(backend: Backend, **options: Any) -> RedisStore:
    """A store without a read cache that has read something (it knows the element size)."""
    store = backend.sync_store(read_cache_bytes=0, **options)
    store.create(Session(key="primer", history=[msg("p")]))
    store.get("primer")
    assert store._core.reader.element_bytes > 0
    return store


def first_read(store: RedisStore, request: Any) -> list[str]:
    """The commands a first read pipelined behind the ``get`` script (whose byte budget is 0:
    it returns no element).
    """
    assert isinstance(request, ScriptCall) and request.name == "get"
    assert request.args[5] == 0
    return [c[0] for c in request.after]


def lrange_of(request: Any) -> tuple[Any, ...]:
    """The LRANGE command of a first read's request."""
    (lrange,) = [c for c in request.after if c[0] == "LRANGE"]
    return tuple(lrange)


def read_again(requests: Sequence[Any]) -> bool:
    """Whether a first read fell back to the ``get`` script alone after its first request."""
    return any(isinstance(r, ScriptCall) and r.name == "get" and not r.after for r in requests[1:])


def drive(
    store: RedisStore,
    op: Any,
    between: Callable[[], object] | None = None,
    after_lrange: bool = False,
) -> Any:
    """Run a core operation on ``store``, recording its requests; a first read's request runs
    in two parts with ``between`` (another worker) in the middle: before its LRANGE (after the
    script), or with ``after_lrange`` just after it (before the positions are read again).
    """

    def split(commands: Sequence[Any], first: list[Any]) -> list[Any]:
        at = [c[0] for c in commands].index("LRANGE") + (1 if after_lrange else 0)
        head = store._execute(Commands(commands[:at], errors_as_values=True)) if at else []
        assert between is not None
        between()
        return [*first, *head, *store._execute(Commands(commands[at:], errors_as_values=True))]

    def execute(request: Any) -> Any:
        if isinstance(request, ScriptCall) and request.after and between is not None:
            alone = ScriptCall(request.name, request.keys, request.args, request.write)
            return split(request.after, [store._execute(alone)])
        return store._execute(request)

    requests: list[Any] = []
    drive.requests = requests  # type: ignore[attr-defined]
    return run_op(op, execute, requests)


def test_a_first_read_is_one_round_trip_without_the_elements_through_lua(
    backend: Backend,
) -> None:
    filled(backend, "s", 60)
    store = cold_store(backend)
    session = drive(store, store._core.sessions.get("s"))
    (request,) = drive.requests  # type: ignore[attr-defined]
    assert first_read(store, request) == ["LRANGE", "HGETALL"]
    assert request.args[1] == "0"  # the meta hash not through Lua
    assert session == backend.sync_store().get("s")
    assert [m.content for m in session.history] == [f"m{i}" for i in range(60)]
    history = drive(store, store._core.sessions.get_history("s", 40))
    (request,) = drive.requests  # type: ignore[attr-defined]
    assert first_read(store, request) == ["LRANGE", "HMGET"]
    assert lrange_of(request)[2:] == (-40, -1)
    assert [m.content for m in history] == [f"m{i}" for i in range(20, 60)]


def test_small_reads_and_a_store_that_read_nothing_use_the_script_alone(
    backend: Backend,
) -> None:
    filled(backend, "s", 60)
    store = cold_store(backend)
    drive(store, store._core.sessions.get_history("s", SMALL_READ))
    assert not drive.requests[0].after  # type: ignore[attr-defined]
    new = backend.sync_store(read_cache_bytes=0)
    assert [m.content for m in drive(new, new._core.sessions.get_history("s"))][-1] == "m59"
    assert not drive.requests[0].after  # type: ignore[attr-defined]
    # Elements so large that the cap (one read's budget of them) falls to SMALL_READ or
    # below: the byte-bounded script reads them.
    store._core.reader.element_bytes = store._core.limits.read_budget // SMALL_READ
    assert store._core.reader.cold_span(-1) is None and store._core.reader.cold_span(100) is None


def test_a_store_that_holds_the_newest_messages_reads_more_of_them_cold(
    backend: Backend,
) -> None:
    writer = filled(backend, "s", 300)
    store = backend.sync_store()  # with its read cache
    tail = drive(store, store._core.sessions.get_history("s", 20))
    assert [m.content for m in tail] == [f"m{i}" for i in range(280, 300)]
    writer.append_message("s", msg("m300"))
    # fewer than it holds: the newest only travel (the held version, no LRANGE)
    assert [m.content for m in drive(store, store._core.sessions.get_history("s", 10))][
        -1
    ] == "m300"
    (request,) = drive.requests  # type: ignore[attr-defined]
    assert not request.after and request.args[2]
    # all of it: what it holds does not reach the head, so the elements come by LRANGE, not
    # through Lua, as for a session it never read
    session = drive(store, store._core.sessions.get("s"))
    assert "LRANGE" in first_read(store, drive.requests[0])  # type: ignore[attr-defined]
    assert not read_again(drive.requests)  # type: ignore[attr-defined]
    assert session == backend.sync_store(read_cache_bytes=0).get("s")
    writer.append_message("s", msg("m301"))
    again = drive(store, store._core.sessions.get("s"))  # it holds all of it now: the hot path
    (request,) = drive.requests  # type: ignore[attr-defined]
    assert not request.after and request.args[2] and request.args[1] == "1"
    assert again == backend.sync_store(read_cache_bytes=0).get("s")
    assert len(again.history) == 302


def test_a_long_history_is_read_on_in_steps_after_the_lrange(backend: Backend) -> None:
    filled(backend, "s", 130)
    store = cold_store(backend)
    # A cap of ~30 elements (one read's budget of them), steps of ~10 after it.
    store._core.limits.read_budget = 30 * store._core.reader.element_bytes
    span = store._core.reader.cold_span(-1)
    assert span is not None and SMALL_READ < span[1] + 1 < 130
    history = drive(store, store._core.sessions.get_history("s"))
    requests = drive.requests  # type: ignore[attr-defined]
    assert "LRANGE" in first_read(store, requests[0]) and len(requests) > 2
    assert not read_again(requests)
    # no element through Lua: LRANGE, then the positions again (two requests on a cluster)
    names = step_names(requests[1:])
    assert names == ["LRANGE", "HMGET", "LLEN"] * (len(names) // 3) and names
    assert [m.content for m in history] == [f"m{i}" for i in range(130)]
    store._core.limits.read_budget = 10 * store._core.reader.element_bytes
    assert store._core.reader.cold_span(-1) is None  # the cap would be 10: the script alone


def stepping_store(backend: Backend, kind: str) -> RedisStore:
    """A store without a read cache whose reads of 130 messages go in steps of ~10: plain
    (LRANGE + HMGET) ones, or, knowing no element size, ``read_range`` script calls.
    """
    return in_steps(cold_store(backend), 10, kind)


@pytest.mark.parametrize("kind", ["plain", "script", "tokenless"])
def test_a_session_deleted_and_made_again_between_steps_is_read_again(
    backend: Backend, kind: str
) -> None:
    writer = filled(backend, "s", 130)
    if kind == "tokenless":  # as the earliest layout wrote a session: no token in its meta
        writer._execute(Commands([("HDEL", writer._core.trees.keys("s")[0].meta, "token")]))
    store = stepping_store(backend, "plain" if kind == "plain" else "script")

    def remade() -> None:  # another session of the same key, of the same generation (0)
        writer.delete("s")  # and positions (0 .. 130)
        writer.create(Session(key="s"))
        writer.append_messages("s", [msg(f"new{i}") for i in range(130)])

    history, requests = steps(store, store._core.sessions.get_history("s"), remade)
    assert requests[0].name == "get"
    if kind == "plain":
        assert step_names(requests[1:])[:3] == ["LRANGE", "HMGET", "LLEN"]
    else:  # the token it began with ('' when the session had none)
        assert requests[1].name == "read_range" and bool(requests[1].args[4]) == (kind == "script")
    assert [m.content for m in history] == [f"new{i}" for i in range(130)]  # not a mix


def _append(backend: Backend, writer: RedisStore) -> None:
    writer.append_message("s", msg("late"))


def _pop(backend: Backend, writer: RedisStore) -> None:
    writer.pop_message("s")


def _pop_and_append(backend: Backend, writer: RedisStore) -> None:
    writer.pop_message("s")  # the same length as before, another generation
    writer.append_message("s", msg("instead"))


def _compact(backend: Backend, writer: RedisStore) -> None:
    writer.compact_messages("s", 10, "summary")


def _trim(backend: Backend, writer: RedisStore) -> None:
    backend.sync_store(max_history_turns=40).append_message("s", msg("trims"))


def _recreate(backend: Backend, writer: RedisStore) -> None:
    writer.delete("s")
    writer.create(Session(key="s", history=[msg(f"x{i}") for i in range(60)]))


def _delete(backend: Backend, writer: RedisStore) -> None:
    writer.delete("s")


def _raw_rpush(backend: Backend, writer: RedisStore) -> None:
    # Another writer, behind the store's back: the list no longer matches its positions.
    sk = writer._core.trees.keys("s")[0]
    element = codec.encode_message(msg("raw"))
    writer._execute(Commands([("RPUSH", sk.msgs, element)]))


def _merge(backend: Backend, writer: RedisStore) -> None:
    child = writer.fork_child("s", "helper")  # merged as its history (no summary)
    writer.append_child_message(child.key, msg("from the child"))
    writer.merge_child(child.key, "")


CHANGES = [
    _append,
    _pop,
    _pop_and_append,
    _compact,
    _trim,
    _recreate,
    _delete,
    _raw_rpush,
    _merge,
]


def outcome(read: Callable[[], Any]) -> Any:
    """What ``read`` returned, or the name of the exception it raised."""
    try:
        return read()
    except Exception as exc:  # the read may see the session gone, as a fresh read does
        return type(exc).__name__


@pytest.mark.parametrize("after_lrange", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__[1:] for c in CHANGES])
def test_a_change_around_the_lrange_is_seen(
    backend: Backend, change: Callable[[Backend, RedisStore], None], after_lrange: bool
) -> None:
    # Before: the meta hash (or the script) read the old session, the LRANGE the new one;
    # after: the LRANGE read the old one, the positions read again the new one.
    writer = filled(backend, "s", 60)
    store = cold_store(backend)
    fresh = backend.sync_store(read_cache_bytes=0)
    before = fresh.get("s")
    got = outcome(
        lambda: drive(
            store, store._core.sessions.get("s"), lambda: change(backend, writer), after_lrange
        )
    )
    requests = drive.requests  # type: ignore[attr-defined]
    assert "LRANGE" in first_read(store, requests[0])
    assert not any(r.after for r in requests[1:] if isinstance(r, ScriptCall))
    after = outcome(lambda: fresh.get("s"))
    assert got in (before, after)  # one snapshot, never a mix
    if after_lrange and change is _raw_rpush:
        # The LRANGE read the list as the script saw it; the raw RPUSH after it changes no
        # position, and a first read reads no LLEN: the session as it was (a snapshot).
        assert got == before and len(requests) == 1
    else:
        assert len(requests) >= 2 and got == after  # seen: read again, by the script


def test_a_session_made_again_by_a_create_of_the_same_key_between_is_seen(
    backend: Backend,
) -> None:
    # The same idempotency key, the same length, the same positions: only the session's token
    # (its own per creation) tells the two apart.
    writer = backend.sync_store()

    def made(word: str) -> None:
        history = [msg(f"{word}{i}") for i in range(60)]
        session = Session(key="s", metadata={"who": word}, history=history)
        writer.create(session, idempotency_key="same")

    made("old")
    store = cold_store(backend)

    def remade() -> None:
        writer.delete("s")
        made("new")

    got = outcome(lambda: drive(store, store._core.sessions.get("s"), remade))
    assert len(drive.requests) >= 2  # type: ignore[attr-defined]  # read again, by the script
    assert got == backend.sync_store(read_cache_bytes=0).get("s")
    assert got.metadata == {"who": "new"} and got.history[0].content == "new0"


def _wrong_type_ids(backend: Backend, writer: RedisStore) -> None:
    sk = writer._core.trees.keys("s")[0]
    writer._execute(Commands([("DEL", sk.ids), ("SET", sk.ids, "x")]))


def _wrong_type_list(backend: Backend, writer: RedisStore) -> None:
    sk = writer._core.trees.keys("s")[0]
    writer._execute(Commands([("DEL", sk.msgs), ("SET", sk.msgs, "x")]))


def _foreign_meta(backend: Backend, writer: RedisStore) -> None:
    writer._execute(Commands([("HDEL", writer._core.trees.keys("s")[0].meta, "v")]))


def _other_version(backend: Backend, writer: RedisStore) -> None:
    writer._execute(Commands([("HSET", writer._core.trees.keys("s")[0].meta, "v", "9")]))


def _evicted_meta(backend: Backend, writer: RedisStore) -> None:
    writer._execute(Commands([("DEL", writer._core.trees.keys("s")[0].meta)]))


def _positions(**fields: str) -> Callable[[Backend, RedisStore], None]:
    """A hostile writer's list positions (meta fields g, h, n) for session "s"."""

    def change(backend: Backend, writer: RedisStore) -> None:
        meta = writer._core.trees.keys("s")[0].meta
        writer._execute(Commands([("HSET", meta, *(x for kv in fields.items() for x in kv))]))

    change.__name__ = "_positions_" + "_".join(f"{k}={v!r}" for k, v in fields.items())
    return change


BAD_POSITIONS = [
    _positions(n="x"),
    _positions(h=""),
    _positions(n="6_0"),  # a number to Python's int(), not to Lua
    _positions(g=""),
    _positions(g="1.5"),
    _positions(h="-1", n="59"),
    _positions(h=str(2**53 + 1), n=str(2**53 + 61)),  # past Lua's exact numbers
]


def _tokenless(backend: Backend, writer: RedisStore) -> None:
    writer._execute(Commands([("HDEL", writer._core.trees.keys("s")[0].meta, "token")]))


ODD = [
    _wrong_type_ids,
    _wrong_type_list,
    _foreign_meta,
    _other_version,
    _evicted_meta,
    *BAD_POSITIONS,
    _tokenless,
]


@pytest.mark.parametrize("with_meta", [True, False], ids=["get", "get_history"])
@pytest.mark.parametrize("odd", ODD, ids=[c.__name__[1:] for c in ODD])
def test_a_first_read_of_what_a_store_does_not_write_answers_as_the_script(
    backend: Backend, odd: Callable[[Backend, RedisStore], None], with_meta: bool
) -> None:
    writer = filled(backend, "s", 60)
    store = cold_store(backend)
    fresh = backend.sync_store(read_cache_bytes=0)  # no element size known: the script alone
    odd(backend, writer)
    sessions = store._core.sessions
    got = outcome(
        lambda: drive(store, sessions.get("s") if with_meta else sessions.get_history("s"))
    )
    expected = outcome(lambda: fresh.get("s") if with_meta else fresh.get_history("s"))
    requests = drive.requests  # type: ignore[attr-defined]
    assert got == expected and expected != "ValueError"
    if odd in BAD_POSITIONS:  # the script names them: the meta hash, not a Lua error
        assert expected == "CorruptData"
    # the script judged it in the first request (an error), or the LRANGE was not taken
    # (a session without a token): read again by the script alone
    assert first_read(store, requests[0]) == ["LRANGE", "HGETALL" if with_meta else "HMGET"]
    assert all(r.name == "get" and not r.after for r in requests[1:]) and len(requests) <= 2


@pytest.mark.parametrize("kind", ["plain", "script"])
@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__[1:] for c in CHANGES])
def test_a_change_between_two_steps_is_seen(
    backend: Backend, change: Callable[[Backend, RedisStore], None], kind: str
) -> None:
    writer = filled(backend, "s", 130)
    store = stepping_store(backend, kind)
    fresh = backend.sync_store(read_cache_bytes=0)
    before = fresh.get("s")
    got, requests = steps(store, store._core.sessions.get("s"), lambda: change(backend, writer))
    assert requests[0].name == "get" and not requests[0].after and len(requests) >= 2
    try:
        after: Any = fresh.get("s")
    except Exception as exc:
        after = type(exc).__name__
    # one snapshot: the session as the first step read it (an append since is not part of
    # it), or as it is after the change (read again from the start), never a mix
    assert got in (before, after)
    if change not in (_append, _raw_rpush, _merge):  # a change that is not an append at the tail
        assert got == after


def test_unchanged_between_is_not_read_twice(backend: Backend) -> None:
    writer = filled(backend, "s", 60)
    store = cold_store(backend)
    got = drive(
        store, store._core.sessions.get("s"), lambda: writer.get("s")
    )  # a read changes nothing
    assert len(drive.requests) == 1 and len(got.history) == 60  # type: ignore[attr-defined]


async def test_an_async_store_reads_cold_in_one_pipeline(backend: Backend) -> None:
    filled(backend, "s", 60)
    store = backend.async_store(read_cache_bytes=0)
    try:
        await store.get("s")  # learns the element size
        assert store._core.reader.element_bytes > 0 and store._core.reader.cold_span(-1) is not None
        await store._clients.current().script_flush()  # the pipeline reloads on NOSCRIPT
        for last in (None, 40):
            history = await store.get_history("s", last=last)
            expected = backend.sync_store().get_history("s", last=last)
            assert [m.id for m in history] == [m.id for m in expected]
        assert (await store.get("s")).metadata == {"m": "1"}
    finally:
        await store.close()


def test_the_sync_pipeline_reloads_a_flushed_script(backend: Backend) -> None:
    filled(backend, "s", 60)
    store = cold_store(backend)
    store._client.script_flush()
    assert len(drive(store, store._core.sessions.get_history("s"))) == 60
    assert "LRANGE" in first_read(store, drive.requests[0])  # type: ignore[attr-defined]
    assert len(drive.requests) == 1  # type: ignore[attr-defined]
    store._client.script_flush()  # outside a cluster the first read ran no script
    assert len(drive(store, store._core.sessions.get_history("s", SMALL_READ))) == SMALL_READ
    assert not drive.requests[0].after  # type: ignore[attr-defined]  # the script alone


def test_a_sealed_session_reads_cold_and_opens(backend: Backend) -> None:
    writer = backend.sync_store(passphrase="cold pw", kdf_work=10)
    writer.create(Session(key="s", metadata={"m": "1"}, history=[msg(f"m{i}") for i in range(40)]))
    store = backend.sync_store(read_cache_bytes=0, passphrase="cold pw", kdf_work=10)
    store.get("s")  # learns the element size (sealed elements: larger)
    session = drive(store, store._core.sessions.get("s"))
    assert "LRANGE" in first_read(store, drive.requests[0])  # type: ignore[attr-defined]
    assert not read_again(drive.requests)  # type: ignore[attr-defined]  # taken, and opened
    assert session.metadata == {"m": "1"}
    assert [m.content for m in session.history] == [f"m{i}" for i in range(40)]


def test_a_first_read_gives_the_session_the_script_gives(backend: Backend) -> None:
    # A first read's plain LRANGE gives the session the get script gives, element for
    # element, with an element of another writer's form among them (validated, as always).
    writer = filled(backend, "s", 300)
    writer.append_message("s", Message(role="tool", content='é\n"q"', author="agent-b"))
    sk = writer._core.trees.keys("s")[0]
    other = b'{"role":"user","id":"by-hand","content":"x","timestamp":"2026-01-01T00:00:00Z"}'
    client: Any = writer.client
    store = cold_store(backend)
    expected = backend.sync_store(read_cache_bytes=0).get("s")  # by the script: first read
    assert store.get("s") == expected
    client.lset(sk.msgs, 7, other)  # the same positions: a first read takes it as it is
    again = store.get("s")  # no read cache: every read is a first read
    assert again.history[7].id == "by-hand"
    assert again == backend.sync_store(read_cache_bytes=0).get("s")
    client.lset(sk.msgs, 9, b"not a message")
    with pytest.raises(CorruptData, match="message 9 is not a stored message"):
        store.get("s")


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_first_read_over_resp2_and_resp3_gives_the_same_session(
    real_backend: Backend, protocol: int
) -> None:
    writer = filled(real_backend, "s", 500)
    client = real_backend.sync_client(protocol=protocol)
    store = RedisStore(client, prefix=real_backend.prefix, read_cache_bytes=0)
    expected = store.get("s")  # a store that read nothing yet: by the script
    assert store.get("s") == expected == writer.get("s")
    assert store.get_history("s", 100) == expected.history[-100:]
