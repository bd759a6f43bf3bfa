"""The append script's two paths agree: its quick path (the common append, answered before the
prelude's other parts are built) writes and answers exactly what its full path writes and
answers for the same call, and steps aside (to the full path) for every other case.

Each step sends one request the store builds, through two variants of the script: on session
"q" the quick path alone (the full path replaced by a "declined" answer, which is then sent
again through the full path), on session "f" the full path alone. Their answers, their lists
and what each step changed in their meta and ids hashes (but the times) must be equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis_session import Message, Session, Usage
from redis_session._core.requests import ScriptCall
from redis_session.scripts import REST_MARK, lua_dir, with_prelude
from tests.conftest import Backend

DECLINED = -1
QUICK = "if ARGV[13] == '0' and #ARGV == 15"


def variants(backend: Backend) -> tuple[Any, Any]:
    """The append script with its full path cut off (quick only) and with its quick path off."""
    body = (lua_dir() / "append_message.lua").read_text(encoding="utf-8")
    assert REST_MARK in body and QUICK in body
    quick = body.replace(REST_MARK, f"{REST_MARK}\ndo return {{{DECLINED}}} end", 1)
    full = body.replace(QUICK, f"if false and {QUICK[3:]}", 1)
    client = backend.sync_client()
    return client.register_script(with_prelude(quick)), client.register_script(with_prelude(full))


def request(store: Any, key: str, msg: Message) -> ScriptCall:
    """The script call ``store`` makes for ``append_message(key, msg)`` (no I/O)."""
    op = store._core.sessions.append_message(key, msg)
    call = next(op)
    op.close()
    assert isinstance(call, ScriptCall) and call.name == "append_message"
    return call


def state(backend: Backend, key: str) -> dict[str, Any]:
    raw, schema = backend.sync_client(), backend.schema.session(key)
    meta = {
        k: v
        for k, v in raw.hgetall(schema.meta).items()
        if k not in (b"updated_at", b"created_at", b"x", b"token", b"ct", b"key")
    }
    return {"meta": meta, "ids": raw.hgetall(schema.ids), "msgs": raw.lrange(schema.msgs, 0, -1)}


def changes(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> dict[bytes, Any]:
    """What a write changed in a hash: each field's new value (None: removed); for a bucket of
    the id window (a one-byte field from 0x80: a 3-byte count, then 8-byte digests), how its
    count moved and which digests it gained and lost, so that a digest another write left in
    the same bucket (a pop's own) does not tell two sessions' changes apart."""
    out: dict[bytes, Any] = {}
    for k in before.keys() | after.keys():
        old, new = before.get(k), after.get(k)
        if old == new:
            continue
        if len(k) == 1 and k[0] >= 0x80 and new is not None:
            was = old or bytes(3)
            held = {was[i : i + 8] for i in range(3, len(was), 8)}
            now = {new[i : i + 8] for i in range(3, len(new), 8)}
            count = int.from_bytes(new[:3], "big") - int.from_bytes(was[:3], "big")
            out[k] = (count, sorted(now - held), sorted(held - now))
        else:
            out[k] = new
    return out


def test_the_quick_path_writes_and_answers_what_the_full_path_does(backend: Backend) -> None:
    quick, full = variants(backend)
    raw = backend.sync_client()
    stores = {
        "plain": backend.sync_store(),
        "trims": backend.sync_store(max_history_turns=30),
        "capped": backend.sync_store(max_history_tokens=2_000),
        "roomy": backend.sync_store(max_history_tokens=1_000_000),
    }
    first = [Message(role="user", content=f"m{i}", tokens=i) for i in range(5)]
    for key in ("q", "f"):
        stores["plain"].create(Session(key=key, history=first))
    taken: dict[str, int] = {}

    def step(
        label: str, msg: Message, store: str = "plain", raw_write: Callable[..., Any] | None = None
    ) -> None:
        calls = {key: request(stores[store], key, msg) for key in ("q", "f")}
        if raw_write is not None:
            for key in ("q", "f"):
                raw_write(key)
        before = {key: state(backend, key) for key in ("q", "f")}
        call = calls["q"]
        answer = quick(keys=list(call.keys), args=list(call.args))
        if answer == [DECLINED]:
            answer = full(keys=list(call.keys), args=list(call.args))
        else:
            taken[label] = taken.get(label, 0) + 1
        call = calls["f"]
        assert answer == full(keys=list(call.keys), args=list(call.args)), label
        got, want = state(backend, "q"), state(backend, "f")
        assert got["msgs"] == want["msgs"], label
        for part in ("meta", "ids"):  # what the step changed (a pop leaves a token of its own)
            assert changes(before["q"][part], got[part]) == changes(
                before["f"][part], want[part]
            ), (label, part)

    for i in range(40):  # through the sums' fields (16 entries each) and the window's buckets
        step("plain", Message(role="user", content=f"a{i}", tokens=i * 7))
    again = Message(role="user", content="once", tokens=3)
    step("plain", again)
    step("retry", again)  # held in the window: answered 0 by the quick path too
    step("usage", Message(role="assistant", content="u", usage=Usage(input_tokens=5)))
    step("counted", Message(role="user", content="estimated: no count of its own"))
    for i in range(3):
        step("trim", Message(role="user", content=f"t{i}", tokens=1), store="trims")
    for key in ("q", "f"):  # a pop after those trims moves the sums' offset off 0
        stores["plain"].pop_message(key)
    assert raw.hget(backend.schema.session("q").ids, "so") not in (None, b"0")
    for i in range(3):
        step("offset", Message(role="user", content=f"o{i}", tokens=2))
    step("roomy", Message(role="user", content="r", tokens=900), store="roomy")  # under its cap
    for i in range(3):  # past its cap: trimmed by tokens
        step("cap", Message(role="user", content=f"c{i}", tokens=900), store="capped")

    def unknown(key: str) -> None:  # the sums' generation gone: unknown from then on
        raw.hdel(backend.schema.session(key).ids, "sg")

    step("unknown", Message(role="user", content="x", tokens=5), raw_write=unknown)
    step("unknown", Message(role="user", content="y", tokens=5))

    def pushed(key: str) -> None:  # a list changed behind the store's back
        raw.rpush(backend.schema.session(key).msgs, b'{"id":"raw"}')

    step("raw", Message(role="user", content="z", tokens=5), raw_write=pushed)
    assert taken == {
        "plain": 41,
        "retry": 1,
        "counted": 1,
        "offset": 3,
        "roomy": 1,
        "unknown": 2,
    }, taken
