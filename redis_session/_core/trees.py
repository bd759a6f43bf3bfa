"""The key names of the sessions a store works on, and what it knows of their trees.

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

from collections.abc import Sequence
from typing import Any

from .. import codec
from ..contracts import Head
from ..keys import KeySchema, SessionKeys
from ..options import StoreOptions

KEY_CACHE = 4096
"""Sessions whose key names and tree a store keeps at hand (then it starts over)."""
Tree = tuple[str, tuple[str | bytes, ...], tuple[str, ...]]
"""A tree as a store knows it: its generation, its members' KEYS (meta, msgs, ids per child)
and its members' child keys."""
NO_TREE: Tree = ("0", (), ())


class Trees:
    """Key names and tree members, by session key (bounded caches: hot path)."""

    def __init__(self, schema: KeySchema, options: StoreOptions) -> None:
        self.schema = schema
        self.options = options
        self._names: dict[str, tuple[SessionKeys, tuple[str, ...]]] = {}
        self._trees: dict[str, Tree] = {}
        self.new_head = Head(options.ttl_ms, options.grace_ms, NO_TREE[0], options.window)
        """The head of a script writing a tree this store knows nothing of (built once)."""

    def keys(self, key: str) -> tuple[SessionKeys, tuple[str, ...]]:
        """The key names of session ``key`` and the root KEYS of its tree's scripts (meta,
        msgs, ids, index, marker, kids, done).
        """
        known = self._names.get(key)
        if known is None:
            sk = self.schema.session(key)
            index = self.schema.index_of(key)
            known = sk, (sk.meta, sk.msgs, sk.ids, index, sk.mark, sk.kids, sk.done)
            if len(self._names) >= KEY_CACHE:
                self._names.clear()
            self._names[key] = known
        return known

    def get(self, root: str) -> Tree | None:
        """What this store knows of ``root``'s tree, if anything."""
        return self._trees.get(root)

    def tree(self, root: str) -> Tree:
        """What this store knows of ``root``'s tree (nothing: generation 0, no members)."""
        return self._trees.get(root, NO_TREE)

    def members(self, root: str) -> tuple[str | bytes, ...]:
        """The KEYS of ``root``'s members, as this store knows them."""
        return self._trees.get(root, NO_TREE)[1]

    def head(self, root: str) -> Head:
        """The ARGV every tree-writing script begins with."""
        tree = self._trees.get(root)
        if tree is None:
            return self.new_head
        o = self.options
        return Head(o.ttl_ms, o.grace_ms, tree[0], o.window)

    def learn(self, root: str, tg: Any, members: Sequence[Any]) -> None:
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

    def forget(self, root: str) -> None:
        """Forget ``root``'s tree (it was created or deleted)."""
        self._trees.pop(root, None)
