"""One contract per Lua script: the names of its KEYS and ARGV, a builder that takes the
arguments by name, and named types for its replies. The one place where Python knows a
script's positions; everything else reads replies by name.

Each script's header holds the same names on three lines, which ``tests/lua`` compares with
:data:`CONTRACTS`::

    -- KEYS: root *members
    -- ARGV: head max_messages session_key kid max_metadata_bytes #metadata *messages
    -- OK: appended

``root`` is a session tree's seven root keys, ``head`` the four arguments every script
writing a tree begins with and ``events`` the four every script logging a lifecycle event
takes (see ``lua/_prelude.lua``); ``#name`` is a count followed by the items it counts,
``*name`` every remaining item. A reply is a list whose first element is
the status (:class:`~redis_session.status.Status`); the named types here hold what follows it.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, get_args, get_type_hints

from ._core.requests import ScriptCall

Key = str | bytes
Arg = bytes | str | int
R = TypeVar("R", bound=tuple[Any, ...])
B = TypeVar("B", bound=Callable[..., ScriptCall])


class Head(NamedTuple):
    """The ARGV every script that writes a session tree begins with."""

    ttl_ms: int
    grace_ms: int
    tree_generation: str
    """The tree generation the caller knows (its members are those it sends)."""
    id_window: int
    """Digests a session's id window keeps at least."""


class Events(NamedTuple):
    """The ARGV every script that logs a lifecycle event takes (``log_event`` in the prelude)."""

    channel: str
    """Where the event is published live."""
    publish: str
    """``PUBLISH``, ``SPUBLISH`` (sharded events) or ``''`` (not published)."""
    log_max: int
    """How many events the log keeps (0: no log)."""
    log_age_ms: int
    """How old a logged event may grow before it is trimmed (0: no limit)."""


def status(reply: Any) -> Any:
    """A reply's status (its first element), or None for a reply that is not a list."""
    return reply[0] if type(reply) is list and reply else None


def parsed(cls: type[R], reply: Sequence[Any]) -> R:
    """What follows a reply's status, as ``cls`` (:func:`typed`)."""
    return typed(cls, reply, 1)


def typed(cls: type[R], values: Sequence[Any], first: int = 0) -> R:
    """``values`` from index ``first`` on as ``cls``, each field converted to its annotated
    type (:func:`converters`); a last field named in :data:`REST` takes every remaining
    element (a tuple), a field the values do not reach is None.
    """
    count, rest, convert = _SHAPES.get(cls) or _shape(cls)
    got = list(values[first:])
    if rest:
        fixed = count - 1
        got = [*got[:fixed], *([None] * (fixed - len(got))), tuple(got[fixed:])]
    elif len(got) != count:
        got += [None] * (count - len(got))
    for i, kind, to in convert:
        value = got[i]
        if value is not None and type(value) is not kind:
            got[i] = to(value)
    return tuple.__new__(cls, got)


def _as_int(value: Any) -> int:
    return int(value)  # a number, or its digits in a Redis string


def _as_bytes(value: Any) -> bytes:
    return b"%d" % value if type(value) is int else bytes(value)


def _as_bool(value: Any) -> bool:
    return bool(int(value))


_CONVERTERS: dict[Any, Callable[[Any], Any]] = {
    int: _as_int,
    bytes: _as_bytes,
    bool: _as_bool,
    float: float,
}
"""The one converter per field type (as redis-py's response callbacks): a Lua number arrives
as an int, a Lua string (a hash field's value too) as bytes, ``false`` and nil as None."""


def converters(cls: type[tuple[Any, ...]]) -> tuple[tuple[int, type, Callable[[Any], Any]], ...]:
    """Per field of reply type ``cls`` whose type has a converter: its index, its type and the
    converter (``T | None``: T's; None stays None). Other fields (lists, tuples, ``Any``) are
    taken as they are.
    """
    hints = get_type_hints(cls)
    found = []
    for i, name in enumerate(cls._fields):  # type: ignore[attr-defined]
        kind = hints[name]
        if isinstance(kind, types.UnionType):  # T | None: T's; two types: as it is
            kinds = [k for k in get_args(kind) if k is not type(None)]
            kind = kinds[0] if len(kinds) == 1 else None
        if kind in _CONVERTERS:
            found.append((i, kind, _CONVERTERS[kind]))
    return tuple(found)


def _shape(cls: type[Any]) -> tuple[int, bool, tuple[tuple[int, type, Callable[[Any], Any]], ...]]:
    fields = cls._fields
    shape = _SHAPES[cls] = (len(fields), bool(fields) and fields[-1] in REST, converters(cls))
    return shape


