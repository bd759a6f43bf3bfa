from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest

from redis_session import (
    ChildSession,
    ChildSessionConfig,
    InvalidArgument,
    Message,
    RunContext,
    Session,
    SessionError,
    SessionLifecycleEvent,
    SessionSummary,
    ToolCall,
)
from redis_session.keys import parent_of


def test_child_session_new_key_and_trimming() -> None:
    child = ChildSession.new("parent:1", "coder", ChildSessionConfig(max_messages=2))
    assert re.fullmatch(r"parent:1:child:coder:\d{16,}", child.key)
    assert parent_of(child.key) == ("parent:1", "coder")
    assert not child.is_merged()
    for i in range(5):
        child.append_message(Message(role="user", content=str(i)))
    assert [m.content for m in child.history] == ["3", "4"]
    unlimited = ChildSession.new("p", "a")
    for i in range(5):
        unlimited.append_message(Message(role="user", content=str(i)))
    assert len(unlimited.history) == 5


def test_child_config_rejects_negatives() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        ChildSessionConfig(max_messages=-1)
    with pytest.raises(ValueError, match="inherit_history"):
        ChildSessionConfig(inherit_history=-2)


def test_events_accept_unknown_types_and_fields() -> None:
    e = SessionLifecycleEvent.model_validate_json('{"type": "rename", "new_field": 1}')
    assert e.type == "rename" and e.child_key == ""


def test_message_ids_are_unique_per_message() -> None:
    assert len({Message(role="user").id for _ in range(1000)}) == 1000


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Session(key="k", metadata={"lang": 1}),
         "Session.metadata.lang: Input should be a valid string, got 1"),
        (lambda: Session(), "Session.key: Field required"),  # type: ignore[call-arg]
        (lambda: Session(key="k", history=[{"role": "user", "id": "a b"}]),
         "Session.history[0].id: String should match pattern '^[!#-\\[\\]-~]{1,128}$', got 'a b'"),
        (lambda: Message(role="user", bogus=1), "Message.bogus: Extra inputs are not permitted"),
        (lambda: ToolCall(id=1, name=2, input=3),
         "ToolCall.id: Input should be a valid string, got 1 (and 2 more)"),
        (lambda: ChildSessionConfig(max_messages=-1),
         "ChildSessionConfig.max_messages: Input should be greater than or equal to 0, got -1"),
    ],
)  # fmt: skip
def test_a_bad_field_is_one_line_naming_it(build: Any, message: str) -> None:
    """Model construction errors are the store's own: InvalidArgument (a SessionError and a
    ValueError), one line, the field named as a path."""
    with pytest.raises(InvalidArgument) as info:
        build()
    assert str(info.value) == message
    assert isinstance(info.value, SessionError) and isinstance(info.value, ValueError)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_validation_does_not_run_the_constructor() -> None:
    """Only a direct call goes through the one-line constructor: nested models, model_validate
    and the codec's decoding of stored messages stay at pydantic-core speed (no Python frame
    per message) and raise pydantic's ValidationError."""
    from redis_session import codec

    public = [Message, ToolCall, Session, SessionSummary, ChildSession, ChildSessionConfig,
              SessionLifecycleEvent, RunContext]  # fmt: skip
    models: list[Any] = [*public, codec._StoredMessage, codec._LenientStoredMessage]
    assert [m for m in models if m.__pydantic_custom_init__] == []
    with pytest.raises(pydantic.ValidationError):
        Message.model_validate({"role": "nobody"})


def test_a_bad_field_is_caught_as_invalid_argument_and_as_pydantic_s_validation_error() -> None:
    import pydantic

    from redis_session import InvalidModel

    with pytest.raises(pydantic.ValidationError) as caught:
        Message(role="robot")
    error = caught.value
    assert isinstance(error, InvalidArgument) and isinstance(error, InvalidModel)
    assert error.argument == "Message.role" and "\n" not in str(error)
    assert error.error_count() == 1 and error.errors()[0]["loc"] == ("role",)
    with pytest.raises(InvalidArgument, match=r"^Session\.metadata\.lang: .* got 1$"):
        Session(key="k", metadata={"lang": 1})
    with pytest.raises(pydantic.ValidationError) as plain:  # pydantic's own: unchanged
        Message.model_validate({"role": "robot"})
    assert not isinstance(plain.value, InvalidArgument)
