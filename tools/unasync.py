"""Generate the blocking twin of each asyncio source module (:data:`PAIRS`).

Each async module is the one source; this script rewrites it with its pair's regex rules, in
order, then sorts the imports and ``ruff format``-s the result. Every rule must match in its
pair's source: a rule that matched nothing (the source changed under it) is an error, in both
modes, naming the rule. ``--check`` exits 1 when a generated file is not what its source
generates (the test suite runs it); without it the generated files are written.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "redis_session"

Rules = list[tuple[str, str]]


class Pair(NamedTuple):
    """An async ``source`` module, its generated blocking ``target`` and the rules between."""

    source: Path
    target: Path
    rules: Rules


class DeadRule(Exception):
    """A rule of a pair matched nothing in that pair's source."""


RULES: Rules = [
    (r"\bawait self\._clients\.aclose\(_url\.async_close\)", "_url.sync_close(self._client)"),
    (r"\bself\._clients\.current\(\)", "self._client"),
    (r"\b_url\.check_client\(client, aio=True\)", "_url.check_client(client)"),
    (r"\bListening\[([\w |]+)\]", r"\1"),
    (r"\bListening\((self\._listen\([^()]*\))\)", r"\1"),
    (r", self\._clients\.nodes\(\)\)", ")"),  # redis-py keeps a blocking node's client
    (r"\b_clock\.async_sleep\(", "_clock.sleep("),
    (r"\bawait asyncio\.to_thread\(([\w.]+)\)", r"\1()"),
    (r"\basyncio\.Lock\(\)", "threading.Lock()"),
    (r"\basync with\b", "with"),
    (r"^.*# async only\b.*\n", ""),
    (r"\bawait events\.finish_hook\(", "events.finish_hook_sync("),
    (r"\bAsyncEventListener\b", "EventListener"),
    (r"\bAsyncLogListener\b", "LogListener"),
    (r"\b_listen_async\b", "_listen_sync"),
    (r"\bAsyncChildSessionStore\b", "ChildSessionStore"),
    (r"\bAsyncRedisStore\b", "RedisStore"),
    (r"\bAsyncTurn\b", "Turn"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bcontextlib\.asynccontextmanager\b", "contextlib.contextmanager"),
    (r"\bAsyncStore\b", "Store"),
    (r"\basync def\b", "def"),
    (r"\bawait ", ""),
    (r"\bredis\.asyncio\.(Redis|RedisCluster)\b", r"redis.\1"),
    (r"^import redis\.asyncio$", "import redis"),
    (r"\b_url\.async_(\w+)", r"_url.sync_\1"),
    (r"^import asyncio\n", "import threading\n"),
    (r"\baclose\(\)", "close()"),
    (r"``async for``", "``for``"),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"asyncio flavour", "blocking flavour"),
    (
        r"it may be a coroutine function, which this store\n    awaits\)",
        "a plain function; an async one\n    is logged, never run)",
    ),
]
"""``aio.py`` → ``store.py`` (``tests/unit/test_api.py`` applies them to signatures too)."""

CONNECT_RULES: Rules = [
    (r"\bAsync(NoticingRetry|SentinelPool|ConnectedFirstPool)\b", r"\1"),
    (r"\bFakeAsyncRedis\b", "FakeRedis"),
    (r"^import redis\.asyncio$", "import redis"),
    (r"\bredis\.asyncio\.", "redis."),
    (r"\basync_(client|refresh|close|replies)\b", r"sync_\1"),
    (r"\basync def\b", "def"),
    (r"\bawait ", ""),
    (r"\baclose\(\)", "close()"),
]
"""``_connect_async.py`` → ``_connect_sync.py``: clients from a URL, refresh and close."""

LISTEN_RULES: Rules = [
    (r"\bAsync(EventListener|LogListener)\b", r"\1"),
    (r"^.*# async only\b.*\n", ""),
    (r"\b_clock\.async_sleep\(", "_clock.sleep("),
    (r"^import redis\.asyncio\n", ""),
    (r"\bredis\.asyncio\.(Redis|RedisCluster)\b", r"redis.\1"),
    (r"\bAwaitable\[Any\]", "Any"),
    (r"\bAwaitable, ", ""),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\basync def\b", "def"),
    (r"\bawait ", ""),
    (r"\baclose\b", "close"),
    (r"``async for``", "``for``"),
    (r"__aiter__", "__iter__"),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"asyncio flavour", "blocking flavour"),
    (
        r"^\"\"\"Listeners of lifecycle events \(asyncio\)\.",
        '"""Listeners of lifecycle events (blocking).',
    ),
]
"""``_listen_async.py`` → ``_listen_sync.py``: the live and the log listeners."""

PAIRS: list[Pair] = [
    Pair(PACKAGE / "aio.py", PACKAGE / "store.py", RULES),
    Pair(PACKAGE / "_connect_async.py", PACKAGE / "_connect_sync.py", CONNECT_RULES),
    Pair(PACKAGE / "_listen_async.py", PACKAGE / "_listen_sync.py", LISTEN_RULES),
]


def shown(path: Path) -> str:
    """``path`` as the header and messages name it: from the repository's root when inside."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def generate(pair: Pair, text: str) -> str:
    """The blocking twin of ``text``, the async source of ``pair``; :class:`DeadRule` when one
    of its rules matched nothing.
    """
    for pattern, replacement in pair.rules:
        text, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        if count == 0:
            raise DeadRule(f"rule {pattern!r} matched nothing in {shown(pair.source)}")
    header = f"# Generated from {shown(pair.source)} by tools/unasync.py: edit that one.\n"
    return _formatted(header + text, pair.target)


def _formatted(text: str, target: Path) -> str:
    """The generated text with its imports sorted (renamed imports may move) and ``ruff
    format``-ed (lines that got shorter may now fit on one).
    """
    sort = ["check", "--select", "I", "--fix", "--quiet", "--exit-zero"]
    for command in (sort, ["format"]):
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


def main(argv: list[str], pairs: list[Pair] | None = None) -> int:
    """Write every pair's target, or with ``--check`` only compare them; nothing is written
    when a rule is dead.
    """
    pairs = PAIRS if pairs is None else pairs
    try:
        wanted = [(p.target, generate(p, p.source.read_text(encoding="utf-8"))) for p in pairs]
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
