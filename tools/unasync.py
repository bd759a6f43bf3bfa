"""Generate the blocking ``redis_session/store.py`` from the asyncio ``redis_session/aio.py``.

The async store is the one source; this script rewrites it token by token. ``--check`` exits 1
when ``store.py`` is not what the async source generates (the test suite runs it).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "redis_session" / "aio.py"
TARGET = ROOT / "redis_session" / "store.py"

RULES: list[tuple[str, str]] = [
    (r"\bawait self\._clients\.aclose\(_url\.async_close\)", "_url.sync_close(self._client)"),
    (r"\bself\._clients\.current\(\)", "self._client"),
    (r"\bself\._clients\.nodes\(\)", "self._node_clients"),
    (r"\bawait asyncio\.sleep\(", "time.sleep("),
    (r"\bawait asyncio\.to_thread\(([\w.]+)\)", r"\1()"),
    (r"\basyncio\.Lock\(\)", "threading.Lock()"),
    (r"\basync with\b", "with"),
    (r"^.*# async only\b.*\n", ""),
    (r"\bawait events\.finish_hook\(", "events.finish_hook_sync("),
    (r"\bAsyncEventListener\b", "EventListener"),
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


def generate(text: str) -> str:
    """The blocking twin of the async source ``text``."""
    for pattern, replacement in RULES:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    header = "# Generated from redis_session/aio.py by tools/unasync.py: edit that one.\n"
    return _formatted(header + text)


def _formatted(text: str) -> str:
    """The generated text with its imports sorted (renamed imports may move) and ``ruff
    format``-ed (lines that got shorter may now fit on one).
    """
    sort = ["check", "--select", "I", "--fix", "--quiet", "--exit-zero"]
    for command in (sort, ["format"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(TARGET), "-"],
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


def main(argv: list[str]) -> int:
    """Write ``store.py``, or with ``--check`` only compare it."""
    wanted = generate(SOURCE.read_text(encoding="utf-8"))
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != wanted:
            print(f"{TARGET} is stale: run python tools/unasync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
