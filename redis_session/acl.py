"""The Redis ACL a store needs, computed from what it sends, so the recipe cannot drift.

Two sources, read every time (nothing here lists a script's commands by hand):

- every Lua script, as sent (:func:`redis_session.scripts.script_source` of each name in
  ``SCRIPT_NAMES``): the commands it calls with ``redis.call('X', …)`` / ``redis.pcall('X', …)``
  (comments skipped; a command name passed to a local function, as the prelude's ``hcall_from``
  does, is followed to that function's call sites), see :func:`script_commands`;
- :data:`CLIENT_COMMANDS`: what the Python side sends itself (the store's plain ``Commands``
  requests, ``EVALSHA``, ``SCRIPT LOAD``, ``WAIT``, ``SUBSCRIBE``, the CLI's reads), and what
  redis-py sends on its behalf (``SELECT``, a cluster client's topology reads). A test
  (``tests/unit/test_acl.py``) reads the package's source and fails when it sends a command
  that list lacks, or when the list holds one nothing sends.

:func:`acl_rules` turns them into the rules of ``ACL SETUSER`` for one prefix: keys
``~<prefix>*``, the events channels ``&<prefix>events`` and ``&<prefix>events:*`` (sharded
events; glob characters of the prefix escaped),
``-@all`` and one ``+command`` each. ``redis-session acl`` prints the line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import NamedTuple

from . import scripts
from .errors import InvalidArgument
from .keys import KeySchema


class Sent(NamedTuple):
    """Why a command is sent, and whether redis-py sends it rather than this package's code."""

    why: str
    implicit: bool = False
    """Sent by redis-py on the package's behalf (no call of it in this package's source)."""


CLIENT_COMMANDS: Mapping[str, Sent] = MappingProxyType(
    {
        # every script call, and its reload
        "evalsha": Sent("every script call (_sync/store.py, _async/store.py)"),
        "script|load": Sent("reloading a script the server's cache lost (NOSCRIPT)"),
        # the store's plain reads and writes (Commands requests of _core/)
        "del": Sent("fork_child: dropping a staged copy whose source changed; a branch's retry"),
        "exists": Sent("repair_index: probing index shards (cluster); the ADK index's prune"),
        "get": Sent("rewind through a turn: the turn checked before its branch and discards"),
        "hget": Sent("get_salt, get_checksum, get_secret; a lost keyring restored from a session"),
        "hgetall": Sent("get: a first read's meta hash; migrate_secrets, the keyring, rekey"),
        "hkeys": Sent("list_secrets"),
        "hmget": Sent("list_sessions, the keyring, rekey, restoring a lost keyring, get"),
        "lrange": Sent(
            "get, get_history: a first read's messages (behind the get script on a cluster), "
            "a long read's plain steps"
        ),
        "hset": Sent("set_salt; migrate_secrets: staging many secrets"),
        "pexpire": Sent("migrate_secrets: the staging hash's TTL; the ADK index's TTL"),
        "sadd": Sent("registering index shards (cluster)"),
        "smembers": Sent("list_sessions: the index shards (cluster)"),
        "type": Sent(
            "get, get_history: a first read's check of the id window; list_sessions, delete, ls, "
            "stats: naming the type of another program's key"
        ),
        "zcard": Sent("delete: counting the children of a session deleted in batches"),
        "zrange": Sent("children_of, delete, rekey: a session's children"),
        "zrevrange": Sent("list_sessions"),
        "zrangebyscore": Sent("the expire reaper: index entries whose tree's deadline passed"),
        "zscan": Sent("list_sessions(prefix=...)"),
        "zadd": Sent("the ADK adapter's session index: create_session, list_sessions"),
        "zrem": Sent("the ADK adapter's session index: delete_session, list_sessions, its prune"),
        "zrandmember": Sent("the ADK adapter's session index: create_session samples it"),
        "zrangebylex": Sent("the LangGraph savers: a thread's checkpoints, runs, writes"),
        "srem": Sent("the LangGraph savers' delete_thread: unlisting a thread from its runs"),
        "wait": Sent("writes with wait_replicas"),
        "blpop": Sent("turn(..., wait=...): waiting for a session's turn to be released"),
        "ping": Sent("the OpenAI Agents session's ping()"),
        # events
        "subscribe": Sent("listen(): live; a log listener's wake-ups on a cluster"),
        "ssubscribe": Sent("listen() with sharded_events: each slot's shard channel"),
        "xrange": Sent("listen(since=...): reading the event log; pending()"),
        "xrevrange": Sent("listen(since='latest'): the newest event there is"),
        "xread": Sent("listen(since=...) on a single server: waiting for the next event"),
        "xgroup|create": Sent("listen(group=...): the group, on its first use"),
        "xreadgroup": Sent("listen(group=...): what a member held before it started again"),
        "xack": Sent("a group listener's ack(event), and the events of types it skips"),
        "xautoclaim": Sent("listen(group=...): taking over what another member held too long"),
        "xclaim": Sent("listen(group=...) closing: giving back what it read and did not hand out"),
        "xpending": Sent("pending(group); a group listener counting deliveries"),
        "time": Sent("listen(since=...) on a cluster: the primaries' clocks move the cursor"),
        "cluster|info": Sent("listen() on a cluster: is the listener's node still a member"),
        # redis-py itself
        "select": Sent("connecting with a database other than 0 in the URL", True),
        "cluster|slots": Sent("a cluster client learning which node serves which slot", True),
        "command": Sent("a cluster client learning where commands keep their keys", True),
        # the command line's own reads
        "llen": Sent(
            "redis-session ls, show: message counts; a first read's and a long read's checks"
        ),
        "memory|usage": Sent("redis-session stats"),
    }
)
"""Every command the Python side of the package sends besides its scripts (ACL names: lower
case, ``container|subcommand``), with where it comes from. The benchmark (``redis-session
bench``, the repository's ``bench/harness/``) is left out: it works under its own ``bench:``
prefix and times raw commands of its own, so run it as a user of a test server.
"""

