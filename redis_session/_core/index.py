"""The session index: listing sessions, its shards on a cluster, and reads of the store's own
keys that name another program's key instead of failing with a bare WRONGTYPE.

One index per prefix on a single server (a sorted set of session keys scored by
``updated_at``, written by the same scripts as the sessions); one per slot on a cluster, with a
registry of the shards that exist (see ``keys.KeySchema.index_of``).

The registry is kept in three copies on (usually) three nodes, each written and read on its own
node (``Commands.direct``), so that no single node gates creates or listing: a create registers
its new shard in every copy it reaches (one is enough), a listing reads every copy it reaches,
lists their union and adds to each copy what it lacks (a copy lost with its node repairs
itself). A shard that no copy took (every copy's node unreachable) is kept by the process,
logged, and written at its next create or listing.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from .. import _clock, codec
from ..errors import CorruptData, ForeignKey
from ..keys import KeySchema
from ..models import SessionSummary, Usage
from .args import non_negative_int
from .limits import SCAN_COUNT
from .requests import Commands, Op

_GLOB_SPECIAL = re.compile(r"[*?\[\]\\]")  # escaped in a MATCH pattern
COPY_PAUSE_S = 10.0
"""A registry copy whose node failed is left out of creates' registrations this long (a node
that hangs instead of refusing would cost each create its connect timeout); listing reads it."""
log = logging.getLogger("redis_session")


class Index:
    """Reads of the session index (its writes are the scripts'), and its registry of shards."""

    def __init__(self, schema: KeySchema) -> None:
        self.schema = schema
        self._pending: set[str] = set()
        """Shards no registry copy took yet (every copy's node was unreachable)."""
        self._paused: dict[str, float] = {}
        """Registry copy -> when to try its node again."""

    def list_sessions(
        self, limit: int | None = None, offset: int = 0, *, prefix: str | None = None
    ) -> Op[list[SessionSummary]]:
        count = -1 if limit is None else non_negative_int(limit, "limit")
        first = non_negative_int(offset, "offset")
        if prefix is not None:
            codec.text_arg(prefix, "prefix")
        if count == 0:
            return []
        indexes = yield from self.indexes()
        if not indexes:
            return []
        if prefix:
            live = yield from self._summaries((yield from self._matching(indexes, prefix)))
            return live[first:] if count < 0 else live[first : first + count]
        if count < 0:  # every session: each index shard in pages, no command unbounded
            rows: list[tuple[float, bytes]] = []
            for index in indexes:
                at = 0
                while True:
                    (page,) = yield from self.reads(
                        [("ZREVRANGE", index, at, at + SCAN_COUNT - 1, "WITHSCORES")]
                    )
                    page = codec.scored(page)
                    rows += ((float(score), member) for member, score in page)
                    at += SCAN_COUNT
                    if len(page) < SCAN_COUNT:
                        break
            rows.sort(reverse=True)
            live = yield from self._summaries([member for _, member in rows])
            return live[first:]
        want = first + count  # live rows needed
        window = want
        while True:
            # The newest `window` entries of every index shard, merged newest first; then the
            # sessions' own timestamps, which also drop entries of sessions gone meanwhile.
            pages = yield from self.reads(
                [("ZREVRANGE", i, 0, window - 1, "WITHSCORES") for i in indexes]
            )
            pages = [codec.scored(page) for page in pages]
            rows = sorted(
                ((float(score), member) for page in pages for member, score in page),
                reverse=True,
            )
            live = yield from self._summaries([member for _, member in rows])
            exhausted = all(len(page) < window for page in pages)
            if exhausted or len(live) >= want:
                return live[first : first + count]
            window *= 2

    def usage(self) -> Op[Usage]:
        """The usage totals under the prefix: the sum of every index shard's totals (one on a
        single server), which the append scripts keep beside it (``KeySchema.usage_of``).
        """
        indexes = yield from self.indexes()
        shards = [self.schema.beside(index, "usage") for index in indexes]
        replies = yield from self.reads([("HMGET", s, "ui", "uo", "ur") for s in shards])
        total = Usage()
        for shard, reply in zip(shards, replies, strict=True):
            total += codec.decode_usage(
                shard, dict(zip(codec.USAGE_FIELDS, reply, strict=True)).get
            )
        return total

    def _matching(self, indexes: list[str], prefix: str) -> Op[list[bytes]]:
        """The index members that begin with ``prefix``, newest first: the server filters
        (``ZSCAN ... MATCH``), so only matching entries cross the network.
        """
        pattern = _GLOB_SPECIAL.sub(r"\\\g<0>", prefix) + "*"
        found: dict[bytes, float] = {}
        for index in indexes:
            cursor: Any = 0
            while True:  # ends: ZSCAN comes back to cursor 0 after a full iteration
                (reply,) = yield from self.reads(
                    [("ZSCAN", index, cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)]
                )
                cursor, entries = reply
                for member, score in entries:
                    found[bytes(member)] = float(score)
                if int(cursor) == 0:
                    break
        return [key for key, _ in sorted(found.items(), key=lambda kv: kv[1], reverse=True)]

    def indexes(self) -> Op[list[str]]:
        """Every index key to read: the one of a single server; on a cluster the union of
        the registry copies that answer (each copy given what it lacks, and this process's
        unwritten shards written). Raises the first copy's error when none answers.
        """
        if not self.schema.cluster:
            return self.schema.all_indexes()
        # Every copy, a paused one too: listing waits on every shard's node anyway, and a copy
        # whose node is back is given what it missed at once.
        copies = self.schema.index_registries
        replies = yield Commands([("SMEMBERS", copy) for copy in copies], direct=True)
        held: dict[str, set[str]] = {}
        failed: list[Exception] = []
        for copy, reply in zip(copies, replies, strict=True):
            if isinstance(reply, Exception):
                if codec.is_wrong_type(reply):
                    (kind,) = yield Commands([("TYPE", copy)])
                    raise ForeignKey("", copy, codec.type_name(kind))
                self._pause(copy, reply)
                failed.append(reply)
            else:
                held[copy] = {codec.decode_key(m) for m in reply}
        if not held:
            raise failed[0]
        every = set(self._pending).union(*held.values())
        yield from self._add(
            {copy: every - members for copy, members in held.items() if every - members}
        )
        return sorted(every)

    def register(self, shard: str) -> Op[None]:
        """Name index shard ``shard`` in every registry copy whose node answers (never
        raises for a node that does not: listing gives a copy what it missed). When none
        answers, the shard waits in this process for its next create or listing, logged.
        """
        if not self.schema.cluster:
            return
        self._pending.add(shard)
        shards = set(self._pending)
        yield from self._add({copy: shards for copy in self._reachable()})

    def _add(self, missing: dict[str, set[str]]) -> Op[None]:
        """SADD each copy's missing shards; a shard taken by any copy leaves the pending."""
        if not missing:
            return
        copies = list(missing)
        replies = yield Commands(
            [("SADD", copy, *sorted(missing[copy])) for copy in copies], direct=True
        )
        taken: set[str] = set()
        for copy, reply in zip(copies, replies, strict=True):
            if isinstance(reply, Exception):
                self._pause(copy, reply)
            else:
                taken |= missing[copy]
        left = set(self._pending) - taken
        self._pending.difference_update(taken)
        for shard in left & set().union(*missing.values()):
            log.warning(
                "index shard %s is in no copy of the registry yet (no copy's node answered):"
                " list_sessions lists its sessions once this process writes it (at its next"
                " create or listing) or after repair_index()",
                shard,
            )

    def _reachable(self) -> list[str]:
        """The registry copies not paused after a failure (all of them when all are): those a
        create registers its shard in.
        """
        now = _clock.monotonic()
        copies = self.schema.index_registries
        up = [copy for copy in copies if self._paused.get(copy, 0.0) <= now]
        return up or list(copies)

    def _pause(self, copy: str, error: Exception) -> None:
        if codec.is_wrong_type(error):
            return  # another program's key: not a node to wait for
        self._paused[copy] = _clock.monotonic() + COPY_PAUSE_S
        log.warning("index registry copy %s unreachable (%s): the others serve", copy, error)

    def repair_index(self) -> Op[int]:
        """Register every existing index shard (cluster) in every registry copy; returns how
        many shards no copy named.
        """
        if not self.schema.cluster:
            return 0
        shards = self.schema.all_indexes()
        exists = yield Commands([("EXISTS", s) for s in shards])
        found = {s for s, n in zip(shards, exists, strict=True) if n}
        known = set((yield from self.indexes()))
        missing = found - known
        yield from self._add({copy: missing for copy in self.schema.index_registries if missing})
        return len(missing)

    def reads(self, commands: list[tuple[Any, ...]], key: str = "") -> Op[list[Any]]:
        """The replies of read ``commands`` (each on the key it names second); a key that holds
        another program's value raises :class:`ForeignKey` naming it (``key``: the session it
        belongs to, ``""`` for the store's own keys such as its index), not a bare WRONGTYPE.
        """
        replies = yield Commands(commands, errors_as_values=True)
        for command, reply in zip(commands, replies, strict=True):
            if isinstance(reply, Exception):
                if not codec.is_wrong_type(reply):
                    raise reply
                (held,) = yield Commands([("TYPE", command[1])])
                raise ForeignKey(key, str(command[1]), codec.type_name(held))
        return list(replies)

    def _summaries(self, members: list[bytes]) -> Op[list[SessionSummary]]:
        """The summaries of the sessions the index members name. A member that is not a key
        this store wrote (not UTF-8), a meta hash without timestamps and a meta key of another
        type (another program's key: :class:`ForeignKey`) are skipped and logged (see
        ``codec.log_bad_record``), not raised for everybody; a session gone since it was
        indexed (expired) is skipped silently.
        """
        keys = [k for k in map(codec.index_member, members) if k is not None]
        if not keys:
            return []
        metas = [self.schema.session(k).meta for k in keys]
        found: list[Any] = []
        for i in range(0, len(metas), SCAN_COUNT):  # pipelines of a bounded size
            found += yield Commands(
                [("HMGET", m, "created_at", "updated_at") for m in metas[i : i + SCAN_COUNT]],
                errors_as_values=True,
            )
        out = []
        odd: list[tuple[str, str]] = []  # no session read: gone, or not a session's hash
        for key, meta, got in zip(keys, metas, found, strict=True):
            if isinstance(got, Exception) and not codec.is_wrong_type(got):
                raise got
            if isinstance(got, Exception) or got[0] is None:  # HMGET's created_at
                odd.append((key, meta))
                continue
            try:
                out.append(codec.decode_summary(key, *got))
            except CorruptData as exc:
                codec.log_bad_record("list_sessions", exc)
        for i in range(0, len(odd), SCAN_COUNT):
            batch = odd[i : i + SCAN_COUNT]
            types = yield Commands([("TYPE", meta) for _, meta in batch])
            for (key, meta), held in zip(batch, types, strict=True):
                held = codec.type_name(held)
                if held != "none":
                    codec.log_bad_record("list_sessions", ForeignKey(key, meta, held))
        return out
