"""The read path: a session's (or child's) list read in one snapshot, in bounded steps when it
is long, and kept decoded so that the next read of it sends and decodes only what was added.

A first read of a session takes its messages without Lua: one pipeline of plain reads,
checked as the ``get`` script checks them (on a cluster: a plain ``LRANGE`` sent behind the
``get`` script; the elements never pass through Lua, which costs per element); a read of a
session the store holds sends the version it holds and gets only the messages added since;
a list longer than one read's budget continues in plain steps (``LRANGE`` with the token,
generation and positions behind it), taken when those are still what the read began with,
else by the ``read_range`` script. See ``cache`` for what is held.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from .. import codec, contracts
from .._transport.telemetry import note_read
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
    def head(self) -> Any: ...
    @property
    def tail(self) -> Any: ...
    @property
    def generation(self) -> Any: ...
    @property
    def elements(self) -> Any: ...
    @property
    def upto(self) -> Any: ...


L = TypeVar("L", bound=ListRead)


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
        self, key: str, last: int, with_meta: bool
    ) -> Op[tuple[contracts.Read, list[Message]]]:
        """The ``get`` script's reply for session ``key`` (``last`` < 0: every message) and
        the messages it asked for: those the store holds from an earlier read of the session
        and the ones added since, or all of them (a long history read in steps). The reply's
        meta array is read as well with ``with_meta``.
        """
        sk = self.trees.keys(key)[0]
        read_keys = (sk.meta, sk.msgs, sk.ids, sk.mark)

        def ctx() -> Ctx:  # built only for an exception
            return Ctx(key, read_keys)

        def parse(reply: Any) -> contracts.Read:
            return contracts.parsed(contracts.Read, check(reply, ctx))

        held = self.cache.get(key)
        if held is not None and not held.reaches(last):
            held = None  # it holds the newest messages only and this read wants more
        budget = self.limits.read_budget
        try:
            if held is not None:  # the hot path: only what was added since travels
                first = contracts.get(
                    read_keys,
                    last=last,
                    with_meta=with_meta,
                    token=held.token,
                    generation=held.generation,
                    tail=held.tail,
                    budget=budget,
                    held_head=held.head,
                )
                read = parse((yield first))
                items = read.elements
                if int(read.upto) < int(read.tail):  # more than one read's budget: in steps
                    rest = yield from self.rest(
                        read.generation,
                        int(read.upto),
                        int(read.tail),
                        read_keys[:2],
                        ctx,
                        read.token,
                        int(read.head),
                    )
                    if rest is None:  # changed meanwhile: from the start
                        read, items = yield from self.steps(
                            key, first, parse, read_keys[:2], _token, ctx
                        )
                    else:
                        items = [*items, *rest]
            else:
                cold = dict(last=last, with_meta=with_meta, token="", generation="", tail="")
                span = self.cold_span(last)
                got: tuple[contracts.Read, list[bytes]] | None = None
                if span is not None and self.schema.cluster:
                    got = yield from self._cold(read_keys, cold, span, parse, ctx)
                elif span is not None:
                    got = yield from self._snapshot(read_keys, last, with_meta, span, ctx)
                if got is None:
                    first = contracts.get(read_keys, **cold, budget=budget, held_head="")
                    got = yield from self.steps(key, first, parse, read_keys[:2], _token, ctx)
                read, items = got
        except SessionError:
            self.cache.discard(key)
            raise
        start, h, n = int(read.from_), int(read.head), int(read.tail)
        wanted = h if last < 0 else max(h, n - last)
        version = (bytes(read.token), b"%d" % int(read.generation))
        place = start - h  # the first element's place in the history: a bad one is named so
        if self.keyring.passphrase is None:
            new, size = self.decoded(key, items, place)
        else:
            new = yield from self.keyring.opened(
                key, read.kid, read.dk, lambda o: codec.decode_messages(key, items, o, first=place)
            )
            size = sum(map(len, items))
        return read, self.hold(key, held, version, h, start, wanted, new, size, len(items))

    def _snapshot(
        self,
        read_keys: tuple[str, ...],
        last: int,
        with_meta: bool,
        span: tuple[int, int],
        ctx: Callable[[], Ctx],
    ) -> Op[tuple[contracts.Read, list[bytes]] | None]:
        """A read of a session this store does not hold, without Lua (outside a cluster), in
        one pipeline of plain reads: the id window's type, the meta hash (its position fields
        only without ``with_meta``), ``LRANGE`` of list indexes ``span``, then the positions
        again and the list's length; checked here as the ``get`` script checks them, so that
        it answers what the script would, without the script's server time. Not atomic, as
        :meth:`rest`: the elements belong to the meta hash read first when the token,
        generation and positions read after them are the same and the list's length is what
        they say (every change a store makes to a list changes one of them). Not a MULTI/EXEC:
        Redis refuses to queue commands when it is out of memory.
        A longer list continues in steps (:meth:`rest`). None when anything is not as a store
        writes it (a missing or foreign meta hash, a key of another type, another schema
        version, positions that are not numbers, a list whose length is not what they say, a
        session without a token, a failed command) or changed meanwhile: the caller reads by
        the script, which names what is wrong.
        """
        meta, msgs, ids = read_keys[0], read_keys[1], read_keys[2]
        fields = ("HGETALL", meta) if with_meta else ("HMGET", meta, *_READ_FIELDS)
        replies = yield Commands(
            [
                ("TYPE", ids),
                fields,
                ("LRANGE", msgs, *span),
                ("HMGET", meta, *_VERSION_FIELDS),
                ("LLEN", msgs),
            ],
            errors_as_values=True,
            read_only=True,
        )
        if any(isinstance(r, Exception) for r in replies):
            return None
        kind, values, items, now, length = replies
        if with_meta:  # HGETALL as read (a flat list with RESP2, a map with RESP3: no callback)
            got = codec.raw_fields(str(meta), values)
        else:
            got = dict(zip(_READ_FIELDS, values, strict=True))
        version = [got.get(f) for f in _VERSION_FIELDS]
        if kind not in _WINDOW_TYPES or got.get(b"v") != codec.SCHEMA_VERSION or now != version:
            return None
        token = version[0] or b""
        if not token or not all(x is None or _WHOLE.fullmatch(x) for x in version[1:]):
            return None  # the script says what a store does not write
        g, h, n = (int(x or 0) for x in version[1:])
        if length != n - h:
            return None
        start = h if last < 0 else max(h, n - last)
        count = len(items)
        if count != min(span[1] - span[0] + 1 if span[0] >= 0 else n - start, n - start):
            return None
        kid, dk = got.get(b"k") or b"", got.get(b"dk") or b""
        read = contracts.Read(
            values if with_meta else [], start, h, n, g, token, [], start, kid, dk
        )
        upto = start + count
        if upto < n:
            rest = yield from self.rest(g, upto, n, (meta, msgs), ctx, token, h)
            if rest is None:
                return None
            items += rest
        return read, items

    def _cold(
        self,
        read_keys: tuple[str, ...],
        cold: dict[str, Any],
        span: tuple[int, int],
        parse: Callable[[Any], contracts.Read],
        ctx: Callable[[], Ctx],
    ) -> Op[tuple[contracts.Read, list[bytes]] | None]:
        """A read of a session this store does not hold, on a cluster (elsewhere
        :meth:`_snapshot`), in one round trip without passing the elements through Lua: the
        ``get`` script for the meta hash and the list's positions
        only (a zero byte budget), then ``LRANGE`` of list indexes ``span`` and the positions
        again (``HMGET``), pipelined, not atomic. The elements belong to the script's snapshot
        when the positions read after them are the same (every change to a session's list
        changes its token, generation, head or tail); the rest of a longer list is read in
        steps. None: the caller reads by the script alone (changed between, a list changed
        behind the store).
        """
        meta, msgs = read_keys[0], read_keys[1]
        after = (("LRANGE", msgs, *span), ("HMGET", meta, *_VERSION_FIELDS))
        first = contracts.get(read_keys, **cold, budget=0, held_head="", after=after)
        script, items, now = yield first
        if isinstance(script, Exception):
            raise script
        read = parse(script)
        if isinstance(items, Exception) or isinstance(now, Exception):
            return None
        start, n, g = int(read.from_), int(read.tail), read.generation
        token = bytes(read.token)
        version = [token, b"%d" % int(g), b"%d" % int(read.head), b"%d" % n]
        now_token, now_g, now_h, now_n = now
        if not token or [now_token, now_g or b"0", now_h or b"0", now_n] != version:
            return None
        count = span[1] - span[0] + 1 if span[0] >= 0 else n - start
        if len(items) != min(count, n - start):
            return None
        upto = start + len(items)
        if upto < n:
            rest = yield from self.rest(g, upto, n, (meta, msgs), ctx, token, int(read.head))
            if rest is None:
                return None
            items += rest
        return read, items

    # -- lists in steps ------------------------------------------------------------------------

    def steps(
        self,
        key: str,
        first: ScriptCall,
        parse: Callable[[Any], L],
        range_keys: tuple[str, ...],
        token_of: Callable[[L], Any],
        ctx: Ctx | Callable[[], Ctx],
    ) -> Op[tuple[L, list[bytes]]]:
        """Run read script ``first`` (its reply read by ``parse``) and, when the list is longer
        than one read's budget, read the rest in steps (:meth:`rest`), each only while the list
        keeps its generation and nothing read was trimmed away; else read again from the start.
        ``token_of`` gives the list's token in a reply. Returns the first reply and every
        element from its start to its tail: one snapshot of the list as it was when the first
        step ran.
        """
        for _ in range(READ_ATTEMPTS):
            read = parse((yield first))
            items = list(read.elements)
            upto, n = int(read.upto), int(read.tail)
            if upto >= n:
                return read, items
            rest = yield from self.rest(
                read.generation,
                upto,
                n,
                range_keys,
                ctx,
                token_of(read),
                int(read.head),
            )
            if rest is not None:
                return read, items + rest
        raise ConcurrentChange(key, "its history kept changing while it was read in steps")

    def rest(
        self,
        g: Any,
        upto: int,
        n: int,
        range_keys: tuple[str, ...],
        ctx: Ctx | Callable[[], Ctx],
        token: Any,
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
        meta, msgs = range_keys[0], range_keys[1]
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
                if not any(isinstance(r, Exception) for r in (got, now, length)):
                    now_token, now_g, now_h, now_n = now
                    if (
                        bytes(now_token or b"") == bytes(token)
                        and int(now_g or 0) == int(g)
                        and int(length) == int(now_n or 0) - int(now_h or 0)
                    ):  # the same list and generation, its length what its positions say
                        head = int(now_h or 0)
                        if head > upto:
                            return None  # what was to be read was trimmed away
                        if head != h:  # trimmed at the head meanwhile: the indexes moved
                            h = head
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
                range_keys,
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
            upto = int(part.upto)
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

    def twin(self, key: str, body: bytes, msg: Message) -> Message | None:
        """``msg``'s decoded twin (:func:`codec.twin_of`; ``msg`` is one that
        :func:`codec.twin_ready` holds ready and ``body`` its stored form), to be appended to
        session ``key``, taken when it is encoded, so that a change made to ``msg`` later
        (past its frozen guard) cannot reach a read; None when the store does not hold
        ``key`` (its next read of it is a first read, which parses what it reads: a worker
        of a fleet without session affinity) or ``body`` is too long to keep.
        """
        if len(body) <= OWN_APPEND_BYTES and self.cache.holds(key):
            return codec.twin_of(msg)
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
"""The meta hash's fields that change with every change a store makes to a session's list
(read again after a plain ``LRANGE``: a first read's, a long read's steps)."""
_READ_FIELDS = (b"v", *_VERSION_FIELDS, b"k", b"dk")
"""The meta hash's fields a first read of the history alone takes (:meth:`Reader._snapshot`)."""
_WHOLE = re.compile(rb"\d{1,15}")
"""A list position as a store writes it (what the scripts' ``whole`` takes, and less: no
sign, space, exponent or hexadecimal form, which the script then judges)."""
_WINDOW_TYPES = frozenset({b"none", b"hash"})
"""What ``TYPE`` may say of a session's id window (absent in a session written by no append)."""


def _token(read: contracts.Read) -> Any:
    return read.token