CONTAINER_COMMANDS = frozenset(
    {"acl", "client", "cluster", "command", "config", "function", "latency", "memory", "module",
     "object", "pubsub", "script", "slowlog", "xgroup", "xinfo"}
)  # fmt: skip
"""Redis commands whose ACL name includes the subcommand (``script|load``)."""

GLOB_SPECIAL = "*?[]\\"
"""Characters that ACL key and channel patterns read as glob syntax."""
ACL_SPACE = " \t\n\v\f\r\0"
"""Characters Redis refuses inside an ACL pattern (C ``isspace`` and NUL)."""

_LONG_BRACKET = re.compile(r"\[(=*)\[")
_CALL = re.compile(r"\bredis\s*\.\s*p?call\b")
_NAME = re.compile(r"\s*(['\"])([A-Za-z][A-Za-z0-9_-]*)\1\s*\Z")
_IDENT = re.compile(r"\s*([A-Za-z_]\w*)\s*\Z")
_FUNCTION = re.compile(r"\blocal\s+function\s+([A-Za-z_]\w*)\s*\(([^)]*)\)")
_DEFINED = re.compile(r"\bfunction\s+\Z")


def _long_close(code: str, start: int, level: str) -> int:
    """The index after the ``]==]`` closing a long bracket opened before ``start``."""
    close = "]" + level + "]"
    end = code.find(close, start)
    if end < 0:
        raise ValueError("unfinished long string or comment in Lua source")
    return end + len(close)


