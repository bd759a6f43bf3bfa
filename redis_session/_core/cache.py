"""What a store holds of the sessions it read: their decoded messages, so that a read of a
session read before sends and decodes only the messages added since.

An entry is the session's version as the ``get`` script names it — token (new for every
create), generation (new for every change that is not an append at the tail: compaction,
pop, a rewrite by another writer, re-sealing), and the absolute positions of the messages
held. The script answers a read that sends the version with only the messages after the
held tail when the version still holds and the held messages cover what the read wants;
otherwise with everything wanted, and the entry is replaced. A trim at the head (a store with
``max_history_turns``) keeps the version: positions are absolute, the entry drops what left.

Entries are immutable (named tuples, replaced, never changed), so threads sharing a store
never see one half-updated; the messages themselves are frozen models. Bounded by bytes as
stored (the decoded objects take a few times that), least recently read evicted first.

A session first read while the cache is full is not held: only a second read within a window
(a doorkeeper of the keys last turned away, as many as the cache holds entries) evicts others
to hold it. A cache that cannot hold the sessions its store serves would otherwise replace an
entry on every read: each miss would free an entry long out of the CPU's caches and keep its own
models alive long enough for the collector's older generations to walk them again and again, which
made such a store slower than one without a cache (docs/benchmarks.md, "Figures behind the code").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from ..models import Message

DEFAULT_READ_CACHE_BYTES = 64 * 2**20
"""The default bound of a store's read cache: 64 MiB of messages as stored."""
DOORKEEPER_MIN = 16
"""The fewest keys the doorkeeper remembers (more when the cache holds more entries)."""


class Held(NamedTuple):
    """A session's (or child's) messages at absolute positions ``head`` .. ``tail``: the
    slice ``start:end`` of ``store``, a list that entries of one session share and that only
    grows at its end (under the cache's lock), so that holding one more message costs O(1).
    """

    token: bytes
    generation: bytes
    head: int
    store: list[Message]
    start: int
    end: int
    size: int
    """Bytes as stored (the measure the cache is bounded by)."""
    ids: set[str] | None = None
    """Ids in ``store`` (a superset of those held), for a sealed session: a sealed element
    copied within it is dropped."""
    list_head: int = 0
    """The list's head position when the entry was made: below ``head`` when the read that
    made it asked for the newest messages only."""

    @property
    def tail(self) -> int:
        return self.head + self.end - self.start

    def reaches(self, last: int) -> bool:
        """Whether a read of the newest ``last`` messages (< 0: all) can continue this entry:
        it holds the list from its head, or at least ``last`` messages (a version that still
        holds has its tail at or past the entry's). Else the read is one of a session not
        held, whose elements need not pass through Lua.
        """
        return self.head <= self.list_head or 0 <= last <= self.end - self.start

    def covers(self, token: bytes, generation: bytes, start: int, first: int) -> bool:
        """Whether a reply that starts at ``start`` (wanting messages from ``first``) is the
        continuation of this entry.
        """
        return (
            start == self.tail and self.head <= first
            and token == self.token and generation == self.generation
        )  # fmt: skip

    def repeats(self, msg_id: str) -> bool:
        """Whether a message with ``msg_id`` is held (a sealed session's copy)."""
        if self.ids is None or msg_id not in self.ids:
            return False
        return any(m.id == msg_id for m in self.store[self.start : self.end])  # rare: checked

    def extended(
        self, lock: threading.Lock, head: int, first: int, new: Sequence[Message], new_size: int
    ) -> tuple[list[Message], Held]:
        """The messages from ``first`` (held ones, then ``new``) and the entry that holds
        them from ``head`` (the list's head now: what was trimmed away is dropped).
        """
        with lock:
            store, begin, end = self.store, self.start, self.end
            ids = self.ids
            if len(store) == end:  # the newest entry of this list: grow it in place
                store.extend(new)
                end += len(new)
                if ids is not None:
                    ids.update(m.id for m in new)
            else:  # another read grew it past this entry first: a list of its own
                store = store[begin:end] + list(new)
                begin, end = 0, len(store)
                ids = None if ids is None else {m.id for m in store}
        drop = max(head, self.head) - self.head
        begin += drop
        count = self.end - self.start
        size = new_size + (self.size * (count - drop) // count if count else 0)
        if begin > 64 and begin > end - begin:  # mostly trimmed away: let the list go
            store = store[begin:end]
            begin, end = 0, len(store)
            ids = None if ids is None else {m.id for m in store}
        entry = Held(self.token, self.generation, self.head + drop, store, begin, end, size, ids,
                     head)  # fmt: skip
        return store[begin + first - entry.head : end], entry


class ReadCache:
    """Entries by session (or child) key, least recently read first; thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Held] = OrderedDict()
        self._bytes = 0
        self._seen: dict[str, None] = {}
        """Keys turned away while the cache was full, oldest first (the doorkeeper)."""
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """Bytes (as stored) of the messages held."""
        return self._bytes

    def get(self, key: str) -> Held | None:
        if not self.max_bytes:
            return None
        with self.lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def holds(self, key: str) -> bool:
        """Whether an entry for ``key`` is held (not counted as a read of it)."""
        return key in self._entries

    def put(self, key: str, entry: Held) -> bool:
        """Hold ``entry`` for ``key``, unless it alone passes the bound or it would evict others
        to hold a key not held and not turned away lately (see the module docstring); whether
        it is held.
        """
        if not self.max_bytes:
            return False
        with self.lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            if entry.size > self.max_bytes or not entry.token:
                return False
            if old is None and self._bytes + entry.size > self.max_bytes:
                seen = self._seen
                if key not in seen:  # a first read: turned away, remembered
                    seen[key] = None
                    while len(seen) > max(DOORKEEPER_MIN, len(self._entries)):
                        del seen[next(iter(seen))]
                    return False
                del seen[key]
            self._entries[key] = entry
            self._bytes += entry.size
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.size
        return True

    def discard(self, key: str) -> None:
        with self.lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.size

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()
            self._seen.clear()
            self._bytes = 0