_SHAPES: dict[type[Any], tuple[int, bool, tuple[tuple[int, type, Callable[[Any], Any]], ...]]] = {}
"""Per reply type: its number of fields, whether the last takes the rest of a reply, and its
converters."""


REST = frozenset({"members", "children", "reaped", "event_ids"})
"""Reply fields that take the rest of a reply."""


# -- replies shared by many scripts (the statuses that carry something) ---------------------


class KeyChanged(NamedTuple):
    """``KEY_CHANGED``: the session is sealed with key id ``kid`` (``b''``: cleartext), its
    wrapped data key ``dk``; ``at`` the KEYS index of the record it is about (1: the session).
    """

    kid: bytes
    dk: bytes
    at: int | None


class TreeChanged(NamedTuple):
    """``TREE_CHANGED``: the tree's generation and its members (child keys)."""

    tree_generation: bytes
    members: tuple[bytes, ...]


class VersionRefused(NamedTuple):
    """``VERSION``: a sealed metadata value no newer than the stored one."""

    field: bytes
    version: bytes


class Damaged(NamedTuple):
    """``DAMAGED``: ``KEYS[at]`` is missing or inconsistent (``what``), with what was found
    and what the session records; ``what`` = ``version``: found is the schema version.
    """

    at: int
    what: bytes | str
    found: bytes | int
    expected: bytes | int


class WrongType(NamedTuple):
    """``WRONG_TYPE``: ``KEYS[at]`` holds a value of Redis type ``held``."""

    at: int
    held: bytes | str


class TooLarge(NamedTuple):
    """``TOO_LARGE``: the session's metadata would be ``size`` bytes, over ``limit``."""

    size: int
    limit: int


class Pruned(NamedTuple):
    """``PRUNED``: the child was merged (at ``merged_at``, µs) and its record pruned since."""

    merged_at: float


class ParentGone(NamedTuple):
    """``PARENT_GONE``: a child's parent is gone; ``status`` NOT_FOUND or EXPIRED."""

    status: int


class OutOfRange(NamedTuple):
    """``OUT_OF_RANGE``: the history holds ``length`` messages."""

    length: int


class Stale(NamedTuple):
    """``STALE``: an expectation failed; ``newest``: the newest message's id where the script
    names it (an append's ``expect_last``), else None.
    """

    newest: bytes | None


class OverBudget(NamedTuple):
    """``OVER_BUDGET``: the session's usage, ``usage`` tokens, has reached its ``budget``."""

    usage: int
    budget: int


class TurnHeld(NamedTuple):
    """``TURN_BUSY``: another claim holds the session's turn for ``pttl`` ms more."""

    pttl: int


class Nothing(NamedTuple):
    """A reply with nothing after its status."""


# -- the contracts -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Contract:
    """A script's KEYS and ARGV names (as its header lists them), its builder and the named
    types of its OK replies.
    """

    name: str
    keys: tuple[str, ...]
    argv: tuple[str, ...]
    build: Callable[..., ScriptCall]
    ok: tuple[type[tuple[Any, ...]], ...]


CONTRACTS: dict[str, Contract] = {}


def _contract(keys: str, argv: str, *ok: type[tuple[Any, ...]]) -> Callable[[B], B]:
    def register(build: B) -> B:
        name = build.__name__
        CONTRACTS[name] = Contract(name, tuple(keys.split()), tuple(argv.split()), build, ok)
        return build

    return register


# Sessions ----------------------------------------------------------------------------------


class Created(NamedTuple):
    created_at: int
    """Microseconds since the epoch (the server's clock)."""
    index_created: int
    """1 when this call created the index key (a cluster registers its shard)."""
    event_id: bytes
    """The ``create`` event's id in the log (``b''``: no log, or a retry of this call)."""
    due: int | None
    """How many index entries of the shard belong to trees whose deadline passed."""
    expired: bytes | None
    """The ``expire`` event's id of an earlier tree under the key that ended unseen (None:
    there was none)."""
    again: bool
    """A retry of this call: it wrote nothing, the session as stored is what the call made."""


@_contract(
    "root stage log usage",
    "head session_key call_token events event event_type schema_version kid #meta tokens #sums "
    "staged *messages",
    Created,
)
def create(
    *,
    root: Sequence[Key],
    stage: Key,
    log: Key,
    usage: Key,
    head: Head,
    session_key: str,
    call_token: str,
    events: Events,
    event: bytes,
    event_type: str,
    schema_version: bytes,
    kid: bytes,
    meta: Sequence[bytes],
    tokens: int | str,
    sums: Sequence[bytes],
    staged: int,
    messages: Sequence[bytes],
) -> ScriptCall:
    """``meta``: field/value pairs (counted in pairs); ``tokens``, ``sums``: the history's
    token total and its token sums (``codec.token_sums``; ``''`` and none: unknown);
    ``messages``: tag/JSON pairs, or, with a history ``staged`` in the stage key, the tags of
    its newest messages only.
    """
    return ScriptCall(
        "create",
        [*root, stage, log, usage],
        [
            *head,
            session_key,
            call_token,
            *events,
            event,
            event_type,
            schema_version,
            kid,
            len(meta) // 2,
            *meta,
            tokens,
            len(sums) // 2,
            *sums,
            staged,
            *messages,
        ],
    )