def lua_code(source: str) -> tuple[str, str]:
    """``(code, mask)`` of Lua ``source``: ``code`` is the source with its comments blanked
    out, ``mask`` the same with the inside of every string blanked too (indices line up), so
    a pattern found in ``mask`` is code, never a comment or a string.
    """
    code, mask = list(source), list(source)

    def blank(chars: list[str], start: int, end: int) -> None:
        for k in range(start, end):
            if chars[k] != "\n":
                chars[k] = " "

    i, n = 0, len(source)
    while i < n:
        if source.startswith("--", i):
            long = _LONG_BRACKET.match(source, i + 2)
            end = (
                _long_close(source, long.end(), long.group(1))
                if long
                else (source.find("\n", i) if "\n" in source[i:] else n)
            )
            blank(code, i, end)
            blank(mask, i, end)
            i = end
        elif source[i] in "'\"":
            quote, j = source[i], i + 1
            while j < n and source[j] != quote:
                if source[j] == "\n":
                    raise ValueError("unfinished string in Lua source")
                j += 2 if source[j] == "\\" else 1
            blank(mask, i + 1, j)
            i = j + 1
        elif long := _LONG_BRACKET.match(source, i):
            end = _long_close(source, long.end(), long.group(1))
            blank(mask, long.end(), end - len(long.group(0)))
            i = end
        else:
            i += 1
    return "".join(code), "".join(mask)


