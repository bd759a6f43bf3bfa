"""A store's everyday work through ``from_url``, sync and asyncio, and what it read back, as
JSON on stdout (``python -m tests.support.workload URL [SETUP]``): create, 300 mixed messages,
``get``, ``get_history(last=20)``, a child forked, written and merged, the parent read again.

``SETUP`` is Python run before ``redis_session`` is imported (a test that removes a private
name of a dependency, as a release that renames it would). The output holds everything a
caller sees of what was read (every field, its type, the fields set), nothing that differs
between runs (server timestamps, the key prefix), and which pieces of the fast path ran.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

MESSAGES = 300


def _messages() -> list[Any]:
    from redis_session import Message, ToolCall

    start = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    out = []
    for i in range(MESSAGES):
        calls = []
        if i % 3 == 0:
            calls = [ToolCall(id=f"c{i}", name="lookup", input=f'{{"q": {i}}}', output="ok")]
        if i % 7 == 0:
            calls.append(ToolCall(id=f"t{i}", name="think", input="", thought=True))
        out.append(
            Message(
                id=f"m{i}",
                role=("user", "assistant", "tool", "system")[i % 4],
                content="" if i % 5 == 0 else f'message {i}: é "q" \\ \n {"x" * (i % 40)}',
                timestamp=start + timedelta(seconds=i, microseconds=i % 2),
                tool_calls=calls,
                author="agent-b" if i % 11 == 0 else "",
            )
        )
    return out


def _child_message(cls: Any) -> Any:
    return cls(id="k1", role="assistant", content="c1", timestamp=datetime(2026, 2, 1, tzinfo=UTC))


def _seen(message: Any) -> dict[str, Any]:
    from redis_session import Message

    assert type(message) is Message, type(message)
    assert message.timestamp.utcoffset() == timedelta(0)
    return {
        "fields": message.model_dump(mode="json"),
        "set": sorted(message.model_fields_set),
        "calls": [sorted(c.model_fields_set) for c in message.tool_calls],
        "types": [type(v).__name__ for v in vars(message).values()],
    }


def _session(session: Any) -> dict[str, Any]:
    return {
        "key": session.key,
        "agent_id": session.agent_id,
        "metadata": session.metadata,
        "history": [_seen(m) for m in session.history],
    }


def sync_run(url: str) -> dict[str, Any]:
    from redis_session import ChildSessionConfig, Message, RedisStore, Session

    store = RedisStore.from_url(url, prefix=f"workload:{uuid.uuid4().hex[:8]}:")
    try:
        store.create(Session(key="s", agent_id="helpdesk", metadata={"lang": "en"}))
        batch = _messages()
        store.append_messages("s", batch[:100])
        for m in batch[100:]:
            store.append_message("s", m)
        got = store.get("s")
        last = store.get_history("s", last=20)
        child = store.fork_child(
            "s", "researcher", ChildSessionConfig(inherit_history=5), idempotency_key="f1"
        )
        store.append_child_message(child.key, _child_message(Message))
        added = store.merge_child(child.key, "", idempotency_key="m1")
        after = store.get("s")
        cold = RedisStore(store.client, prefix=store.prefix, read_cache_bytes=0).get("s")
        store.delete("s")
        return {
            "get": _session(got),
            "last": [_seen(m) for m in last],
            "merged": added,
            "after": _session(after),
            "cold": _session(cold),
        }
    finally:
        store.close()


async def async_run(url: str) -> dict[str, Any]:
    from redis_session import AsyncRedisStore, ChildSessionConfig, Message, Session

    store = AsyncRedisStore.from_url(url, prefix=f"workload:{uuid.uuid4().hex[:8]}:")
    try:
        await store.create(Session(key="s", agent_id="helpdesk", metadata={"lang": "en"}))
        batch = _messages()
        await store.append_messages("s", batch[:100])
        for m in batch[100:]:
            await store.append_message("s", m)
        got = await store.get("s")
        last = await store.get_history("s", last=20)
        child = await store.fork_child(
            "s", "researcher", ChildSessionConfig(inherit_history=5), idempotency_key="f1"
        )
        await store.append_child_message(child.key, _child_message(Message))
        added = await store.merge_child(child.key, "", idempotency_key="m1")
        after = await store.get("s")
        await store.delete("s")
        return {
            "get": _session(got),
            "last": [_seen(m) for m in last],
            "merged": added,
            "after": _session(after),
        }
    finally:
        await store.close()


def main(argv: list[str]) -> None:
    url = argv[1]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if len(argv) > 2:
        exec(argv[2], {})  # the test's own removal of a private name
    from redis_session._transport import fast as _fast

    out = {
        "sync": sync_run(url),
        "async": asyncio.run(async_run(url)),
        "pieces": {p.name: p.on for p in _fast.STATUS.pieces.values()},
    }
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv)
