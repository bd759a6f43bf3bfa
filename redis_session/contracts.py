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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from ._core.requests import ScriptCall

Key = str | bytes
Arg = bytes | str | int
R = TypeVar("R", bound=tuple[Any, ...])


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
    """What follows a reply's status, as ``cls``; a last field named in :data:`REST` takes
    every remaining element (a tuple), a field the reply does not reach is None.
    """
    shape = _SHAPES.get(cls)
    if shape is None:
        fields = cls._fields  # type: ignore[attr-defined]
        shape = _SHAPES[cls] = (len(fields), bool(fields) and fields[-1] in REST)
    count, rest = shape
    if not rest and len(reply) == count + 1:  # the common case: one value per field
        return tuple.__new__(cls, reply[1:])
    values = list(reply[1:])
    if rest:
        fixed = count - 1
        values = [*values[:fixed], *([None] * (fixed - len(values))), tuple(values[fixed:])]
    else:
        values += [None] * (count - len(values))
    return cls(*values)


_SHAPES: dict[type[Any], tuple[int, bool]] = {}
"""Per reply type: its number of fields, and whether the last takes the rest of a reply."""


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

    tree_generation: Any
    members: tuple[Any, ...]


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
    found: Any
    expected: Any


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

    merged_at: Any


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

    newest: Any


class TurnHeld(NamedTuple):
    """``TURN_BUSY``: another claim holds the session's turn for ``pttl`` ms more."""

    pttl: Any


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


def _contract(
    keys: str, argv: str, *ok: type[tuple[Any, ...]]
) -> Callable[[Callable[..., ScriptCall]], Callable[..., ScriptCall]]:
    def register(build: Callable[..., ScriptCall]) -> Callable[..., ScriptCall]:
        name = build.__name__
        CONTRACTS[name] = Contract(name, tuple(keys.split()), tuple(argv.split()), build, ok)
        return build

    return register


# Sessions ----------------------------------------------------------------------------------


class Created(NamedTuple):
    created_at: Any
    """Microseconds since the epoch (the server's clock)."""
    index_created: Any
    """1 when this call created the index key (a cluster registers its shard)."""
    event_id: Any
    """The ``create`` event's id in the log (``b''``: no log, or a retry of this call)."""
    due: Any
    """How many index entries of the shard belong to trees whose deadline passed."""
    expired: Any
    """The ``expire`` event's id of an earlier tree under the key that ended unseen (None:
    there was none)."""


@_contract(
    "root stage log",
    "head session_key call_token events event schema_version kid #meta staged *messages",
    Created,
)
def create(
    keys: Sequence[Key],
    *,
    head: Head,
    session_key: str,
    call_token: str,
    events: Events,
    event: bytes,
    schema_version: bytes,
    kid: bytes,
    meta: Sequence[bytes],
    staged: int,
    messages: Sequence[bytes],
) -> ScriptCall:
    """``meta``: field/value pairs (counted in pairs); ``messages``: digest/JSON pairs, or,
    with a history ``staged`` in the stage key, the digests of its newest messages only.
    """
    return ScriptCall(
        "create",
        keys,
        [
            *head,
            session_key,
            call_token,
            *events,
            event,
            schema_version,
            kid,
            len(meta) // 2,
            *meta,
            staged,
            *messages,
        ],
    )


class Read(NamedTuple):
    """A ``get`` reply: the session's meta hash and the messages at ``from_`` .. ``upto``
    of its list (which holds ``head`` .. ``tail`` in ``generation``).
    """

    meta: Any
    from_: Any
    head: Any
    tail: Any
    generation: Any
    token: Any
    elements: Any
    upto: Any
    kid: Any
    dk: Any


@_contract("meta msgs ids mark", "last with_meta token generation tail budget held_head", Read)
def get(
    keys: Sequence[Key],
    *,
    last: int,
    with_meta: bool,
    token: Arg,
    generation: Arg,
    tail: Arg,
    budget: int,
    held_head: Arg,
    after: Sequence[tuple[Any, ...]] = (),
) -> ScriptCall:
    """``last`` < 0: every message; ``token``, ``generation``, ``tail``, ``held_head``: the
    version the caller holds (``''``: none); ``after``: plain reads sent behind it.
    """
    args: list[Arg] = [last, "1" if with_meta else "0", token, generation, tail, budget, held_head]
    return ScriptCall("get", keys, args, False, after)


