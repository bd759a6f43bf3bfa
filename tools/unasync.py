"""Generate the blocking twin of each asyncio source module (:data:`PAIRS`).

Each async module is the one source. A pair's few structural rules come first (regular
expressions, for what is no renaming: the lines marked ``# async only``, the asyncio store's
clients per event loop); then the token map shared by every pair rewrites Python's tokens
(:mod:`tokenize`): :data:`NAMES` renames identifiers and dotted names (``async`` and ``await``
are dropped where they come before something) and :data:`UNWRAP` drops a name with its
brackets, keeping what they hold. Strings and comments are left as they are, except for the
code in a docstring, mapped alike: its inline literals and the targets of its roles (as in
:class:`AsyncTurn` or ``await turn.renew()``). A docstring's prose is never rewritten: it must
read true in both flavours. Then the imports are sorted, those no longer used are removed
(ruff's ``I`` and ``F401`` fixes) and the result is ``ruff format``-ed with the pinned ruff.

Every rule must do something: a structural rule that matches nothing in its pair's source, or
an entry of the token map that no pair uses, is an error in both modes, naming it. ``--check``
exits 1 when a generated file is not what its source generates (the test suite runs it);
without it the generated files are written.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from collections import Counter
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "redis_session"

Rules = Sequence[tuple[str, str]]
"""Structural rules: ``(pattern, replacement)`` for :func:`re.subn`, multiline, in order."""

NAMES: Mapping[str, str] = {
    "async": "",  # before def, with, for
    "await": "",
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "asyncio.Lock": "threading.Lock",
    "_clock.async_sleep": "_clock.sleep",
    "redis.asyncio": "redis",
    "FakeAsyncRedis": "FakeRedis",
    "AsyncRedisStore": "RedisStore",
    "AsyncStore": "Store",
    "AsyncChildSessionStore": "ChildSessionStore",
    "AsyncTurn": "Turn",
    "AsyncEventListener": "EventListener",
    "AsyncLogListener": "LogListener",
    "finish_hook": "finish_hook_sync",
    "AsyncNoticingRetry": "NoticingRetry",
    "AsyncSentinelPool": "SentinelPool",
    "AsyncConnectedFirstPool": "ConnectedFirstPool",
    "async_client": "sync_client",
    "async_replies": "sync_replies",
    "async_refresh": "sync_refresh",
    "async_close": "sync_close",
    "async_node_client": "sync_node_client",
}
"""The token map's renamings, shared by every pair: an identifier (wherever it stands, as an
attribute too) or a dotted name (where its first name is not an attribute) to its blocking
spelling; ``""`` drops the keyword and the space after it.
"""

UNWRAP: Set[str] = frozenset({"Listening", "Awaitable"})
"""The token map's wrappers: ``Listening(x)`` → ``x``, ``Awaitable[Any]`` → ``Any``."""

ASYNC_ONLY = (r"^.*# async only\b.*\n", "")
"""The line of code that has no blocking counterpart is left out (a structural rule)."""

RULES: Rules = [
    ASYNC_ONLY,
    (r"^import asyncio$", "import threading"),
    (r"\bawait asyncio\.to_thread\(([\w.]+)\)", r"\1()"),
    (r"\bawait self\._clients\.aclose\(_url\.async_close\)", "_url.sync_close(self._client)"),
    (r"\bself\._clients\.current\(\)", "self._client"),
    (r", self\._clients\.nodes\(\)\)", ")"),  # redis-py keeps a blocking node's client
    (r"\b_url\.check_client\(client, aio=True\)", "_url.check_client(client)"),
]
"""``_async/store.py`` → ``_sync/store.py``: its structural rules."""

LISTEN_RULES: Rules = [ASYNC_ONLY]
"""``_async/listen.py`` → ``_sync/listen.py``: the live and the log listeners."""


class Pair(NamedTuple):
    """An async ``source`` module, its generated blocking ``target`` and its structural rules
    (applied before the token map).
    """

    source: Path
    target: Path
    rules: Rules = ()


class DeadRule(Exception):
    """A structural rule of a pair matched nothing in its source, or an entry of the token map
    was used in no pair.
    """


