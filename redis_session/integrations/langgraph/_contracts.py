"""The contracts of this package's scripts (``langgraph_*.lua``): a builder per script,
taking its KEYS and ARGV by the names its header gives them, and the named types of its OK
replies (``tests/lua/test_scripts.py`` checks them against the headers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ...contracts import Arg, Contract, Head, Key, Nothing
from ...extension import ScriptCall


class Stored(NamedTuple):
    """``langgraph_put_writes``: how many writes were stored."""

    stored: int


class Read(NamedTuple):
    """``langgraph_read``: per checkpoint, ``[checkpoint, record, references, values,
    writes]``.
    """

    checkpoints: list[Any]


class Removed(NamedTuple):
    """``langgraph_remove``: how many of the checkpoints were there."""

    removed: int


class Dumped(NamedTuple):
    """``langgraph_dump``: the data hash's field/value pairs, the order zset's members."""

    fields: list[bytes]
    entries: list[bytes]


def langgraph_put(
    *,
    root: Sequence[Key],
    data: Key,
    order: Key,
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    checkpoint: bytes,
    record: bytes,
    refs: bytes,
    guard: bytes,
    blobs: Sequence[bytes],
) -> ScriptCall:
    """``blobs``: data field, value, ... (pairs)."""
    args: list[Arg] = [*head, session_key, checkpoint, record, refs, guard, len(blobs) // 2]
    return ScriptCall("langgraph_put", [*root, data, order, *members], [*args, *blobs])


def langgraph_put_writes(
    *,
    root: Sequence[Key],
    data: Key,
    order: Key,
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    checkpoint: bytes,
    writes: Sequence[bytes],
) -> ScriptCall:
    """``writes``: triples of ``<task id>\\0<index>``, replace flag, write."""
    args: list[Arg] = [*head, session_key, checkpoint, len(writes) // 3, *writes]
    return ScriptCall("langgraph_put_writes", [*root, data, order, *members], args)


def langgraph_read(
    *,
    root: Sequence[Key],
    data: Key,
    order: Key,
    members: Sequence[Key] = (),
    head: Head,
    high: bytes,
    low: bytes,
    count: int,
    exact: bytes,
) -> ScriptCall:
    """A read: ``head``'s TTL 0 refreshes nothing (then it is sent as a read-only script)."""
    return ScriptCall(
        "langgraph_read",
        [*root, data, order, *members],
        [*head, high, low, count, exact],
        write=bool(head.ttl_ms),
    )


def langgraph_remove(*, data: Key, order: Key, checkpoints: Sequence[bytes]) -> ScriptCall:
    """Remove ``checkpoints`` (at most 100)."""
    return ScriptCall("langgraph_remove", [data, order], list(checkpoints))


def langgraph_dump(*, data: Key, order: Key, max_fields: int) -> ScriptCall:
    """Read a whole thread (at most ``max_fields`` data fields)."""
    return ScriptCall("langgraph_dump", [data, order], [max_fields], write=False)


def langgraph_copy(
    *,
    root: Sequence[Key],
    data: Key,
    order: Key,
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    fields: Sequence[bytes],
    entries: Sequence[bytes],
) -> ScriptCall:
    """``fields``: the data hash's field/value pairs; ``entries``: the order's members."""
    args: list[Arg] = [*head, session_key, len(fields), *fields, *entries]
    return ScriptCall("langgraph_copy", [*root, data, order, *members], args)


class Walked(NamedTuple):
    """``langgraph_walk``: the start, then per ancestor ``[checkpoint, [channel, value...],
    [write...]]``; the last ancestor returned when the walk goes on (``b''``: it ended).
    """

    walked: list[Any]
    last: bytes


def langgraph_walk(
    *, data: Key, order: Key, start: bytes, high: bytes, low: bytes, steps: int,
    channels: Sequence[str],
) -> ScriptCall:  # fmt: skip
    """Walk ``start``'s ancestors (``b''``: the newest of the range's), ``steps`` at most."""
    return ScriptCall(
        "langgraph_walk", [data, order], [start, high, low, steps, *channels], write=False
    )


def _contract(build: Any, keys: str, argv: str, *ok: type[tuple[Any, ...]]) -> Contract:
    return Contract(build.__name__, tuple(keys.split()), tuple(argv.split()), build, ok)


TREE = "root data order *members"
CONTRACTS = {
    c.name: c
    for c in (
        _contract(
            langgraph_put, TREE, "head session_key checkpoint record refs guard #blobs", Nothing
        ),
        _contract(langgraph_put_writes, TREE, "head session_key checkpoint #writes", Stored),
        _contract(langgraph_read, TREE, "head high low count exact", Read),
        _contract(langgraph_remove, "data order", "*checkpoints", Removed),
        _contract(langgraph_dump, "data order", "max_fields", Dumped),
        _contract(langgraph_copy, TREE, "head session_key #fields *entries", Nothing),
        _contract(langgraph_walk, "data order", "start high low steps *channels", Walked),
    )
}
"""Each script's contract, by name."""
