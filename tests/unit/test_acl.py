"""The ACL recipe (``redis_session.acl``) without a server: commands read from Lua as sent, the
client's own command list checked against the package's source so neither can drift, and the
rules and the redis-cli line for a prefix.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.client import PubSub

import redis_session
from redis_session import InvalidArgument, acl, scripts
from redis_session.acl import CLIENT_COMMANDS, commands_in

PACKAGE = Path(redis_session.__file__).resolve().parent

# -- reading Lua ---------------------------------------------------------------------------------


def test_literal_calls_and_pcalls_are_found() -> None:
    lua = """
    local a = redis.call('HGET', KEYS[1], 'f')
    local b = redis.pcall("rpush", KEYS[2], ARGV[1])
    redis.call( 'TIME' )
    """
    assert commands_in(lua) == {"hget", "rpush", "time"}


def test_comments_and_strings_are_not_calls() -> None:
    lua = """
    -- redis.call('FLUSHALL') in a comment
    --[[ redis.call('DEBUG', 'SLEEP', 1) ]]
    --[==[ a long comment with ]] inside redis.call('KEYS', '*') ]==]
    local s = "redis.call('CONFIG', 'SET')"
    local t = [[ redis.call('SHUTDOWN') ]]
    return redis.call('GET', KEYS[1])
    """
    assert commands_in(lua) == {"get"}


def test_container_commands_name_their_subcommand() -> None:
    assert commands_in("redis.call('OBJECT', 'ENCODING', KEYS[1])") == {"object|encoding"}
    with pytest.raises(ValueError, match="without a literal subcommand"):
        commands_in("redis.call('OBJECT', ARGV[1], KEYS[1])")


def test_a_command_name_passed_to_a_local_function_is_followed_to_its_calls() -> None:
    lua = """
    local function hcall(cmd, key, first)
      redis.call(cmd, key, ARGV[first])
    end
    local function other(key, c)
      redis.pcall(c, key)
    end
    hcall('HSET', KEYS[1], 2)
    hcall("HDEL", KEYS[1], 3)
    other(KEYS[1], 'LPOP')
    """
    assert commands_in(lua) == {"hset", "hdel", "lpop"}


@pytest.mark.parametrize(
    ("lua", "message"),
    [
        ("local call = redis.call\ncall('DEL', KEYS[1])", "other than as a direct call"),
        ("redis.call(ARGV[1], KEYS[1])", "not a literal"),
        ("local c = 'DEL'\nredis.call(c, KEYS[1])", "not a literal"),
        (
            "local function f(cmd)\n redis.call(cmd, KEYS[1])\nend\nf(ARGV[1])",
            "without a literal command name",
        ),
        ("local function f(x)\n redis.call(cmd, KEYS[1])\nend", "is no parameter"),
    ],
)
def test_anything_else_refuses_rather_than_miss_a_command(lua: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        commands_in(lua)


# -- the scripts, as they are now and as they will be ---------------------------------------------


def test_every_script_file_is_read() -> None:
    files = {p.stem for p in scripts.lua_dir().glob("*.lua")} - {scripts.PRELUDE}
    assert files == set(scripts.SCRIPT_NAMES)


def test_every_command_a_script_names_is_in_the_recipe() -> None:
    recipe = set(acl.commands())
    for name in scripts.SCRIPT_NAMES:
        source = scripts.script_source(name)
        named = {c.lower() for c in re.findall(r"redis\.p?call\(\s*'([A-Za-z]+)'", source)}
        found = acl.script_commands(name)  # containers with their subcommand: xinfo|groups
        assert named <= {c.split("|")[0] for c in found} and found <= recipe, name
    # the prelude's hcall_from('HDEL', ...) is the only HDEL of update_metadata
    assert "hdel" in acl.script_commands("update_metadata")


def test_a_script_added_later_is_in_the_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path in scripts.lua_dir().glob("*.lua"):
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "count_visitor.lua").write_text(
        "-- KEYS[1]: a HyperLogLog\nreturn redis.call('PFADD', KEYS[1], ARGV[1])\n"
    )
    monkeypatch.setattr(scripts, "lua_dir", lambda: tmp_path)
    monkeypatch.setattr(scripts, "SCRIPT_NAMES", (*scripts.SCRIPT_NAMES, "count_visitor"))
    scripts.script_source.cache_clear()
    try:
        assert "pfadd" in acl.commands()
        assert "+pfadd" in acl.acl_rules("rs:")
    finally:
        monkeypatch.undo()
        scripts.script_source.cache_clear()
    assert "pfadd" not in acl.commands()  # read again from the real files


# -- the client's own commands, against the package's source ---------------------------------------

NOT_REDIS_CALLS = frozenset(
    {"append", "close", "command", "copy", "delete", "digest", "echo", "get", "info", "keys",
     "listen", "reset", "set", "sort", "time", "wait", "watch"}
)  # fmt: skip
"""Calls whose names a redis-py client also has, made here on other objects: list.append,
dict.get, click.command, click.echo, store.delete, store.listen, hashlib's digest, time.time,
threading's wait, contextvars' reset and set, copy.copy, a logger's info, Trees.keys, a
traced call's watch."""

SEND_NOTHING = frozenset(
    {"execute_command", "from_pool", "from_url", "get_message", "get_sharded_message",
     "pipeline", "pubsub", "register_script"}
)  # fmt: skip
"""redis-py methods that send no command of their own (``execute_command`` is read apart)."""

