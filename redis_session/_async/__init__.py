"""The asyncio side, written by hand: the store (:mod:`.store`), its listeners and its
clients. ``tools/unasync.py`` generates the blocking side (``redis_session._sync``) from these
modules. This module imports nothing.
"""
