"""Under every eviction policy a key of a session can go alone. The store must say so
(``CorruptData`` naming the key) and never answer as if nothing happened: an evicted history
is not an empty one, an evicted id window does not make a retried append "already stored",
an evicted meta hash is not an expired session (issue #14, point 4).

The store needs ``noeviction`` (README); these tests check that the other policies are
detected, not survived.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import redis

from redis_session import (
    ChildSessionConfig,
    CorruptData,
    Message,
    RedisStore,
    Session,
    SessionError,
    SessionExpired,
    SessionNotFound,
)
from tests.resources.conftest import PrivateServer
from tests.support.figures import Recorder
from tests.support.stepping import in_steps, recording

POLICIES = (
    "allkeys-lru", "allkeys-lfu", "allkeys-random",
    "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
)  # fmt: skip


KINDS = ("plain", "script")


def msg(content: str) -> Message:
    return Message(role="user", content=content)


@pytest.mark.parametrize("policy", POLICIES)
def test_an_evicted_key_is_reported_never_hidden(
    private_server: PrivateServer, figures: Recorder, policy: str
) -> None:
    server = private_server(maxmemory=6 * 1024 * 1024, maxmemory_policy=policy)
    raw = server.client()
    store = RedisStore.from_url(server.url, prefix="v:", ttl=3600)
    written: dict[str, list[str]] = {}
    i = 0
    while int(raw.info("stats")["evicted_keys"]) < 40 and i < 4000:
        key = f"s{i}"
        history = [f"{key}:{j} " + "z" * 300 for j in range(12)]
        try:
            store.create(Session(key=key, history=[msg(c) for c in history]))
        except (redis.RedisError, CorruptData):
            i += 1
            continue
        written[key] = history
        i += 1
    assert int(raw.info("stats")["evicted_keys"]) >= 40, "nothing was evicted"
    # No more evictions while reading (a read's reply buffer would evict more): each session
    # reads the same now, whoever reads it.
    raw.config_set("maxmemory", 0)
    whole = damaged = gone = 0
    wrong: list[str] = []
    # Stores without a read cache that read each session in steps of ~4 messages after the
    # get script (plain LRANGE + HMGET steps, or read_range script calls) once they know the
    # element size: the same outcome as the store's read.
    steppers = {k: RedisStore.from_url(server.url, prefix="v:", read_cache_bytes=0) for k in KINDS}
    compared = size = 0
    with contextlib.ExitStack() as stack:
        sent = stack.enter_context(recording(store))
        by = {k: stack.enter_context(recording(s)) for k, s in steppers.items()}
        for key, history in written.items():
            outcome = _outcome(store, key)
            if size:
                for kind, stepper in steppers.items():
                    assert _outcome(in_steps(stepper, 4, kind, size), key) == outcome, kind
                compared += 1
            elif isinstance(outcome, list):  # the first whole session: the element size
                size = store._core.reader.element_bytes
            try:
                got = [m.content for m in store.get(key).history]
            except CorruptData as exc:
                damaged += 1
                assert key in str(exc) or exc.key == key
                # A damaged session takes no append: never "already stored", never half
                # written.
                with pytest.raises((CorruptData, SessionNotFound)):
                    store.append_message(key, msg("after eviction"))
                continue
            except SessionExpired:
                wrong.append(f"{key}: reported expired")
                continue
            except SessionNotFound:
                gone += 1  # every key of it went: it is not there, and says so
                continue
            if got == history:
                whole += 1
            else:
                wrong.append(f"{key}: {len(got)} of {len(history)} messages, no error")
    assert not wrong, wrong[:5]
    assert compared > 40, compared
    # The store knew the element size after its first read: the others took their elements
    # by a plain LRANGE behind the get script (the positions checked after), not through
    # Lua; a session damaged by eviction was named by the get script.
    assert sent["LRANGE+after"] >= whole - 1 > 0 and not sent["read_range"], sent
    assert sent["get"] >= damaged + gone, sent
    # The steppers read in steps: plain ones only LRANGE steps, the others read_range calls.
    assert by["plain"]["LRANGE"] >= compared and not by["plain"]["read_range"], by["plain"]
    assert by["script"]["read_range"] >= compared and not by["script"]["LRANGE"], by["script"]
    figures.record_resource(
        case=f"maxmemory 6 MB, {policy}",
        outcome=f"{len(written)} sessions written, {raw.info('stats')['evicted_keys']} keys "
        f"evicted: {whole} whole, {damaged} reported damaged (CorruptData), {gone} gone "
        "entirely (SessionNotFound); none read as empty, expired or partial",
        errors={"CorruptData": damaged, "SessionNotFound": gone},
        damaged=damaged,
        lost=gone,
        duplicated=0,
    )
    store.close()
    for stepper in steppers.values():
        stepper.close()
    raw.close()


def _outcome(store: RedisStore, key: str) -> object:
    """What reading session ``key`` gives: its messages' contents, or the exception's name."""
    try:
        return [m.content for m in store.get(key).history]
    except (redis.RedisError, SessionError) as exc:
        return type(exc).__name__


def test_each_key_of_a_session_missing_is_named(private_server: PrivateServer) -> None:
    server = private_server()
    raw = server.client()
    store = RedisStore.from_url(server.url, prefix="k:", ttl=3600)

    def fresh(key: str) -> Any:
        store.create(Session(key=key, history=[msg("a"), msg("b")]))
        child = store.fork_child(key, "sub", ChildSessionConfig(inherit_history=1))
        return store._core.schema.session(key), child

    sk, _ = fresh("no-msgs")
    raw.delete(sk.msgs)
    with pytest.raises(CorruptData, match="msgs.*records 2"):
        store.get_history("no-msgs")
    with pytest.raises(CorruptData, match="msgs"):
        store.append_message("no-msgs", msg("c"))
    sk, _ = fresh("no-ids")
    raw.delete(sk.ids)
    retried = msg("retry")
    with pytest.raises(CorruptData, match="ids.*missing"):
        store.append_message("no-ids", retried)  # not stored twice, not "already stored"
    sk, _ = fresh("no-meta")
    raw.delete(sk.meta)
    with pytest.raises(CorruptData, match="meta.*missing"):
        store.get("no-meta")  # not SessionExpired, though its expiry marker is there
    sk, _ = fresh("no-kids")
    raw.delete(sk.kids)
    with pytest.raises(CorruptData, match="kids.*0 children where the session records 1"):
        store.children_of("no-kids")
    with pytest.raises(CorruptData, match="kids"):
        store.fork_child("no-kids", "again")
    store.close()
    raw.close()
