"""The key schema: every Redis key name the store uses, and the cluster slot rule.

A session key is any non-empty string. Its keys in Redis look like::

    <prefix>meta:{<root>}<rest>     hash: scalar fields, ``m:<name>`` metadata entries, list
                                    positions, the tree's deadline and generation
    <prefix>msgs:{<root>}<rest>     list: one JSON message per element, in append order
    <prefix>ids:{<root>}<rest>      hash: the id window (digests of the newest message ids and
                                    call tokens: idempotency)
    <prefix>kids:{<root>}<rest>     zset: the session's children (live, and merged ones kept
                                    whole), scored by fork order
    <prefix>done:{<root>}<rest>     zset: tombstones of ended children (the newest 100)
    <prefix>mark:{<root>}<rest>     string: the expiry marker (outlives the tree by a grace
                                    period, so that an expired session is told from none)
    <prefix>pop:{<root>}<rest>      string: the last popped element, kept briefly for a retry
    <prefix>turn:{<root>}<rest>     string: the session's turn while a worker holds it
                                    ('<token>:<call token>', expiring with its lease)
    <prefix>wake:{<root>}<rest>     list: wakes a worker waiting for the turn (briefly)
    <prefix>gone:{<root>}<rest>     string: the idempotency key of the delete that removed the
                                    session (kept ``expired_grace``, for the caller's retry)

and a child session (its key made by ``ChildSession.new``) has its own namespace::

    <prefix>child:{<root>}<rest>    hash: parent, agent, config, timestamps, merge marks,
                                    list positions
    <prefix>cmsgs:{<root>}<rest>    list: 8-byte id digest + JSON per message
    <prefix>cids:{<root>}<rest>     hash: the child's id window
    <prefix>stage:{<root>}<rest>    list: a large merge's staging list (briefly)

A session and its children form a tree that expires as one: every key above shares the
deadline in the session's meta hash.

``root`` is the part of the key before its first ``":child:"`` (the whole key when there is
none) and ``rest`` what follows. A child key is ``<parent>:child:<agent>:<ns>``, so its root is
its parent's root: a session and all of its descendants share one hash tag, hence one cluster
slot, and every script touches one slot only.

Both parts are percent-encoded (``%``, ``{`` and ``}`` only), so the tag can hold no brace and the
mapping from session key to key names is injective; an empty root is written ``%`` (no encoded
string is a lone ``%``) because Redis hashes the whole name when the tag is empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from .errors import InvalidArgument

CHILD_MARKER = ":child:"
_SESSION_TYPES = {
    "meta": "hash", "msgs": "list", "ids": "hash", "kids": "zset", "done": "zset",
    "mark": "string", "pop": "string", "turn": "string", "wake": "list", "stage": "list",
    "gone": "string",
    "child": "hash", "cmsgs": "list",
    "cids": "hash", "index": "zset", "log": "stream", "index-shards": "set", "usage": "hash",
    "lgdata": "hash", "lgorder": "zset", "lgrun": "set",  # integrations.langgraph's
}  # fmt: skip
"""The type of each kind of key named ``<prefix><kind>:{<tag>}...`` (see the module docstring)."""
_GLOBAL_TYPES = {
    "salts": "hash", "checksums": "hash", "secrets": "hash", "keyring": "hash",
    "secrets-lock": "string",
}  # fmt: skip
_PREFIX_TYPES = {"index": "zset", "index-shards": "set", "log": "stream", "usage": "hash"}
_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})
GLOBAL_TAG = "{rs-global}"


@cache
def slot_tags() -> tuple[str, ...]:
    """For every cluster slot, a short string that hashes to it (computed once, ~0.1 s)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    table: list[str | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
    left, n = REDIS_CLUSTER_HASH_SLOTS, 0
    while left:
        tag, i = "", n
        while True:
            i, r = divmod(i, 36)
            tag = digits[r] + tag
            if i == 0:
                break
        slot = key_slot(tag.encode())
        if table[slot] is None:
            table[slot] = tag
            left -= 1
        n += 1
    return tuple(t for t in table if t is not None)


def check_key(key: object, argument: str = "key") -> str:
    """Return ``key`` if it is a usable session key, else raise :class:`InvalidArgument`."""
    if not isinstance(key, str):
        raise InvalidArgument(argument, f"must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidArgument(argument, "must not be empty")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(argument, "must be encodable as UTF-8 (no lone surrogates)") from exc
    return key


def parent_of(child_key: str) -> tuple[str, str] | None:
    """``(parent_key, agent_name)`` of a key made by ``ChildSession.new``, else None.

    Agent names hold no ``:``, so the key splits from the right without ambiguity.
    """
    head, _, rest = child_key.rpartition(CHILD_MARKER)
    agent, sep, ns = rest.partition(":")
    if not head or not sep or not agent or not ns.isdigit():
        return None
    return head, agent


def _escape(text: str) -> str:
    return text.translate(_ESCAPES)


def hash_tag(key: str) -> str:
    """The hash tag (without braces) shared by ``key`` and every descendant of it."""
    root = key.split(CHILD_MARKER, 1)[0]
    return _escape(root) or "%"


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The Redis key names of one session: the root of its tree."""

    meta: str
    msgs: str
    ids: str
    kids: str
    done: str
    mark: str
    pop: str
    turn: str
    wake: str
    stage: str
    """The prefix of the session's staging lists (``stage + "#" + token``: one per call)."""
    gone: str
    """The idempotency key of the delete that removed the session, kept for a retry."""


@dataclass(frozen=True, slots=True)
class ChildKeys:
    """The Redis key names of one child session."""

    meta: str
    msgs: str
    ids: str
    stage: str


@dataclass(frozen=True, slots=True)
class KeySchema:
    """Builds key names under one prefix. The prefix may not contain braces.

    ``cluster`` shards the session index by slot (see :meth:`index_of`).
    """

    prefix: str = "rs:"
    cluster: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str):
            raise InvalidArgument("prefix", f"must be a str, not {type(self.prefix).__name__}")
        if "{" in self.prefix or "}" in self.prefix:
            raise InvalidArgument("prefix", "must not contain '{' or '}' (they pick the slot)")

    def _body(self, key: str) -> str:
        root, sep, rest = key.partition(CHILD_MARKER)
        return "{" + (_escape(root) or "%") + "}" + _escape(sep + rest)

    @lru_cache(maxsize=4096)  # noqa: B019 - schemas are few and live as long as their stores
    def session(self, key: str) -> SessionKeys:
        """The key names of session ``key``."""
        body = self._body(key)
        p = self.prefix
        return SessionKeys(
            meta=f"{p}meta:{body}", msgs=f"{p}msgs:{body}", ids=f"{p}ids:{body}",
            kids=f"{p}kids:{body}", done=f"{p}done:{body}", mark=f"{p}mark:{body}",
            pop=f"{p}pop:{body}", turn=f"{p}turn:{body}", wake=f"{p}wake:{body}",
            stage=f"{p}stage:{body}", gone=f"{p}gone:{body}",
        )  # fmt: skip

    @lru_cache(maxsize=4096)  # noqa: B019
    def child(self, key: str) -> ChildKeys:
        """The key names of child session ``key`` (in its parent's slot). A ``kids`` member
        that is not UTF-8 comes as a str with surrogate escapes (see ``codec.member_key``);
        its names go to Redis through ``codec.wire``.
        """
        p = self.prefix
        body = self._body(key)
        return ChildKeys(
            meta=f"{p}child:{body}", msgs=f"{p}cmsgs:{body}", ids=f"{p}cids:{body}",
            stage=f"{p}stage:{body}",
        )  # fmt: skip

    @lru_cache(maxsize=4096)  # noqa: B019
    def index_of(self, key: str) -> str:
        """The sorted set that lists session ``key``, scored by ``updated_at`` (ms).

        One index per prefix on a single server. On a cluster, one per slot, named with a tag
        that hashes to the session's own slot, so the scripts that update it stay single-slot
        and no index key is hot.
        """
        if not self.cluster:
            return f"{self.prefix}index"
        slot = key_slot(("{" + hash_tag(key) + "}").encode())
        return f"{self.prefix}index:{{{slot_tags()[slot]}}}"

    @lru_cache(maxsize=4096)  # noqa: B019
    def log_of(self, key: str) -> str:
        """The stream that logs the lifecycle events of session ``key``'s tree: one per prefix
        on a single server; on a cluster one per slot, beside the slot's index shard (the
        same tag), so the script that makes a change logs it in its own slot.
        """
        return self.beside(self.index_of(key), "log")

    @lru_cache(maxsize=4096)  # noqa: B019
    def usage_of(self, key: str) -> str:
        """The usage totals (a hash: ``ui``, ``uo``, ``ur``) that session ``key``'s appends add
        to: one per prefix on a single server, one per slot on a cluster beside the slot's
        index shard (as :meth:`log_of`).
        """
        return self.beside(self.index_of(key), "usage")

    @lru_cache(maxsize=4096)  # noqa: B019
    def shard_channel_of(self, key: str) -> str:
        """The shard channel (``SPUBLISH``) of session ``key``'s events with sharded events:
        ``<prefix>events`` on a single server, ``<prefix>events:{tag}`` on a cluster (the tag
        of the session's slot, so that a node carries its own slots' events alone).
        """
        return self.beside(self.index_of(key), "events")

    def beside(self, index: str, kind: str) -> str:
        """The name of kind ``kind`` (``log``, ``events``) beside index shard ``index``:
        ``<prefix>index...`` -> ``<prefix><kind>...`` (the same slot tag).
        """
        return f"{self.prefix}{kind}{index[len(self.prefix) + len('index') :]}"

    def all_indexes(self) -> list[str]:
        """Every index key there can be (one, or one per slot on a cluster)."""
        if not self.cluster:
            return [f"{self.prefix}index"]
        return [f"{self.prefix}index:{{{tag}}}" for tag in slot_tags()]

    @property
    def index_registries(self) -> tuple[str, ...]:
        """On a cluster: the copies of the registry of index shards that were ever created
        (``list_sessions`` reads their union instead of probing all 16384 shards).

        Three sets holding the same members: ``<prefix>index-shards`` and two copies tagged a
        third and two thirds of the slot ring away from its slot, so that a cluster whose
        primaries split the slots evenly holds each copy on another node, and no single node
        gates creates or listing (see ``_core.index.Index``).
        """
        first = f"{self.prefix}index-shards"
        slot = key_slot(first.encode())
        tags = slot_tags()
        return (
            first,
            *(
                f"{first}:{{{tags[(slot + offset) % REDIS_CLUSTER_HASH_SLOTS]}}}"
                for offset in (5461, 10923)  # redis-cli splits 3 primaries 5461/5462/5461
            ),
        )

    def expected_type(self, name: str) -> str | None:
        """The Redis type a key of this name holds when this store wrote it (``"hash"``,
        ``"list"``, ...), or None when the name is none of the store's (another program's key
        under the prefix, or a store's with a longer prefix). Integrations' indexes
        (``<name>-index:{<tag>}``) are sorted sets.
        """
        if not name.startswith(self.prefix):
            return None
        rest = name[len(self.prefix) :]
        if rest in _PREFIX_TYPES:
            return _PREFIX_TYPES[rest]
        kind, brace, tail = rest.partition(":{")
        if not brace or "}" not in tail:
            return None
        if kind in _GLOBAL_TYPES:
            return _GLOBAL_TYPES[kind] if "{" + tail == GLOBAL_TAG else None
        if kind.endswith("-index") and kind not in _SESSION_TYPES:
            return "zset"
        return _SESSION_TYPES.get(kind)

    @property
    def salts(self) -> str:
        """Hash of named salts."""
        return f"{self.prefix}salts:{GLOBAL_TAG}"

    @property
    def checksums(self) -> str:
        """Hash of named checksums."""
        return f"{self.prefix}checksums:{GLOBAL_TAG}"

    @property
    def secrets(self) -> str:
        """Hash of named secrets (opaque bytes) and their version counter."""
        return f"{self.prefix}secrets:{GLOBAL_TAG}"

    @property
    def keyring(self) -> str:
        """Hash of the encryption keyring: the current key id and the wrapped data keys."""
        return f"{self.prefix}keyring:{GLOBAL_TAG}"

    @property
    def events_channel(self) -> str:
        """The pub/sub channel lifecycle events are published on."""
        return f"{self.prefix}events"