PAIRS: list[Pair] = [
    Pair(PACKAGE / "_async" / "store.py", PACKAGE / "_sync" / "store.py", RULES),
    Pair(PACKAGE / "_async" / "connect.py", PACKAGE / "_sync" / "connect.py"),
    Pair(PACKAGE / "_async" / "listen.py", PACKAGE / "_sync" / "listen.py", LISTEN_RULES),
]

_CODE_IN_DOCS = re.compile(r"(``)(.+?)(``)|(:[\w:]+:`)([^`]+)(`)", re.DOTALL)
"""An inline literal of a docstring, or a role's target: the code in its prose."""

_BRACKETS = {"(": ")", "[": "]", "{": "}"}


def unasync(
    code: str,
    names: Mapping[str, str] = NAMES,
    unwrap: Set[str] = UNWRAP,
    used: Counter[str] | None = None,
) -> str:
    """``code`` (Python source, or a fragment that tokenizes) with the token map applied to its
    tokens: to the names of its code and to the code in its docstrings (:func:`unasync_doc`).
    Each entry applied is counted in ``used``.
    """
    used = Counter() if used is None else used
    lines = code.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def at(point: tuple[int, int]) -> int:
        return starts[point[0] - 1] + point[1]

    tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    edits: list[tuple[int, int, str]] = []
    skip = 0
    for i, token in enumerate(tokens):
        if i < skip:
            continue
        before = _significant(tokens, i, -1)
        if token.type == tokenize.STRING:
            after = _significant(tokens, i, 1)
            statement = before is None or before.type in _STATEMENT_STARTS
            if statement and (after is None or after.type == tokenize.NEWLINE):  # a docstring
                text = unasync_doc(token.string, names, unwrap, used)
                if text != token.string:
                    edits.append((at(token.start), at(token.end), text))
            continue
        if token.type != tokenize.NAME:
            continue
        attribute = before is not None and before.string == "."
        dotted = _dotted(tokens, i, names) if not attribute else None
        if dotted is not None:
            key, last = dotted
            edits.append((at(token.start), at(tokens[last].end), names[key]))
            used[key] += 1
            skip = last + 1
        elif names.get(token.string) == "":
            follower = tokens[i + 1]
            if follower.start[0] == token.start[0] and follower.type not in _ENDS:
                edits.append((at(token.start), at(follower.start), ""))
                used[token.string] += 1
        elif token.string in names:
            edits.append((at(token.start), at(token.end), names[token.string]))
            used[token.string] += 1
        elif token.string in unwrap and tokens[i + 1].string in _BRACKETS:
            close = _closing(tokens, i + 1)
            edits.append((at(token.start), at(tokens[i + 1].end), ""))
            edits.append((at(tokens[close].start), at(tokens[close].end), ""))
            used[token.string] += 1
    for start, end, text in sorted(edits, reverse=True):
        code = code[:start] + text + code[end:]
    return code


def unasync_doc(
    doc: str,
    names: Mapping[str, str] = NAMES,
    unwrap: Set[str] = UNWRAP,
    used: Counter[str] | None = None,
) -> str:
    """``doc`` (a docstring) with the token map applied to its code: inline literals and the
    targets of roles; its prose as it is. Code that does not tokenize is left as it is.
    """

    def mapped(m: re.Match[str]) -> str:
        opening, code, closing = m.group(1, 2, 3) if m.group(1) else m.group(4, 5, 6)
        try:
            return opening + unasync(code, names, unwrap, used) + closing
        except (tokenize.TokenError, SyntaxError):
            return m.group(0)

    return _CODE_IN_DOCS.sub(mapped, doc)


_STATEMENT_STARTS = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
_ENDS = {tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER}


def _significant(tokens: list[tokenize.TokenInfo], i: int, step: int) -> tokenize.TokenInfo | None:
    """The token before (``step`` -1) or after (1) ``tokens[i]``, comments and blank lines
    passed over; None at either end.
    """
    i += step
    while 0 <= i < len(tokens):
        if tokens[i].type not in (tokenize.COMMENT, tokenize.NL):
            return tokens[i]
        i += step
    return None


