"""The extension point integrations build on: a script of their own, registered on the store,
run by an operation of their own through the store's own driver (and tree-write loop)."""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import InvalidArgument, LifecycleEventType, Session, SessionNotFound
from redis_session.extension import Emit, Op, ScriptCall, new_event
from redis_session.status import Ctx
from tests.conftest import Backend

# Sets a metadata entry of a live session and refreshes its tree's deadline, with the prelude's
# checks: KEYS root *members, ARGV head field value.
TOUCH = """\
local f = redis.pcall('HMGET', KEYS[1], 'v', 'x', 'tg')
local refused = root_refused(f)
if refused then return refused end
local _, now = clock()
if due(f[2], tonumber(ARGV[1]), now) then
  if (f[3] or '0') ~= ARGV[3] then return tree_changed(f[3]) end
  extend(8, tonumber(ARGV[1]), tonumber(ARGV[2]), now)
end
redis.call('HSET', KEYS[1], ARGV[5], ARGV[6])
return {OK, redis.call('HLEN', KEYS[1])}
"""


def touch(store: Any, key: str, value: str) -> Op[int]:
    ext = store.extension

    def build(_: Any) -> ScriptCall:
        keys = (*ext.root_keys(key), *ext.members(key))
        return ScriptCall("touch", keys, [*ext.head(key), "m:touched", value])

    reply = yield from ext.write(key, build, Ctx(key, ext.root_keys(key)))
    yield Emit(new_event(LifecycleEventType.COMPACT, key).event())
    return int(reply[1])


@pytest.fixture
def events() -> list[Any]:
    return []


async def test_an_operation_of_an_integration_runs_as_the_stores_own(
    backend: Backend, flavour: str, events: list[Any]
) -> None:
    store: Any = (backend.sync_store if flavour == "sync" else backend.async_store)(
        lifecycle_hook=events.append, ttl=60
    )
    store.register_script("touch", TOUCH)
    store.register_script("touch", TOUCH)  # the same again: nothing changes
    run = store.run if flavour == "async" else None

    async def call(op: Op[Any]) -> Any:
        return await run(op) if run else store.run(op)

    if flavour == "sync":
        store.create(Session(key="s", metadata={"a": "1"}))
        fork = store.fork_child("s", "sub")
    else:
        await store.create(Session(key="s", metadata={"a": "1"}))
        fork = await store.fork_child("s", "sub")
    assert await call(touch(store, "s", "yes")) > 0
    got = store.get("s") if flavour == "sync" else await store.get("s")
    assert got.metadata == {"a": "1", "touched": "yes"}
    assert [e.type for e in events][-1] == LifecycleEventType.COMPACT
    with pytest.raises(SessionNotFound):
        await call(touch(store, "nobody", "x"))
    with pytest.raises(InvalidArgument, match="registered already"):
        store.register_script("touch", TOUCH + "\n-- another")
    with pytest.raises(InvalidArgument, match="registered already"):
        store.register_script("append_message", TOUCH)
    assert fork.parent_key == "s"
    if flavour == "sync":
        store.close()
    else:
        await store.close()