ELSEWHERE = ("bench", "doctor.py", "cli/doctor.py")
"""Left out of the recipe: the benchmark (see ``acl.CLIENT_COMMANDS``) and ``doctor``, an
operator's check run as an admin (it degrades to warnings for a confined user)."""

CLIENT_METHODS = frozenset(
    name for cls in (redis.Redis, PubSub) for name in dir(cls) if not name.startswith("_")
)


def _sources() -> Iterator[tuple[Path, ast.AST]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in ELSEWHERE or relative.as_posix() in ELSEWHERE:
            continue
        yield relative, ast.parse(path.read_text(encoding="utf-8"))


def _name(words: list[str]) -> str:
    command = words[0].lower()
    if command in acl.CONTAINER_COMMANDS and len(words) > 1:
        command += "|" + words[1].lower()
    return command


def _constants(nodes: list[ast.expr]) -> list[str]:
    out = []
    for node in nodes:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            break
        out.append(node.value)
    return out


def sent_by_the_source() -> dict[str, set[str]]:
    """Command → files: tuples that start with a command word (``Commands`` requests),
    ``execute_command("X", …)``, and redis-py client methods (``pipe.llen`` → llen).
    """
    found: dict[str, set[str]] = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            words: list[str] = []
            if isinstance(node, ast.Tuple):
                words = _constants(node.elts)
                if not words or not re.fullmatch(r"[A-Z]{3,}", words[0]):
                    continue
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                method = node.func.attr
                if method == "execute_command":
                    words = _constants(node.args)
                elif method in CLIENT_METHODS and method not in NOT_REDIS_CALLS | SEND_NOTHING:
                    words = method.split("_")
            if words:
                found.setdefault(_name(words), set()).add(str(path))
    return found


def test_every_command_the_source_sends_is_in_the_list() -> None:
    sent = sent_by_the_source()
    missing = {c: sorted(files) for c, files in sent.items() if c not in CLIENT_COMMANDS}
    assert not missing, f"add these to redis_session.acl.CLIENT_COMMANDS: {missing}"


def test_every_listed_command_is_sent_by_the_source() -> None:
    sent = sent_by_the_source()
    stale = [c for c, s in CLIENT_COMMANDS.items() if not s.implicit and c not in sent]
    assert not stale, f"nothing in the package sends {stale}: drop them from CLIENT_COMMANDS"


def test_the_scan_sees_the_kinds_of_sending_there_are() -> None:
    sent = sent_by_the_source()
    assert "_core/secrets.py" in sent["hgetall"]  # a Commands request
    assert "_sync/store.py" in sent["evalsha"]  # execute_command
    assert "_async/store.py" in sent["wait"]
    assert "_sync/store.py" in sent["script|load"]  # methods
    assert "_sync/listen.py" in sent["subscribe"]
    assert "cli/sessions.py" in sent["memory|usage"]  # execute_command("MEMORY", "USAGE", ...)


def test_no_request_is_a_transaction_so_multi_exec_is_not_listed() -> None:
    """Redis refuses MULTI when it is out of memory: reads that must see one moment are
    read-only scripts, so nothing asks redis-py for a MULTI/EXEC pipeline.
    """
    sources = [p for p in PACKAGE.rglob("*.py") if "bench" not in p.parts]  # not the store's
    text = "\n".join(p.read_text(encoding="utf-8") for p in sources)
    assert "transaction=True" not in text and "pipeline(transaction=" in text
    assert "multi" not in CLIENT_COMMANDS and "exec" not in CLIENT_COMMANDS


# -- rules and the line ------------------------------------------------------------------------


def test_rules_confine_keys_and_channel_to_the_prefix() -> None:
    rules = acl.acl_rules("app:")
    assert rules[:7] == [
        "on", "resetkeys", "~app:*", "resetchannels", "&app:events", "&app:events:*", "-@all"
    ]  # fmt: skip
    assert rules[7:] == [f"+{c}" for c in acl.commands()]
    assert not any(r.startswith((">", "<", "nopass", "resetpass", "+@")) for r in rules)


def test_glob_characters_of_the_prefix_are_escaped() -> None:
    assert acl.glob_escape("a*b?[c]\\:") == "a\\*b\\?\\[c\\]\\\\:"
    assert acl.acl_rules("t[1]*:")[2] == "~t\\[1\\]\\*:*"


@pytest.mark.parametrize("prefix", ["a b:", "tab\t:", "nul\0:"])
def test_a_prefix_no_acl_pattern_can_hold_is_refused(prefix: str) -> None:
    with pytest.raises(InvalidArgument, match="prefix"):
        acl.acl_rules(prefix)


def test_a_prefix_no_store_takes_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="prefix"):
        acl.acl_rules("a{b}:")


def test_the_line_quotes_for_redis_cli_only_what_needs_it() -> None:
    line = acl.setuser_line("app:", "worker")
    assert line.startswith("ACL SETUSER worker on resetkeys ~app:* resetchannels &app:events ")
    assert '"' not in line
    odd = acl.setuser_line("it's\\x:", "worker")
    assert ' "~it\'s\\\\\\\\x:*" ' in odd  # the pattern it\\x:* quoted: each \ doubled
    with pytest.raises(ValueError, match="user"):
        acl.setuser_line("app:", "two words")
