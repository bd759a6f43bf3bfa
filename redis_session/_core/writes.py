"""The loop every write to a session tree goes through: the script is built for the tree's
members and the session's key as this store knows them, and sent again (a few times at most)
when the script answers that it knew them wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import contracts
from .._transport.telemetry import note_trimmed
from ..crypto import Sealer
from ..errors import ConcurrentChange
from ..status import Ctx, Status, check
from .keyring import Keyring
from .limits import WRITE_ATTEMPTS
from .requests import Op, ScriptCall
from .trees import Trees


def appended(reply: Any) -> int:
    """The number of messages an append script's OK reply says it stored; what it trimmed
    from the session's head is noted for the call's span and metrics.
    """
    done = contracts.parsed(contracts.Appended, reply)
    if done.trimmed:
        note_trimmed(done.trimmed)
    return done.appended


class Writer:
    """Sends tree writes (see the module docstring)."""

    def __init__(self, trees: Trees, keyring: Keyring) -> None:
        self.trees = trees
        self.keyring = keyring

    def write(
        self,
        root: str,
        build: Callable[[Sealer | None], ScriptCall],
        ctx: Ctx | Callable[[], Ctx],
        passthrough: tuple[int, ...] = (),
    ) -> Op[Sequence[Any]]:
        """Run the write script ``build`` makes, sealing with session ``root``'s own key and
        naming the tree's members as this store knows them: when the script answers
        ``KEY_CHANGED`` follow the session's key, when it answers ``TREE_CHANGED`` learn the
        members, when it answers ``VERSION`` (a sealed metadata value of another writer is
        newer) seal past it, and send it again. Replies whose status is in ``passthrough`` are
        returned for the caller to handle; an OK reply is returned, any other raises.
        """
        keyring = self.keyring
        for _ in range(WRITE_ATTEMPTS):
            reply = yield build(keyring.sealer(root))
            status = contracts.status(reply)
            if status == Status.OK:  # the common case first
                return reply  # type: ignore[no-any-return]
            if status in passthrough:
                return reply  # type: ignore[no-any-return]
            if status == Status.KEY_CHANGED:
                changed = contracts.parsed(contracts.KeyChanged, reply)
                yield from keyring.follow(root, changed.kid, changed.dk)
                continue
            if status == Status.VERSION:  # another writer's clock is ahead: go past it
                refused = contracts.parsed(contracts.VersionRefused, reply)
                name = refused.field[2:].decode("utf-8", "replace")
                keyring.versions[(root, name)] = int.from_bytes(refused.version, "big")
                continue
            if status == Status.TREE_CHANGED:
                tree = contracts.parsed(contracts.TreeChanged, reply)
                self.trees.learn(root, tree.tree_generation, tree.members)
                continue
            return check(reply, ctx)
        raise ConcurrentChange(root, "its encryption key or its children kept changing")
