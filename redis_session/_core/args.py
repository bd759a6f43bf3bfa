"""Argument checks shared by the store's operations: each raises ``InvalidArgument`` naming the
argument, before anything is sent to Redis.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from .. import codec
from ..errors import InvalidArgument
from ..keys import check_key
from ..models import Message, Session

MAX_INT = 2**63 - 1  # Redis integers are signed 64-bit


def token() -> str:
    """A fresh random call token (a retried call carries the same one)."""
    return secrets.token_hex(8)


MAX_TOKEN = 128
"""The longest ``idempotency_key`` (characters)."""


def call_token(value: object) -> str:
    """The call token of an operation: from the caller's ``idempotency_key`` (so that the
    caller's own retry of the call after a lost reply finds the first call's success), or a
    fresh one.
    """
    if value is None:
        return token()
    if not isinstance(value, str) or not value or len(value) > MAX_TOKEN:
        raise InvalidArgument(
            "idempotency_key", f"must be a non-empty str of at most {MAX_TOKEN} characters"
        )
    codec.text_arg(value, "idempotency_key")
    return "c:" + value  # never equal to a fresh token (hex digits only)


def duration_ms(value: object, argument: str, *, allow_zero: bool = False) -> int:
    """Seconds (int/float) or a timedelta as whole milliseconds, validated."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgument(
            argument, f"must be seconds or a timedelta, not {type(value).__name__}"
        )
    ms = round(seconds * 1000)
    if ms < 0 or (ms == 0 and not allow_zero) or seconds != seconds:
        raise InvalidArgument(argument, f"must be > 0, got {value!r}")
    return ms


def non_negative_int(value: object, argument: str) -> int:
    """An int from 0 to 2**63 - 1."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(argument, f"must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_INT:
        raise InvalidArgument(argument, f"must be >= 0 and < 2**63, got {value}")
    return value


def name(value: object, argument: str = "name") -> str:
    """A non-empty str that UTF-8 can encode."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(argument, "must be a non-empty str")
    codec.text_arg(value, argument)
    return value


def as_bytes(value: object, argument: str) -> bytes:
    """A bytes-like value (bytes, bytearray, memoryview) as bytes."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(argument, f"must be bytes, not {type(value).__name__}")
    return bytes(value)


def message(msg: object, argument: str = "msg") -> Message:
    """A ``Message``."""
    if not isinstance(msg, Message):
        raise InvalidArgument(argument, f"must be a Message, not {type(msg).__name__}")
    return msg


def session(value: object) -> Session:
    """A ``Session`` with a usable key."""
    if not isinstance(value, Session):
        raise InvalidArgument("session", f"must be a Session, not {type(value).__name__}")
    check_key(value.key, "session.key")
    return value


def optional_str(value: object, argument: str) -> str | None:
    """A str or None."""
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(argument, "must be a str or None")
    return value


def text(value: object, argument: str) -> str:
    """A str."""
    if not isinstance(value, str):
        raise InvalidArgument(argument, f"must be a str, not {type(value).__name__}")
    return value
