"""A Google ADK ``BaseSessionService`` backed by :class:`~redis_session.AsyncRedisStore`.

``RedisSessionService(store)`` is a drop-in for ADK's ``InMemorySessionService`` /
``DatabaseSessionService``: give it to a ``Runner`` (``session_service=...``) and every worker
sharing the store's Redis (and prefix) sees the same sessions, events and state.

Mapping. Everything lives in ordinary store sessions whose keys :class:`AdkKeys` makes (the one
place that names them; each part is percent-encoded, so ``/`` and ``:`` in names are safe and
two names never collide):

- ``adk/session/<app>/<user>/<id>``: the ADK session, one store session: metadata
  ``adk:app_name``, ``adk:user_id``, ``adk:session_id``, ``adk:last_update_time`` (``repr``
  of the float), ``adk:layout`` (``2``) and one ``state:<key>`` entry (JSON text) per
  session-state key; its events are its messages, one each. ``content`` is the event's JSON
  (``Event.model_dump_json(exclude_defaults=True)``, read back with
  ``Event.model_validate_json``: lossless), ``id`` the event id (a stable digest of it when
  it is not a valid message id), ``author`` the event's author, ``timestamp`` the event's,
  ``role`` ``user`` for the user's events, ``tool`` for function responses, ``assistant``
  otherwise.
- ``adk/user/<app>/<user>``: ``user:`` state shared by all sessions of that user, as
  ``state:<key>`` entries (key without the prefix).
- ``adk/app/<app>``: ``app:`` state shared by all sessions of the app, likewise.

``temp:`` state is applied to the in-memory session during the invocation and never stored.
State values are stored as JSON; values JSON cannot hold are stored as their ``repr`` with a
warning (as ADK's own persistent services do).

Reading. ``get_session`` reads the session with only the events it returns
(``store.get(key, last=N)``: fields, metadata and the newest N messages in one snapshot), so
``GetSessionConfig(num_recent_events=N)`` never reads the whole history. With
``after_timestamp`` it reads the newest 16, 32, 64… events until a page reaches an older
event: the cost follows the number of events returned (the pages overlap: at most about four
times the events returned, plus 16), not the history's length.

Consistency. ``append_event`` is one script (this package's ``adk_append_event.lua``, run through
the store's extension point, :mod:`redis_session.extension`; one round trip):
it refuses a stale caller with ADK's ``StaleSessionError`` (the stored ``last_update_time``
is later than the caller's and the newest stored event is not the caller's newest: the rule
of ADK's ``DatabaseSessionService`` for sessions without its storage marker), checked before
the first write, then stores the event, the session-state delta, ``last_update_time =
event.timestamp`` and the ``app:`` / ``user:`` deltas (making their records when missing).
Two workers holding the same version of a session: exactly one append lands, the other is
refused and stores nothing (the caller reloads with ``get_session`` and retries). An event
whose id is already stored changes nothing and is not taken for a stale write, so retrying a
failed ``append_event`` is safe.

Cluster. All keys of one script must share a slot, and the ``app:`` / ``user:`` records are
shared by many sessions, so they cannot share every session's slot. On a Redis Cluster the
script covers the session only (stale check, event, session state, ``last_update_time``:
atomic), and the app / user deltas are applied right after, concurrently, each atomically
and idempotently (state by value): a crash between the two steps leaves the event stored and
a shared delta missing, and a refused (stale) append writes nothing anywhere. Per-app hash
tags would put one app's sessions in one slot (one hot slot per app, and every stored key
renamed); the keys stay as they were, so data written by earlier versions reads unchanged.

Encryption. The script cannot compare or write sealed values, so with a passphrase the store's
own path is kept (``append_message`` with metadata, then the shared deltas as on a cluster),
preceded by a stale check in Python: one more round trip, and not atomic with the append (a
concurrent writer between the check and the append is not refused).

TTL. With a store ``ttl``, the three records expire ``ttl`` after their last write;
``append_event`` also refreshes the user and app records (in the same script, or the same
concurrent step on a cluster), so shared state outlives every session that uses it.

Ordering. Events come back as ADK's database service orders them: by timestamp, ties by event
id. ``num_recent_events=N`` reads the newest N + 1 appended events (more, doubling, while the
oldest one read ties with the N-th), so a tie at the edge is cut by id.

Listing. ``list_sessions`` reads the app's index (``<prefix><namespace>-index:{<app>}``, a
sorted set of ``<user>/<session>`` members read by lexical range: one app's or one user's
sessions only), then each listed session's fields and metadata without its events. A session
is indexed before it is created (and again once created) and unindexed after it is deleted, so
the index may name a session that is gone (deleted, expired) but never misses one; such
entries are dropped when a listing finds them, and each ``create_session`` samples
``PRUNE_SAMPLE`` (4) members and drops those that are gone, so an app that is never listed
keeps an index near its live sessions, not one entry per session it ever had; with a store
``ttl``, an index lives ``2 * ttl`` after its app's last create (a listing after that, of
sessions kept alive by their appends, rebuilds it as for sessions older than the index). Sessions
created before the index are found once, the first time their app is listed (by prefix, as
earlier versions listed), and indexed then (the member ``!`` marks an index that is complete).
"""

from __future__ import annotations

from ._service import AdkKeys, RedisSessionService

__all__ = ["AdkKeys", "RedisSessionService"]
