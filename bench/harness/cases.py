"""The append cases (sessions of one size, their floors and prebuilt inputs) and the timed
operations built from them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from redis_session import codec, contracts
from redis_session._core.core import Core, ScriptCall
from redis_session.aio import AsyncRedisStore
from redis_session.models import Message
from redis_session.store import RedisStore

from .timing import AsyncOp, SyncOp, Timings


@dataclass
class AppendCase:
    """One session the store appends to, the floor keys of the same size and prebuilt inputs."""

    size: int
    pool: list[str]  # sessions pre-filled to ``size``; each takes a few rounds' appends
    targets: list[str]  # the session of round i
    floor_keys: list[str]
    messages: list[Message]  # one new Message per store call
    floor_args: list[list[bytes | int]]  # the floor's ARGV (pre-serialized JSON)
    raw_requests: list[ScriptCall]  # the store's own request for other new messages


@dataclass
class AppendTimings:
    """Timings of one append case."""

    case: AppendCase
    store: Timings
    floor: Timings
    raw: Timings
    prep: Timings | None = None


def growth_cap(size: int) -> int:
    """How many messages an append case may add to one of its sessions: 20%, or 50 if empty."""
    return max(50, size // 5)


def script_names(cases: Sequence[AppendCase]) -> set[str]:
    """The scripts the cases' raw requests call."""
    return {req.name for case in cases for req in case.raw_requests}


def append_breakdown(results: Sequence[AppendTimings]) -> dict[str, float]:
    """Where an append's time goes, per case: medians (µs) and their differences."""
    out: dict[str, float] = {}
    for r in results:
        at = f"@{r.case.size:,}"
        client_side = r.store.median - r.raw.median
        out[f"floor: 6-command EVALSHA {at}"] = r.floor.median
        out[f"store's append script, bare EVALSHA (plain redis-py) {at}"] = r.raw.median
        out[f"store.append_message {at}"] = r.store.median
        out[f"-> server-side script extra (bare - floor) {at}"] = r.raw.median - r.floor.median
        out[f"-> client-side Python (store - bare) {at}"] = client_side
        if r.prep is not None:
            out[f"   of which prep: validate+dump_json+digest {at}"] = r.prep.median
            # below 0 when the store's hiredis packer saves more than its own Python costs
            out[f"   of which driver/check rest, less the packer saved {at}"] = (
                client_side - r.prep.median
            )
    return out


def history_ops(
    store: RedisStore,
    raw: Any,
    bare: Callable[[], Any],
    meta: str,
    key: str,
    msgs: str,
    h: dict[str, Timings],
) -> list[tuple[SyncOp, Timings]]:
    """The timed operations of one ``get_history(last=20)`` case: the store, its floor, the
    store's request sent bare, decoding alone, and a MULTI/EXEC alternative.
    """
    loads = orjson.loads
    items: list[bytes] = list(contracts.parsed(contracts.Read, bare()).elements)

    def store_op(_: int) -> object:
        return store.get_history(key, last=20)

    def floor_op(_: int) -> object:
        return [loads(x) for x in raw.lrange(msgs, -20, -1)]

    def script_op(_: int) -> object:
        return bare()

    def decode_op(_: int) -> object:
        return codec.decode_messages(key, items)

    def multi_op(_: int) -> object:
        pipe = raw.pipeline(transaction=True)
        pipe.exists(meta).lrange(msgs, -20, -1)
        return pipe.execute()

    return [
        (store_op, h["store"]),
        (floor_op, h["floor"]),
        (script_op, h["script"]),
        (decode_op, h["decode"]),
        (multi_op, h["multi"]),
    ]


def sync_store_op(store: RedisStore, case: AppendCase) -> SyncOp:
    """Round ``i``: the store appends the case's message ``i``."""
    targets, messages = case.targets, case.messages

    def op(i: int) -> object:
        return store.append_message(targets[i], messages[i])

    return op


def sync_floor_op(script: Any, case: AppendCase) -> SyncOp:
    """Round ``i``: the floor script with the case's pre-serialized arguments ``i``."""
    keys, args = case.floor_keys, case.floor_args

    def op(i: int) -> object:
        return script(keys=keys, args=args[i])

    return op


def sync_raw_op(scripts: dict[str, Any], case: AppendCase) -> SyncOp:
    """Round ``i``: the store's own append script, called bare through redis-py."""
    prepared = [(scripts[r.name], list(r.keys), list(r.args)) for r in case.raw_requests]

    def op(i: int) -> object:
        script, keys, args = prepared[i]
        return script(keys=keys, args=args)

    return op


def prep_op(core: Core, targets: Sequence[str], messages: Sequence[Message]) -> SyncOp:
    """An op that runs ``append_message``'s preparation (checks, encoding, digest, sealing)
    up to its request, without I/O: round ``i`` appends ``messages[i]`` to ``targets[i]``.
    """

    def op(i: int) -> object:
        # Closed at once: thousands of suspended generators kept alive would make every
        # garbage collection in the loop (of all the ops timed in it) walk their frames.
        gen = core.sessions.append_message(targets[i], messages[i])
        request = next(gen)
        gen.close()
        return request

    return op


def async_store_op(store: AsyncRedisStore, case: AppendCase) -> AsyncOp:
    """:func:`sync_store_op` for the asyncio store."""
    targets, messages = case.targets, case.messages

    async def op(i: int) -> object:
        return await store.append_message(targets[i], messages[i])

    return op


def async_floor_op(script: Any, case: AppendCase) -> AsyncOp:
    """:func:`sync_floor_op` on an asyncio client."""
    keys, args = case.floor_keys, case.floor_args

    async def op(i: int) -> object:
        return await script(keys=keys, args=args[i])

    return op


def async_raw_op(scripts: dict[str, Any], case: AppendCase) -> AsyncOp:
    """:func:`sync_raw_op` on an asyncio client."""
    prepared = [(scripts[r.name], list(r.keys), list(r.args)) for r in case.raw_requests]

    async def op(i: int) -> object:
        script, keys, args = prepared[i]
        return await script(keys=keys, args=args)

    return op
