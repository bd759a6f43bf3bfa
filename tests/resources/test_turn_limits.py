"""Turns where Redis refuses writes: a claim at ``maxmemory`` (noeviction) and on a read-only
replica is refused cleanly (redis-py's error, nothing claimed); a turn claimed before the
limit still fences its writes, which are refused as OOM too; once memory frees, claims work."""

from __future__ import annotations

import pytest
import redis

from redis_session import Message, RedisStore, Session, SessionError
from tests.resources.conftest import PrivateServer
from tests.resources.test_memory import fill
from tests.support.servers import wait_until


def test_a_claim_at_maxmemory_is_refused_and_claims_nothing(
    private_server: PrivateServer,
) -> None:
    server = private_server(maxmemory="8mb", maxmemory_policy="noeviction")
    raw = server.client()
    store = RedisStore.from_url(server.url, prefix="t:", ttl=3600)
    store.create(Session(key="s"))
    store.create(Session(key="held"))
    with store.turn("held", lease=30) as held:
        fill(raw, "t:")
        with pytest.raises(redis.exceptions.OutOfMemoryError) as info, store.turn("s", lease=30):
            pass
        assert not isinstance(info.value, SessionError)
        assert raw.exists("t:turn:{s}") == 0 and raw.hget("t:meta:{s}", "tk") is None
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            held.append_message(Message(role="user", content="over the limit"))
        for key in raw.scan_iter(match="t:filler:*", count=1000):
            raw.delete(key)
        assert held.append_message(Message(role="user", content="memory freed"))
    with store.turn("s", lease=30) as later:
        assert later.token == 1
    store.close()


def test_a_claim_on_a_read_only_replica_is_refused(private_server: PrivateServer) -> None:
    primary = private_server()
    replica = private_server(replicaof=f"127.0.0.1 {primary.port}")
    writer = RedisStore.from_url(primary.url, prefix="r:")
    writer.create(Session(key="s"))
    raw = replica.client()
    assert wait_until(lambda: raw.exists("r:meta:{s}") == 1, 15)
    reader = RedisStore.from_url(replica.url, prefix="r:")
    with pytest.raises(redis.exceptions.ReadOnlyError), reader.turn("s"):
        pass
    with writer.turn("s") as held:
        assert held.token == 1
    for store in (writer, reader):
        store.close()
