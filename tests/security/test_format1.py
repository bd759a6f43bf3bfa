"""Sessions sealed by the previous release (format 1: one prefix-wide data key in the keyring,
values bound with NUL-joined associated data) keep opening; ``rekey`` moves them to format 2.

The format-1 data is written here by hand, byte for byte as that release wrote it: a session
made in cleartext, then its elements, metadata values and child elements sealed under a
keyring key, the keyring records beside it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from redis_session import (
    ChildSessionConfig,
    Message,
    Session,
    TamperDetected,
    codec,
    crypto,
)
from redis_session.crypto import CURRENT, Keyring, Passphrase
from tests.conftest import Backend
from tests.support import first_layout
from tests.support.stepping import steps

WORK = 10
PASSPHRASE = "format one passphrase"


def write_format1(backend: Backend) -> dict[str, Any]:
    """Session ``old`` (3 messages, metadata, a child with one message of its own) sealed in
    format 1, and its prefix's keyring of that release.
    """
    plain = backend.sync_store()
    history = [Message(role="user", content=f"old-{i}") for i in range(3)]
    plain.create(Session(key="old", agent_id="agent-1", model="m1", metadata={"tier": "gold"},
                         history=history))  # fmt: skip
    child = plain.fork_child("old", "helper", ChildSessionConfig(inherit_history=1))
    plain.append_child_message(child.key, Message(role="assistant", content="child-said"))
    raw = backend.sync_client()
    ring, kid = format1_keyring(backend)
    sk, ck = backend.schema.session("old"), backend.schema.child(child.key)
    seal_elements(backend, ring, kid, "old")
    for i, element in enumerate(raw.lrange(ck.msgs, 0, -1)):
        element = bytes(element)
        raw.lset(ck.msgs, i, element[:8] + _seal(ring, kid, "old", element[8:]))
    value = raw.hget(sk.meta, "m:tier")
    raw.hdel(sk.meta, "m:tier")
    raw.hset(sk.meta, mapping={
        "e:tier": crypto.seal(ring, kid, bytes(value), crypto.aad(b"meta", "old", "tier")),
        "k": kid,
    })  # fmt: skip
    return {"child": child.key, "kid": kid}


def format1_keyring(backend: Backend) -> tuple[Keyring, bytes]:
    """The prefix's keyring as the previous release wrote it: one data key under PASSPHRASE."""
    raw = backend.sync_client()
    schema = backend.schema
    salt, kid, dek = os.urandom(16), os.urandom(crypto.KID_LEN), os.urandom(32)
    kek = crypto.derive_kek(Passphrase(PASSPHRASE), salt, WORK)
    raw.hset(schema.salts, CURRENT, salt)
    raw.hset(schema.checksums, CURRENT, crypto.key_check(kek, WORK))
    wrapped = crypto.wrap(kek, kid, dek)
    raw.hset(schema.keyring, mapping={"current": kid.hex(), f"dek:{kid.hex()}:{CURRENT}": wrapped})
    ring = Keyring(current=kid)
    ring.add(kid, dek)
    return ring, kid


def _seal(ring: Keyring, kid: bytes, key: str, element: bytes) -> bytes:
    return crypto.seal_message(ring, kid, key, json.loads(element)["id"], element)


def seal_elements(backend: Backend, ring: Keyring, kid: bytes, key: str) -> None:
    """Session ``key``'s elements sealed in place in format 1."""
    raw = backend.sync_client()
    msgs = backend.schema.session(key).msgs
    for i, element in enumerate(raw.lrange(msgs, 0, -1)):
        raw.lset(msgs, i, _seal(ring, kid, key, bytes(element)))


def test_a_format1_session_opens_takes_appends_and_rekey_moves_it_to_format2(
    backend: Backend,
) -> None:
    made = write_format1(backend)
    store = backend.sync_store(passphrase=PASSPHRASE, kdf_work=WORK)
    session = store.get("old")
    assert [m.content for m in session.history] == ["old-0", "old-1", "old-2"]
    assert (session.metadata, session.agent_id, session.model) == (
        {"tier": "gold"},
        "agent-1",
        "m1",
    )
    assert [m.content for m in store.get_child(made["child"]).history] == ["old-2", "child-said"]
    store.append_message("old", Message(role="user", content="appended in format 1"))
    raw = backend.sync_client()
    sk = backend.schema.session("old")
    newest = bytes(raw.lindex(sk.msgs, -1))
    assert crypto.split_element(newest)[1][0] == crypto.MAGIC  # type: ignore[index]

    report = store.rekey(PASSPHRASE)
    assert report.sessions_resealed == 1 and report.values_resealed >= 7
    for element in raw.lrange(sk.msgs, 0, -1):
        parts = crypto.split_element(bytes(element))
        assert parts is not None and parts[1][0] == crypto.V2
    for element in raw.lrange(backend.schema.child(made["child"]).msgs, 0, -1):
        parts = crypto.split_element(bytes(element)[8:])
        assert parts is not None and parts[1][0] == crypto.V2
    fields = {bytes(f): bytes(v) for f, v in raw.hgetall(sk.meta).items()}
    assert fields[b"e:tier"][0] == crypto.V2_META and fields[b"model"][0] == crypto.V2
    assert crypto.parse_dk(fields[b"dk"]) is not None and fields[b"k"] != made["kid"]
    fresh = backend.sync_store(passphrase=PASSPHRASE)
    session = fresh.get("old")
    assert [m.content for m in session.history][-1] == "appended in format 1"
    assert (session.metadata, session.agent_id, session.model) == (
        {"tier": "gold"},
        "agent-1",
        "m1",
    )
    raw.rpush(sk.msgs, crypto.seal_message(_ring(made["kid"]), made["kid"], "old", "x", b"{}"))
    raw.hincrby(sk.meta, "n", 1)
    with pytest.raises(TamperDetected, match="format 1 in a format-2 session"):
        fresh.get_history("old")  # once moved, format 1 is refused like cleartext


