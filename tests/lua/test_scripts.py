"""The Lua scripts themselves: headers, portability, NOSCRIPT recovery, retried calls."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from redis_session import Message, Session, contracts
from redis_session.codec import message_args
from redis_session.contracts import CONTRACTS, Contract, Events, Head
from redis_session.extension import ScriptCall
from redis_session.scripts import (
    PRELUDE,
    REST_MARK,
    SCRIPT_NAMES,
    lua_dir,
    prelude_for,
    script_source,
)
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
    described: set[int] = set()
    open_from = None  # "KEYS[8 ..]": every key from 8 on
    for first, dots, last in re.findall(r"KEYS\[(\d+)\s*(\.\.)?\s*(\d*)\]", header):
        if dots and not last:
            open_from = int(first) if open_from is None else min(open_from, int(first))
        described |= set(range(int(first), int(last or first) + 1))
    for used in {int(i) for i in re.findall(r"KEYS\[(\d+)\]", text)}:
        covered = used in described or (open_from is not None and used >= open_from)
        assert covered, f"{name}: KEYS[{used}] not described"
    assert "Reply:" in header
    if "ARGV" in text.replace(header, ""):
        assert "ARGV[" in header


INTEGRATIONS = Path(__file__).resolve().parents[2] / "redis_session/integrations"
LANGGRAPH_SCRIPTS = sorted(  # the scripts (_langgraph.lua: what they share, not one)
    p.stem for p in (INTEGRATIONS / "langgraph").glob("*.lua") if not p.stem.startswith("_")
)


def _script_path(name: str) -> Path:
    if name == "adk_append_event":
        return INTEGRATIONS / "adk" / f"{name}.lua"
    if name in LANGGRAPH_SCRIPTS:
        return INTEGRATIONS / "langgraph" / f"{name}.lua"
    return lua_dir() / f"{name}.lua"


def _contracts() -> dict[str, Contract]:
    found = dict(CONTRACTS)
    try:
        from redis_session.integrations.langgraph._contracts import CONTRACTS as LANGGRAPH
    except ImportError:  # without the langgraph extra: its scripts are not checked
        pass
    else:
        assert sorted(LANGGRAPH) == LANGGRAPH_SCRIPTS  # a contract per script shipped
        found.update(LANGGRAPH)
    try:
        from redis_session.integrations.adk._append import CONTRACT
    except ImportError:  # without the adk extra: its script is not checked
        return found
    found[CONTRACT.name] = CONTRACT
    return found


ALL_CONTRACTS = _contracts()


def _contract_lines(name: str) -> dict[str, list[str]]:
    text = _script_path(name).read_text()
    found = re.findall(r"^-- (KEYS|ARGV|OK): (.*)$", text, re.M)
    assert [k for k, _ in found] == ["KEYS", "ARGV", "OK"], f"{name}: the three contract lines"
    return {k: v.split() for k, v in found}


@pytest.mark.parametrize("name", sorted(ALL_CONTRACTS))
def test_the_python_contract_is_the_headers(name: str) -> None:
    """The names of KEYS, ARGV and the OK reply in the script's header are those of its
    contract, the builder takes exactly those keys and arguments by name (KEYS first), every
    OK reply field has a type other than ``Any``, and the header's prose numbers every
    argument before the first variable part."""
    contract, lines = ALL_CONTRACTS[name], _contract_lines(name)
    assert lines["KEYS"] == list(contract.keys)
    assert lines["ARGV"] == list(contract.argv)
    ok = " | ".join(" ".join(getattr(t, "_fields")) or "-" for t in contract.ok).split()  # noqa: B009
    assert lines["OK"] == ok
    params = inspect.signature(contract.build).parameters.values()
    named = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name != "after"]
    assert not [p for p in params if p.kind is not p.KEYWORD_ONLY], "KEYS and ARGV by name"
    assert named == [k.lstrip("*") for k in contract.keys] + [a.lstrip("#*") for a in contract.argv]
    for reply in contract.ok:
        hints = get_type_hints(reply)
        fields = getattr(reply, "_fields")  # noqa: B009
        assert all(hints[f] is not Any for f in fields), f"{reply.__name__}: Any field"
    fixed = 0
    for arg in contract.argv:
        if arg[0] in "#*":
            break
        fixed += 4 if arg in ("head", "events") else 1
    header = _script_path(name).read_text()
    described = set()
    for first, last in re.findall(r"ARGV\[(\d+)(?:\s*\.\.\s*(\d+))?\]", header):
        described |= set(range(int(first), int(last or first) + 1))
    missing = set(range(1, fixed + 1)) - described
    assert not missing, f"{name}: ARGV {sorted(missing)} not described"


@pytest.mark.parametrize("name", sorted(ALL_CONTRACTS))
def test_a_builder_sends_every_argument_in_the_headers_order(name: str) -> None:
    """Each builder argument, given a marker, reaches ARGV, and each key KEYS, in the
    contract's order."""
    contract = ALL_CONTRACTS[name]
    given: dict[str, Any] = {}
    key_names = {k.lstrip("*") for k in contract.keys}
    for p in inspect.signature(contract.build).parameters.values():
        if p.kind is not p.KEYWORD_ONLY or p.name == "after":
            continue
        if p.name == "root":
            given[p.name] = [f"<root{i}>" for i in range(7)]
        elif p.name in key_names:
            given[p.name] = (
                [f"<{p.name}>"] * 2 if "Sequence" in str(p.annotation) else f"<{p.name}>"
            )
        elif p.name == "head":
            given[p.name] = Head(*(f"<head{i}>" for i in range(4)))  # type: ignore[arg-type]
        elif p.name == "events":
            given[p.name] = Events(*(f"<events{i}>" for i in range(4)))  # type: ignore[arg-type]
        elif p.name in ("shared",):
            given[p.name] = [[f"<{p.name}>"]]
        elif "Sequence" in str(p.annotation):
            given[p.name] = [f"<{p.name}>"] * 12  # divisible by 2, 3 and 4
        else:
            given[p.name] = f"<{p.name}>"
    call = contract.build(**given)
    keys = list(dict.fromkeys(str(k).strip("<>").rstrip("0123456") for k in call.keys))
    assert keys == [k.lstrip("*") for k in contract.keys]
    args = [a for a in call.args if isinstance(a, str) and a[:1] == "<"]
    flags = {
        n for n, p in inspect.signature(contract.build).parameters.items() if p.annotation == "bool"
    }
    wanted = [a.lstrip("#*") for a in contract.argv if a not in flags]  # a bool goes as "1"/"0"
    seen = list(dict.fromkeys(a.strip("<>").rstrip("0123") for a in args))
    assert seen == wanted


