"""Public API fuzzed with hypothesis: a round trip equal to the input, or a ValueError /
SessionError subclass naming the problem; never a crash, a hang or a damaged session."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_session import (
    InvalidArgument,
    Message,
    RedisStore,
    Session,
    SessionError,
    ToolCall,
)
from tests.support.servers import Server
from tests.support.tokens import counted

any_text = st.text(  # every code point, lone surrogates and NUL included
    alphabet=st.characters(min_codepoint=0, blacklist_categories=()), max_size=40
)
timestamps = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1), timezones=st.none()
) | st.datetimes(min_value=datetime(1970, 1, 2), timezones=st.just(UTC))
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(params=["fake", "redis"], ids=["fake", "redis"])
def fuzz_store(request: pytest.FixtureRequest) -> RedisStore:
    if request.param == "fake":
        return RedisStore.from_url("memory://", prefix="fz:")
    server: Server = request.getfixturevalue("redis_server")
    return RedisStore.from_url(server.url, prefix=f"fz{uuid.uuid4().hex[:8]}:")


@FUZZ
@given(
    key=any_text,
    content=any_text,
    author=any_text,
    meta=st.dictionaries(any_text, any_text, max_size=4),
    ts=timestamps,
    signature=st.binary(max_size=16) | st.none(),
)
def test_round_trip_or_a_clear_error(
    fuzz_store: RedisStore, key: str, content: str, author: str, meta: dict[str, str],
    ts: datetime, signature: bytes | None,
) -> None:  # fmt: skip
    store = fuzz_store
    try:
        msg = Message(
            role="assistant", content=content, author=author, timestamp=ts,
            tool_calls=[ToolCall(id="c", name=content, input=content, thought_signature=signature)],
        )  # fmt: skip
    except ValueError:
        return  # pydantic refused the model itself
    created = False
    try:
        store.create(Session(key=key, agent_id=author, metadata=meta))
        created = True
        store.append_message(key, msg)
    except InvalidArgument as exc:
        assert exc.argument  # names the problem
        if created:  # the refused append left the session as it was
            assert store.get_history(key) == []
            store.delete(key)
        else:
            with pytest.raises(SessionError):
                store.get(key)
        return
    got = store.get(key)
    assert (got.key, got.agent_id, got.metadata) == (key, author, meta)
    assert got.history == [counted(msg)]  # as stored: with the store's token count
    store.delete(key)


@FUZZ
@given(bad=st.one_of(st.integers(), st.binary(), st.lists(st.text()), st.floats(), st.booleans()))
def test_wrong_types_are_value_errors(fuzz_store: RedisStore, bad: object) -> None:
    store = fuzz_store
    key = f"t{uuid.uuid4().hex[:6]}"
    store.create(Session(key=key, history=[Message(role="user", content="kept")]))
    calls: list[Callable[[], object]] = [
        lambda: store.get(bad),  # type: ignore[arg-type]
        lambda: store.append_message(key, bad),  # type: ignore[arg-type]
        lambda: store.compact_messages(key, 0, bad),  # type: ignore[arg-type]
        lambda: store.update_metadata(key, set=bad),  # type: ignore[arg-type]
        lambda: store.fork_child(key, bad),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidArgument):
            call()
    assert [m.content for m in store.get_history(key)] == ["kept"]
    store.delete(key)


def test_huge_messages_are_refused_above_the_limit() -> None:
    store = RedisStore.from_url("memory://", max_message_bytes=1000)
    store.create(Session(key="h"))
    with pytest.raises(InvalidArgument, match=r"msg.*over max_message_bytes=1,000"):
        store.append_message("h", Message(role="user", content="x" * 2000))
    with pytest.raises(InvalidArgument, match=r"messages\[1\].*max_message_bytes"):
        store.append_messages("h", [Message(role="user"), Message(role="user", content="y" * 999)])
    assert store.get_history("h") == []
    big = RedisStore.from_url("memory://", max_message_bytes=0)
    big.create(Session(key="h", history=[Message(role="user", content="z" * 5_000_000)]))
    assert len(big.get_history("h")[0].content) == 5_000_000


@pytest.mark.parametrize("text", ["\udc80", "a\ud800b"])
def test_lone_surrogates_are_refused_naming_the_field(text: str) -> None:
    store = RedisStore.from_url("memory://")
    store.create(Session(key="s"))
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: store.append_message("s", Message(role="user", content=text)), "msg"),
        (lambda: store.update_metadata("s", set={"k": text}), "set"),
        (lambda: store.update_metadata("s", set={text: "v"}), "set"),
        (lambda: store.create(Session(key="t", agent_id=text)), "session.agent_id"),
        (lambda: store.compact_messages("s", 0, text), "summary"),
        (lambda: store.fork_child("s", "a" + text), "agent_name"),
        (lambda: store.set_secret(text, b"x"), "name"),
    ]
    store.append_message("s", Message(role="user", content="ok"))
    for call, argument in cases:
        with pytest.raises(InvalidArgument) as info:
            call()
        assert info.value.argument.startswith(argument), (argument, info.value.argument)
    assert [m.content for m in store.get_history("s")] == ["ok"]
