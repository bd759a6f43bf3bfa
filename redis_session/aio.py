"""The asyncio flavour: :class:`AsyncRedisStore` over ``redis.asyncio.Redis``, and
:class:`AsyncTurn`, one worker's turn in a session.

Written in ``redis_session/_async/store.py``, the source ``tools/unasync.py`` generates the
blocking flavour (:mod:`redis_session.store`) from.
"""

from __future__ import annotations

from ._async.store import AsyncRedisStore, AsyncTurn

__all__ = ["AsyncRedisStore", "AsyncTurn"]
