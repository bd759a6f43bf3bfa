"""The Lua scripts themselves: headers, portability, NOSCRIPT recovery, retried calls."""

from __future__ import annotations

import re
from typing import Any

import pytest

from redis_session import Message, Session
from redis_session.codec import message_args
from redis_session.scripts import PRELUDE, SCRIPT_NAMES, lua_dir, prelude_for, script_source
from tests.conftest import Backend

FORBIDDEN = [
    "table.unpack",
    "cmsgpack",
    "bit.",
    "struct.",
    "redis.sha1hex",
    "#!lua",
    "os.",
    "cjson",
]


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_header_declares_keys_argv_and_reply(name: str) -> None:
    text = (lua_dir() / f"{name}.lua").read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("--"))
    assert header.startswith(f"-- {name}:")
    for used in set(re.findall(r"KEYS\[(\d+)\]", text)):
        assert f"KEYS[{used}]" in header, f"{name}: KEYS[{used}] not described"
    assert "Reply:" in header
    if "ARGV" in text.replace(header, ""):
        assert "ARGV[" in header


@pytest.mark.parametrize("name", [*SCRIPT_NAMES, PRELUDE])
def test_portable_lua(name: str) -> None:
    code = "\n".join(
        line.split("--")[0] for line in (lua_dir() / f"{name}.lua").read_text().splitlines()
    )
    for word in FORBIDDEN:
        assert word not in code, f"{name} uses {word}"
    # No globals: every assignment at column 0 declares a local.
    for line in code.splitlines():
        if re.match(r"^[A-Za-z_][\w.]*\s*=", line):
            pytest.fail(f"{name}: global assignment {line!r}")


@pytest.mark.parametrize("flavour_name", ["sync", "async"])
async def test_noscript_after_script_flush_is_recovered(
    backend: Backend, flavour_name: str
) -> None:
    raw = backend.sync_client()
    store: Any = backend.sync_store() if flavour_name == "sync" else backend.async_store()

    async def call(value: Any) -> Any:
        return (await value) if flavour_name == "async" else value

    await call(store.create(Session(key="nos")))
    raw.script_flush()
    assert await call(store.append_message("nos", Message(role="user", content="after flush")))
    assert [m.content for m in await call(store.get_history("nos"))] == ["after flush"]
    await call(store.close())


def _script(backend: Backend, name: str) -> Any:
    return backend.sync_client().register_script(script_source(name))


def test_a_retried_append_script_stores_nothing_twice(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="r"))
    k = backend.schema.session("r")
    keys = [k.meta, k.msgs, k.ids, backend.schema.index_of("r")]
    args = [0, 0, 0, "r", b"", 0, *message_args([Message(role="user", content="x")], "m")]
    append = _script(backend, "append_message")
    assert append(keys=keys, args=args) == [0, 1]
    assert append(keys=keys, args=args) == [0, 0]


def test_a_retried_compaction_script_changes_nothing(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="c", history=[Message(role="user", content=str(i)) for i in range(4)]))
    k = backend.schema.session("c")
    keys = [k.meta, k.msgs, k.ids, backend.schema.index_of("c")]
    summary = message_args([Message(role="system", content="S")], "s")
    compact = _script(backend, "compact_messages")
    assert compact(keys=keys, args=[0, 0, "c", 1, *summary, b"", "", "", b""]) == [0, 2]
    assert compact(keys=keys, args=[0, 0, "c", 1, *summary, b"", "", "", b""]) == [0, 0]
    assert [m.content for m in store.get_history("c")] == ["S", "2", "3"]


def test_digest_lookup_is_aligned(backend: Backend) -> None:
    """A digest found only across the boundary of two stored digests is not held."""
    raw = backend.sync_client()
    ids = backend.schema.session("al").ids
    first, second = b"\x00\x80CCCCCC", b"\x80BBBBBBB"  # both in bucket 0 (first byte % 128)
    raw.hset(ids, "0", first + second)
    straddling = (first + second)[1:9]  # b"\x80CCCCCC\x80", also bucket 0
    assert straddling[0] % 128 == 0
    probe = raw.register_script(
        (lua_dir() / f"{PRELUDE}.lua").read_text()
        + "\nlocal out = {}"
        + "\nfor i, d in ipairs(ARGV) do out[i] = has_digest(KEYS[1], d) and 1 or 0 end"
        + "\nreturn out"
    )
    assert probe(keys=[ids], args=[first, second, straddling, b"\x00nothing"]) == [1, 1, 0, 0]


def test_a_script_gets_the_prelude_parts_it_uses_and_no_others() -> None:
    prelude = "\n\n".join(
        [
            "-- header\nlocal OK, GONE =\n  0, 1",
            "-- a\nlocal function a()\n  return OK\nend",
            "local function b()\n  return a()\nend",
            "-- c, used by nothing\nlocal function c()\n  return GONE\nend",
            "local MARK = string.rep('x', 8)",
        ]
    )
    kept = prelude_for(prelude, "-- calls b\nreturn b()\n")
    assert "local function b()" in kept and "local function a()" in kept  # through b
    assert "local OK, GONE" in kept  # through a
    assert "local function c" not in kept and "MARK" not in kept
    assert prelude_for(prelude, "return MARK") == "local MARK = string.rep('x', 8)\n"
    split = "local function f()\n  local x = 1\n\n  return x\nend"  # a blank line inside
    with pytest.raises(ValueError, match="no definition"):
        prelude_for(split, "return f()")


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_prelude_name_a_script_uses_is_defined_in_what_is_sent(name: str) -> None:
    prelude = (lua_dir() / f"{PRELUDE}.lua").read_text()
    defined = set(re.findall(r"^local function (\w+)", prelude, re.M)) | {"INHERITED", "OK"}
    source = script_source(name)
    for used in defined & set(re.findall(r"\w+", source)):
        assert re.search(rf"^local (function )?{used}\b", source, re.M), f"{name}: {used}"
