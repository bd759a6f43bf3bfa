"""The store works for a Redis ACL user confined to its key prefix and events channel, with
only the commands it needs (the README gives the same line), and two prefixes never mix."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from redis_session import ChildSessionConfig, Message, RedisStore, Session
from tests.support.servers import Server

pytestmark = pytest.mark.redis

COMMANDS = (
    "+evalsha +script|load +eval +multi +exec +ping "
    "+hget +hgetall +hmget +hexists +hkeys +hset +hdel +hincrby "
    "+lrange +llen +lindex +rpush +lpush +ltrim "
    "+zadd +zrem +zrange +zrevrange +zcard +zscore +zremrangebyscore "
    "+sadd +smembers +exists +del +pexpire +type +time +publish +subscribe +unsubscribe"
)


def acl_line(user: str, password: str, prefix: str) -> str:
    return (
        f"{user} on >{password} resetkeys ~{prefix}* resetchannels &{prefix}events -@all {COMMANDS}"
    )


def test_store_runs_as_a_confined_acl_user(redis_server: Server) -> None:
    prefix = f"acl{uuid.uuid4().hex[:6]}:"
    user, password = f"rs-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    admin: Any = redis_server.client()
    admin.execute_command("ACL", "SETUSER", *acl_line(user, password, prefix).split())
    try:
        client = redis.Redis.from_url(redis_server.url, username=user, password=password)
        store = RedisStore(client, prefix=prefix, ttl=60)
        listener = store.listen()
        store.create(Session(key="a", history=[Message(role="user", content="hi")]))
        store.append_message("a", Message(role="assistant", content="hello"))
        store.update_metadata("a", set={"k": "v"})
        child = store.fork_child("a", "helper", ChildSessionConfig(inherit_history=1))
        store.append_child_message(child.key, Message(role="assistant", content="work"))
        store.merge_child(child.key, "done")
        store.compact_messages("a", 0, "summary")
        assert [m.content for m in store.get_history("a")] == [
            "[Compacted Summary]\nsummary", "hello", "done",
        ]  # fmt: skip
        assert [s.key for s in store.list_sessions()] == ["a"]
        store.set_salt("default", b"s")
        store.set_checksum("default", b"c")
        store.set_secret("x", b"1")
        assert store.migrate_secrets(lambda b: b + b"!", b"s2", b"c2") == 1
        event = listener.get(timeout=5)
        assert event is not None and event.type == "create"
        store.delete("a")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.get("not-my-prefix")
        listener.close()
        store.close()
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()


def test_two_prefixes_never_see_each_other(redis_server: Server) -> None:
    tag = uuid.uuid4().hex[:6]
    one = RedisStore.from_url(redis_server.url, prefix=f"one{tag}:")
    two = RedisStore.from_url(redis_server.url, prefix=f"two{tag}:")
    try:
        one.create(Session(key="same", agent_id="one"))
        two.create(Session(key="same", agent_id="two"))
        one.append_message("same", Message(role="user", content="for one"))
        assert two.get_history("same") == []
        assert (one.get("same").agent_id, two.get("same").agent_id) == ("one", "two")
        assert [s.key for s in one.list_sessions()] == ["same"]
        two.delete("same")
        assert one.get("same").history[0].content == "for one"
    finally:
        one.delete("same")
        one.close()
        two.close()
