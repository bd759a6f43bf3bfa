"""The store's options and what every operation shares: key names, the session tree, and the
loop that runs a write script until the session's key and the tree's members are the ones it
was built for.

A session and its children form a tree that expires as one. Every key of the tree expires at
the deadline held by the session's meta hash; a write that finds the deadline less than
``ttl`` away moves it to ``ttl + ttl/16`` from now and every key with it, so most writes touch
no TTL at all (a session expires between ``ttl`` and ``ttl * 17/16`` after its last write). To
move the children's keys the script needs their names in ``KEYS``: the store remembers each
tree's members (its generation ``tg`` and child keys, from the replies of the scripts that
change them) and sends them along; a script that needs them and finds another generation
answers ``TREE_CHANGED`` with the members, and the write is sent again (a second round trip,
at most once per deadline step for a worker whose knowledge is stale).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from . import codec
from ._args import duration_ms, non_negative_int
from ._cache import DEFAULT_READ_CACHE_BYTES, Held, ReadCache
from ._keyring import KeyringOps
from ._requests import Commands, Op, ScriptCall
from .crypto import DEFAULT_WORK, Sealer
from .errors import ConcurrentChange, InvalidArgument
from .keys import KeySchema, SessionKeys
from .models import Message
from .status import Ctx, Status, check

DEFAULT_EXPIRED_GRACE = timedelta(days=1)
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_METADATA_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_METADATA_VALUE_BYTES = 1024 * 1024
DEFAULT_DEDUP_WINDOW = 1000
MIN_DEDUP_WINDOW = 64
DEFAULT_KEEP_MERGED_CHILDREN = 4
KEY_CACHE = 4096  # sessions whose key names and tree a store keeps at hand
WRITE_ATTEMPTS = 8
READ_BUDGET = 4 * 1024 * 1024
"""Bytes one read script returns at most; a longer history is read in steps (read_range)."""
READ_ATTEMPTS = 4
HEAD_AT = 3
"""The index of the list's head position in a ``get`` or ``get_child`` script's reply."""
COLD_READ_MESSAGES = 2_000
"""Messages a store's first read of a session takes at most by one plain LRANGE sent behind the
``get`` script (fewer when the elements it read so far were larger: about one read's budget)."""
SMALL_READ = 24
"""A read of at most this many newest messages passes them through the ``get`` script: below
it the LRANGE's round-trip share costs more than the script's ~1.5 us per element it saves."""
OWN_APPENDS = 256
"""Own appends a store keeps at hand (stored form -> decoded twin), to read back unparsed."""
OWN_APPEND_BYTES = 16 * 1024
"""The largest stored message kept at hand (``OWN_APPENDS`` of them: 4 MiB, and their twins)."""
STEP_MESSAGES = 2_000
"""Messages one script call copies at most (a merge, an inheriting fork): more go in steps."""
BATCH_MESSAGES = 10_000
"""Messages one append call takes at most (one script call, ~3 µs each on the server)."""
BATCH_BYTES = 64 * 1024 * 1024
"""Bytes of messages one append call takes at most."""
STAGE_LEASE_MS = 30_000
"""How long a staged operation's lease and staging list last between two of its steps."""
Tree = tuple[str, tuple[str | bytes, ...], tuple[str, ...]]
NO_TREE: Tree = ("0", (), ())


class CoreBase(KeyringOps):
    """Options, key names and the session trees a store knows of."""

    def __init__(
        self,
        *,
        prefix: str = "rs:",
        ttl: float | timedelta | None = None,
        max_history_turns: int = 0,
        expired_grace: float | timedelta = DEFAULT_EXPIRED_GRACE,
        publish_events: bool = True,
        cluster: bool = False,
        wait_replicas: int = 0,
        wait_timeout: float | timedelta = 1.0,
        failover_window: float | timedelta = 15.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
        max_metadata_value_bytes: int = DEFAULT_MAX_METADATA_VALUE_BYTES,
        dedup_window: int = DEFAULT_DEDUP_WINDOW,
        keep_merged_children: int = DEFAULT_KEEP_MERGED_CHILDREN,
        passphrase: str | bytes | None = None,
        kdf_work: int = DEFAULT_WORK,
        read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES,
    ) -> None:
        self.schema = KeySchema(prefix, cluster=cluster)
        self._reads = ReadCache(non_negative_int(read_cache_bytes, "read_cache_bytes"))
        self._own_appends: dict[bytes, Message] = {}
        self._key_cache: dict[str, tuple[SessionKeys, tuple[str, ...]]] = {}
        self._trees: dict[str, Tree] = {}
        self._init_crypto(passphrase, kdf_work)
        self.channel = self.schema.events_channel if publish_events else ""
        self.ttl_ms = 0 if ttl is None else duration_ms(ttl, "ttl")
        self.grace_ms = duration_ms(expired_grace, "expired_grace", allow_zero=True)
        self.max_history_turns = non_negative_int(max_history_turns, "max_history_turns")
        self.wait_replicas = non_negative_int(wait_replicas, "wait_replicas")
        self.max_message_bytes = non_negative_int(max_message_bytes, "max_message_bytes")
        self.max_metadata_bytes = non_negative_int(max_metadata_bytes, "max_metadata_bytes")
        self.max_metadata_value_bytes = non_negative_int(
            max_metadata_value_bytes, "max_metadata_value_bytes"
        )
        self.dedup_window = non_negative_int(dedup_window, "dedup_window")
        if self.dedup_window < MIN_DEDUP_WINDOW:
            raise InvalidArgument(
                "dedup_window", f"must be >= {MIN_DEDUP_WINDOW}, got {dedup_window}"
            )
        self.keep_merged_children = non_negative_int(keep_merged_children, "keep_merged_children")
        self.wait_timeout_ms = duration_ms(wait_timeout, "wait_timeout")
        self.failover_window_ms = duration_ms(failover_window, "failover_window", allow_zero=True)
        #: Digests a session's id window keeps at least (its newest message ids and tokens).
        self.window = max(self.dedup_window, self.max_history_turns)
        #: How long a popped element is kept for a retry of its pop (redis-py's retries and a
        #: failover ride-through fit in it).
        self.pop_keep_ms = max(self.failover_window_ms, 60_000)
        #: Bytes one read script returns at most (tests make it small).
        self.read_budget = READ_BUDGET
        #: The mean size in bytes of the elements this store read, weighted to the larger
        #: (0: none read yet); it sizes the plain LRANGE of a first read (see _cold_span).
        self.element_bytes = 0
        #: Messages one script call copies at most (tests make it small).
        self.step_messages = STEP_MESSAGES
        #: Messages and bytes one append call takes at most (a create with more is staged).
        self.batch_messages, self.batch_bytes = BATCH_MESSAGES, BATCH_BYTES

    @property
    def ttl(self) -> timedelta | None:
        """The sliding TTL of every session tree, or None when sessions never expire."""
        return timedelta(milliseconds=self.ttl_ms) if self.ttl_ms else None

    def _keys(self, key: str) -> tuple[SessionKeys, tuple[str, ...]]:
        """The key names of session ``key`` and the root KEYS of its tree's scripts (meta,
        msgs, ids, index, marker, kids, done; cached: hot path).
        """
        known = self._key_cache.get(key)
        if known is None:
            sk = self.schema.session(key)
            index = self.schema.index_of(key)
            known = sk, (sk.meta, sk.msgs, sk.ids, index, sk.mark, sk.kids, sk.done)
            if len(self._key_cache) >= KEY_CACHE:
                self._key_cache.clear()
            self._key_cache[key] = known
        return known

    def _tree(self, root: str) -> Tree:
        """What this store knows of ``root``'s tree: its generation, its members' KEYS (meta,
        msgs, ids per child) and the member child keys.
        """
        return self._trees.get(root, NO_TREE)

    def _learn_tree(self, root: str, tg: Any, members: Sequence[Any]) -> None:
        """Remember ``root``'s tree as a script reported it (``tg`` and the raw kids members)."""
        children: list[str] = []
        names: list[str | bytes] = []
        for raw in members:
            child = codec.member_key(raw)  # a damaged member: its keys are still named
            ck = self.schema.child(child)
            names += (codec.wire(ck.meta), codec.wire(ck.msgs), codec.wire(ck.ids))
            children.append(child)
        if len(self._trees) >= KEY_CACHE:
            self._trees.clear()
        generation = bytes(tg).decode() if isinstance(tg, bytes) else str(tg)
        self._trees[root] = (generation, tuple(names), tuple(children))

    def _forget_tree(self, root: str) -> None:
        self._trees.pop(root, None)

    def _batches(self, elements: Sequence[bytes]) -> list[list[bytes]]:
        """``elements`` in runs that one script call takes (see ``batch_messages``)."""
        out: list[list[bytes]] = [[]]
        size = 0
        for element in elements:
            if out[-1] and (
                len(out[-1]) >= self.batch_messages or size + len(element) > self.batch_bytes
            ):
                out.append([])
                size = 0
            out[-1].append(element)
            size += len(element)
        return out

    def _check_batch(self, elements: Sequence[bytes], argument: str) -> None:
        """Refuse more messages than one script call takes: a batch is one atomic step."""
        if len(self._batches(elements)) > 1:
            raise InvalidArgument(
                argument,
                f"{len(elements):,} messages ({sum(map(len, elements)):,} bytes) are more than "
                f"one atomic append takes (batch_messages={self.batch_messages:,}, "
                f"batch_bytes={self.batch_bytes:,}): append them in several calls",
            )

    def _head(self, root: str) -> list[Any]:
        """The ARGV every tree-writing script begins with: ttl, grace, the tree generation this
        store knows, the id window.
        """
        return [self.ttl_ms, self.grace_ms, self._tree(root)[0], self.window]

    def _read_list(
        self,
        key: str,
        first: ScriptCall,
        ctx: Ctx | Callable[[], Ctx],
        at: tuple[int, int, int, int, int],
        range_keys: tuple[str, ...],
        token_of: Callable[[Sequence[Any]], Any],
    ) -> Op[tuple[Sequence[Any], list[bytes]]]:
        """Run read script ``first`` and, when the list is longer than one read's budget, read
        the rest in steps (``read_range``), each only while the list keeps its generation and
        nothing read was trimmed away; else read again from the start. ``at`` gives the reply's
        indexes of generation, tail, elements, upto and the start position, ``token_of`` the
        list's token in a reply. Returns the first reply and every element from its start to
        its tail: one snapshot of the list as it was when the first step ran.
        """
        g_at, n_at, items_at, upto_at, _ = at
        for _ in range(READ_ATTEMPTS):
            reply = check((yield first), ctx)
            items = list(reply[items_at])
            upto, n = int(reply[upto_at]), int(reply[n_at])
            if upto >= n:
                return reply, items
            g, token, h = reply[g_at], token_of(reply), int(reply[HEAD_AT])
            rest = yield from self._read_rest(g, upto, n, range_keys, ctx, token, h)
            if rest is not None:
                return reply, items + rest
        raise ConcurrentChange(key, "its history kept changing while it was read in steps")

    def _read_rest(
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
        ``h``, at positions ``upto`` ..
        ``n`` - 1; None when the list changed generation or token (deleted and made again) or
        lost what was to be read meanwhile (then read again from the start).

        Read in steps of at most one read's budget, without passing the elements through Lua:
        ``LRANGE`` of the list indexes the head gives, then ``HMGET`` of the token, the
        generation and the positions and ``LLEN``, pipelined (on a cluster in two round
        trips: its pipeline may resend a redirected ``LRANGE`` after the others); the step
        holds when those are still what the read began with (every change to a list but an
        append at its tail changes its token, generation or head, and a head only grows
        within a generation), it is taken again from the new head after a trim. A
        store that knows no element size, a list whose length is not
        what its positions say (another writer changed it, or damage) or a failed command:
        the ``read_range`` script, which begins a new generation or names the damage. Not
        atomic: a raw writer that changes the list's length between the ``LRANGE`` and the
        check, and a store's write that makes it right again, are not seen (the script sees
        them); no operation of a store changes the list without its positions.
        """
        items: list[bytes] = []
        plain = bool(token) and self.element_bytes > 0
        meta, msgs = range_keys[0], range_keys[1]
        while upto < n:
            if plain:
                budget = self.read_budget // self.element_bytes
                count = max(1, min(n - upto, COLD_READ_MESSAGES, budget))
                lo = upto - h
                lrange = ("LRANGE", msgs, lo, lo + count - 1)
                check_after = [("HMGET", meta, "token", "g", "h", "n"), ("LLEN", msgs)]
                if self.schema.cluster:  # a cluster pipeline may send a redirected command
                    (got,) = yield Commands([lrange], errors_as_values=True)  # after the rest
                    now, length = yield Commands(check_after, errors_as_values=True)
                else:
                    got, now, length = yield Commands([lrange, *check_after], errors_as_values=True)
                if (
                    not any(isinstance(r, Exception) for r in (got, now, length))
                    and bytes(now[0] or b"") == bytes(token)
                    and int(now[1] or 0) == int(g)
                    and int(length) == int(now[3] or 0) - int(now[2] or 0)
                ):  # the same list and generation, its length what its positions say
                    head = int(now[2] or 0)
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
            args = (g, upto, n, self.read_budget, token or "")
            part = yield ScriptCall("read_range", range_keys, args, write=False)
            if part[0] == Status.STALE:
                return None
            check(part, ctx)
            items += part[1]
            upto = int(part[2])
        return items

    def _cold_span(self, last: int) -> tuple[int, int] | None:
        """The list indexes of the LRANGE a read of the newest ``last`` messages (< 0: all)
        of a session this store does not hold sends behind the ``get`` script, or None: the
        script alone (small reads, a store that read nothing yet, very large elements).
        """
        if not self.element_bytes or 0 <= last <= SMALL_READ:
            return None
        cap = min(COLD_READ_MESSAGES, self.read_budget // self.element_bytes)
        if last < 0:
            return (0, cap - 1) if cap > SMALL_READ else None
        return (-last, -1) if last <= cap else None

    def _twin(self, body: bytes, msg: Message) -> Message | None:
        """``msg``'s decoded twin (:func:`codec.twin_of`; ``msg`` is one that
        :func:`codec.twin_ready` holds ready and ``body`` its stored form), taken when it is
        encoded, so that a change made to ``msg`` later (past its frozen guard) cannot reach a
        read; None when the store keeps no own appends (it holds nothing it reads) or
        ``body`` is too long to keep.
        """
        if self._reads.max_bytes and len(body) <= OWN_APPEND_BYTES:
            return codec.twin_of(msg)
        return None

    def _wrote(self, body: bytes, twin: Message) -> None:
        """Keep at hand that ``body``, appended, decodes to ``twin`` (see :meth:`_twin`): a
        read that finds ``body`` among the new messages takes ``twin`` instead of parsing it
        (the agent loop reads its own appends). Whoever wrote the element, these bytes decode
        to that message.
        """
        own = self._own_appends
        if len(own) >= OWN_APPENDS:
            own.clear()
        own[body] = twin

    def _decoded(self, key: str, items: Sequence[bytes]) -> list[Message]:
        """The cleartext elements ``items`` as messages: parsed, or, when every one of a few
        is an own append kept at hand, the twins of those messages (see :meth:`_wrote`;
        each is handed out once).
        """
        own = self._own_appends
        if own and len(items) <= 8:
            try:
                return [own.pop(item) for item in items]
            except (KeyError, TypeError):  # not all own appends (or not bytes): parse them
                pass
        return codec.decode_messages(key, items)

    def _hold(
        self,
        key: str,
        held: Held | None,
        version: tuple[bytes, bytes],
        h: int,
        start: int,
        wanted: int,
        new: list[Message],
        items: Sequence[bytes],
    ) -> list[Message]:
        """The messages from position ``wanted`` on: ``new`` (read from ``start``) after those
        ``held`` when the read continued it; the cache keeps what the session holds now.
        """
        size = sum(map(len, items))
        if items:  # the mean element size, rising at once and falling slowly
            mean, known = size // len(items), self.element_bytes
            self.element_bytes = mean if mean > known else (15 * known + mean) // 16
        sealed = self.passphrase is not None
        if held is not None and held.covers(*version, start, wanted):
            if held.ids is not None and new:  # a sealed element copied within its session
                new = codec.distinct_from(key, held.repeats, new)
            messages, entry = held.extended(self._reads.lock, h, wanted, new, size)
        else:
            ids = {m.id for m in new} if sealed else None
            entry = Held(*version, start, list(new), 0, len(new), size, ids, h)
            messages = list(new)  # the caller's own, not the cache's list
        self._reads.put(key, entry)
        return messages

    def _write(
        self,
        root: str,
        build: Callable[[Sealer | None], ScriptCall],
        ctx: Ctx | Callable[[], Ctx],
        passthrough: tuple[int, ...] = (),
    ) -> Op[Any]:
        """Run the write script ``build`` makes, sealing with session ``root``'s own key and
        naming the tree's members as this store knows them: when the script answers
        ``KEY_CHANGED`` follow the session's key, when it answers ``TREE_CHANGED`` learn the
        members, when it answers ``VERSION`` (a sealed metadata value of another writer is
        newer) seal past it, and send it again. Replies whose status is in ``passthrough`` are
        returned for the caller to handle.
        """
        for _ in range(WRITE_ATTEMPTS):
            reply = yield build(self._sealer(root))
            if type(reply) is list and reply:
                if reply[0] == Status.KEY_CHANGED:
                    yield from self._follow(root, bytes(reply[1]), bytes(reply[2]))
                    continue
                if reply[0] == Status.VERSION:  # another writer's clock is ahead: go past it
                    name = bytes(reply[1])[2:].decode("utf-8", "replace")
                    self._versions[(root, name)] = int.from_bytes(bytes(reply[2]), "big")
                    continue
                if reply[0] == Status.TREE_CHANGED:
                    self._learn_tree(root, reply[1], reply[2:])
                    continue
                if reply[0] in passthrough:
                    return reply
            return check(reply, ctx)
        raise ConcurrentChange(root, "its encryption key or its children kept changing")