class Part(NamedTuple):
    elements: Any
    upto: Any


@_contract("meta msgs", "generation from_ to budget token", Part)
def read_range(
    keys: Sequence[Key],
    *,
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
    return ScriptCall("read_range", keys, args, write=False)


class Updated(NamedTuple):
    updated_at: Any


@_contract("root *members", "head session_key kid #scalars *metadata", Updated)
def update(
    keys: Sequence[Key],
    *,
    head: Head,
    session_key: str,
    kid: bytes,
    scalars: Sequence[bytes],
    metadata: Sequence[bytes],
) -> ScriptCall:
    """``scalars``, ``metadata``: field/value pairs (scalars counted in pairs)."""
    args: list[Arg] = [*head, session_key, kid, len(scalars) // 2, *scalars, *metadata]
    return ScriptCall("update", keys, args)


@_contract("root *members", "head session_key kid max_metadata_bytes #delete *set", Updated)
def update_metadata(
    keys: Sequence[Key],
    *,
    head: Head,
    session_key: str,
    kid: bytes,
    max_metadata_bytes: int,
    delete: Sequence[bytes],
    set: Sequence[bytes],
) -> ScriptCall:
    args: list[Arg] = [*head, session_key, kid, max_metadata_bytes, len(delete), *delete, *set]
    return ScriptCall("update_metadata", keys, args)


class Deleted(NamedTuple):
    existed: Any
    event_id: Any
    """The ``delete`` (or ``expire``) event's id in the log (``b''``: none logged)."""
    event_ids: Any
    """Per child, in order: its ``discard`` event's id when it was live (``b''``: no log),
    else 0."""


@_contract(
    "root pop turn wake log gone *children",
    "session_key call_token gone_ms events event *children",
    Deleted,
)
def delete(
    keys: Sequence[Key],
    *,
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
    return ScriptCall("delete", keys, args)


class DiscardedBatch(NamedTuple):
    done: Any
    """1 when the delete the batch belongs to was done before (nothing discarded), else 0."""
    event_ids: Any
    """Per child, in order: its ``discard`` event's id when it was live (``b''``: no log),
    else 0 (merged, damaged, or no longer a member)."""


@_contract("root log gone *children", "call_token events *children", DiscardedBatch)
def discard_children(
    keys: Sequence[Key],
    *,
    call_token: str,
    events: Events,
    children: Sequence[bytes],
) -> ScriptCall:
    """``keys``: the root keys, the log, the gone key, then meta, msgs, ids and staging list
    per child; ``call_token``: the delete's (``""``: none); ``children``: per child, its key
    as read and the fields of its ``discard`` event (a batch of a delete: see ``delete``).
    """
    return ScriptCall("discard_children", keys, [call_token, *events, *children])


class Ended(NamedTuple):
    ended_at: Any
    """Microseconds since the epoch (the server's clock), when the session was ended."""
    event_id: Any
    """The ``end`` event's id (``b''``: no log); None when the session was ended before."""


@_contract("root log", "events event", Ended)
def end_session(keys: Sequence[Key], *, events: Events, event: bytes) -> ScriptCall:
    return ScriptCall("end_session", keys, [*events, event])


class Reaped(NamedTuple):
    reaped: tuple[Any, ...]
    """Session key, event id, session key, event id, ... of the trees reaped by this call."""


@_contract("index log *metas", "events ttl_ms *candidates", Reaped)
def reap_expired(
    keys: Sequence[Key], *, events: Events, ttl_ms: int, candidates: Sequence[bytes | str]
) -> ScriptCall:
    """``keys``: the index shard, its log, then each candidate's meta hash; ``candidates``:
    per candidate, its session key and its ``expire`` event's fields.
    """
    return ScriptCall("reap_expired", keys, [*events, ttl_ms, *candidates])


class GroupRead(NamedTuple):
    delivered: Any
    """The group's last delivered id before this call."""
    entries: Any
    """``[id, [field, value, ...]]`` per entry taken."""


@_contract("log", "group consumer count", GroupRead)
def read_group(keys: Sequence[Key], *, group: str, consumer: str, count: int) -> ScriptCall:
    return ScriptCall("read_group", keys, [group, consumer, count], write=False)


class Appended(NamedTuple):
    appended: Any
    trimmed: Any
    """Messages the append trimmed from the session's head (its ``max_messages``)."""


@_contract(
    "root turn *members",
    "head max_messages session_key kid max_metadata_bytes fence expect_last #metadata *messages",
    Appended,
)
def append_message(
    keys: Sequence[Key],
    *,
    head: Head,
    max_messages: int,
    session_key: str,
    kid: bytes,
    max_metadata_bytes: int,
    fence: str,
    expect_last: bytes,
    metadata: Sequence[bytes],
    messages: Sequence[bytes],
) -> ScriptCall:
    """``fence``: the turn's value the write is made through (``''``: none); ``expect_last``:
    ``b''`` (no expectation), ``b'.'`` (the session is empty) or the newest element's id
    prefix; ``metadata``: field/value pairs (counted in arguments); ``messages``:
    digest/element pairs.
    """
    return ScriptCall(
        "append_message",
        keys,
        [
            *head,
            max_messages,
            session_key,
            kid,
            max_metadata_bytes,
            fence,
            expect_last,
            len(metadata),
            *metadata,
            *messages,
        ],
    )


class Compacted(NamedTuple):
    removed: Any
    event_id: Any
    """The ``compact`` event's id in the log (``b''``: none logged)."""


@_contract(
    "root turn log *members",
    "head session_key up_to digest element expect events event kid fence",
    Compacted,
)
def compact_messages(
    keys: Sequence[Key],
    *,
    head: Head,
    session_key: str,
    up_to: int,
    digest: bytes,
    element: bytes,
    expect: bytes,
    events: Events,
    event: bytes,
    kid: bytes,
    fence: str = "",
) -> ScriptCall:
    args: list[Arg] = [
        *head,
        session_key,
        up_to,
        digest,
        element,
        expect,
        *events,
        event,
        kid,
        fence,
    ]
    return ScriptCall("compact_messages", keys, args)


class Popped(NamedTuple):
    element: Any
    """None when the history was empty."""


@_contract("root pop *members", "head session_key call_token digest expect kid keep_ms", Popped)
def pop_message(
    keys: Sequence[Key],
    *,
    head: Head,
    session_key: str,
    call_token: str,
    digest: bytes,
    expect: bytes,
    kid: bytes,
    keep_ms: int,
) -> ScriptCall:
    args: list[Arg] = [*head, session_key, call_token, digest, expect, kid, keep_ms]
    return ScriptCall("pop_message", keys, args)


class Staged(NamedTuple):
    length: Any


@_contract("stage", "length ttl_ms *elements", Staged)
def stage_push(
    keys: Sequence[Key], *, length: int, ttl_ms: int, elements: Sequence[bytes]
) -> ScriptCall:
    return ScriptCall("stage_push", keys, [length, ttl_ms, *elements])


# Children ----------------------------------------------------------------------------------


class Forked(NamedTuple):
    created_at: Any
    tree_generation: Any
    elements: Any
    """The child's stored elements, or False when they were copied in steps (read them so)."""
    event_id: Any
    """The ``fork`` event's id in the log (``b''``: a retry of this call, or no log)."""
    members: tuple[Any, ...]


class ForkStage(NamedTuple):
    """``STAGE`` of ``fork_child``: the parent's list (``generation``, ``head`` .. ``tail``)
    holds more to inherit than one call copies.
    """

    generation: Any
    head: Any
    tail: Any


@_contract(
    "root child_meta child_msgs child_ids log *members",
    "head parent_key child_key agent config max_messages inherit call_token events "
    "event kid staged staged_generation step",
    Forked,
)
def fork_child(
    keys: Sequence[Key],
    *,
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
        keys,
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
    upto: Any
    length: Any


@_contract(
    "source_meta source_msgs target", "generation from_ to copied prefix ttl_ms budget", Copied
)
def copy_range(
    keys: Sequence[Key],
    *,
    generation: Arg,
    from_: int,
    to: int,
    copied: int,
    prefix: bytes,
    ttl_ms: int,
    budget: int,
) -> ScriptCall:
    args: list[Arg] = [generation, from_, to, copied, prefix, ttl_ms, budget]
    return ScriptCall("copy_range", keys, args)


@_contract(
    "root child_meta child_msgs child_ids turn *members",
    "head parent_key child_key kid fence expect_last *messages",
    Appended,
)
def append_child_message(
    keys: Sequence[Key],
    *,
    head: Head,
    parent_key: str,
    child_key: str,
    kid: bytes,
    fence: str,
    expect_last: bytes,
    messages: Sequence[bytes],
) -> ScriptCall:
    """``fence``, ``expect_last``: as :func:`append_message`'s (the parent's turn, the
    child's newest message); ``messages``: digest/element pairs, each element the digest +
    the stored message.
    """
    args: list[Arg] = [*head, parent_key, child_key, kid, fence, expect_last, *messages]
    return ScriptCall("append_child_message", keys, args)


class Merged(NamedTuple):
    merged_at: Any
    appended: Any
    tree_generation: Any
    event_id: Any
    """The ``merge`` event's id in the log (``b''``: a retry of this call, or no log)."""
    members: tuple[Any, ...]


@_contract(
    "root child_meta child_msgs child_ids stage log *members",
    "head max_messages parent_key child_key call_token call_digest mode summary_digest "
    "summary events event kid keep_merged staged_generation staged_tail staged_child "
    "staged_length",
    Merged,
)
def merge_child(
    keys: Sequence[Key],
    *,
    head: Head,
    max_messages: int,
    parent_key: str,
    child_key: str,
    call_token: str,
    call_digest: bytes,
    mode: str,
    summary_digest: bytes,
    summary: bytes,
    events: Events,
    event: bytes,
    kid: bytes,
    keep_merged: int,
    staged_generation: Arg,
    staged_tail: int,
    staged_child: int,
    staged_length: int,
) -> ScriptCall:
    """``mode``: ``summary``, ``history`` (``staged_child``: the most child messages one call
    merges) or ``staged`` (the staging list's generation, tail, child count and length).
    """
    return ScriptCall(
        "merge_child",
        keys,
        [
            *head,
            max_messages,
            parent_key,
            child_key,
            call_token,
            call_digest,
            mode,
            summary_digest,
            summary,
            *events,
            event,
            kid,
            keep_merged,
            staged_generation,
            staged_tail,
            staged_child,
            staged_length,
        ],
    )


class MergeBegun(NamedTuple):
    """``merge_stage`` ``begin``: the parent's list and the child's positions."""

    generation: Any
    head: Any
    tail: Any
    child_head: Any
    child_tail: Any


class MergeStep(NamedTuple):
    """A ``merge_stage`` copy step."""

    upto: Any
    length: Any
    child_staged: Any


@_contract(
    "root child_meta child_msgs child_ids stage",
    "head parent_key child_key call_token step from_ to staged generation lease_ms kid budget",
    MergeBegun,
    MergeStep,
)
def merge_stage(
    keys: Sequence[Key],
    *,
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
        keys,
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
    tree_generation: Any
    event_id: Any
    """The ``discard`` event's id in the log (``b''``: a retry of this call, or no log)."""
    members: tuple[Any, ...]


@_contract(
    "root child_meta child_msgs child_ids log",
    "head parent_key child_key call_digest events event",
    Discarded,
)
def discard_child(
    keys: Sequence[Key],
    *,
    head: Head,
    parent_key: str,
    child_key: str,
    call_digest: bytes,
    events: Events,
    event: bytes,
) -> ScriptCall:
    args: list[Arg] = [*head, parent_key, child_key, call_digest, *events, event]
    return ScriptCall("discard_child", keys, args)


class ChildRead(NamedTuple):
    """A ``get_child`` reply (see :class:`Read`); ``kid``, ``dk``: the parent's key."""

    meta: Any
    from_: Any
    head: Any
    tail: Any
    generation: Any
    elements: Any
    upto: Any
    kid: Any
    dk: Any


@_contract(
    "child_meta child_msgs done parent_meta",
    "child_key generation tail budget held_head token",
    ChildRead,
)
def get_child(
    keys: Sequence[Key],
    *,
    child_key: str,
    generation: Arg,
    tail: Arg,
    budget: int,
    held_head: Arg,
    token: Arg,
) -> ScriptCall:
    args: list[Arg] = [child_key, generation, tail, budget, held_head, token]
    return ScriptCall("get_child", keys, args, write=False)


class Children(NamedTuple):
    """A ``children_of`` reply: the parent's key record and one :class:`ChildPart` each."""

    key_record: Any
    children: tuple[Any, ...]


class ChildPart(NamedTuple):
    """One child in a ``children_of`` reply: its hash (flat; empty: missing), its stored
    elements from its head, and how far they reach of its tail.
    """

    meta: Any
    elements: Any
    upto: Any
    tail: Any


@_contract("kids parent_meta *children", "budget *child_keys", Children)
def children_of(keys: Sequence[Key], *, budget: int, child_keys: Sequence[bytes]) -> ScriptCall:
    """``keys``: the kids zset, the parent's meta hash, then meta and msgs per child."""
    return ScriptCall("children_of", keys, [budget, *child_keys], write=False)


# Secrets and the keyring -------------------------------------------------------------------


@_contract("salts checksums", "name checksum", Nothing)
def set_checksum(keys: Sequence[Key], *, name: str, checksum: bytes) -> ScriptCall:
    return ScriptCall("set_checksum", keys, [name, checksum])


class SecretSet(NamedTuple):
    changed: Any


@_contract("secrets", "field value", SecretSet)
def set_secret(keys: Sequence[Key], *, field: str, value: bytes | None) -> ScriptCall:
    """``value`` None: delete the secret."""
    return ScriptCall("set_secret", keys, [field] if value is None else [field, value])


class Migrated(NamedTuple):
    count: Any


@_contract("secrets salts checksums stage", "version salt checksum staged *pairs", Migrated)
def migrate_secrets(
    keys: Sequence[Key],
    *,
    version: bytes,
    salt: bytes,
    checksum: bytes,
    staged: int,
    pairs: Sequence[bytes],
) -> ScriptCall:
    return ScriptCall("migrate_secrets", keys, [version, salt, checksum, staged, *pairs])


@_contract("salts checksums keyring", "record salt key_check master_wrap", Nothing)
def init_keyring(
    keys: Sequence[Key], *, record: str, salt: bytes, key_check: bytes, master_wrap: bytes
) -> ScriptCall:
    return ScriptCall("init_keyring", keys, [record, salt, key_check, master_wrap])


@_contract("salts checksums keyring", "record salt key_check master_field master_wrap", Nothing)
def begin_rekey(
    keys: Sequence[Key],
    *,
    record: str,
    salt: bytes,
    key_check: bytes,
    master_field: str,
    master_wrap: bytes,
) -> ScriptCall:
    return ScriptCall("begin_rekey", keys, [record, salt, key_check, master_field, master_wrap])


@_contract("salts checksums keyring", "record next_record next_salt", Nothing)
def finish_rekey(
    keys: Sequence[Key], *, record: str, next_record: str, next_salt: bytes
) -> ScriptCall:
    return ScriptCall("finish_rekey", keys, [record, next_record, next_salt])


@_contract("meta", "kid dk new_kid new_dk", Nothing)
def rekey_session(
    keys: Sequence[Key], *, kid: bytes, dk: bytes, new_kid: bytes, new_dk: bytes
) -> ScriptCall:
    return ScriptCall("rekey_session", keys, [kid, dk, new_kid, new_dk])


class Resealed(NamedTuple):
    replaced: Any
    generation: Any


@_contract("session_meta owner_meta list", "kid generation #elements #fields", Resealed)
def reseal_session(
    keys: Sequence[Key],
    *,
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
        keys,
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
    token: Any
    """The turn's token: it grows with every claim of the session."""


@_contract("root turn", "lease_ms call_token", Claimed)
def claim_turn(keys: Sequence[Key], *, lease_ms: int, call_token: str) -> ScriptCall:
    return ScriptCall("claim_turn", keys, [lease_ms, call_token])


@_contract("turn", "fence lease_ms", Nothing)
def renew_turn(keys: Sequence[Key], *, fence: str, lease_ms: int) -> ScriptCall:
    return ScriptCall("renew_turn", keys, [fence, lease_ms])


class Released(NamedTuple):
    released: Any


@_contract("turn wake", "fence wake_ms", Released)
def release_turn(keys: Sequence[Key], *, fence: str, wake_ms: int) -> ScriptCall:
    return ScriptCall("release_turn", keys, [fence, wake_ms])
