"""The C decoder of stored messages (``_speedups.c``); used through :mod:`.fast`."""

from collections.abc import Sequence
from datetime import tzinfo
from typing import Any

from pydantic import BaseModel

def configure(
    roles: dict[str, Any],
    message_cls: type[BaseModel],
    tool_call_cls: type[Any],
    tz: tzinfo,
    message_defaults: dict[str, Any],
    call_defaults: dict[str, Any],
    fields_set_cls: type[set[str]],
    usage_cls: type[BaseModel],
    usage_defaults: dict[str, Any],
) -> None: ...
def decode(items: Sequence[bytes]) -> tuple[list[Any], list[int], int]: ...
