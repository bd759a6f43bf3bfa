"""The blocking flavour: :class:`RedisStore` over ``redis.Redis``, and :class:`Turn`, one
worker's turn in a session.

Generated into ``redis_session/_sync/store.py`` by ``tools/unasync.py`` from the asyncio
flavour (:mod:`redis_session.aio`): the two cannot drift.
"""

from __future__ import annotations

from ._sync.store import RedisStore, Turn

__all__ = ["RedisStore", "Turn"]
