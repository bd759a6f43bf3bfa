"""``append_event`` in one script: the contract of ``adk_append_event.lua`` (this package's
own script, registered on the store) and the operation that runs it through the store's
extension point (:mod:`redis_session.extension`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, NamedTuple

from ... import codec, contracts
from ..._core.args import token
from ...aio import AsyncTurn
from ...contracts import Arg, Contract, Events, Head, Key
from ...errors import PassphraseRequired
from ...extension import Emit, Extension, Op, ScriptCall, new_event
from ...models import LifecycleEventType, Message
from ...models import Session as StoreSession
from ...status import Ctx, Status, check

SCRIPT = "adk_append_event"
SOURCE = resources.files(__package__).joinpath(f"{SCRIPT}.lua").read_text(encoding="utf-8")
"""The script's text (shipped in this package)."""
SHARED_KEYS = 6
"""KEYS each shared state record takes: meta, msgs, ids, marker, kids, done."""
ROOT_KEYS = 10
"""The session's tree root keys, its turn key, its tree's event log and the usage totals."""


class Stored(NamedTuple):
    stored: int
    """1 when the event was stored, 0 when its id was stored before (nothing changed)."""
    created: bytes
    """One character per shared record, ``1`` when this call created it."""
    event_ids: tuple[bytes, ...]
    """The ``create`` event id of each shared record this call created, in order."""


def adk_append_event(
    *,
    root: Sequence[Key],
    turn: Key,
    log: Key,
    usage: Key,
    shared_records: Sequence[Key],
    members: Sequence[Key] = (),
    head: Head,
    max_messages: int,
    session_key: str,
    max_metadata_bytes: int,
    schema_version: bytes,
    last_update_field: str,
    last_update_time: str,
    newest_event_id: str,
    events: Events,
    tag: bytes,
    element: bytes,
    fence: str,
    budget: int,
    max_tokens: int,
    metadata: Sequence[bytes],
    shared: Sequence[Sequence[Arg]],
) -> ScriptCall:
    """``tag``: the event's ``codec.message_tag``; ``budget``: the store's usage budget (0:
    none); ``max_tokens``: the cap on the tokens the session holds (0: none); ``shared``: per
    shared record, its key, 'create' event, call token, the count of its base pairs'
    arguments and them, the count of its metadata arguments and them.
    """
    return ScriptCall(
        SCRIPT,
        [*root, turn, log, usage, *shared_records, *members],
        [
            *head,
            max_messages,
            session_key,
            max_metadata_bytes,
            schema_version,
            last_update_field,
            last_update_time,
            newest_event_id,
            *events,
            tag,
            element,
            fence,
            budget,
            max_tokens,
            len(metadata),
            *metadata,
            len(shared),
            *(a for record in shared for a in record),
        ],
    )


_ARGV = (
    "head max_messages session_key max_metadata_bytes schema_version last_update_field "
    "last_update_time newest_event_id events tag element fence budget max_tokens #metadata "
    "#shared"
)
CONTRACT = Contract(
    SCRIPT,
    ("root", "turn", "log", "usage", "*shared_records", "*members"),
    tuple(_ARGV.split()),
    adk_append_event,
    (Stored,),
)


class Stale(Exception):
    """The caller's session is older than the stored one (the script answered ``STALE``)."""


def append_event(
    ext: Extension,
    record: str,
    msg: Message,
    entries: Mapping[str, str],
    shared: Sequence[tuple[str, Mapping[str, str]]],
    last_update_field: str,
    last_update_time: float,
    newest_event_id: str,
    turn: AsyncTurn | None = None,
) -> Op[None]:
    """Append ``msg`` (an event) to session ``record`` with its state ``entries`` and the
    ``shared`` records' entries, in one script; ``Stale`` for a stale caller,
    ``PassphraseRequired`` naming the sealed record, ``TurnLost`` when made through a ``turn``
    that is not the caller's any more. Sent again when the session tree's members turned out
    to be other than the store knew.
    """
    options = ext.options
    body, _, tokens = codec.stored_form(msg, "event", options.count_tokens)
    element = codec.check_size(body, options.max_message_bytes, "event")
    own = ext.metadata_pairs(entries, "state_delta")
    shared_keys: list[str] = []
    records: list[list[Arg]] = []
    created = []
    for key, put in shared:
        sk = ext.schema.session(key)
        shared_keys += [sk.meta, sk.msgs, sk.ids, sk.mark, sk.kids, sk.done]
        draft = new_event(LifecycleEventType.CREATE, key)
        base = codec.meta_args(StoreSession(key=key))
        pairs = ext.metadata_pairs(put, "state_delta")
        records.append([key, draft.fields, token(), len(base), *base, len(pairs), *pairs])
        created.append(draft)
    root = ext.root_keys(record)
    turn_key, log = ext.schema.session(record).turn, ext.log_of(record)
    usage = ext.schema.usage_of(record)

    def build(_: Any) -> ScriptCall:
        return adk_append_event(
            root=root,
            turn=turn_key,
            log=log,
            usage=usage,
            shared_records=shared_keys,
            members=ext.members(record),
            head=ext.head(record),
            max_messages=options.max_history_turns,
            session_key=record,
            max_metadata_bytes=options.max_metadata_bytes,
            schema_version=codec.SCHEMA_VERSION,
            last_update_field=last_update_field,
            last_update_time=repr(last_update_time),
            newest_event_id=newest_event_id,
            events=ext.events_of(record),
            tag=codec.message_tag(msg, tokens),
            element=element,
            fence="" if turn is None else turn.id,
            budget=options.max_usage_tokens,
            max_tokens=options.max_history_tokens,
            metadata=own,
            shared=records,
        )

    fenced = 0 if turn is None else turn.token
    ctx = Ctx(
        record, [*root, turn_key, log, usage, *shared_keys], argument="state_delta", token=fenced
    )
    passthrough = (Status.STALE, Status.KEY_CHANGED)
    reply = yield from ext.write(record, build, ctx, passthrough)
    status = contracts.status(reply)
    if status == Status.STALE:
        raise Stale()
    if status == Status.KEY_CHANGED:
        at = contracts.parsed(contracts.KeyChanged, reply).at  # a shared record's KEYS[at]
        if at is None or at <= ROOT_KEYS:
            raise PassphraseRequired(record)
        raise PassphraseRequired(shared[(at - ROOT_KEYS - 1) // SHARED_KEYS][0])
    stored = contracts.parsed(Stored, check(reply, ctx))
    made = [d for d, m in zip(created, stored.created.decode(), strict=False) if m == "1"]
    for draft, event_id in zip(made, stored.event_ids, strict=True):
        yield Emit(draft.event(event_id))
