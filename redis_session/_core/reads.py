"""The read path: a session's (or child's) list read in one snapshot, in bounded steps when it
is long, and kept decoded so that the next read of it sends and decodes only what was added.

Every read is one loop (:meth:`Reader.listed`) around the list's read script (``get``,
``get_child``), which alone checks what it reads; reads differ only by what they ask of it:
a read of a session the store holds sends the version it holds and gets only the messages
added since; a first read asks the script for the positions only, with a plain ``LRANGE``
behind it in the same round trip (elements never pass through Lua, which costs per element);
a first read that wants the meta hash reads it by a plain ``HGETALL`` behind those; a list
longer than one read's budget continues in plain steps (``LRANGE`` with the token, generation
and positions behind it), taken when those are still what the read began with, else by the
``read_range`` script. See ``_cache`` for what is held.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from .. import codec, contracts
from .._transport.telemetry import note_context, note_read
from ..errors import ConcurrentChange, SessionError
from ..keys import KeySchema
from ..models import Message
from ..options import StoreOptions
from ..status import Ctx, Status, check
from .cache import Held, ReadCache
from .keyring import Keyring
from .limits import READ_ATTEMPTS, Limits
from .requests import Commands, Op, ScriptCall
from .trees import Trees

COLD_READ_MESSAGES = 2_000
"""Messages a store's first read of a session takes at most by one plain LRANGE sent behind the
``get`` script (fewer when the elements it read so far were larger: about one read's budget)."""
SMALL_READ = 24
"""A read of at most this many newest messages passes them through the ``get`` script: below
it the LRANGE's round-trip share costs more than the script's cost per element it saves
(docs/benchmarks.md, "Figures behind the code")."""
OWN_APPENDS = 256
"""Own appends a store keeps at hand (stored form -> decoded twin), to read back unparsed."""
OWN_APPEND_BYTES = 16 * 1024
"""The largest stored message kept at hand (``OWN_APPENDS`` of them: 4 MiB, and their twins)."""


class ListRead(Protocol):
    """What a read script answers of a list (``get``, ``get_child``)."""

    @property
    def from_(self) -> int: ...
    @property
    def head(self) -> int: ...
    @property
    def tail(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def elements(self) -> list[bytes]: ...
    @property
    def upto(self) -> int: ...


L = TypeVar("L", contracts.Read, contracts.ChildRead)


class Reader:
    """Reads lists in one snapshot and holds what it read (see the module docstring)."""

    def __init__(
        self,
        schema: KeySchema,
        options: StoreOptions,
        limits: Limits,
        trees: Trees,
        keyring: Keyring,
    ) -> None:
        self.schema = schema
        self.limits = limits
        self.trees = trees
        self.keyring = keyring
        self.cache = ReadCache(options.read_cache_bytes)
        self.own_appends: dict[bytes, Message] = {}
        #: The mean size in bytes of the elements this store read, weighted to the larger
        #: (0: none read yet); it sizes the plain LRANGE of a first read (see cold_span).
        self.element_bytes = 0

    # -- a session's read ----------------------------------------------------------------------

    def session(
        self, key: str, last: int, with_meta: bool, max_tokens: int | None = None
    ) -> Op[tuple[contracts.Read, list[Message]]]:
        """The ``get`` script's reply for session ``key`` (``last`` < 0: every message; with
        ``max_tokens``, no more of the newest than sum to at most that many tokens) and the
        messages it asked for: those the store holds from an earlier read of the session and
        the ones added since, or all of them (a long history read in steps). The reply's meta
        array is read as well with ``with_meta``.
        """
        sk = self.trees.keys(key)[0]
        held = self.cache.get(key)
        if held is not None and not held.reaches(last):
            held = None  # it holds the newest messages only and this read wants more
        known = (
            ("", "", "", "")
            if held is None
            else (held.token, held.generation, held.tail, held.head)
        )

        def call(budget: int, after: Sequence[tuple[Any, ...]], meta: bool) -> ScriptCall:
            return contracts.get(
                meta=sk.meta,
                msgs=sk.msgs,
                ids=sk.ids,
                mark=sk.mark,
                last=last,
                with_meta=meta,
                token=known[0],
                generation=known[1],
                tail=known[2],
                budget=budget,
                held_head=known[3],
                max_tokens=max_tokens,
                with_context=with_meta,
                after=after,
            )

        def ctx() -> Ctx:  # built only for an exception
            return Ctx(key, (sk.meta, sk.msgs, sk.ids, sk.mark))

        try:
            span = None if held is not None or max_tokens is not None else self.cold_span(last)
            read, items = yield from self.listed(
                key, call, contracts.Read, ctx, (sk.meta, sk.msgs), _token, span, with_meta
            )
        except SessionError:
            self.cache.discard(key)
            raise
        start, h = read.from_, read.head
        wanted = read.first
        note_context(read.context_tokens)
        version = (read.token, b"%d" % read.generation)
        place = start - h  # the first element's place in the history: a bad one is named so
        if self.keyring.passphrase is None:
            new, size = self.decoded(key, items, place)
        else:
            new = yield from self.keyring.opened(
                key, read.kid, read.dk, lambda o: codec.decode_messages(key, items, o, first=place)
            )
            size = sum(map(len, items))
        return read, self.hold(key, held, version, h, start, wanted, new, size, len(items))

    # -- the one read loop ---------------------------------------------------------------------

    def listed(
        self,
        key: str,
        call: Callable[[int, Sequence[tuple[Any, ...]], bool], ScriptCall],
        kind: type[L],
        ctx: Callable[[], Ctx],
        range_keys: tuple[str, str],
        token_of: Callable[[L], bytes],
        span: tuple[int, int] | None = None,
        meta: bool = False,
    ) -> Op[tuple[L, list[bytes]]]:
        """A list's read: the read script ``call(budget, after, meta)`` makes (its reply of
        type ``kind``, checked with ``ctx``; with the meta hash when ``meta``) and, when the
        list is longer than one read's budget, the rest in steps (:meth:`rest`). Returns the
        script's reply and every element from its ``from_`` to its ``tail``: one snapshot of
        the list as it was when the script ran.

        With ``span`` (the list indexes a first read wants, :meth:`cold_span`) the script is
        asked for the positions only (a zero byte budget) and the elements come from a plain
        ``LRANGE`` of ``span`` sent behind it in the same round trip, so that they never pass
        through Lua; with ``meta`` (a read that wants the meta hash) the hash comes from a
        plain ``HGETALL`` sent after the ``LRANGE``: a field passed through Lua is converted
        twice, which cost a first read of a 17-field hash more of Redis's time than the
        script's other work (a read of a held session, which sends no ``LRANGE``, has the
        script read the hash: a reply more costs the client what it saves Redis). Not
        atomic, so the read checks the positions read last (the hash's, else an ``HMGET`` of
        them, :func:`_unchanged`): taken when they are what the script saw (no write of a
        store changes the list without moving them, so the elements and the hash are then
        one snapshot); else the script alone reads again, the hash with it. A list that
        changed while it was read in steps is read again from the start, a few times at most.
        """
        range_meta, range_list = range_keys
        for _ in range(READ_ATTEMPTS):
            items: list[bytes]
            if span is None:
                reply = yield call(self.limits.read_budget, (), meta)
                read = contracts.parsed(kind, check(reply, ctx))
                items, upto = read.elements, read.upto
            else:
                lrange = ("LRANGE", range_list, span[0], span[1])
                now = ("HGETALL", range_meta) if meta else ("HMGET", range_meta, *_VERSION_FIELDS)
                script, elements, last = yield call(0, (lrange, now), False)
                if isinstance(script, Exception):
                    raise script
                read = contracts.parsed(kind, check(script, ctx))
                fields = _fields(last) if meta else None
                at = _version_of(fields) if meta else last
                got = _unchanged(read, token_of(read), span, elements, at)
                if got is None:  # changed between, or not as a store writes it: the script
                    span = None
                    continue
                items, upto = got, read.from_ + len(got)
                if fields is not None:
                    read = read._replace(meta=fields)
            if upto < read.tail:  # more than one read's budget: in steps
                rest: list[bytes] | None = yield from self.rest(
                    read.generation, upto, read.tail, range_keys, ctx, token_of(read), read.head
                )
                if rest is None:  # changed meanwhile: from the start
                    span = None
                    continue
                items = items + rest
            return read, items
        raise ConcurrentChange(key, "its history kept changing while it was read in steps")

    def rest(
        self,
        g: int,
        upto: int,
        n: int,
        range_keys: tuple[str, str],
        ctx: Ctx | Callable[[], Ctx],
        token: bytes,
        h: int,
    ) -> Op[list[bytes] | None]:
        """The elements of a list of generation ``g`` and ``token`` whose head was at position
        ``h``, at positions ``upto`` .. ``n`` - 1; None when the list changed generation or
        token (deleted and made again) or lost what was to be read meanwhile (then read again
        from the start).

        Read in steps of at most one read's budget, without passing the elements through Lua:
        ``LRANGE`` of the list indexes the head gives, then ``HMGET`` of the token, the
        generation and the positions and ``LLEN``, pipelined (on a cluster in two round
        trips: its pipeline may resend a redirected ``LRANGE`` after the others); the step
        holds when those are still what the read began with (every change to a list but an
        append at its tail changes its token, generation or head, and a head only grows
        within a generation), it is taken again from the new head after a trim. A store that
        knows no element size, a list whose length is not what its positions say (another
        writer changed it, or damage) or a failed command: the ``read_range`` script, which
        begins a new generation or names the damage. Not atomic: a raw writer that changes
        the list's length between the ``LRANGE`` and the check, and a store's write that makes
        it right again, are not seen (the script sees them); no operation of a store changes
        the list without its positions.
        """
        items: list[bytes] = []
        plain = bool(token) and self.element_bytes > 0
        meta, msgs = range_keys
        while upto < n:
            if plain:
                budget = self.limits.read_budget // self.element_bytes
                count = max(1, min(n - upto, COLD_READ_MESSAGES, budget))
                lo = upto - h
                lrange = ("LRANGE", msgs, lo, lo + count - 1)
                check_after = [("HMGET", meta, *_VERSION_FIELDS), ("LLEN", msgs)]
                if self.schema.cluster:  # a cluster pipeline may send a redirected command
                    (got,) = yield Commands([lrange], errors_as_values=True)  # after the rest
                    now, length = yield Commands(check_after, errors_as_values=True)
                else:
                    got, now, length = yield Commands(
                        [lrange, *check_after], errors_as_values=True, read_only=True
                    )
                at = _positions(now)
                if (
                    at is not None
                    and isinstance(length, int)
                    and at.tail is not None
                    and not isinstance(got, Exception)
                    and at.token == token
                    and at.generation == g
                    and length == at.tail - at.head
                ):  # the same list and generation, its length what its positions say
                    if at.head > upto:
                        return None  # what was to be read was trimmed away
                    if at.head != h:  # trimmed at the head meanwhile: the indexes moved
                        h = at.head
                        continue
                    if len(got) == count:
                        items += got
                        upto += len(got)
                        continue
                # Another list or generation, a list changed behind the store's back (its
                # positions begin anew, which only a script sees), damage, a failed command:
                # the script decides (STALE: from the start) and names what is wrong.
                plain = False
            reply = yield contracts.read_range(
                meta=meta,
                msgs=msgs,
                generation=g,
                from_=upto,
                to=n,
                budget=self.limits.read_budget,
                token=token or "",
            )
            if contracts.status(reply) == Status.STALE:
                return None
            part = contracts.parsed(contracts.Part, check(reply, ctx))
            items += part.elements
            upto = part.upto
        return items

    def cold_span(self, last: int) -> tuple[int, int] | None:
        """The list indexes of the LRANGE a read of the newest ``last`` messages (< 0: all)
        of a session this store does not hold sends behind the ``get`` script, or None: the
        script alone (small reads, a store that read nothing yet, very large elements).
        """
        if not self.element_bytes or 0 <= last <= SMALL_READ:
            return None
        cap = min(COLD_READ_MESSAGES, self.limits.read_budget // self.element_bytes)
        if last < 0:
            return (0, cap - 1) if cap > SMALL_READ else None
        return (-last, -1) if last <= cap else None

    # -- what a store holds ---------------------------------------------------------------------

    def twin(
        self, key: str, body: bytes, msg: Message, tokens: int | None = None
    ) -> Message | None:
        """``msg``'s decoded twin (:func:`codec.twin_of`; ``msg`` is one that
        :func:`codec.twin_ready` holds ready, ``body`` its stored form and ``tokens`` the count
        the store gave it, if any), to be appended to
        session ``key``, taken when it is encoded, so that a change made to ``msg`` later
        (past its frozen guard) cannot reach a read; None when the store does not hold
        ``key`` (its next read of it is a first read, which parses what it reads: a worker
        of a fleet without session affinity) or ``body`` is too long to keep.
        """
        if len(body) <= OWN_APPEND_BYTES and self.cache.holds(key):
            return codec.twin_of(msg, tokens)
        return None

    def wrote(self, body: bytes, twin: Message) -> None:
        """Keep at hand that ``body``, appended, decodes to ``twin`` (see :meth:`twin`): a
        read that finds ``body`` among the new messages takes ``twin`` instead of parsing it
        (the agent loop reads its own appends). Whoever wrote the element, these bytes decode
        to that message.
        """
        own = self.own_appends
        if len(own) >= OWN_APPENDS:
            own.clear()
        own[body] = twin

    def decoded(
        self, key: str, items: Sequence[bytes], first: int = 0
    ) -> tuple[list[Message], int]:
        """The cleartext elements ``items`` as messages, and their size in bytes: parsed, or,
        when every one of a few is an own append kept at hand, the twins of those messages
        (see :meth:`wrote`; each is handed out once).
        """
        own = self.own_appends
        if own and len(items) <= 8:
            try:
                return [own.pop(item) for item in items], sum(map(len, items))
            except (KeyError, TypeError):  # not all own appends (or not bytes): parse them
                pass
        return codec.decode_sized(key, items, first)

    def hold(
        self,
        key: str,
        held: Held | None,
        version: tuple[bytes, bytes],
        h: int,
        start: int,
        wanted: int,
        new: list[Message],
        size: int,
        count: int,
    ) -> list[Message]:
        """The messages from position ``wanted`` on: ``new`` (read from ``start``: ``count``
        elements of ``size`` bytes in all) after those ``held`` when the read continued it; the
        cache keeps what the session holds now.
        """
        if count:  # the mean element size, rising at once and falling slowly
            mean, known = size // count, self.element_bytes
            self.element_bytes = mean if mean > known else (15 * known + mean) // 16
        sealed = self.keyring.passphrase is not None
        if held is not None and held.covers(*version, start, wanted):
            note_read(True, count)  # only what was added since travelled
            if held.ids is not None and new:  # a sealed element copied within its session
                new = codec.distinct_from(key, held.repeats, new)
            messages, entry = held.extended(self.cache.lock, h, wanted, new, size)
            self.cache.put(key, entry)
            return messages
        note_read(False, count)
        ids = {m.id for m in new} if sealed else None
        if self.cache.put(key, Held(*version, start, new, 0, len(new), size, ids, h)):
            return list(new)  # the caller's own, not the cache's list (which grows in place)
        return new


_VERSION_FIELDS = (b"token", b"g", b"h", b"n")
"""The meta hash's fields that change with every change a store makes to a list (read again
after a plain ``LRANGE``: a first read's, a long read's steps)."""


class Positions(NamedTuple):
    """The meta hash's :data:`_VERSION_FIELDS` as ``HMGET`` reads them (None: absent)."""

    token: bytes | None
    generation: int
    head: int
    tail: int | None


def _positions(reply: Any) -> Positions | None:
    """An ``HMGET`` of :data:`_VERSION_FIELDS` as :class:`Positions` (an absent generation or
    head is 0, as the scripts take it), or None for a failed command or a value that is not a
    position as a store writes it (the script judges those).
    """
    if type(reply) is not list or len(reply) != len(_VERSION_FIELDS):
        return None  # a failed command (its exception in its place), or not an HMGET's reply
    token, g, h, n = reply
    if not all(x is None or (type(x) is bytes and _WHOLE.fullmatch(x)) for x in (g, h, n)):
        return None
    return contracts.typed(Positions, (token, g or 0, h or 0, n))


def _unchanged(
    read: ListRead, token: bytes, span: tuple[int, int], elements: Any, now: Any
) -> list[bytes] | None:
    """The ``LRANGE`` of list indexes ``span`` sent behind a read script (``elements``) when
    the positions read after it (``now``, as an ``HMGET`` of :data:`_VERSION_FIELDS` gives
    them) are those of the script's reply ``read`` (of the list with ``token``) and it holds
    what the span asks of them; else None.
    """
    at = _positions(now)
    if (
        at is None
        or isinstance(elements, Exception)
        or not token
        or at != (token, read.generation, read.head, read.tail)
    ):
        return None
    lo, hi = span
    count = hi - lo + 1 if lo >= 0 else read.tail - read.from_
    return elements if len(elements) == min(count, read.tail - read.from_) else None


def _fields(reply: Any) -> list[bytes] | dict[bytes, bytes] | None:
    """An ``HGETALL`` reply (a mapping on RESP3, a flat field/value list on RESP2), or None:
    a failed command or an empty hash (the script judges).
    """
    return reply if type(reply) in (dict, list) and reply else None


def _version_of(fields: list[bytes] | dict[bytes, bytes] | None) -> list[Any] | None:
    """The values of :data:`_VERSION_FIELDS` in a hash's fields, as ``HMGET`` gives them
    (None when there are none).
    """
    if fields is None:
        return None
    if isinstance(fields, list):
        fields = dict(zip(fields[::2], fields[1::2], strict=False))
    return [fields.get(f) for f in _VERSION_FIELDS]


_WHOLE = re.compile(rb"\d{1,15}")
"""A list position as a store writes it (what the scripts' ``whole`` takes, and less: no
sign, space, exponent or hexadecimal form, which the script then judges)."""


def _token(read: contracts.Read) -> bytes:
    return read.token
