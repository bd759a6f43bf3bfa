"""The examples of ``docs/cli.md`` and ``docs/acl.md`` run as written: every ``sh`` block with
bash (``set -euo pipefail``), every ``python`` block with this interpreter, against the real
Redis in ``REDIS_URL``; a ``text`` block right after one is its exact output. ``console``
blocks are illustrations (a terminal session, other hosts) and are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.servers import Server

from .conftest import SUBPROCESS_TIMEOUT

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("cli.md", "acl.md")
PREFIXES = ("docs-cli:", "docs-sealed:", "docs-acl:", "docs-py:")
USERS = ("docs-worker", "docs-py-worker")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


def examples(page: str) -> list[tuple[str, str, str | None]]:
    """``(language, code, expected output or None)`` of each runnable block of ``page``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    out = []
    for i, (lang, code, _, end) in enumerate(blocks):
        if lang not in ("sh", "python"):
            continue
        expected = None
        following = blocks[i + 1] if i + 1 < len(blocks) else None
        if following and following[0] == "text" and not text[end : following[2]].strip():
            expected = following[1]
        out.append((lang, code, expected))
    return out


@pytest.fixture
def docs_env(redis_server: Server) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_SESSION_")}
    env.update(
        REDIS_URL=redis_server.url,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="200",
    )
    yield env
    admin: Any = redis.Redis.from_url(redis_server.url)
    try:
        for prefix in PREFIXES:
            for key in admin.scan_iter(match=f"{prefix}*"):
                admin.delete(key)
        admin.execute_command("ACL", "DELUSER", *USERS)
    finally:
        admin.close()


def test_the_pages_have_runnable_examples() -> None:
    assert all(examples(page) for page in PAGES)
    assert sum(expected is not None for page in PAGES for *_, expected in examples(page)) >= 4


@pytest.mark.redis
@pytest.mark.parametrize("page", PAGES)
def test_every_example_runs_as_written(page: str, docs_env: Any, tmp_path: Path) -> None:
    for lang, code, expected in examples(page):
        command = (
            ["bash", "-c", "set -euo pipefail\n" + code]
            if lang == "sh"
            else [sys.executable, "-c", code]
        )
        done = subprocess.run(
            command,
            cwd=tmp_path,
            env=docs_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, (code, done.stdout, done.stderr)
        if expected is not None:
            got = [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()]
            assert got == [line.rstrip() for line in expected.rstrip("\n").splitlines()], code
