"""The index registry of a cluster (sans-I/O): a copy whose node failed is left out of the
creates' registrations for ``COPY_PAUSE_S`` on the store's clock, then tried again; a copy that
held another program's key is no node to wait for. Time is the test's (``clock``), not slept.
"""

from __future__ import annotations

from typing import Any

import redis

from redis_session._core.index import COPY_PAUSE_S, Index
from redis_session._core.requests import Commands
from redis_session.keys import KeySchema
from tests.support.clock import FakeClock


def registered(index: Index, shard: str, failing: str, error: Exception) -> list[str]:
    """The registry copies ``index.register(shard)`` sent an ``SADD`` to, the copy
    ``failing`` answering ``error``.
    """
    op = index.register(shard)
    sent: list[str] = []
    reply: Any = None
    try:
        while True:
            request = op.send(reply)
            assert isinstance(request, Commands) and request.direct
            sent += [command[1] for command in request.commands]
            reply = [error if c[1] == failing else 1 for c in request.commands]
    except StopIteration:
        return sent


def test_a_copy_whose_node_failed_is_paused_then_tried_again(clock: FakeClock) -> None:
    clock.freeze()  # "not yet" however slow the machine
    index = Index(KeySchema("p:", cluster=True))
    copies = index.schema.index_registries
    down = copies[0]
    failure = redis.ConnectionError("node down")
    shards = (index.schema.index_of(f"s{n}") for n in range(100))
    assert sorted(registered(index, next(shards), down, failure)) == sorted(copies)
    assert sorted(registered(index, next(shards), down, failure)) == sorted(copies[1:])
    clock.advance(COPY_PAUSE_S / 2)
    assert sorted(registered(index, next(shards), down, failure)) == sorted(copies[1:])
    clock.advance(COPY_PAUSE_S / 2)  # the pause over: tried again (and paused again)
    assert sorted(registered(index, next(shards), down, failure)) == sorted(copies)
    assert sorted(registered(index, next(shards), down, failure)) == sorted(copies[1:])


def test_another_programs_key_at_a_copy_pauses_nothing(clock: FakeClock) -> None:
    clock.freeze()
    index = Index(KeySchema("p:", cluster=True))
    copies = index.schema.index_registries
    wrong = redis.ResponseError("WRONGTYPE Operation against a key holding the wrong value")
    for n in range(3):
        assert sorted(registered(index, index.schema.index_of(f"s{n}"), copies[1], wrong)) == (
            sorted(copies)
        )
