"""The sans-I/O core: every store operation as a generator of Redis requests.

An operation validates its arguments, yields :class:`ScriptCall` or :class:`Commands` requests,
receives each reply by ``send`` and returns its result (or raises). ``RedisStore`` and
``AsyncRedisStore`` only drive these generators, one with blocking calls and one with ``await``,
so the two cannot drift in behaviour.

The operations are grouped by concern: ``_sessions`` (sessions), ``_children`` (child
sessions), ``_secrets`` (salts, checksums, secrets) and ``_keyring`` (encryption keys and
rotation), over ``_base`` (options, key names, the session tree, the write loop).
"""

from __future__ import annotations

from ._base import (
    DEFAULT_DEDUP_WINDOW,
    DEFAULT_EXPIRED_GRACE,
    DEFAULT_KEEP_MERGED_CHILDREN,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_METADATA_BYTES,
    DEFAULT_MAX_METADATA_VALUE_BYTES,
)
from ._children import ChildOps
from ._keyring import RekeyProgress, RekeyReport
from ._requests import Commands, Compute, Emit, Op, Request, ScriptCall
from ._secrets import SecretOps
from ._sessions import SessionOps

__all__ = [
    "DEFAULT_DEDUP_WINDOW",
    "DEFAULT_EXPIRED_GRACE",
    "DEFAULT_KEEP_MERGED_CHILDREN",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_METADATA_BYTES",
    "DEFAULT_MAX_METADATA_VALUE_BYTES",
    "Commands",
    "Compute",
    "Core",
    "Emit",
    "Op",
    "RekeyProgress",
    "RekeyReport",
    "Request",
    "ScriptCall",
]


class Core(SessionOps, ChildOps, SecretOps):
    """Options and operations shared by the sync and async stores."""
