"""Every mutating operation, retried by redis-py after its reply was lost, applies once and
reports the caller's own success (a TCP proxy drops the reply after the server applied it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_session import ChildSession, Message, RedisStore, Session
from redis_session._core import sessions as _sessions
from redis_session._core.eventlog import entry_event
from tests.conftest import Backend
from tests.support.proxy import LossyProxy

pytestmark = pytest.mark.slow


def load_scripts(store: RedisStore) -> None:
    """Load every script of ``store`` first: the reply the proxy drops is then the one of the
    script applied, never a NOSCRIPT answered before it is loaded (which would test nothing).
    """
    for script in store._scripts.values():
        store._client.script_load(script.script)


def _ops() -> list[tuple[str, Callable[[RedisStore, dict[str, Any]], object]]]:
    return [
        ("create", lambda s, ctx: s.create(Session(key="new", agent_id="x"))),
        ("append", lambda s, ctx: s.append_message("p", Message(role="user", content="once"))),
        (
            "append_with_metadata",
            lambda s, ctx: s.append_message(
                "p", Message(role="user", content="once"), metadata={"turn": "1"}
            ),
        ),
        (
            "append_child",
            lambda s, ctx: s.append_child_message(
                ctx["child"], Message(role="user", content="child once")
            ),
        ),
        ("pop", lambda s, ctx: ctx.setdefault("popped", s.pop_message("p"))),
        ("compact", lambda s, ctx: s.compact_messages("p", 1, "sum")),
        ("update_metadata", lambda s, ctx: s.update_metadata("p", set={"k": "v"})),
        ("fork", lambda s, ctx: ctx.setdefault("fork", s.fork_child("p", "forked"))),
        ("merge", lambda s, ctx: s.merge_child(ctx["child"], "merged")),
        ("discard", lambda s, ctx: s.discard_child(ctx["child"])),
        ("delete", lambda s, ctx: ctx.setdefault("deleted", s.delete("p"))),
    ]


@pytest.mark.parametrize(("name", "op"), _ops(), ids=[n for n, _ in _ops()])
def test_retried_after_a_lost_reply_applies_once(
    real_backend: Backend, name: str, op: Callable[[RedisStore, dict[str, Any]], object]
) -> None:
    assert real_backend.server is not None
    setup = real_backend.sync_store()
    setup.create(Session(key="p", history=[Message(role="user", content=str(i)) for i in range(3)]))
    ctx: dict[str, Any] = {"child": setup.fork_child("p", "helper").key}
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=5)
        store = RedisStore(client, prefix=real_backend.prefix)
        store.get_history("p")  # connect, and learn nothing that the fault could hide
        load_scripts(store)
        proxy.drop_replies_to(b"EVALSHA", 1)
        op(store, ctx)  # no exception: the retry found this call's own success
        assert proxy.dropped == 1
        client.close()
    history = [m.content for m in setup.get_history("p")] if name != "delete" else []
    if name == "create":
        assert setup.get("new").agent_id == "x"
    elif name == "append":
        assert history == ["0", "1", "2", "once"]
    elif name == "append_with_metadata":
        assert history == ["0", "1", "2", "once"]
        assert setup.get("p", last=0).metadata == {"turn": "1"}
    elif name == "append_child":
        assert [m.content for m in setup.get_child(ctx["child"]).history] == ["child once"]
    elif name == "pop":
        assert history == ["0", "1"]
        assert ctx["popped"].content == "2"  # the retry answered this call's own pop
    elif name == "compact":
        assert history == ["[Compacted Summary]\nsum", "2"]
    elif name == "update_metadata":
        assert setup.get("p").metadata == {"k": "v"}
    elif name == "fork":
        assert [c.agent_name for c in setup.children_of("p")] == ["helper", "forked"]
    elif name == "merge":
        assert history == ["0", "1", "2", "merged"]
        assert setup.get_child(ctx["child"]).is_merged()
    elif name == "discard":
        assert [c.agent_name for c in setup.children_of("p")] == []
    elif name == "delete":
        assert setup.list_sessions() == []
        assert ctx["deleted"] is True  # the retry found this call's own success


def _callers_ops() -> list[tuple[str, Callable[[RedisStore, dict[str, Any]], object]]]:
    return [
        ("create", lambda s, ctx: s.create(Session(key="new"), idempotency_key="c-1")),
        ("fork", lambda s, ctx: s.fork_child("p", "forked", idempotency_key="f-1")),
        ("merge", lambda s, ctx: s.merge_child(ctx["child"], "merged", idempotency_key="m-1")),
        ("discard", lambda s, ctx: s.discard_child(ctx["child"], idempotency_key="d-1")),
    ]


@pytest.mark.parametrize(("name", "op"), _callers_ops(), ids=[n for n, _ in _callers_ops()])
def test_the_callers_own_retry_with_its_idempotency_key_returns_the_first_result(
    real_backend: Backend, name: str, op: Callable[[RedisStore, dict[str, Any]], object]
) -> None:
    """A client without retries: the lost reply reaches the caller as an error, and the caller
    sends the call again with the same idempotency key."""
    assert real_backend.server is not None
    setup = real_backend.sync_store()
    setup.create(Session(key="p", history=[Message(role="user", content="0")]))
    ctx: dict[str, Any] = {"child": setup.fork_child("p", "helper").key}
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=2, retry=Retry(NoBackoff(), 0))
        store = RedisStore(client, prefix=real_backend.prefix)
        store.get_history("p")
        load_scripts(store)
        proxy.drop_replies_to(b"EVALSHA", 1)
        with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
            op(store, ctx)  # applied, but its reply was lost
        assert proxy.dropped == 1
        again = op(store, ctx)  # the caller's retry: the first call's result
        client.close()
    if name == "create":
        assert isinstance(again, Session) and again.key == "new" and setup.get("new")
    elif name == "fork":
        children = setup.children_of("p")
        assert [c.agent_name for c in children] == ["helper", "forked"]  # one child
        assert isinstance(again, ChildSession) and again.key == children[1].key
    elif name == "merge":
        assert again == 1  # the first call's count, never ChildAlreadyMerged
        assert [m.content for m in setup.get_history("p")] == ["0", "merged"]
    elif name == "discard":
        assert setup.children_of("p") == []


@pytest.mark.parametrize("lost", [0, 1, 2], ids=["first-batch", "second-batch", "the-delete"])
def test_a_batched_delete_retried_after_a_lost_reply_logs_each_event_once(
    real_backend: Backend, monkeypatch: pytest.MonkeyPatch, lost: int
) -> None:
    """A delete of more children than a script takes (two batches, then the session): the
    reply of script ``lost`` (from 0) is lost and redis-py sends it again; each child is
    discarded and logged once, and the delete (with its idempotency key) answers True."""
    monkeypatch.setattr(_sessions, "DELETE_BATCH", 2)
    assert real_backend.server is not None
    setup = real_backend.sync_store()
    setup.create(Session(key="p"))
    kids = [setup.fork_child("p", f"a{n}").key for n in range(5)]
    log = real_backend.schema.log_of("p")
    raw = real_backend.sync_client()
    before = raw.xlen(log)
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=5)
        store = RedisStore(client, prefix=real_backend.prefix)
        store.get_history("p")
        load_scripts(store)
        proxy.drop_replies_to(b"EVALSHA", 1, skip=lost)
        assert store.delete("p", idempotency_key="d-1") is True
        assert proxy.dropped == 1
        client.close()
    events = [entry_event(i, f) for i, f in raw.xrange(log)][before:]
    assert [(e.type if e else None, e.child_key if e else None) for e in events] == [
        *(("discard", k) for k in kids),
        ("delete", ""),
    ]
    gone = real_backend.schema.session("p").gone
    assert real_backend.session_keys() == [] and raw.get(gone) is not None  # the key's record
