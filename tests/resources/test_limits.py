"""A read-only replica, a busy server, a full client table: what callers see, and recovery
(issue #14, points 1, 2 and 5).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest
import redis

from redis_session import (
    AsyncRedisStore,
    ChildSessionConfig,
    Message,
    RedisStore,
    Session,
    SessionError,
)
from tests.resources.conftest import PrivateServer
from tests.support.figures import Recorder
from tests.support.servers import wait_until
from tests.support.stepping import in_steps, recording


def msg(content: str) -> Message:
    return Message(role="user", content=content)


def test_a_read_only_replica_serves_every_read(
    private_server: PrivateServer, figures: Recorder
) -> None:
    primary = private_server()
    replica = private_server(replicaof=f"127.0.0.1 {primary.port}")
    writer = RedisStore.from_url(primary.url, prefix="r:")
    writer.create(Session(key="s", history=[msg(f"m{i}") for i in range(130)]))
    child = writer.fork_child("s", "sub", ChildSessionConfig(inherit_history=2))
    raw = replica.client()
    assert wait_until(lambda: raw.exists("r:kids:{s}") == 1, 15)
    reader = RedisStore.from_url(replica.url, prefix="r:")
    assert [m.content for m in reader.get("s").history] == [f"m{i}" for i in range(130)]
    assert len(reader.get_history("s", last=2)) == 2
    cold = RedisStore.from_url(replica.url, prefix="r:", read_cache_bytes=0)
    cold.get("s")  # learns the element size: its next read takes the elements by LRANGE
    assert cold._core.reader.cold_span(-1) is not None
    expected = reader.get("s").history
    evalsha, lrange = _calls(raw, "evalsha"), _calls(raw, "lrange")
    assert cold.get("s").history == expected
    # the get script (the positions only) with the LRANGE behind it: read-only, served
    assert (_calls(raw, "evalsha"), _calls(raw, "lrange")) == (evalsha + 1, lrange + 1)
    # A list longer than one read's budget: read on in steps of ~10, plain (LRANGE + HMGET)
    # or by the read_range script; read-only commands, so the replica serves them.
    for kind in ("plain", "script"):
        in_steps(cold, 10, kind)
        expected = reader.get("s").history
        evalsha = _calls(raw, "evalsha")
        with recording(cold) as sent:
            assert cold.get("s").history == expected
        steps = sent["LRANGE"] if kind == "plain" else sent["read_range"]
        assert steps >= 10 and sent["get"] == 1, (kind, sent)  # 130 messages, ~10 a step
        # the replica ran them: one script call (the get) for plain steps; for script steps
        # one more each (and a first one refused NOSCRIPT: scripts are loaded per server)
        scripts = _calls(raw, "evalsha") - evalsha
        assert scripts == 1 if kind == "plain" else scripts >= 1 + steps, (kind, scripts)
    cold.close()
    assert [s.key for s in reader.list_sessions()] == ["s"]
    assert len(reader.get_child(child.key).history) == 2
    assert [c.key for c in reader.children_of("s")] == [child.key]
    with pytest.raises(redis.exceptions.ReadOnlyError) as info:
        reader.append_message("s", msg("to a replica"))
    assert not isinstance(info.value, SessionError)
    figures.record_resource(
        case="a read-only replica",
        outcome="get, get_history, list_sessions, get_child, children_of served; a write "
        "raised ReadOnlyError (redis-py's, not CorruptData)",
        errors={"ReadOnlyError": 1},
        damaged=0,
        lost=0,
        duplicated=0,
    )
    for store in (writer, reader):
        store.close()
    raw.close()


def _calls(raw: Any, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats)."""
    return int(raw.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_busy_server_answers_busy_not_corrupt_data(private_server: PrivateServer) -> None:
    server = private_server(busy_reply_threshold=50)
    store = RedisStore.from_url(server.url, prefix="b:")
    store.create(Session(key="s"))
    busy_client = server.client()
    loop = "local t = redis.call('TIME') local s = t[1] while true do t = redis.call('TIME') " \
        "if t[1] - s >= 2 then break end end return 1"  # fmt: skip
    runner = threading.Thread(target=lambda: busy_client.eval(loop, 0), daemon=True)
    runner.start()
    time.sleep(0.3)
    plain = redis.Redis(port=server.port)  # BUSY is not retried: it comes back at once
    bare = RedisStore(plain, prefix="b:")
    with pytest.raises(redis.exceptions.ResponseError) as info:
        bare.append_message("s", msg("while busy"))
    assert "BUSY" in str(info.value) and not isinstance(info.value, SessionError)
    runner.join(timeout=10)
    assert bare.append_message("s", msg("after")) is True
    for c in (bare, store):
        c.close()
    busy_client.close()


def _burst(store: RedisStore, threads: int, calls: int) -> dict[str, int]:
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def work() -> None:
        for _ in range(calls):
            try:
                store.append_message("s", msg("burst"))
            except (redis.RedisError, SessionError) as exc:
                with lock:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=120)
    return errors


def test_after_a_burst_that_hit_maxclients_the_store_recovers_at_once(
    private_server: PrivateServer, figures: Recorder
) -> None:
    server = private_server(maxclients=20)
    store = RedisStore.from_url(server.url, prefix="c:")
    store.create(Session(key="s"))
    started = time.monotonic()
    errors = _burst(store, 50, 10)  # 50 threads, one store, a server that takes 20 clients
    burst = time.monotonic() - started
    begun = time.monotonic()
    assert store.append_message("s", msg("after the burst")) is True
    recovered = time.monotonic() - begun
    assert recovered < 1.0, recovered
    client: Any = store.client
    assert (
        client.connection_pool.max_connections == 32
    )  # bounded: callers beyond it wait for a connection
    figures.record_resource(
        case="maxclients 20, 50 threads on one store from from_url",
        outcome=f"burst of 500 appends in {burst:.1f} s; the next call succeeded "
        f"{recovered * 1000:.0f} ms after it (bounded pool, connected connections first)",
        errors=errors,
        damaged=0,
        lost=0,
        duplicated=0,
    )
    store.close()


async def test_the_asyncio_store_recovers_after_maxclients_too(
    private_server: PrivateServer,
) -> None:
    server = private_server(maxclients=20)
    store = AsyncRedisStore.from_url(server.url, prefix="c:")
    await store.create(Session(key="s"))

    async def one() -> None:
        for _ in range(5):
            with contextlib.suppress(redis.RedisError, SessionError):
                await store.append_message("s", msg("burst"))

    await asyncio.gather(*(one() for _ in range(50)))
    begun = time.monotonic()
    assert await store.append_message("s", msg("after")) is True
    assert time.monotonic() - begun < 1.0
    await store.close()


def test_from_url_passes_client_options_to_redis_py(private_server: PrivateServer) -> None:
    server = private_server()
    store = RedisStore.from_url(
        server.url, prefix="o:", ttl=60, socket_timeout=3, max_connections=5, decode_responses=False
    )
    pool = store.client.connection_pool  # type: ignore[union-attr]
    kwargs = pool.connection_kwargs
    assert kwargs["socket_timeout"] == 3 and kwargs["socket_connect_timeout"] == 5.0
    assert pool.max_connections == 5 and store.ttl is not None
    with pytest.raises(ValueError, match="decode_responses"):
        RedisStore.from_url(server.url, decode_responses=True)
    store.close()