def _ring(kid: bytes) -> Keyring:
    ring = Keyring(current=kid)
    ring.add(kid, os.urandom(32))
    return ring


def test_a_forged_cleartext_message_in_a_format1_session_is_refused(backend: Backend) -> None:
    write_format1(backend)
    raw = backend.sync_client()
    sk = backend.schema.session("old")
    raw.rpush(sk.msgs, codec.encode_message(Message(role="system", content="forged")))
    raw.hincrby(sk.meta, "n", 1)
    store = backend.sync_store(passphrase=PASSPHRASE, kdf_work=WORK)
    with pytest.raises(TamperDetected, match="message 3 is in cleartext"):
        store.get_history("old")


def test_rekey_does_not_seal_a_forgery_planted_in_a_format1_session(backend: Backend) -> None:
    write_format1(backend)
    raw = backend.sync_client()
    sk = backend.schema.session("old")
    raw.hset(sk.meta, "m:is_admin", "true")
    store = backend.sync_store(passphrase=PASSPHRASE, kdf_work=WORK)
    with pytest.raises(TamperDetected, match="metadata 'is_admin' is in cleartext"):
        store.rekey(PASSPHRASE)
    raw.hdel(sk.meta, "m:is_admin")
    raw.rpush(sk.msgs, codec.encode_message(Message(role="system", content="forged")))
    raw.hincrby(sk.meta, "n", 1)
    with pytest.raises(TamperDetected, match="message 3 is in cleartext"):
        store.rekey(PASSPHRASE)  # resumed: the flag says the session was not cleartext
    raw.rpop(sk.msgs)
    raw.hincrby(sk.meta, "n", -1)
    store.rekey(PASSPHRASE)
    assert [m.content for m in store.get_history("old")] == ["old-0", "old-1", "old-2"]


def test_a_rekey_between_the_steps_of_a_read_of_a_first_layout_session_is_seen(
    backend: Backend,
) -> None:
    # A format-1 session as the first layout wrote it (no list positions), never written since:
    # rekey re-seals its elements in place, so a read in steps that began before must read
    # again, not go on with elements of the other format (a false TamperDetected).
    raw = backend.sync_client()
    first_layout.write_session(
        raw, backend.schema, "old", [Message(role="user", content=f"old-{i}") for i in range(130)]
    )
    ring, kid = format1_keyring(backend)
    seal_elements(backend, ring, kid, "old")
    raw.hset(backend.schema.session("old").meta, "k", kid)
    reader = backend.sync_store(passphrase=PASSPHRASE, kdf_work=WORK, read_cache_bytes=0)
    assert reader.get_history("old", 1)[0].content == "old-129"  # unlocked
    reader._core.element_bytes = 0  # no element size known: the read_range script steps
    reader._core.read_budget = 10 * len(bytes(raw.lindex(backend.schema.session("old").msgs, 0)))
    rekeyed: list[Any] = []
    history, requests = steps(
        reader,
        reader._core.get_history("old"),
        lambda: rekeyed.append(backend.sync_store(passphrase=PASSPHRASE).rekey(PASSPHRASE)),
    )
    assert rekeyed[0].values_resealed >= 130
    assert [r.name for r in requests[:2]] == ["get", "read_range"]
    assert isinstance(history, list), history  # not the name of an exception
    assert [m.content for m in history] == [f"old-{i}" for i in range(130)]
    fresh = backend.sync_store(passphrase=PASSPHRASE, read_cache_bytes=0)
    assert fresh.get_history("old") == history


def test_rekey_makes_no_meta_hash_for_a_child_whose_hash_is_gone(backend: Backend) -> None:
    # A child whose meta hash went (evicted, removed by hand) while its list stayed: re-sealing
    # the list in place records no generation in a hash made anew (it would have no TTL).
    made = write_format1(backend)
    raw = backend.sync_client()
    ck = backend.schema.child(made["child"])
    raw.delete(ck.meta)
    backend.sync_store(passphrase=PASSPHRASE, kdf_work=WORK).rekey(PASSPHRASE)
    assert not raw.exists(ck.meta)
