"""The examples of ``docs/cli.md`` and ``docs/acl.md`` run as written: every ``sh`` block with
bash (``set -euo pipefail``), every ``python`` block with this interpreter, against the real
Redis in ``REDIS_URL``; a ``text`` block right after one is its exact output. ``console``
blocks are illustrations (a terminal session, other hosts) and are not run.

The page's command table is the CLI's: one row per command of ``redis_session.cli.cli``, each
option a row names is one of its command's; the README's list of commands is the same; and
the output goes where the page's *Output* section says.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from redis_session.cli import cli
from tests.support.servers import Server

from .conftest import SUBPROCESS_TIMEOUT, invoke

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ("cli.md", "acl.md")
PREFIXES = ("docs-cli:", "docs-sealed:", "docs-acl:", "docs-py:", "docs-foreign:")
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


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a Markdown page."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def command_rows() -> dict[str, str]:
    """The page's ``## Commands`` table: each row's command name and the rest of the row."""
    table = section((DOCS / "cli.md").read_text(encoding="utf-8"), "Commands")
    rows = (re.match(r"\| `([a-z-]+)[^`]*` \|(.*)", line) for line in table.splitlines())
    return {m.group(1): m.group(2) for m in rows if m}


def test_the_command_table_is_the_clis() -> None:
    rows = command_rows()
    assert sorted(rows) == sorted(cli.commands)
    for name, row in rows.items():
        options = {opt for param in cli.commands[name].params for opt in param.opts}
        named = set(re.findall(r"`(--[a-z-]+)", row))
        assert named <= options, f"{name}: the page names {sorted(named - options)}"


def test_every_command_is_shown_in_detail() -> None:
    """Below the table, each command has a paragraph of its own (``acl``: its page)."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    details = section(text, "Commands in detail")
    bold = " ".join(re.findall(r"\*\*([^*]+)\*\*", details))
    missing = [n for n in cli.commands if n != "acl" and not re.search(rf"\b{n}\b", bold)]
    assert not missing
    assert "(acl.md)" in text


def test_the_readme_names_every_command() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    operators = re.search(r"the operator commands \(([^)]*)\)", section(text, "Command line"))
    assert operators is not None
    assert sorted(["demo", *re.findall(r"`([a-z-]+)`", operators.group(1))]) == sorted(cli.commands)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_progress_goes_where_the_page_says(as_json: bool) -> None:
    """The progress bar and the event lines are stdout's, except under ``--json``, where
    stdout holds the JSON alone and they go to stderr."""
    args = ["demo", "--workers", "1", "--sessions", "1", "--turns", "2"]
    result = invoke(*args, *(["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    progress, quiet = (result.stderr, result.stdout) if as_json else (result.stdout, result.stderr)
    assert "agents at work" in progress and "event create" in progress
    assert "agents at work" not in quiet
    if as_json:
        assert orjson.loads(result.stdout)["workers"] == 1
    else:
        assert result.stderr == ""
