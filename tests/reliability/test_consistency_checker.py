"""The checker of the fault and soak tests finds what it is meant to find (else their
"nothing lost, nothing doubled" would prove nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from redis_session import Message, RedisStore, Session
from redis_session.keys import KeySchema
from tests.support.consistency import Ledger, audit_keys, check_histories, session_key_of

pytestmark = pytest.mark.fake


def _ledger() -> Ledger:
    ledger = Ledger(live={"s"})
    ledger.ack("s", "w0", "a0", "a1", "a2")
    ledger.ack("s", "w1", "b0", "b1")
    ledger.ack("s", "merge:c", "c0", "c1")
    ledger.contiguous.add(("s", "merge:c"))
    ledger.maybe("s", "u0", "u1")
    return ledger


def test_a_correct_history_passes() -> None:
    stored = ["a0", "b0", "u0", "a1", "c0", "c1", "b1", "a2"]
    verdict = check_histories(_ledger(), {"s": stored})
    assert verdict.ok, verdict
    assert (verdict.acknowledged, verdict.unknown_applied, verdict.unknown_absent) == (7, 1, 1)


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        (["a0", "b0", "a1", "c0", "c1", "b1"], "lost"),
        (["a0", "b0", "a1", "c0", "c1", "b1", "a2", "a2"], "duplicated"),
        (["a0", "b0", "u0", "u0", "a1", "c0", "c1", "b1", "a2"], "duplicated"),
        (["a1", "a0", "b0", "c0", "c1", "b1", "a2"], "out_of_order"),
        (["a0", "b0", "a1", "c0", "b1", "c1", "a2"], "split"),
        (["a0", "b0", "a1", "c0", "c1", "b1", "a2", "zz"], "unexpected"),
    ],
)
def test_each_kind_of_damage_is_found(stored: list[str], problem: str) -> None:
    verdict = check_histories(_ledger(), {"s": stored})
    assert not verdict.ok
    assert getattr(verdict, problem), verdict


def test_compaction_and_deletion_are_accounted_for() -> None:
    ledger = _ledger()
    ledger.removed["s"] = {"a0", "b0"}
    ledger.ack("s", "compact", "sum")
    ledger.absent["s"] = {"d0"}
    ledger.live.add("gone")
    assert check_histories(ledger, {"s": ["sum", "a1", "c0", "c1", "b1", "a2"]}).ok is False
    ledger.live.discard("gone")
    assert check_histories(ledger, {"s": ["sum", "a1", "c0", "c1", "b1", "a2"]}).ok
    assert check_histories(ledger, {"s": ["a0", "sum", "a1", "c0", "c1", "b1", "a2"]}).unexpected
    assert check_histories(ledger, {"s": ["sum", "a1", "c0", "c1", "b1", "a2", "d0"]}).unexpected


def test_ledgers_merge_and_round_trip_through_json() -> None:
    one, two = _ledger(), Ledger(live={"t"}, deleted={"x"})
    two.ack("s", "w2", "z0")
    one += two
    again = Ledger.from_json(one.to_json())
    assert again == one and again.acknowledged() == 8


def test_key_bodies_decode_to_their_session_keys() -> None:
    schema = KeySchema("p:")
    for key in ["plain", "a{b}c", "50%", "%7B", "x:child:agent:1", "{:child:a:2"]:
        body = schema.session(key).meta.removeprefix("p:meta:")
        assert session_key_of(body) == key


def test_audit_finds_orphans_missing_ttls_and_stale_index_entries() -> None:
    store = RedisStore.from_url("memory://", prefix="p:", ttl=60)
    raw: Any = store.client
    store.create(Session(key="a", history=[Message(role="user", content="x")]))
    store.create(Session(key="b"))
    child = store.fork_child("a", "helper")
    store.append_child_message(child.key, Message(role="user", content="y"))
    gone = store.fork_child("b", "other")
    store.discard_child(gone.key)
    store.create(Session(key="c"))
    store.delete("c")  # leaves its call token a while, with a TTL: counted, not unknown
    audit = audit_keys(raw, "p:", ttl=True)
    assert audit.ok, audit
    assert audit.tombstones == 1 and audit.delete_tokens == 1
    raw.persist("p:msgs:{a}")
    raw.delete("p:meta:{a}")
    raw.zadd("p:index", {"nobody": 1})
    audit = audit_keys(raw, "p:", ttl=True, deleted={"b"})
    assert audit.without_ttl == ["p:msgs:{a}"]
    assert audit.off_deadline == []  # a's meta hash (its deadline) is gone; b's keys agree
    assert sorted(audit.orphans) == [
        "p:child:{a}:child:helper:" + child.key.rsplit(":", 1)[1],
        "p:cids:{a}:child:helper:" + child.key.rsplit(":", 1)[1],
        "p:cmsgs:{a}:child:helper:" + child.key.rsplit(":", 1)[1],
    ]
    assert audit.dangling == ["p:ids:{a}", "p:kids:{a}", "p:msgs:{a}"]
    assert sorted(audit.stale_index) == ["a", "nobody"]
    assert "p:meta:{b}" in audit.leftovers and "index entry b" in audit.leftovers
    assert not audit.ok
    raw.pexpire("p:ids:{b}", 5000)  # one key of b's tree no longer expires with the rest
    assert [n.split(" ")[0] for n in audit_keys(raw, "p:", ttl=True).off_deadline] == ["p:ids:{b}"]