class Read(NamedTuple):
    """A ``get`` reply: the session's meta hash and the messages at ``from_`` .. ``upto``
    of its list (which holds ``head`` .. ``tail`` in ``generation``). The hash as the script
    gives it is a flat field/value list; a first read puts there the mapping of a plain
    ``HGETALL`` sent behind the script (RESP3's; a list on RESP2).
    """

    meta: list[bytes] | dict[bytes, bytes]
    from_: int
    head: int
    tail: int
    generation: int
    token: bytes
    elements: list[bytes]
    upto: int
    kid: bytes
    dk: bytes
    first: int
    """Where the messages the read wants begin (by ``last`` and ``max_tokens``)."""
    context_tokens: int | None
    """The tokens the session holds (asked ``with_context``; None: its token sums are
    unknown)."""


@_contract(
    "meta msgs ids mark",
    "last with_meta token generation tail budget held_head max_tokens with_context",
    Read,
)
def get(
    *,
    meta: Key,
    msgs: Key,
    ids: Key,
    mark: Key,
    last: int,
    with_meta: bool,
    token: Arg,
    generation: Arg,
    tail: Arg,
    budget: int,
    held_head: Arg,
    max_tokens: int | None = None,
    with_context: bool = False,
    after: Sequence[tuple[Any, ...]] = (),
) -> ScriptCall:
    """``last`` < 0: every message; ``token``, ``generation``, ``tail``, ``held_head``: the
    version the caller holds (``''``: none); ``max_tokens``: the most tokens the messages
    wanted may sum to (None: no bound); ``with_context``: the tokens the session holds too;
    ``after``: plain reads sent behind it.
    """
    bound: Arg = "" if max_tokens is None else max_tokens
    args: list[Arg] = [
        last, "1" if with_meta else "0", token, generation, tail, budget, held_head, bound,
        "1" if with_context else "0",
    ]  # fmt: skip
    return ScriptCall("get", [meta, msgs, ids, mark], args, False, after)


class Part(NamedTuple):
    elements: list[bytes]
    upto: int


@_contract("meta msgs", "generation from_ to budget token", Part)
def read_range(
    *,
    meta: Key,
    msgs: Key,
    generation: Arg,
    from_: int,
    to: int,
    budget: int,
    token: Arg | None = None,
) -> ScriptCall:
    """``token`` None: not checked (a re-seal reads its own list)."""
    args: list[Arg] = [generation, from_, to, budget]
    if token is not None:
        args.append(token)
    return ScriptCall("read_range", [meta, msgs], args, write=False)


class Updated(NamedTuple):
    updated_at: int


