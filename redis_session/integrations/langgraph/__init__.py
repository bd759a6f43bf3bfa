"""A LangGraph checkpointer (``BaseCheckpointSaver``) on plain Redis, Valkey, a Redis
Cluster or Sentinel: ``RedisSaver(store)`` over a :class:`~redis_session.RedisStore`,
``AsyncRedisSaver(store)`` over an :class:`~redis_session.AsyncRedisStore` (the names of
``langgraph-checkpoint-redis``, which needs RedisJSON and RediSearch; this one needs neither),
each also ``.from_url(url, **store_options)``.

Mapping. A thread is one store session, ``langgraph/<thread id>`` (percent-encoded), and two
keys in its slot, named after the session's: ``<prefix>lgdata:{...}`` (a hash: per
checkpoint its record and references, per channel version its value and reference count, per
pending write its value) and ``<prefix>lgorder:{...}`` (a sorted set read by lexical range:
the checkpoints of each namespace in id order, the writes of each checkpoint, the checkpoints
of each run). Subgraph namespaces live inside their thread's keys. Values are serialized with
the saver's ``serde`` (LangGraph's ``JsonPlusSerializer`` by default; its
``EncryptedSerializer`` works too); a channel value is stored once per version and shared by
every checkpoint that holds it (LangGraph's incremental channel updates).

Atomicity. ``put`` and ``put_writes`` are one script each (``langgraph_put.lua``,
``langgraph_put_writes.lua``, run through :mod:`redis_session.extension`); ``get_tuple`` and
each page of ``list`` one read script (one snapshot); ``get_delta_channel_history`` (LangGraph's
``DeltaChannel``) one read script per 100 ancestors walked. ``put`` makes the thread's session the
first time (``store.create``: a ``create`` event). ``exclusive_steps=True``: a ``put`` that
continues from a parent (``source`` ``loop`` or ``input``) is refused with :class:`StepTaken`
when the parent already has such a child, so two workers resuming (or starting a run on) the
same thread cannot both write the same step (a fork by ``update_state`` is an ``update``:
never refused).

TTL. The store's ``ttl``: a thread expires as one tree (its session and both keys), each
``put`` / ``put_writes`` moves its deadline, reads too with ``ttl_config={"refresh_on_read":
True}``. ``ttl_config={"default_ttl": minutes}`` is accepted for a migration (it must be the
store's ``ttl``; ``from_url`` sets it).

Cleanup. ``delete_thread`` removes the thread's keys and its session (``delete`` event);
``prune`` keeps each namespace's newest checkpoint (or deletes the threads);
``delete_for_runs`` finds a run's threads in the run's registry (``<prefix>lgrun:{...}``, a
set written before the run's first checkpoint in a thread); ``copy_thread`` is the store's
``branch`` of the session, then one script writing one snapshot of the source's checkpoints.
"""

from __future__ import annotations

from ..._dist import install_hint

try:
    import langgraph.checkpoint.base  # noqa: F401
    import ormsgpack  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        f"redis_session.integrations.langgraph needs LangGraph: {install_hint('langgraph')}"
    ) from exc

from ._async_saver import AsyncRedisSaver
from ._base import TTLConfig
from ._saver import RedisSaver
from ._thread import StepTaken

__all__ = ["AsyncRedisSaver", "RedisSaver", "StepTaken", "TTLConfig"]
