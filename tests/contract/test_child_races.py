"""Races on children, on real servers, with threads: one winner, nothing half-applied."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis

from redis_session import (
    ChildAlreadyMerged,
    ChildNotFound,
    Message,
    RedisStore,
    Session,
    SessionError,
)
from tests.conftest import Backend
from tests.support.proxy import LossyProxy

pytestmark = pytest.mark.slow


def race(*calls: Callable[[], object]) -> list[object]:
    """Run the calls at once in threads; each outcome is its return value or its exception."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            outcomes[i] = calls[i]()
        except (SessionError, redis.RedisError) as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return outcomes


def setup(backend: Backend, n: int = 20) -> tuple[RedisStore, str]:
    store = backend.sync_store()
    store.create(Session(key="p", history=[Message(role="user", content="q")]))
    child = store.fork_child("p", "worker")
    for i in range(n):
        store.append_child_message(child.key, Message(role="assistant", content=f"c{i}"))
    return store, child.key


def test_eight_workers_merging_one_child_one_succeeds(real_backend: Backend) -> None:
    for _ in range(5):
        store, child = setup(real_backend)
        stores = [real_backend.sync_store() for _ in range(8)]
        outcomes = race(*[lambda s=s: s.merge_child(child, "") for s in stores])
        assert sum(o == 20 for o in outcomes) == 1
        assert sum(isinstance(o, ChildAlreadyMerged) for o in outcomes) == 7
        history = store.get_history("p")
        assert [m.content for m in history] == ["q"] + [f"c{i}" for i in range(20)]
        store.delete("p")


def test_merge_racing_discard_has_one_winner(real_backend: Backend) -> None:
    for _ in range(10):
        store, child = setup(real_backend, n=5)
        other = real_backend.sync_store()
        merged, discarded = race(
            lambda: store.merge_child(child, ""), lambda: other.discard_child(child)
        )
        if isinstance(merged, int):
            assert isinstance(discarded, ChildAlreadyMerged)
            assert len(store.get_history("p")) == 6
        else:
            assert isinstance(merged, ChildNotFound) and discarded is None
            assert len(store.get_history("p")) == 1
        store.delete("p")


def test_merge_racing_parent_delete_leaves_nothing_half_done(real_backend: Backend) -> None:
    for _ in range(10):
        store, child = setup(real_backend, n=5)
        other = real_backend.sync_store()
        merged, deleted = race(lambda: store.merge_child(child, ""), lambda: other.delete("p"))
        assert deleted is True
        assert isinstance(merged, int | ChildNotFound), merged
        assert real_backend.session_keys() == []


def test_merge_retried_after_a_lost_reply_succeeds_once(real_backend: Backend) -> None:
    assert real_backend.server is not None
    store, child = setup(real_backend, n=3)
    with LossyProxy(real_backend.server.port) as proxy:
        client = redis.Redis(port=proxy.port, socket_timeout=5)
        lossy = RedisStore(client, prefix=real_backend.prefix)
        lossy.fork_child("p", "spare")  # the reply teaches it the tree: the merge is one call
        proxy.drop_replies_to(b"EVALSHA", 1)
        assert lossy.merge_child(child, "") == 3  # the retry found its own merge: its count
        assert proxy.dropped == 1
        client.close()
    assert [m.content for m in store.get_history("p")] == ["q", "c0", "c1", "c2"]
    assert store.get_child(child).is_merged()