@_contract("root *members", "head session_key kid #scalars *metadata", Updated)
def update(
    *,
    root: Sequence[Key],
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    kid: bytes,
    scalars: Sequence[bytes],
    metadata: Sequence[bytes],
) -> ScriptCall:
    """``scalars``, ``metadata``: field/value pairs (scalars counted in pairs)."""
    args: list[Arg] = [*head, session_key, kid, len(scalars) // 2, *scalars, *metadata]
    return ScriptCall("update", [*root, *members], args)


@_contract("root *members", "head session_key kid max_metadata_bytes #delete *set", Updated)
def update_metadata(
    *,
    root: Sequence[Key],
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    kid: bytes,
    max_metadata_bytes: int,
    delete: Sequence[bytes],
    set: Sequence[bytes],
) -> ScriptCall:
    args: list[Arg] = [*head, session_key, kid, max_metadata_bytes, len(delete), *delete, *set]
    return ScriptCall("update_metadata", [*root, *members], args)


class Deleted(NamedTuple):
    existed: int
    event_id: bytes | None
    """The ``delete`` (or ``expire``) event's id in the log (``b''``: none logged)."""
    event_ids: tuple[bytes | int, ...]
    """Per child, in order: its ``discard`` event's id when it was live (``b''``: no log),
    else 0."""


@_contract(
    "root pop turn wake log gone *child_records",
    "session_key call_token gone_ms events event *children",
    Deleted,
)
def delete(
    *,
    root: Sequence[Key],
    pop: Key,
    turn: Key,
    wake: Key,
    log: Key,
    gone: Key,
    child_records: Sequence[Key],
    session_key: str,
    call_token: str,
    gone_ms: int,
    events: Events,
    event: bytes,
    children: Sequence[bytes],
) -> ScriptCall:
    """``keys``: the root keys, the pop, turn and wake keys, the log, the gone key, then meta,
    msgs, ids and staging list per child; ``call_token``: the caller's (``""``: none), kept in
    the gone key ``gone_ms``; ``children``: per child, its key as read and the fields of its
    ``discard`` event.
    """
    args: list[Arg] = [session_key, call_token, gone_ms, *events, event, *children]
    return ScriptCall("delete", [*root, pop, turn, wake, log, gone, *child_records], args)


class DiscardedBatch(NamedTuple):
    done: int
    """1 when the delete the batch belongs to was done before (nothing discarded), else 0."""
    event_ids: tuple[bytes | int, ...]
    """Per child, in order: its ``discard`` event's id when it was live (``b''``: no log),
    else 0 (merged, damaged, or no longer a member)."""


@_contract("root log gone *child_records", "call_token events *children", DiscardedBatch)
def discard_children(
    *,
    root: Sequence[Key],
    log: Key,
    gone: Key,
    child_records: Sequence[Key],
    call_token: str,
    events: Events,
    children: Sequence[bytes],
) -> ScriptCall:
    """``keys``: the root keys, the log, the gone key, then meta, msgs, ids and staging list
    per child; ``call_token``: the delete's (``""``: none); ``children``: per child, its key
    as read and the fields of its ``discard`` event (a batch of a delete: see ``delete``).
    """
    return ScriptCall(
        "discard_children", [*root, log, gone, *child_records], [call_token, *events, *children]
    )


class Ended(NamedTuple):
    ended_at: int | None
    """Microseconds since the epoch (the server's clock), when the session was ended."""
    event_id: bytes | None
    """The ``end`` event's id (``b''``: no log); None when the session was ended before."""


@_contract("root log", "events event", Ended)
def end_session(*, root: Sequence[Key], log: Key, events: Events, event: bytes) -> ScriptCall:
    return ScriptCall("end_session", [*root, log], [*events, event])


class Reaped(NamedTuple):
    reaped: tuple[bytes, ...]
    """Session key, event id, session key, event id, ... of the trees reaped by this call."""


@_contract("index log *metas", "events ttl_ms *candidates", Reaped)
def reap_expired(
    *,
    index: Key,
    log: Key,
    metas: Sequence[Key],
    events: Events,
    ttl_ms: int,
    candidates: Sequence[bytes | str],
) -> ScriptCall:
    """``keys``: the index shard, its log, then each candidate's meta hash; ``candidates``:
    per candidate, its session key and its ``expire`` event's fields.
    """
    return ScriptCall("reap_expired", [index, log, *metas], [*events, ttl_ms, *candidates])


class GroupRead(NamedTuple):
    delivered: bytes
    """The group's last delivered id before this call."""
    entries: list[Any]
    """``[id, [field, value, ...]]`` per entry taken."""


@_contract("log", "group consumer count", GroupRead)
def read_group(*, log: Key, group: str, consumer: str, count: int) -> ScriptCall:
    return ScriptCall("read_group", [log], [group, consumer, count], write=False)


class Appended(NamedTuple):
    appended: int
    trimmed: int
    """Messages the append trimmed from the session's head (its ``max_messages``)."""


@_contract(
    "root turn usage *members",
    "head max_messages session_key kid max_metadata_bytes fence expect_last budget max_tokens "
    "#metadata "
    "*messages",
    Appended,
)
def append_message(
    *,
    root: Sequence[Key],
    turn: Key,
    usage: Key,
    members: Sequence[Key] = (),
    head: Head,
    max_messages: int,
    session_key: str,
    kid: bytes,
    max_metadata_bytes: int,
    fence: str,
    expect_last: bytes,
    budget: int,
    max_tokens: int,
    metadata: Sequence[bytes],
    messages: Sequence[bytes],
) -> ScriptCall:
    """``fence``: the turn's value the write is made through (``''``: none); ``expect_last``:
    ``b''`` (no expectation), ``b'.'`` (the session is empty) or the newest element's id
    prefix; ``budget``: the store's usage budget (0: none); ``max_tokens``: the store's cap on
    the tokens a session holds (0: none); ``metadata``: field/value pairs (counted in
    arguments); ``messages``: tag/element pairs (``codec.message_args``).
    """
    return ScriptCall(
        "append_message",
        [*root, turn, usage, *members],
        [
            *head,
            max_messages,
            session_key,
            kid,
            max_metadata_bytes,
            fence,
            expect_last,
            budget,
            max_tokens,
            len(metadata),
            *metadata,
            *messages,
        ],
    )


class Compacted(NamedTuple):
    removed: int
    event_id: bytes
    """The ``compact`` event's id in the log (``b''``: none logged)."""
    reclaimed_tokens: int | None
    """The tokens the removed messages held (None: the session's token sums are unknown)."""


@_contract(
    "root turn log *members",
    "head session_key up_to tag element expect events event kid fence",
    Compacted,
)
def compact_messages(
    *,
    root: Sequence[Key],
    turn: Key,
    log: Key,
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    up_to: int,
    tag: bytes,
    element: bytes,
    expect: bytes,
    events: Events,
    event: bytes,
    kid: bytes,
    fence: str = "",
) -> ScriptCall:
    """``tag``: the summary's (``codec.message_tag``), ``element`` its stored form."""
    args: list[Arg] = [
        *head,
        session_key,
        up_to,
        tag,
        element,
        expect,
        *events,
        event,
        kid,
        fence,
    ]
    return ScriptCall("compact_messages", [*root, turn, log, *members], args)


class Rewound(NamedTuple):
    removed: int
    event_id: bytes
    """The ``rewind`` event's id in the log (``b''``: none logged, or a retried call)."""
    again: bool
    """The answer of a call made before (a retry): nothing was done now."""


@_contract(
    "root turn log *members",
    "head session_key call_digest generation keep tail last events event fence",
    Rewound,
)
def rewind(
    *,
    root: Sequence[Key],
    turn: Key,
    log: Key,
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    call_digest: bytes,
    generation: int,
    keep: int,
    tail: int,
    last: bytes,
    events: Events,
    event: bytes,
    fence: str = "",
) -> ScriptCall:
    """``keep``: the absolute position after the last message kept, in ``generation`` whose
    list ended at ``tail`` when read (-1: only the answer of a call made before); ``last``: the
    kept last message's id prefix (``b''``: none kept).
    """
    args: list[Arg] = [
        *head,
        session_key,
        call_digest,
        generation,
        keep,
        tail,
        last,
        *events,
        event,
        fence,
    ]
    return ScriptCall("rewind", [*root, turn, log, *members], args)


class Cleaned(NamedTuple):
    appended: int
    """Messages appended (0: a retry of this call: it was applied before)."""
    tree_generation: bytes
    event_ids: tuple[bytes | int, ...]
    """Per member, in order: its ``discard`` event's id when it was discarded (``b''``: no
    log), else 0 (merged, or under another call's merge lease)."""


@_contract(
    "root turn log *members",
    "head session_key kid max_messages fence expect_last events tag element notice_tag"
    " notice max_tokens *children",
    Cleaned,
)
def cleanup_failed_turn(
    *,
    root: Sequence[Key],
    turn: Key,
    log: Key,
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    kid: bytes,
    max_messages: int,
    fence: str,
    expect_last: bytes,
    events: Events,
    tag: bytes,
    element: bytes,
    notice_tag: bytes,
    notice: bytes,
    max_tokens: int,
    children: Sequence[bytes | str],
) -> ScriptCall:
    """``tag``/``element``: the answers of the open calls (``codec.message_tag``; ``b''``
    twice: none); ``notice_tag``/``notice``: a message after them (``b''`` twice: none);
    ``max_tokens``: the cap on the tokens the session holds (0: none); ``children``: per
    member, its child key and its ``discard`` event's fields.
    """
    args: list[Arg] = [
        *head,
        session_key,
        kid,
        max_messages,
        fence,
        expect_last,
        *events,
        tag,
        element,
        notice_tag,
        notice,
        max_tokens,
        *children,
    ]
    return ScriptCall("cleanup_failed_turn", [*root, turn, log, *members], args)


class Popped(NamedTuple):
    element: bytes | None
    """None when the history was empty."""


@_contract("root pop *members", "head session_key call_token digest expect kid keep_ms", Popped)
def pop_message(
    *,
    root: Sequence[Key],
    pop: Key,
    members: Sequence[Key] = (),
    head: Head,
    session_key: str,
    call_token: str,
    digest: bytes,
    expect: bytes,
    kid: bytes,
    keep_ms: int,
) -> ScriptCall:
    args: list[Arg] = [*head, session_key, call_token, digest, expect, kid, keep_ms]
    return ScriptCall("pop_message", [*root, pop, *members], args)


class Staged(NamedTuple):
    length: int


@_contract("stage", "length ttl_ms *elements", Staged)
def stage_push(*, stage: Key, length: int, ttl_ms: int, elements: Sequence[bytes]) -> ScriptCall:
    return ScriptCall("stage_push", [stage], [length, ttl_ms, *elements])


# Children ----------------------------------------------------------------------------------


class Forked(NamedTuple):
    created_at: int
    tree_generation: bytes
    elements: list[bytes] | None
    """The child's stored elements, or False when they were copied in steps (read them so)."""
    event_id: bytes
    """The ``fork`` event's id in the log (``b''``: a retry of this call, or no log)."""
    fork_point: bytes
    """The prefix of the parent's newest message at the fork (``b''``: none)."""
    context_tokens: int | None
    """The tokens the child holds (None: its token sums are unknown)."""
    members: tuple[bytes, ...]


class ForkStage(NamedTuple):
    """``STAGE`` of ``fork_child``: the parent's list (``generation``, ``head`` .. ``tail``)
    holds more to inherit than one call copies.
    """

    generation: int
    head: int
    tail: int


@_contract(
    "root child_meta child_msgs child_ids log *members",
    "head parent_key child_key agent config max_messages inherit call_token events "
    "event kid staged staged_generation step",
    Forked,
)
def fork_child(
    *,
    root: Sequence[Key],
    child_meta: Key,
    child_msgs: Key,
    child_ids: Key,
    log: Key,
    members: Sequence[Key] = (),
    head: Head,
    parent_key: str,
    child_key: str,
    agent: str,
    config: bytes,
    max_messages: int,
    inherit: int,
    call_token: str,
    events: Events,
    event: bytes,
    kid: bytes,
    staged: int,
    staged_generation: Arg,
    step: int,
) -> ScriptCall:
    return ScriptCall(
        "fork_child",
        [*root, child_meta, child_msgs, child_ids, log, *members],
        [
            *head,
            parent_key,
            child_key,
            agent,
            config,
            max_messages,
            inherit,
            call_token,
            *events,
            event,
            kid,
            staged,
            staged_generation,
            step,
        ],
    )


class Copied(NamedTuple):
    upto: int
    length: int


@_contract(
    "source_meta source_msgs target", "generation from_ to copied prefix ttl_ms budget", Copied
)
def copy_range(
    *,
    source_meta: Key,
    source_msgs: Key,
    target: Key,
    generation: Arg,
    from_: int,
    to: int,
    copied: int,
    prefix: bytes,
    ttl_ms: int,
    budget: int,
) -> ScriptCall:
    args: list[Arg] = [generation, from_, to, copied, prefix, ttl_ms, budget]
    return ScriptCall("copy_range", [source_meta, source_msgs, target], args)


@_contract(
    "root child_meta child_msgs child_ids turn usage *members",
    "head parent_key child_key kid fence expect_last budget *messages",
    Appended,
)
def append_child_message(
    *,
    root: Sequence[Key],
    child_meta: Key,
    child_msgs: Key,
    child_ids: Key,
    turn: Key,
    usage: Key,
    members: Sequence[Key] = (),
    head: Head,
    parent_key: str,
    child_key: str,
    kid: bytes,
    fence: str,
    expect_last: bytes,
    budget: int,
    messages: Sequence[bytes],
) -> ScriptCall:
    """``fence``, ``expect_last``, ``budget``: as :func:`append_message`'s (the parent's turn,
    the child's newest message, the store's usage budget); ``messages``: tag/element pairs,
    each element the digest + the stored message.
    """
    args: list[Arg] = [*head, parent_key, child_key, kid, fence, expect_last, budget, *messages]
    return ScriptCall(
        "append_child_message",
        [*root, child_meta, child_msgs, child_ids, turn, usage, *members],
        args,
    )


class Merged(NamedTuple):
    merged_at: int
    appended: int
    tree_generation: bytes
    event_id: bytes
    """The ``merge`` event's id in the log (``b''``: a retry of this call, or no log)."""
    members: tuple[bytes, ...]


@_contract(
    "root child_meta child_msgs child_ids stage log *members",
    "head max_messages parent_key child_key call_token call_digest mode summary_tag "
    "summary events event kid keep_merged staged_generation staged_tail staged_child "
    "staged_length max_tokens",
    Merged,
)
def merge_child(
    *,
    root: Sequence[Key],
    child_meta: Key,
    child_msgs: Key,
    child_ids: Key,
    stage: Key,
    log: Key,
    members: Sequence[Key] = (),
    head: Head,
    max_messages: int,
    parent_key: str,
    child_key: str,
    call_token: str,
    call_digest: bytes,
    mode: str,
    summary_tag: bytes,
    summary: bytes,
    events: Events,
    event: bytes,
    kid: bytes,
    keep_merged: int,
    staged_generation: Arg,
    staged_tail: int,
    staged_child: int,
    staged_length: int,
    max_tokens: int,
) -> ScriptCall:
    """``mode``: ``summary``, ``history`` (``staged_child``: the most child messages one call
    merges) or ``staged`` (the staging list's generation, tail, child count and length);
    ``summary_tag``: the summary's ``codec.message_tag``; ``max_tokens``: the parent's cap on
    the tokens it holds (0: none).
    """
    return ScriptCall(
        "merge_child",
        [*root, child_meta, child_msgs, child_ids, stage, log, *members],
        [
            *head,
            max_messages,
            parent_key,
            child_key,
            call_token,
            call_digest,
            mode,
            summary_tag,
            summary,
            *events,
            event,
            kid,
            keep_merged,
            staged_generation,
            staged_tail,
            staged_child,
            staged_length,
            max_tokens,
        ],
    )


class MergeBegun(NamedTuple):
    """``merge_stage`` ``begin``: the parent's list and the child's positions."""

    generation: int
    head: int
    tail: int
    child_head: int
    child_tail: int


class MergeStep(NamedTuple):
    """A ``merge_stage`` copy step."""

    upto: int
    length: int
    child_staged: int


@_contract(
    "root child_meta child_msgs child_ids stage",
    "head parent_key child_key call_token step from_ to staged generation lease_ms kid budget",
    MergeBegun,
    MergeStep,
)
def merge_stage(
    *,
    root: Sequence[Key],
    child_meta: Key,
    child_msgs: Key,
    child_ids: Key,
    stage: Key,
    head: Head,
    parent_key: str,
    child_key: str,
    call_token: str,
    step: str,
    from_: int,
    to: int,
    staged: int,
    generation: Arg,
    lease_ms: int,
    kid: bytes,
    budget: int,
) -> ScriptCall:
    """``step``: ``begin``, ``parent`` or ``child``."""
    return ScriptCall(
        "merge_stage",
        [*root, child_meta, child_msgs, child_ids, stage],
        [
            *head,
            parent_key,
            child_key,
            call_token,
            step,
            from_,
            to,
            staged,
            generation,
            lease_ms,
            kid,
            budget,
        ],
    )


class Discarded(NamedTuple):
    tree_generation: bytes
    event_id: bytes
    """The ``discard`` event's id in the log (``b''``: a retry of this call, or no log)."""
    members: tuple[bytes, ...]


@_contract(
    "root child_meta child_msgs child_ids log",
    "head parent_key child_key call_digest events event",
    Discarded,
)
def discard_child(
    *,
    root: Sequence[Key],
    child_meta: Key,
    child_msgs: Key,
    child_ids: Key,
    log: Key,
    head: Head,
    parent_key: str,
    child_key: str,
    call_digest: bytes,
    events: Events,
    event: bytes,
) -> ScriptCall:
    args: list[Arg] = [*head, parent_key, child_key, call_digest, *events, event]
    return ScriptCall("discard_child", [*root, child_meta, child_msgs, child_ids, log], args)


class ChildRead(NamedTuple):
    """A ``get_child`` reply (see :class:`Read`); ``kid``, ``dk``: the parent's key."""

    meta: list[bytes] | dict[bytes, bytes]
    from_: int
    head: int
    tail: int
    generation: int
    elements: list[bytes]
    upto: int
    kid: bytes
    dk: bytes
    context_tokens: int | None
    """The tokens the child holds (None: its token sums are unknown)."""


@_contract(
    "child_meta child_msgs done parent_meta child_ids",
    "child_key generation tail budget held_head token",
    ChildRead,
)
def get_child(
    *,
    child_meta: Key,
    child_msgs: Key,
    done: Key,
    parent_meta: Key,
    child_ids: Key,
    child_key: str,
    generation: Arg,
    tail: Arg,
    budget: int,
    held_head: Arg,
    token: Arg,
) -> ScriptCall:
    args: list[Arg] = [child_key, generation, tail, budget, held_head, token]
    keys = [child_meta, child_msgs, done, parent_meta, child_ids]
    return ScriptCall("get_child", keys, args, write=False)


class Children(NamedTuple):
    """A ``children_of`` reply: the parent's key record and one :class:`ChildPart` each."""

    key_record: list[bytes]
    children: tuple[list[Any], ...]


class ChildPart(NamedTuple):
    """One child in a ``children_of`` reply: its hash (flat; empty: missing), its stored
    elements from its head, and how far they reach of its tail.
    """

    meta: list[bytes]
    elements: list[bytes]
    upto: int
    tail: int


@_contract("kids parent_meta *children", "budget *child_keys", Children)
def children_of(
    *,
    kids: Key,
    parent_meta: Key,
    children: Sequence[Key],
    budget: int,
    child_keys: Sequence[bytes],
) -> ScriptCall:
    """``keys``: the kids zset, the parent's meta hash, then meta and msgs per child."""
    return ScriptCall(
        "children_of", [kids, parent_meta, *children], [budget, *child_keys], write=False
    )


# Secrets and the keyring -------------------------------------------------------------------


@_contract("salts checksums", "name checksum", Nothing)
def set_checksum(*, salts: Key, checksums: Key, name: str, checksum: bytes) -> ScriptCall:
    return ScriptCall("set_checksum", [salts, checksums], [name, checksum])


class SecretSet(NamedTuple):
    changed: int


@_contract("secrets", "field value", SecretSet)
def set_secret(*, secrets: Key, field: str, value: bytes | None) -> ScriptCall:
    """``value`` None: delete the secret."""
    return ScriptCall("set_secret", [secrets], [field] if value is None else [field, value])


class Migrated(NamedTuple):
    migrated: int


@_contract("secrets salts checksums stage", "version salt checksum staged *pairs", Migrated)
def migrate_secrets(
    *,
    secrets: Key,
    salts: Key,
    checksums: Key,
    stage: Key,
    version: bytes,
    salt: bytes,
    checksum: bytes,
    staged: int,
    pairs: Sequence[bytes],
) -> ScriptCall:
    return ScriptCall(
        "migrate_secrets",
        [secrets, salts, checksums, stage],
        [version, salt, checksum, staged, *pairs],
    )


@_contract("salts checksums keyring", "record salt key_check master_wrap", Nothing)
def init_keyring(
    *,
    salts: Key,
    checksums: Key,
    keyring: Key,
    record: str,
    salt: bytes,
    key_check: bytes,
    master_wrap: bytes,
) -> ScriptCall:
    return ScriptCall(
        "init_keyring", [salts, checksums, keyring], [record, salt, key_check, master_wrap]
    )


@_contract("salts checksums keyring", "record salt key_check master_field master_wrap", Nothing)
def begin_rekey(
    *,
    salts: Key,
    checksums: Key,
    keyring: Key,
    record: str,
    salt: bytes,
    key_check: bytes,
    master_field: str,
    master_wrap: bytes,
) -> ScriptCall:
    return ScriptCall(
        "begin_rekey",
        [salts, checksums, keyring],
        [record, salt, key_check, master_field, master_wrap],
    )


@_contract("salts checksums keyring", "record next_record next_salt", Nothing)
def finish_rekey(
    *, salts: Key, checksums: Key, keyring: Key, record: str, next_record: str, next_salt: bytes
) -> ScriptCall:
    return ScriptCall("finish_rekey", [salts, checksums, keyring], [record, next_record, next_salt])


@_contract("meta", "kid dk new_kid new_dk", Nothing)
def rekey_session(*, meta: Key, kid: bytes, dk: bytes, new_kid: bytes, new_dk: bytes) -> ScriptCall:
    return ScriptCall("rekey_session", [meta], [kid, dk, new_kid, new_dk])


class Resealed(NamedTuple):
    replaced: int
    generation: int


@_contract("session_meta owner_meta list", "kid generation #elements #fields", Resealed)
def reseal_session(
    *,
    session_meta: Key,
    owner_meta: Key,
    list: Key,
    kid: bytes,
    generation: Arg,
    elements: Sequence[Any],
    fields: Sequence[bytes],
) -> ScriptCall:
    """``elements``: position/old/new triples; ``fields``: old field/old value/new field/new
    value quads (each counted as one).
    """
    return ScriptCall(
        "reseal_session",
        [session_meta, owner_meta, list],
        [
            kid,
            generation,
            len(elements) // 3,
            *elements,
            len(fields) // 4,
            *fields,
        ],
    )


# Turns ---------------------------------------------------------------------------------------


class Claimed(NamedTuple):
    token: int
    """The turn's token: it grows with every claim of the session."""


@_contract("root turn", "lease_ms call_token", Claimed)
def claim_turn(*, root: Sequence[Key], turn: Key, lease_ms: int, call_token: str) -> ScriptCall:
    return ScriptCall("claim_turn", [*root, turn], [lease_ms, call_token])


@_contract("turn", "fence lease_ms", Nothing)
def renew_turn(*, turn: Key, fence: str, lease_ms: int) -> ScriptCall:
    return ScriptCall("renew_turn", [turn], [fence, lease_ms])


class Released(NamedTuple):
    released: bool


@_contract("turn wake", "fence wake_ms", Released)
def release_turn(*, turn: Key, wake: Key, fence: str, wake_ms: int) -> ScriptCall:
    return ScriptCall("release_turn", [turn, wake], [fence, wake_ms])