def _dotted(
    tokens: list[tokenize.TokenInfo], i: int, names: Mapping[str, str]
) -> tuple[str, int] | None:
    """The dotted key of ``names`` that the tokens from ``i`` on spell, and the index of its
    last token; None when they spell none.
    """
    for key in names:
        parts = key.split(".")
        if len(parts) < 2 or i + 2 * len(parts) - 1 > len(tokens):
            continue
        spelled = [t.string for t in tokens[i : i + 2 * len(parts) - 1]]
        if spelled == [s for part in parts for s in (".", part)][1:]:
            return key, i + 2 * len(parts) - 2
    return None


def _closing(tokens: list[tokenize.TokenInfo], i: int) -> int:
    """The index of the bracket that closes the one at ``tokens[i]``."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].type == tokenize.OP and tokens[j].string in _BRACKETS:
            depth += 1
        elif tokens[j].type == tokenize.OP and tokens[j].string in _BRACKETS.values():
            depth -= 1
            if depth == 0:
                return j
    raise tokenize.TokenError(f"no bracket closes {tokens[i].string!r} at {tokens[i].start}")


def shown(path: Path) -> str:
    """``path`` as the header and messages name it: from the repository's root when inside."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def generate(
    pair: Pair,
    text: str,
    names: Mapping[str, str] = NAMES,
    unwrap: Set[str] = UNWRAP,
    used: Counter[str] | None = None,
) -> str:
    """The blocking twin of ``text``, the async source of ``pair``; :class:`DeadRule` when one
    of its structural rules matched nothing. The token map's entries applied are counted in
    ``used``.
    """
    for pattern, replacement in pair.rules:
        text, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        if count == 0:
            raise DeadRule(f"rule {pattern!r} matched nothing in {shown(pair.source)}")
    text = unasync(text, names, unwrap, used)
    header = f"# Generated from {shown(pair.source)} by tools/unasync.py: edit that one.\n"
    return _formatted(header + text, pair.target)


def _formatted(text: str, target: Path) -> str:
    """The generated text with its imports sorted (renamed imports may move), those it no
    longer uses removed and ``ruff format``-ed (lines that got shorter may now fit on one).
    """
    fix = ["check", "--select", "I,F401", "--fix", "--quiet", "--exit-zero"]
    for command in (fix, ["format"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(target), "-"],
            input=text.encode(),
            capture_output=True,
            check=False,
            timeout=60,
        )
        if done.returncode != 0:  # say why (e.g. "No module named ruff"), not only the status
            why = done.stderr.decode().strip()
            status = done.returncode
            raise SystemExit(f"tools/unasync.py: ruff {command[0]} failed ({status}): {why}")
        text = done.stdout.decode()
    return text


def main(
    argv: list[str],
    pairs: list[Pair] | None = None,
    names: Mapping[str, str] = NAMES,
    unwrap: Set[str] = UNWRAP,
) -> int:
    """Write every pair's target, or with ``--check`` only compare them; nothing is written
    when a rule is dead.
    """
    pairs = PAIRS if pairs is None else pairs
    used: Counter[str] = Counter()
    try:
        wanted = [
            (p.target, generate(p, p.source.read_text(encoding="utf-8"), names, unwrap, used))
            for p in pairs
        ]
        unused = [repr(key) for key in [*names, *sorted(unwrap)] if not used[key]]
        if unused:
            entries = "entries" if len(unused) > 1 else "entry"
            sources = ", ".join(shown(p.source) for p in pairs)
            raise DeadRule(f"token map {entries} {', '.join(unused)} matched nothing in {sources}")
    except DeadRule as exc:
        print(f"tools/unasync.py: {exc}: remove or fix the rule", file=sys.stderr)
        return 1
    if "--check" not in argv:
        for target, text in wanted:
            target.write_text(text, encoding="utf-8")
        return 0
    stale = [t for t, text in wanted if not t.exists() or t.read_text(encoding="utf-8") != text]
    for target in stale:
        print(f"{shown(target)} is stale: run python tools/unasync.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
