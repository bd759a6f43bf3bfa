"""Exported names, the script registry, and sync/async parity."""

from __future__ import annotations

import inspect
import re
from types import ModuleType
from typing import Any

import redis_session
from redis_session import AsyncRedisStore, AsyncStore, RedisStore, Store
from redis_session.scripts import PRELUDE, SCRIPT_NAMES, lua_dir, script_source
from redis_session.status import Status

SPEC_NAMES = {
    "SessionError", "SessionNotFound", "SessionExpired", "DuplicateSession", "MessageRole",
    "ToolCall", "Message", "Session", "SessionSummary", "ChildSessionConfig", "ChildSession",
    "SessionLifecycleEvent", "RunContext", "RedisStore", "AsyncRedisStore", "Store", "AsyncStore",
}  # fmt: skip


def test_spec_names_are_exported() -> None:
    assert SPEC_NAMES <= set(redis_session.__all__)
    for name in redis_session.__all__:
        obj = getattr(redis_session, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name


def test_every_lua_file_is_registered_and_every_script_exists() -> None:
    on_disk = {p.stem for p in lua_dir().glob("*.lua")} - {PRELUDE}
    assert on_disk == set(SCRIPT_NAMES)
    for name in SCRIPT_NAMES:
        assert script_source(name).count("local OK, NOT_FOUND") == 1


def test_status_codes_agree_with_the_prelude() -> None:
    text = (lua_dir() / f"{PRELUDE}.lua").read_text()
    m = re.search(r"local (OK,[A-Z_,\s]+) =\s*([\d, ]+)", text)
    assert m is not None
    names = [n.strip() for n in m.group(1).split(",")]
    values = [int(v) for v in m.group(2).split(",")]
    assert dict(zip(names, values, strict=True)) == {s.name: s.value for s in Status}


def public_methods(cls: type) -> dict[str, Any]:
    return {
        n: m for n, m in inspect.getmembers(cls) if not n.startswith("_") and inspect.isfunction(m)
    }


def unasync_tool() -> ModuleType:
    """tools/unasync.py, loaded as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "unasync.py"
    spec = importlib.util.spec_from_file_location("unasync_tool", path)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def unasync_signature(tool: ModuleType, signature: inspect.Signature) -> str:
    """An async method's signature as tools/unasync.py rewrites it: each annotation (a string,
    the source's text) through its token map.
    """

    def blocking(annotation: Any) -> Any:
        return tool.unasync(annotation) if isinstance(annotation, str) else annotation

    parameters = [
        p.replace(annotation=blocking(p.annotation)) for p in signature.parameters.values()
    ]
    return str(
        signature.replace(
            parameters=parameters, return_annotation=blocking(signature.return_annotation)
        )
    )


def test_sync_and_async_stores_do_not_drift() -> None:
    tool = unasync_tool()
    sync, aio = public_methods(RedisStore), public_methods(AsyncRedisStore)
    assert set(sync) == set(aio)
    for name in sync:
        assert str(inspect.signature(sync[name])) == unasync_signature(
            tool, inspect.signature(aio[name])
        )
        assert sync[name].__doc__ == tool.unasync_doc(aio[name].__doc__), name
        assert sync[name].__doc__, name
        if name not in ("from_url", "set_lifecycle_hook", "register_script", "turn", "listen"):
            assert inspect.iscoroutinefunction(aio[name]), name
            assert not inspect.iscoroutinefunction(sync[name]), name
    # listen: the asyncio one returns what is both awaitable and an async context manager
    assert not inspect.iscoroutinefunction(aio["listen"])


def test_stores_satisfy_their_protocols() -> None:
    assert set(public_methods(Store)) <= set(public_methods(RedisStore))
    assert set(public_methods(AsyncStore)) == set(public_methods(Store))
    store = RedisStore.from_url("memory://")
    assert isinstance(store, Store)
    assert isinstance(AsyncRedisStore.from_url("memory://"), AsyncStore)
    store.close()


def test_memory_urls_share_a_server_by_name() -> None:
    from redis_session import Session

    a = RedisStore.from_url("memory://shared-test")
    b = RedisStore.from_url("memory://shared-test")
    c = RedisStore.from_url("memory://")
    a.create(Session(key="x"))
    assert b.get("x").key == "x"
    assert c.list_sessions() == []


def test_sync_store_is_generated_from_the_async_one() -> None:
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[2] / "tools" / "unasync.py"
    done = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()


async def test_url_clients_retry_connection_errors_as_documented() -> None:
    """``from_url`` gives plain clients 10 retries (redis-py's ``from_url`` alone gives none)."""
    sync = RedisStore.from_url("redis://127.0.0.1:1/0")
    aio = AsyncRedisStore.from_url("redis://127.0.0.1:1/0")
    try:
        for store in (sync, aio):
            client: Any = store.client
            retry = client.connection_pool.connection_kwargs["retry"]
            assert retry.get_retries() == 10
    finally:
        sync.close()
        await aio.close()
