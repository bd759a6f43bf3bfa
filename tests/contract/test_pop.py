"""pop_message: atomic, idempotent per call, guarded, sealed like the rest."""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import (
    Message,
    PassphraseRequired,
    Session,
    SessionExpired,
    SessionNotFound,
    StaleCompaction,
)
from redis_session.codec import message_digest
from redis_session.scripts import script_source
from tests.conftest import Backend, StoreFactory
from tests.support.clock import wait_gone
from tests.support.tokens import as_stored


async def test_pop_returns_the_newest_until_empty(store: Any) -> None:
    await store.create(Session(key="p"))
    msgs = as_stored(Message(role="user", content=str(i)) for i in range(3))
    await store.append_messages("p", msgs)
    before = (await store.get("p")).updated_at
    assert await store.pop_message("p") == msgs[2]
    assert (await store.get("p")).updated_at >= before
    assert await store.pop_message("p", expect_id=msgs[1].id) == msgs[1]
    with pytest.raises(StaleCompaction):
        await store.pop_message("p", expect_id=msgs[1].id)
    assert [m.content for m in await store.get_history("p")] == ["0"]
    assert await store.pop_message("p") == msgs[0]
    assert await store.pop_message("p") is None
    assert await store.append_message("p", msgs[2]) is False  # its id stays recorded
    with pytest.raises(SessionNotFound):
        await store.pop_message("nope")
    with pytest.raises(ValueError, match="expect_id"):
        await store.pop_message("p", expect_id=3)


async def test_pop_of_an_expired_session(backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(ttl=0.05)
    await store.create(Session(key="e", history=[Message(role="user", content="x")]))
    wait_gone(backend.sync_client(), backend.schema.session("e").meta)
    with pytest.raises(SessionExpired):
        await store.pop_message("e")


def test_a_retried_pop_script_pops_once(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="r", history=[Message(role="user", content=c) for c in "abc"]))
    k = backend.schema.session("r")
    keys = [k.meta, k.msgs, k.ids, backend.schema.index_of("r"), k.mark, k.kids, k.done, k.pop]
    pop = backend.sync_client().register_script(script_source("pop_message"))

    def args(token: str) -> list[Any]:
        return [0, 0, "0", 1000, "r", token, message_digest("pop:" + token), b"", b"", 60_000]

    first = pop(keys=keys, args=args("token-1"))
    again = pop(keys=keys, args=args("token-1"))
    assert first == again and first[0] == 0
    assert [m.content for m in store.get_history("r")] == ["a", "b"]
    assert pop(keys=keys, args=args("token-2"))[0] == 0
    assert [m.content for m in store.get_history("r")] == ["a"]


@pytest.mark.slow
def test_concurrent_pops_take_each_message_once(backend: Backend) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = backend.sync_store()
    msgs = [Message(role="user", content=str(i)) for i in range(60)]
    store.create(Session(key="c", history=msgs))

    def drain(_: int) -> list[str]:
        mine = backend.sync_store()
        out: list[str] = []
        for _ in range(100):
            msg = mine.pop_message("c")
            if msg is None:
                return out
            out.append(msg.content)
        return out

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(drain, range(4)))
    popped = [c for r in results for c in r]
    assert sorted(popped, key=int) == [m.content for m in msgs]
    for r in results:  # each worker saw newest first
        assert [int(c) for c in r] == sorted((int(c) for c in r), reverse=True)


async def test_pop_of_sealed_messages(make_store: StoreFactory) -> None:
    sealed = make_store(passphrase="pw", kdf_work=10)
    await sealed.create(Session(key="s", history=[Message(role="user", content="secret")]))
    with pytest.raises(PassphraseRequired):
        await make_store().pop_message("s")
    popped = await sealed.pop_message("s")
    assert popped is not None and popped.content == "secret"
