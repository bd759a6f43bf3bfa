"""What an integration may use of a store, besides its public methods: its options and key
names, the tree-write loop, and the means to run an operation of its own with a script of its
own (``store.register_script(name, source)``, ``await store.run(op)`` on the async store).

An operation is a generator that yields requests (:class:`ScriptCall`, :class:`Commands`,
:class:`Emit`) and receives each reply, as the store's own operations do (see ``_core``); the
store runs it with its client (of the running event loop, on the async store), reloading a
script the server lost (``NOSCRIPT``) and waiting for replicas when the store does.
``store.extension`` is an :class:`Extension`: it builds nothing the store does not.

The Google ADK adapter (``redis_session.integrations.adk``) is written against this module
and the stores' public methods only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import contracts
from ._core.core import Core
from ._core.eventlog import Draft, new_event
from ._core.requests import Commands, Emit, Op, Request, ScriptCall
from .contracts import Head
from .crypto import Sealer
from .keys import KeySchema
from .options import StoreOptions
from .status import Ctx

__all__ = [
    "Commands",
    "Draft",
    "Emit",
    "Extension",
    "Head",
    "Op",
    "Request",
    "ScriptCall",
    "new_event",
]


class Extension:
    """A store's building blocks for integrations (``store.extension``)."""

    def __init__(self, core: Core) -> None:
        self._core = core

    @property
    def options(self) -> StoreOptions:
        """The store's options."""
        return self._core.options

    @property
    def schema(self) -> KeySchema:
        """The store's key names."""
        return self._core.schema

    def events_of(self, key: str) -> contracts.Events:
        """The events arguments (``events`` in a script's header) of a script that logs a
        lifecycle event of session ``key``'s tree with ``log_event`` (see ``lua/_prelude.lua``).
        """
        return self._core.events.events_of(key)

    def log_of(self, key: str) -> str:
        """The event log stream of session ``key``'s tree (a script that logs its events
        names it in its KEYS).
        """
        return self._core.events.log_of(key)

    def root_keys(self, key: str) -> tuple[str, ...]:
        """The seven root KEYS of session ``key``'s tree (see ``lua/_prelude.lua``)."""
        return self._core.trees.keys(key)[1]

    def head(self, key: str) -> Head:
        """The four ARGV every script that writes session ``key``'s tree begins with."""
        return self._core.trees.head(key)

    def members(self, key: str) -> tuple[str | bytes, ...]:
        """The KEYS of session ``key``'s tree members, sent after a script's own KEYS."""
        return self._core.trees.members(key)

    def metadata_pairs(self, entries: Mapping[str, str], argument: str) -> list[bytes]:
        """``entries`` as cleartext meta-hash pairs (``m:<name>``, value), each value checked
        against ``max_metadata_value_bytes`` (``InvalidArgument`` naming ``argument``).
        """
        return self._core.sessions.metadata.pairs(entries, argument)(None)

    def write(
        self,
        key: str,
        build: Callable[[Sealer | None], ScriptCall],
        ctx: Ctx,
        passthrough: tuple[int, ...] = (),
    ) -> Op[Sequence[Any]]:
        """The store's loop for a script that writes session ``key``'s tree: ``build`` is
        called for each send (with the session's sealer, None for a cleartext store) and must
        name the tree's members as :meth:`head` and :meth:`members` give them now; a reply
        that the tree changed is learnt and the script sent again. Replies with a status in
        ``passthrough`` are returned; OK is returned; any other status raises its error.
        """
        return self._core.writer.write(key, build, ctx, passthrough)

    def learn_tree(self, key: str, reply: Sequence[Any]) -> None:
        """Learn session ``key``'s tree from a ``TREE_CHANGED`` reply."""
        tree = contracts.parsed(contracts.TreeChanged, reply)
        self._core.trees.learn(key, tree.tree_generation, tree.members)
