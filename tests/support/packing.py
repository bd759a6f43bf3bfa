"""Whether a connection packs its commands through the store's hiredis packer."""

from __future__ import annotations

from typing import Any

from redis_session._url import HiredisPacker


def packs_with_hiredis(connection: Any) -> bool:
    """Its packer is a :class:`HiredisPacker` (redis-py 8.2, and blocking connections of 8.1),
    or its ``pack_command`` is one's (asyncio connections of redis-py 8.1).
    """
    own = vars(connection)
    packer = own.get("_command_packer")
    if isinstance(packer, HiredisPacker):
        return True
    return isinstance(getattr(own.get("pack_command"), "__self__", None), HiredisPacker)