def test_every_script_has_a_contract() -> None:
    assert set(CONTRACTS) == set(SCRIPT_NAMES)


@pytest.mark.parametrize("name", [*SCRIPT_NAMES, PRELUDE, "adk_append_event", *LANGGRAPH_SCRIPTS])
def test_portable_lua(name: str) -> None:
    code = "\n".join(line.split("--")[0] for line in _script_path(name).read_text().splitlines())
    for word in FORBIDDEN:
        assert word not in code, f"{name} uses {word}"
    # No globals: every assignment at column 0 declares a local or assigns one declared so.
    declared: set[str] = set()
    for line in code.splitlines():
        if m := re.match(r"^local\s+(?:function\s+(\w+)|([\w\s,]+?)\s*(?:=|$))", line):
            declared |= {m[1]} if m[1] else {v.strip() for v in m[2].split(",")}
        elif m := re.match(r"^([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=[^=]", line):
            names = {v.strip() for v in m[1].split(",")}
            if not names <= declared:
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


def _root_keys(backend: Backend, key: str) -> list[str]:
    k = backend.schema.session(key)
    return [k.meta, k.msgs, k.ids, backend.schema.index_of(key), k.mark, k.kids, k.done]


def _send(backend: Backend, call: ScriptCall) -> Any:
    """A script call built by its contract, sent as it is (no store: a retry by hand)."""
    return _script(backend, call.name)(keys=list(call.keys), args=list(call.args))


HEAD = Head(ttl_ms=0, grace_ms=0, tree_generation="0", id_window=1000)


def test_a_retried_append_script_stores_nothing_twice(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="r"))
    call = contracts.append_message(
        root=_root_keys(backend, "r"), turn=backend.schema.session("r").turn,
        usage=backend.schema.usage_of("r"),
        head=HEAD, max_messages=0, session_key="r", kid=b"", max_metadata_bytes=0,
        fence="", expect_last=b"", budget=0, max_tokens=0, metadata=(),
        messages=message_args([Message(role="user", content="x")], "m"),
    )  # fmt: skip
    assert _send(backend, call) == [0, 1, 0]  # OK, appended, trimmed
    assert _send(backend, call) == [0, 0, 0]


def test_a_retried_compaction_script_changes_nothing(backend: Backend) -> None:
    store = backend.sync_store()
    store.create(Session(key="c", history=[Message(role="user", content=str(i)) for i in range(4)]))
    sk = backend.schema.session("c")
    tag, element = message_args([Message(role="system", content="S", tokens=3)], "s")
    call = contracts.compact_messages(
        root=_root_keys(backend, "c"), turn=sk.turn, log=backend.schema.log_of("c"),
        head=HEAD, session_key="c", up_to=1, tag=tag, element=element, expect=b"",
        events=Events("", "", 0, 0), event=b'"key":"c"', kid=b"",
    )  # fmt: skip
    removed = sum(m.tokens or 0 for m in store.get_history("c")[:2])
    assert _send(backend, call) == [0, 2, b"", removed]  # OK, removed, event id, their tokens
    assert _send(backend, call) == [0, 0, b"", None]
    assert store.get("c").context_tokens == 3 + sum(
        m.tokens or 0 for m in store.get_history("c")[1:]
    )
    assert [m.content for m in store.get_history("c")] == ["S", "2", "3"]


