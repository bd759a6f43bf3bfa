"""The C decoder of stored messages (``_speedups.c``); see :func:`.codec._c_decoder`."""

from collections.abc import Sequence
from datetime import tzinfo
from typing import Any

from .models import Message

def configure(
    roles: dict[str, Any],
    message_cls: type[Message],
    tool_call_cls: type[Any],
    tz: tzinfo,
    message_defaults: dict[str, Any],
    call_defaults: dict[str, Any],
    fields_set_cls: type[set[str]],
) -> None: ...
def decode(items: Sequence[bytes]) -> tuple[list[Message | None], list[int]]: ...
def pack(commands: Sequence[tuple[Any, ...]]) -> bytes | None: ...
def resp_scan(buffer: Any, start: int, count: int) -> tuple[int, int]: ...
def resp_replies(buffer: Any, count: int, at: int, error_cls: Any) -> list[Any]: ...