def _arguments(code: str, mask: str, open_paren: int) -> list[str]:
    """The argument texts of the call whose ``(`` is at ``open_paren`` (split at top level)."""
    depth, start, out = 0, open_paren + 1, []
    for k in range(open_paren, len(mask)):
        ch = mask[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                out.append(code[start:k])
                return [a for a in out if a.strip()] if len(out) == 1 else out
        elif ch == "," and depth == 1:
            out.append(code[start:k])
            start = k + 1
    raise ValueError("unbalanced parentheses in Lua source")


def _command(name: str, args: list[str], where: str) -> str:
    command = name.lower()
    if command in CONTAINER_COMMANDS:
        sub = _NAME.match(args[1]) if len(args) > 1 else None
        if sub is None:
            raise ValueError(f"{where}: {name} without a literal subcommand")
        command += "|" + sub.group(2).lower()
    return command


def commands_in(lua: str, where: str = "Lua source") -> frozenset[str]:
    """The commands Lua source ``lua`` calls through ``redis.call`` / ``redis.pcall``.

    The command name must be a string literal, or a parameter of a ``local function`` whose
    every call passes one: anything else (an alias of ``redis.call``, a name computed at run
    time) raises ``ValueError`` rather than give a recipe that misses a command.
    """
    code, mask = lua_code(lua)
    found: set[str] = set()
    for call in _CALL.finditer(mask):
        paren = call.end()
        while paren < len(mask) and mask[paren].isspace():
            paren += 1
        if paren >= len(mask) or mask[paren] != "(":
            raise ValueError(f"{where}: {call.group(0)} used other than as a direct call")
        args = _arguments(code, mask, paren)
        literal = _NAME.match(args[0]) if args else None
        if literal is not None:
            found.add(_command(literal.group(2), args, where))
            continue
        found |= _through_parameter(code, mask, call.start(), args, where)
    return frozenset(found)


def _through_parameter(code: str, mask: str, at: int, args: list[str], where: str) -> set[str]:
    """The commands reaching a ``redis.call(name, …)`` whose ``name`` is a parameter of the
    enclosing ``local function`` (the nearest one defined before the call): the literal each
    call of that function passes for it.
    """
    ident = _IDENT.match(args[0]) if args else None
    enclosing = [f for f in _FUNCTION.finditer(mask) if f.start() < at]
    if ident is None or not enclosing:
        raise ValueError(f"{where}: a command name that is not a literal: {args[:1]}")
    function = enclosing[-1]
    params = [p.strip() for p in function.group(2).split(",")]
    if ident.group(1) not in params:
        raise ValueError(f"{where}: command name {ident.group(1)!r} is no parameter")
    position = params.index(ident.group(1))
    found: set[str] = set()
    for use in re.finditer(rf"\b{re.escape(function.group(1))}\s*\(", mask):
        if _DEFINED.search(mask, 0, use.start()):
            continue  # the definition, not a call
        passed = _arguments(code, mask, use.end() - 1)
        literal = _NAME.match(passed[position]) if len(passed) > position else None
        if literal is None:
            raise ValueError(
                f"{where}: {function.group(1)}() called without a literal command name"
            )
        found.add(_command(literal.group(2), [passed[position], *passed[position + 1 :]], where))
    return found


def script_commands(name: str) -> frozenset[str]:
    """The commands script ``name`` calls, as sent (with the prelude parts it uses)."""
    return commands_in(scripts.script_source(name), f"lua/{name}.lua")


def integration_scripts() -> dict[str, str]:
    """The integrations' own scripts (``integrations/<name>/*.lua``, shipped in the package;
    read without importing their frameworks): name → source as sent.
    """
    found = {}
    for folder in sorted(resources.files("redis_session.integrations").iterdir(), key=str):
        if folder.is_dir():
            for lua in sorted(folder.iterdir(), key=str):
                if lua.name.endswith(".lua"):
                    text = scripts.with_prelude(lua.read_text(encoding="utf-8"))
                    found[f"{folder.name}/{lua.name}"] = text
    return found


def commands() -> tuple[str, ...]:
    """Every command the store, its listener, the CLI and the integrations send: those of every
    script and :data:`CLIENT_COMMANDS`, sorted.
    """
    found = set(CLIENT_COMMANDS)
    for name in scripts.SCRIPT_NAMES:  # read when called: scripts added later count too
        found |= script_commands(name)
    for where, source in integration_scripts().items():
        found |= commands_in(source, where)
    return tuple(sorted(found))


def glob_escape(text: str) -> str:
    """``text`` as an ACL pattern that matches only itself (glob characters escaped)."""
    return "".join("\\" + ch if ch in GLOB_SPECIAL else ch for ch in text)


def acl_rules(prefix: str = "rs:") -> list[str]:
    """The ``ACL SETUSER`` rules (one argument each) that let a user run every operation of a
    store under ``prefix`` and nothing else: its keys, its events channel, its commands.

    ``on`` enables the user; no password is set or reset (add one with ``>password``).
    ``InvalidArgument`` for a prefix with whitespace: Redis takes no such pattern.
    """
    schema = KeySchema(prefix)  # refuses a prefix no store accepts
    if any(ch in ACL_SPACE for ch in prefix):
        # Redis refuses whitespace in patterns; widening it to '?' would admit other prefixes.
        raise InvalidArgument("prefix", "an ACL key pattern cannot hold whitespace or NUL")
    return [
        "on",
        "resetkeys",
        f"~{glob_escape(schema.prefix)}*",
        "resetchannels",
        f"&{glob_escape(schema.events_channel)}",
        f"&{glob_escape(schema.events_channel)}:*",  # sharded events: one channel per slot
        "-@all",
        *(f"+{command}" for command in commands()),
    ]


def _cli_word(word: str) -> str:
    """``word`` as redis-cli reads it: bare when it can be, else double-quoted with escapes."""
    if word and not any(ch.isspace() or ch in "\"'\\" for ch in word) and word.isprintable():
        return word
    escaped = "".join(
        "\\" + ch if ch in '"\\' else ch if ch.isprintable() and ch != "\n" else
        "".join(f"\\x{b:02x}" for b in ch.encode())
        for ch in word
    )  # fmt: skip
    return f'"{escaped}"'


def setuser_line(prefix: str = "rs:", user: str = "redis-session") -> str:
    """The ``ACL SETUSER`` command for :func:`acl_rules`, as one line that ``redis-cli`` runs
    (read from stdin or typed at its prompt); words quoted for it where they need to be.
    """
    if not user or any(ch.isspace() for ch in user):
        raise ValueError(f"user: must be a non-empty name without spaces, got {user!r}")
    return " ".join(_cli_word(w) for w in ["ACL", "SETUSER", user, *acl_rules(prefix)])