def _window_probe(backend: Backend) -> Any:
    """A script that runs the prelude's id window on KEYS[1]: ARGV[1] 'add' or 'has' (or
    'blind': add, the window opened without reading the digests' buckets, as a merge does), the
    window size, then digests.
    """
    prelude = (lua_dir() / f"{PRELUDE}.lua").read_text()
    body = """
local win = open_window(1, false, 3, #ARGV, 1)
if ARGV[1] == 'blind' then win = open_window(1, false, 1, 0, 1) end
if ARGV[1] == 'add' or ARGV[1] == 'blind' then
  local new = {}
  for i = 3, #ARGV do if not has(win, ARGV[i]) then new[#new + 1] = ARGV[i] end end
  add(win, new, tonumber(ARGV[2]))
  save_window(win)
  return #new
end
local out = {}
for i = 3, #ARGV do out[i - 2] = has(win, ARGV[i]) and 1 or 0 end
return out
"""
    return backend.sync_client().register_script(prelude_for(prelude, body) + body)


def test_digest_lookup_is_aligned(backend: Backend) -> None:
    """A digest found only across the boundary of two stored digests is not held."""
    ids = backend.schema.session("al").ids
    first, second = b"\x00\x80CCCCCC", b"\x80BBBBBBB"  # both in bucket 0 (first byte % 128)
    probe = _window_probe(backend)
    assert probe(keys=[ids], args=["add", 100, first, second]) == 2
    straddling = (first + second)[1:9]  # b"\x80CCCCCC\x80", also bucket 0
    assert straddling[0] % 128 == 0
    assert probe(keys=[ids], args=["has", 100, first, second, straddling, b"\x00nothing"]) == [
        1, 1, 0, 0,
    ]  # fmt: skip


def test_a_bucket_is_read_before_it_is_looked_in_or_rewritten(backend: Backend) -> None:
    """A window opened without a digest's bucket (a merge learns its child's ids only inside
    the script) reads it when it looks for the digest or adds one to it: before, it rewrote the
    bucket with the new digests alone, dropping those it held."""
    ids = backend.schema.session("bl").ids
    first, second = b"\x00AAAAAAA", b"\x80BBBBBBB"  # both in bucket 0
    probe = _window_probe(backend)
    assert probe(keys=[ids], args=["add", 100, first]) == 1
    assert probe(keys=[ids], args=["blind", 100, first, second]) == 1  # first found: not added
    assert probe(keys=[ids], args=["has", 100, first, second]) == [1, 1]


def test_the_window_keeps_the_newest_ids_and_stays_bounded(backend: Backend) -> None:
    ids = backend.schema.session("w").ids
    probe = _window_probe(backend)
    digests = [i.to_bytes(8, "big") for i in range(1000)]
    for d in digests:  # one at a time, window of 64
        assert probe(keys=[ids], args=["add", 64, d]) == 1
    found = probe(keys=[ids], args=["has", 64, *digests])
    assert all(found[-64:])  # the newest 64 are always there
    assert sum(found) <= 2 * 64  # and at most two generations
    raw = backend.sync_client()
    buckets = [v for f, v in raw.hgetall(ids).items() if len(f) == 1 and f[0] >= 128]
    held = sum(len(v) - 3 for v in buckets) // 8  # each bucket: a 3-byte count, then digests
    assert held == sum(found)
    big = [(5000 + i).to_bytes(8, "big") for i in range(200)]  # a batch larger than the window
    assert probe(keys=[ids], args=["add", 64, *big]) == 200
    assert all(probe(keys=[ids], args=["has", 64, *big]))


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
    defined = set(re.findall(r"^local function (\w+)", prelude, re.M)) | {"INHERITED", "B32"}
    source = script_source(name)
    for used in defined & set(re.findall(r"\w+", re.sub(r"--[^\n]*", "", source))):
        assert re.search(rf"^local (function )?{used}\b", source, re.M), f"{name}: {used}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_code_above_a_scripts_mark_uses_only_parts_sent_before_it(name: str) -> None:
    """Where a script marks the end of its quick path (``REST_MARK``), the prelude parts sent
    after the mark are ones its code above the mark never names (Lua would take such a name for
    a global), and the ones before it are no more than that code needs."""
    source = script_source(name)
    if REST_MARK not in source:
        return
    above, _, below = source.partition(f"\n{REST_MARK}\n")
    code_above = set(re.findall(r"\w+", re.sub(r"--[^\n]*", "", above)))
    late = set(re.findall(r"^local function (\w+)", below, re.M))
    assert late, name  # the mark leaves some parts out of the quick path
    assert not late & code_above, sorted(late & code_above)
    early = set(re.findall(r"^local function (\w+)", above, re.M))
    assert early <= code_above, sorted(early - code_above)
