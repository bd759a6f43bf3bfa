"""What a listener of the event log knows, without I/O: where it is in each log (its cursor),
how to tell a gap from no events, and which events it passes on.

A store's events are logged in one stream per prefix on a single server, and in one per slot
with sessions on a cluster (see ``eventlog``). A listener's position is an entry id per
stream. On a single server the cursor is that id. On a cluster it would be one id per slot,
so the cursor is a base id ``B`` (every stream has been read past every entry whose id is at
most ``B``) and the streams read further than ``B``: ``c:B;tag=id,tag=id``. ``B`` moves to
the oldest clock of the cluster's primaries, less :data:`CLOCK_MARGIN_MS`, each time the listener
has read every stream to its end and passed every entry on: an entry logged later has a
greater id (a stream's ids grow with its node's clock), so the cursor stays a few streams
long whatever the number of slots.

A gap: each entry names the entry before it (``p``). Reading a stream after position ``P``,
the first entry's ``p`` is at most ``P`` when nothing is missing; greater, entries after ``P``
were trimmed; ``0-0`` while ``P`` is an entry this listener read, the stream was removed
(evicted, deleted) and began again. Either raises :class:`EventsLost` once; the listener then
goes on after the gap.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import EventsLost, InvalidArgument
from ..keys import KeySchema
from ..models import SessionLifecycleEvent
from .eventlog import entry_event

START = "0-0"
"""The position before every entry."""
CLOCK_MARGIN_MS = 2000
"""How far behind its primaries' oldest clock a cluster cursor's base stays (a node's clock
stepped back by less than this cannot hide an entry from it)."""
READ_COUNT = 200
"""Entries read from one stream per request."""
_ID = re.compile(r"\d{1,20}-\d{1,20}")
_CLUSTER = "c:"


def id_key(entry_id: str) -> tuple[int, int]:
    """An entry id as a pair that orders as Redis orders ids."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def later(a: str, b: str) -> bool:
    """Whether entry id ``a`` comes after ``b``."""
    return id_key(a) > id_key(b)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def check_since(since: object) -> str:
    """``since`` as given to ``listen``: ``"earliest"``, ``"latest"`` or a cursor."""
    if not isinstance(since, str) or not since:
        raise InvalidArgument("since", "must be 'earliest', 'latest' or a cursor (a str)")
    return since


class Position:
    """A listener's place in the logs: the base and the logs read past it (see the module)."""

    def __init__(self, schema: KeySchema) -> None:
        self.schema = schema
        self.base = START
        self.at: dict[str, str] = {}
        """Log -> the id of its last entry passed on (later than the base)."""
        self.known: set[str] = set()
        """Logs whose position is an entry they hold (so a stream begun again is a gap)."""

    def of(self, log: str) -> str:
        return self.at.get(log, self.base)

    def resume(self, cursor: str) -> None:
        """Take up ``cursor`` (``InvalidArgument`` for one this store did not make)."""
        refused = InvalidArgument("since", f"not a cursor of this store's listeners: {cursor!r}")
        base, _, rest = cursor.removeprefix(_CLUSTER).partition(";")
        if not _ID.fullmatch(base) or (cursor.startswith(_CLUSTER) != self.schema.cluster):
            raise refused
        self.base = base
        for item in filter(None, rest.split(",")):
            tag, _, at = item.partition("=")
            if not tag or not _ID.fullmatch(at):
                raise refused
            log = f"{self.schema.prefix}log:{{{tag}}}"
            self.at[log] = at
            self.known.add(log)
        if not self.schema.cluster and base != START:
            self.known.add(self.schema.log_of(""))

    @property
    def cursor(self) -> str:
        """The opaque cursor that resumes right after what was passed on."""
        if not self.schema.cluster:
            return self.base
        tags = ",".join(
            f"{log[log.index('{') + 1 : -1]}={at}" for log, at in sorted(self.at.items())
        )
        return f"{_CLUSTER}{self.base}" + (f";{tags}" if tags else "")

    def passed(self, log: str, entry_id: str) -> None:
        """Entry ``entry_id`` of ``log`` was passed on."""
        if not self.schema.cluster:
            self.base = entry_id
        else:
            self.at[log] = entry_id
        self.known.add(log)

    def advance(self, base: str) -> None:
        """Every log was read to its end and passed on up to ``base`` (cluster)."""
        if later(base, self.base):
            self.base = base
            for log in [log for log, at in self.at.items() if not later(at, base)]:
                del self.at[log]


def gap(
    log: str, after: str, known: bool, entries: Sequence[tuple[Any, Mapping[Any, Any]]]
) -> EventsLost | None:
    """The gap before ``entries`` (read from ``log`` after ``after``), if there is one."""
    if not entries:
        return None
    first_id, fields = text(entries[0][0]), entries[0][1]
    before = text(fields.get(b"p", START))
    if before == START and known and after != START:
        return EventsLost(log, after, first_id, "the log was removed and began again")
    if before != START and later(before, after):
        return EventsLost(log, after, first_id, "trimmed from the log")
    return None


def events_of(
    entries: Iterable[tuple[Any, Mapping[Any, Any]]], deliveries: Mapping[str, int] | None = None
) -> list[tuple[str, SessionLifecycleEvent | None]]:
    """(id, event) for each entry (None for an entry that is not an event: passed over)."""
    out: list[tuple[str, SessionLifecycleEvent | None]] = []
    for raw_id, fields in entries:
        entry_id = text(raw_id)
        event = entry_event(entry_id, fields)
        if event is not None and deliveries and deliveries.get(entry_id, 1) != 1:
            event = event.model_copy(update={"deliveries": deliveries[entry_id]})
        out.append((entry_id, event))
    return out


def wanted(types: frozenset[str] | None, event: SessionLifecycleEvent | None) -> bool:
    """Whether ``event`` is one a listener of ``types`` returns."""
    return event is not None and (types is None or event.type in types)


def check_types(types: object) -> frozenset[str] | None:
    """``types`` as given to ``listen``: None (every type) or event type names."""
    if types is None:
        return None
    if isinstance(types, str) or not isinstance(types, Iterable):
        raise InvalidArgument("types", "must be a collection of event type names (str)")
    names = frozenset(types)
    if not all(isinstance(t, str) for t in names):
        raise InvalidArgument("types", "must be a collection of event type names (str)")
    return names


def flat_entries(reply: Any) -> list[tuple[Any, dict[bytes, Any]]]:
    """Entries from a Lua script's reply ``{id, {field, value, ...}}...`` as redis-py gives
    XRANGE's: (id, {field: value}).
    """
    out = []
    for item in reply or ():
        raw_id, pairs = item[0], item[1]
        fields = {bytes(pairs[i]): pairs[i + 1] for i in range(0, len(pairs), 2)}
        out.append((raw_id, fields))
    return out
