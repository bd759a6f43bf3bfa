"""The ADK session service where a production Redis refuses writes: at ``maxmemory`` with
``noeviction`` and on a read-only replica. Reads (get, list) keep working, the list's upkeep of
the app's index that Redis refuses is left to a later listing, a refused create leaves nothing
behind, and an index entry a listing cannot put back is not lost for good.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import redis

pytest.importorskip("google.adk")  # the adk extra (tools/lowest_deps.sh runs without it)

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions

from redis_session import AsyncRedisStore, SessionError
from redis_session.integrations.adk._service import BUILT, RedisSessionService
from tests.resources.conftest import PrivateServer
from tests.resources.test_memory import fill
from tests.support.servers import wait_until

APP, USER = "limits-app", "alice"
PREFIX = "a:"


async def _made(service: RedisSessionService, count: int) -> list[str]:
    """``count`` sessions of APP/USER, each with one event; their ids."""
    ids = []
    for i in range(count):
        session = await service.create_session(
            app_name=APP, user_id=USER, session_id=f"s{i}", state={"n": i}
        )
        await service.append_event(session, Event(invocation_id=f"i{i}", author="user"))
        ids.append(session.id)
    return ids


async def _listed(service: RedisSessionService) -> list[str]:
    return sorted(s.id for s in (await service.list_sessions(app_name=APP)).sessions)


def _index_key(service: RedisSessionService) -> str:
    return service._index(APP)


async def _reads_work(service: RedisSessionService, ids: list[str]) -> None:
    """get and list (an index that names a gone session too) on a server refusing writes."""
    got = await service.get_session(app_name=APP, user_id=USER, session_id=ids[0])
    assert got is not None and got.state["n"] == 0 and len(got.events) == 1
    assert await _listed(service) == sorted(ids)


async def _limited(
    private_server: PrivateServer, count: int, **options: Any
) -> tuple[Any, AsyncRedisStore, RedisSessionService, list[str]]:
    """A server with a memory limit (noeviction), a raw client of it, a store (``options``)
    and its ADK service with ``count`` sessions, listed once (the index built)."""
    server = private_server(maxmemory=12 * 1024 * 1024, maxmemory_policy="noeviction")
    store = AsyncRedisStore.from_url(server.url, prefix=PREFIX, **options)
    service = RedisSessionService(store)
    ids = await _made(service, count)
    assert await _listed(service) == ids  # the index built
    return server.client(), store, service, ids


@pytest.mark.timeout(60)
async def test_adk_at_maxmemory_reads_and_lists_and_refuses_creates_whole(
    private_server: PrivateServer,
) -> None:
    raw, store, service, ids = await _limited(private_server, 6, ttl=3600)
    gone_id = ids.pop()
    gone_key = service.keys.session(APP, USER, gone_id)
    fill(raw, "f:")
    await store.delete(gone_key)  # a delete frees memory: allowed; its index entry stays
    index = _index_key(service)
    assert raw.zscore(index, service.keys.member(USER, gone_id)) is not None
    await _reads_work(service, ids)
    assert raw.zscore(index, service.keys.member(USER, gone_id)) is None  # ZREM: allowed
    raw.delete(index)  # as if it had expired: the listing finds the sessions by prefix
    assert await _listed(service) == sorted(ids)
    assert not raw.exists(index)  # not rebuilt: its ZADD was refused, the listing was not
    assert await _listed(service) == sorted(ids)  # and again, the same way

    session = await service.get_session(app_name=APP, user_id=USER, session_id=ids[0])
    assert session is not None
    late = Event(invocation_id="late", author="user", actions=EventActions(state_delta={"n": 9}))
    with pytest.raises(redis.exceptions.OutOfMemoryError):  # the one-script append: refused
        await service.append_event(session, late)
    again = await service.get_session(app_name=APP, user_id=USER, session_id=ids[0])
    assert again is not None and len(again.events) == 1 and again.state["n"] == 0
    with pytest.raises(redis.exceptions.OutOfMemoryError) as info:
        await service.create_session(app_name=APP, user_id=USER, session_id="late")
    assert not isinstance(info.value, SessionError)
    made = store._core.schema.session(service.keys.session(APP, USER, "late"))
    assert not raw.exists(made.meta, made.msgs, made.ids)

    for key in raw.scan_iter(match="f:*", count=1000):
        raw.delete(key)
    raw.config_set("maxmemory", 0)
    assert await _listed(service) == sorted(ids)  # memory freed: rebuilt now
    assert raw.zcard(index) == len(ids) + 1  # the members and the built marker
    await service.create_session(app_name=APP, user_id=USER, session_id="late")
    assert await _listed(service) == sorted([*ids, "late"])
    await store.close()
    raw.close()


@pytest.mark.timeout(60)
async def test_a_session_made_again_while_a_listing_drops_it_at_maxmemory_is_listed_again(
    private_server: PrivateServer,
) -> None:
    # The listing reads s0 as gone; before its removal of the entry, another worker makes s0
    # again and memory runs out: the ZREM runs, the check finds s0, the ZADD that would put
    # it back is refused. The built marker goes instead: the next listing rebuilds the index.
    raw, store, service, ids = await _limited(private_server, 3)
    other = RedisSessionService(store)
    await store.delete(service.keys.session(APP, USER, "s0"))
    remove = service._remove

    async def racing(app_name: str, gone: Sequence[str]) -> None:
        await other.create_session(app_name=APP, user_id=USER, session_id="s0")
        fill(raw, "f:")
        await remove(app_name, gone)

    service._remove = racing  # type: ignore[method-assign]
    assert await _listed(service) == ["s1", "s2"]  # what its reads found
    index = _index_key(service)
    assert raw.zscore(index, service.keys.member(USER, "s0")) is None  # not put back ...
    assert raw.zscore(index, BUILT) is None  # ... so the index is to be rebuilt
    service._remove = remove  # type: ignore[method-assign]
    assert await _listed(service) == ids  # found by its key, at maxmemory still
    for key in raw.scan_iter(match="f:*", count=1000):
        raw.delete(key)
    raw.config_set("maxmemory", 0)
    assert await _listed(service) == ids
    assert raw.zscore(index, BUILT) is not None  # rebuilt
    await store.close()
    raw.close()


@pytest.mark.timeout(60)
async def test_adk_on_a_read_only_replica_gets_and_lists(private_server: PrivateServer) -> None:
    primary = private_server()
    replica = private_server(replicaof=f"127.0.0.1 {primary.port}")
    writer_store = AsyncRedisStore.from_url(primary.url, prefix=PREFIX)
    writer = RedisSessionService(writer_store)
    ids = await _made(writer, 4)
    assert await _listed(writer) == sorted(ids)  # the index built
    gone_id = ids.pop()
    gone = writer_store._core.schema.session(writer.keys.session(APP, USER, gone_id))
    await writer_store.delete(writer.keys.session(APP, USER, gone_id))
    raw = replica.client()
    index = _index_key(writer)
    assert wait_until(lambda: raw.zcard(index) == 5 and not raw.exists(gone.meta), 15)
    reader_store = AsyncRedisStore.from_url(replica.url, prefix=PREFIX)
    reader = RedisSessionService(reader_store)
    # the index names a gone session: listed without it (its ZREM refused by the replica)
    await _reads_work(reader, ids)
    assert raw.zcard(index) == 5
    primary.client().delete(index)
    assert wait_until(lambda: not raw.exists(index), 15)
    assert await _listed(reader) == sorted(ids)  # found by prefix, not indexed: read only
    with pytest.raises(redis.exceptions.ReadOnlyError):
        await reader.create_session(app_name=APP, user_id=USER, session_id="late")
    session = await reader.get_session(app_name=APP, user_id=USER, session_id=ids[0])
    assert session is not None
    with pytest.raises(redis.exceptions.ReadOnlyError):  # the one-script append
        await reader.append_event(session, Event(invocation_id="late", author="user"))
    for s in (writer_store, reader_store):
        await s.close()
    raw.close()
