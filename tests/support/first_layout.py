"""Sessions as the first layout (before the tree deadline and the id window) wrote them, by raw
commands, so that tests can check that this layout opens, reads and migrates them.

The first layout: a meta hash (``v`` = 1, timestamps, the create token, scalars, ``m:``
metadata; ``pop_token`` / ``popped`` after a pop), a msgs list, an ids hash holding every id's
8-byte digest in buckets named by ``%x`` of the digest's first byte % 128 plus the expiry
marker ``c``, and a kids zset; a child: a hash (``v``, key, parent, agent, config, max,
created_at, token, ``merged_at`` once merged; a discarded one only ``parent`` and
``discarded``), a cmsgs list of digest + JSON and a cids hash like ids. Data keys expired
``ttl`` after the last write, the ids hashes ``ttl + grace``.
"""

from __future__ import annotations

import time
from typing import Any

from redis_session import ChildSessionConfig, Message
from redis_session.codec import encode_config, encode_message, message_digest
from redis_session.keys import KeySchema

INHERITED = b"\0" * 8


def _bucket(digest: bytes) -> str:
    return f"{digest[0] % 128:x}"


def _add_digests(raw: Any, ids: str, messages: list[Message]) -> None:
    for m in messages:
        d = message_digest(m.id)
        raw.hset(ids, _bucket(d), (raw.hget(ids, _bucket(d)) or b"") + d)


def write_session(
    raw: Any,
    schema: KeySchema,
    key: str,
    history: list[Message],
    *,
    metadata: dict[str, str] | None = None,
    ttl_ms: int = 0,
    grace_ms: int = 0,
    popped: Message | None = None,
) -> None:
    """A session of the first layout, with its history's ids in its ids hash."""
    sk = schema.session(key)
    us = str(time.time_ns() // 1000)
    fields: dict[str, str | bytes] = {"key": key, "v": "1", "created_at": us, "updated_at": us}
    fields["token"] = "t0"
    fields.update({f"m:{k}": v for k, v in (metadata or {}).items()})
    if popped is not None:
        fields.update({"pop_token": "p0", "popped": encode_message(popped)})
    raw.hset(sk.meta, mapping=fields)
    if history:
        raw.rpush(sk.msgs, *(encode_message(m) for m in history))
    raw.hset(sk.ids, "c", us)
    _add_digests(raw, sk.ids, [*history, *([popped] if popped else [])])
    raw.zadd(schema.index_of(key), {key: int(us) // 1000})
    if schema.cluster:
        raw.sadd(schema.index_registry, schema.index_of(key))
    if ttl_ms:
        raw.pexpire(sk.meta, ttl_ms)
        raw.pexpire(sk.msgs, ttl_ms)
        raw.pexpire(sk.ids, ttl_ms + grace_ms)


def write_child(
    raw: Any,
    schema: KeySchema,
    parent: str,
    agent: str,
    inherited: list[Message],
    own: list[Message],
    *,
    merged: bool = False,
    discarded: bool = False,
    ttl_ms: int = 0,
    grace_ms: int = 0,
    seq: int = 1,
) -> str:
    """A child of ``parent`` in the first layout; returns its key."""
    child = f"{parent}:child:{agent}:{time.time_ns()}"
    ck, sk = schema.child(child), schema.session(parent)
    us = str(time.time_ns() // 1000)
    raw.zadd(sk.kids, {child: seq})
    if discarded:
        raw.hset(ck.meta, mapping={"parent": parent, "discarded": "d0"})
        raw.pexpire(ck.meta, 60_000)
        raw.zrem(sk.kids, child)
        return child
    fields = {
        "v": "1", "key": child, "parent": parent, "agent": agent,
        "config": encode_config(ChildSessionConfig()), "max": "0", "created_at": us,
        "token": "f0",
    }  # fmt: skip
    if merged:
        fields.update({"merged_at": us, "merge_token": "m0"})
    raw.hset(ck.meta, mapping=fields)
    elements = [INHERITED + encode_message(m) for m in inherited]
    elements += [message_digest(m.id) + encode_message(m) for m in own]
    if elements:
        raw.rpush(ck.msgs, *elements)
    raw.hset(ck.ids, "c", us)
    _add_digests(raw, ck.ids, own)
    if ttl_ms:
        for name in (ck.meta, ck.msgs, sk.kids):
            raw.pexpire(name, ttl_ms)
        raw.pexpire(ck.ids, ttl_ms + grace_ms)
    return child
