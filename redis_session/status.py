"""Script status codes and the one table that turns them into exceptions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NoReturn

from .contracts import (
    Damaged,
    OutOfRange,
    OverBudget,
    ParentGone,
    Pruned,
    Stale,
    TooLarge,
    WrongType,
    parsed,
    status,
)
from .errors import (
    ChildAlreadyMerged,
    ChildNotFound,
    ChildPruned,
    ConcurrentChange,
    CorruptData,
    DuplicateSession,
    ForeignKey,
    InvalidArgument,
    ItemNotFound,
    MigrationConflict,
    SessionError,
    SessionExpired,
    SessionNotFound,
    StaleExpectation,
    TokenCountsUnknown,
    TurnLost,
    UsageLimitExceeded,
)


class Status(IntEnum):
    """The first element of every script reply (see ``lua/_prelude.lua``)."""

    OK = 0
    NOT_FOUND = 1
    EXPIRED = 2
    EXISTS = 3
    OUT_OF_RANGE = 4
    STALE = 5
    MERGED = 6
    CONFLICT = 7
    MISSING = 8
    WRONG_TYPE = 9
    PARENT_GONE = 10
    KEY_CHANGED = 11
    TREE_CHANGED = 12
    DAMAGED = 13
    TOO_LARGE = 14
    PRUNED = 15
    STAGE = 16
    VERSION = 17
    TURN_LOST = 18
    TURN_BUSY = 19
    OVER_BUDGET = 20
    TOKENS_UNKNOWN = 21


@dataclass(frozen=True, slots=True)
class Ctx:
    """What an operation knows that its exception should carry."""

    key: str = ""
    keys: Sequence[str | bytes] = ()
    child: bool = False
    kind: str = ""
    name: str = ""
    index: int = -1
    expect_id: str = ""
    parent: str = ""
    argument: str = ""
    token: int = 0
    """The turn a write was fenced with."""


def _raise(status: int, reply: Sequence[Any], ctx: Ctx) -> NoReturn:
    match status:
        case Status.NOT_FOUND:
            raise ChildNotFound(ctx.key) if ctx.child else SessionNotFound(ctx.key)
        case Status.EXPIRED:
            raise SessionExpired(ctx.key)
        case Status.EXISTS:
            raise DuplicateSession(ctx.key)
        case Status.OUT_OF_RANGE if ctx.expect_id:  # the history got shorter since it was read
            raise StaleExpectation(ctx.key, ctx.index, ctx.expect_id)
        case Status.OUT_OF_RANGE:
            length = parsed(OutOfRange, reply).length
            raise InvalidArgument(
                "up_to_index", f"{ctx.index} is out of range: the history has {length} messages"
            )
        case Status.STALE:
            newest = parsed(Stale, reply).newest
            raise StaleExpectation(
                ctx.key, ctx.index, ctx.expect_id, None if newest is None else _key_name(newest)
            )
        case Status.TURN_LOST:
            raise TurnLost(ctx.key, ctx.token)
        case Status.OVER_BUDGET:
            over = parsed(OverBudget, reply)
            raise UsageLimitExceeded(ctx.key, int(over.usage), int(over.budget))
        case Status.TOKENS_UNKNOWN:
            raise TokenCountsUnknown(ctx.key)
        case Status.MERGED:
            raise ChildAlreadyMerged(ctx.key)
        case Status.CONFLICT:
            raise MigrationConflict("another secret migration or a secret write came first")
        case Status.MISSING:
            if ctx.kind == "pop":
                raise ConcurrentChange(
                    ctx.key, "this pop was applied, but its message is no longer kept for a retry"
                )
            raise ItemNotFound(ctx.kind, ctx.name)
        case Status.PARENT_GONE:
            if parsed(ParentGone, reply).status == Status.EXPIRED:
                raise SessionExpired(ctx.parent)
            raise SessionNotFound(ctx.parent)
        case Status.WRONG_TYPE:
            wrong = parsed(WrongType, reply)
            where = _key_name(ctx.keys[wrong.at - 1])
            raise ForeignKey(_owner(ctx, wrong.at), where, _key_name(wrong.held))
        case Status.DAMAGED:
            damaged = parsed(Damaged, reply)
            where = _key_name(ctx.keys[damaged.at - 1])
            if _key_name(damaged.what) == "foreign":
                raise ForeignKey(_owner(ctx, damaged.at), where, "hash")
            raise CorruptData(_owner(ctx, damaged.at), damage(where, damaged))
        case Status.TOO_LARGE:
            large = parsed(TooLarge, reply)
            raise InvalidArgument(
                ctx.argument or "metadata",
                f"would make the session's metadata {large.size:,} bytes as stored, over "
                f"max_metadata_bytes={large.limit:,}",
            )
        case Status.PRUNED:
            raise ChildPruned(ctx.key, int(parsed(Pruned, reply).merged_at))
        case Status.TREE_CHANGED:
            raise ConcurrentChange(ctx.key, "its children kept changing")
        case Status.VERSION:
            raise ConcurrentChange(ctx.key, "its sealed metadata kept getting newer versions")
    raise SessionError(f"unknown script status {status!r}")


ROOT_KEYS = 7
"""A child operation's first KEYS are its parent's tree root keys (see ``lua/_prelude.lua``)."""


def _owner(ctx: Ctx, at: int) -> str:
    """The session a reply naming ``KEYS[at]`` is about: a child operation's parent for the
    parent's own keys, else the operation's key.
    """
    if ctx.parent and at <= ROOT_KEYS:
        return ctx.parent
    return ctx.key or ctx.name


def _key_name(name: str | bytes | int) -> str:
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def damage(where: str, damaged: Damaged) -> str:
    """What a ``DAMAGED`` reply says about Redis key ``where``."""
    what = _key_name(damaged.what)
    if what == "version":
        return (
            f"Redis key {where!r} holds a session of schema version {_key_name(damaged.found)!r}, "
            "which this version of redis_session does not know"
        )
    if what == "evicted":
        return (
            f"every data key of the session was removed before its deadline (evicted under "
            f"memory pressure, or by hand); {where!r} is missing"
        )
    if what == "usage":
        return (
            f"Redis key {where!r} holds usage figures (ui, uo, ur) that are not whole numbers "
            "this store writes (changed by another writer): nothing was written"
        )
    if what == "positions":
        return (
            f"Redis key {where!r} records list positions that are not whole numbers this store "
            "writes (changed by another writer): the session is damaged"
        )
    if what in ("members", "length"):
        kind = "children" if what == "members" else "messages"
        return (
            f"Redis key {where!r} holds {_key_name(damaged.found)} {kind} where the session "
            f"records {_key_name(damaged.expected)} (evicted, or changed by another writer)"
        )
    return (
        f"Redis key {where!r} is missing while the session's other keys exist (evicted under "
        "memory pressure, or removed by hand): the session is damaged"
    )


def check(reply: Any, ctx: Ctx | Callable[[], Ctx]) -> Sequence[Any]:
    """Return ``reply`` when its status is OK, else raise the exception its status means.

    ``ctx`` may be a function that makes the context, so hot paths build it only on failure.
    """
    code = status(reply)
    if code == 0:
        return reply  # type: ignore[no-any-return]
    if not isinstance(code, int):
        raise SessionError(f"unexpected script reply {reply!r}")
    _raise(code, reply, ctx if isinstance(ctx, Ctx) else ctx())
