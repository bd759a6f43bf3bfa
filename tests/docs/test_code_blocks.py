"""Every code block of the README and of ``docs/`` runs as written, or is listed here with why not.

``python`` blocks are complete scripts (imports, ``asyncio.run``): each runs with this
interpreter and ``-W error``, in a temporary directory, bounded by a timeout. Those that name
``127.0.0.1:6379`` need a real Redis there: the one that answers, else a ``redis-server`` this
module starts on that port (no persistence) and stops; the examples work under a fresh random
prefix and delete what they wrote. ``sh``/``bash`` blocks run with ``set -euo pipefail`` when
cheap and safe, else they are in ``NOT_RUN`` with the reason. ``console`` blocks (a terminal
transcript: prompt, output, other hosts) and ``text`` blocks (the output shown after a block)
are illustrations. Blocks that another test runs are in ``RUN_ELSEWHERE``.

Each block runs with only what its page tells the reader to install, as a user who followed
the page would have it: a page names its extras with ``pip install`` lines (in a code block or
inline code); a block gets those of its own section (``#``/``##`` heading to the next), or,
when its section has none, all of the page's (the README's first line installs ``[test]``,
so its blocks have every extra but ``docs``'s tools). A page with no ``pip install`` line
documents the bare package (``pip install redis-agent-sessions``): its examples get no extra, and
one that needs an extra must name it on its page. Every other distribution that
redis-session's extras bring is hidden from the block's process (``tests/support/extras.py``:
computed from the installed metadata, its modules unimportable, its metadata unlisted), so an
example that needs an extra its page does not name fails here as it fails a user.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.extras import hiding, page_requirements

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
TIMEOUT = 60
LOCAL_REDIS = ("127.0.0.1", 6379)

# (page, language) -> the test that runs those blocks as written
RUN_ELSEWHERE = {
    ("docs/cli.md", "sh"): "tests/cli/test_docs.py (against a real Redis, output compared)",
    ("docs/cli.md", "python"): "tests/cli/test_docs.py",
    ("docs/acl.md", "sh"): "tests/cli/test_docs.py (creates ACL users, output compared)",
    ("docs/acl.md", "python"): "tests/cli/test_docs.py",
    ("docs/testing.md", "python"): "tests/docs/test_testing_doc.py (as a user's test file)",
    ("docs/testing.md", "toml"): "tests/docs/test_testing_doc.py (as the user's pyproject.toml)",
    ("docs/integrations.md", "python"): "tests/integrations/test_readme_examples.py",
}

# (page, how the block begins) -> why this shell block is not run here
NOT_RUN = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -e '.[test]'"):
        "creates a venv, installs the project and runs the whole suite: .ci/run does exactly this",
    ("README.md", "pip install -e '.[cli,memory]'"):
        "installs the project; .ci/run's fresh venv installs it so (its name shown by pip show)",
    ("docs/install.md", "pip install -e .  "):
        "installs packages; tests/packaging/test_wheel.py installs the bare wheel in a fresh venv",
    ("docs/benchmarks.md", ".venv/bin/python bench/bench_store.py [--url"):
        "benchmarks: tens of seconds each, and a synopsis ([...] are optional arguments)",
    ("docs/benchmarks.md", ".venv/bin/python bench/bench_encryption.py  "):
        "benchmarks: tens of seconds each",
    ("docs/benchmarks.md", "git worktree add --detach /tmp/before 3c8c33b^"):
        "benchmark: ~30 s, with a worktree of an older commit",
    ("docs/benchmarks.md", ".venv/bin/python bench/bench_frameworks.py --rounds 30"):
        "benchmark: a minute; tests/integrations/test_bench_frameworks.py runs its --quick form",
    ("docs/cli.md", "# one Redis 7.4 on localhost:6379"):
        "needs Docker (docker compose); tests/cli/test_compose.py checks the compose file",
    ("docs/integrations.md", "pip install 'redis-agent-sessions[adk]'"):
        "installs packages from the index",
    ("docs/testing.md", "pip install 'redis-agent-sessions[memory]' pytest pytest-asyncio"):
        "installs packages from the index; tests/docs/test_testing_doc.py runs with only these",
    ("docs/production.md", "RS_FIGURES=build/reliability.json .venv/bin/python -m pytest"):
        "runs the reliability suites (minutes) and rewrites RELIABILITY.md",
}  # fmt: skip

ILLUSTRATIONS = ("console", "text", "mermaid")


def blocks() -> list[tuple[str, int, str, str]]:
    """``(page, line, language, code)`` of every fenced block of the README and the docs."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            found.append((page, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return found


def not_run(page: str, code: str) -> str | None:
    """The reason a block is not run, if it is listed in ``NOT_RUN``."""
    return next(
        (why for (p, begin), why in NOT_RUN.items() if p == page and code.startswith(begin)), None
    )


def run_here(lang: str) -> list[tuple[str, int, str]]:
    return [
        (page, line, code)
        for page, line, language, code in blocks()
        if language == lang and (page, lang) not in RUN_ELSEWHERE and not_run(page, code) is None
    ]


def ids(items: list[tuple[str, int, str]]) -> list[str]:
    return [f"{page}:{line}" for page, line, _ in items]


PYTHON = run_here("python")
SHELL = run_here("sh") + run_here("bash")


def test_every_block_is_run_or_says_why_not() -> None:
    for page, line, lang, code in blocks():
        where = f"{page}:{line}"
        if lang in ILLUSTRATIONS or (page, lang) in RUN_ELSEWHERE:
            continue
        assert lang in ("python", "sh", "bash"), f"{where}: a block without a known language"
        if lang == "python":
            assert not_run(page, code) is None, f"{where}: python blocks all run"
    stale = [
        key
        for key in NOT_RUN
        if not any(p == key[0] and code.startswith(key[1]) for p, _, _, code in blocks())
    ]
    assert not stale, f"NOT_RUN entries matching no block: {stale}"
    assert len(PYTHON) >= 5 and SHELL


def answers(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="module")
def local_redis() -> Iterator[None]:
    """A Redis on 127.0.0.1:6379, the address the examples name."""
    if answers(LOCAL_REDIS):
        yield
        return
    binary = shutil.which("redis-server")
    if binary is None:
        reason = "nothing answers on 127.0.0.1:6379 and no redis-server on PATH"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    workdir = tempfile.mkdtemp(prefix="rs-docs-")
    args = [binary, "--port", str(LOCAL_REDIS[1]), "--bind", LOCAL_REDIS[0], "--save", "",
            "--appendonly", "no", "--dir", workdir]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not answers(LOCAL_REDIS):
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield
    finally:
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def installed(page: str, line: int) -> list[str]:
    """What the reader of ``page`` installed for the block at ``line`` (see the docstring)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    offset = sum(len(row) for row in text.splitlines(keepends=True)[: line - 1])
    return page_requirements(text, offset)


def environment(page: str, line: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REDIS_SESSION_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        SESSION_PASSPHRASE="correct horse battery staple",  # what docs/encryption.md reads
    )
    return hiding(installed(page, line), env)


def test_each_block_gets_what_its_page_installs() -> None:
    def extras(page: str, line: int) -> set[str]:
        return {r for r in installed(page, line) if r.startswith("redis-agent-sessions[")}

    assert installed("docs/encryption.md", 1) == ["redis-agent-sessions"]  # names no extra
    quickstart = next(line for page, line, _ in PYTHON if page == "README.md")
    assert "redis-agent-sessions[test]" in extras("README.md", quickstart)
    assert extras("docs/reference.md", 1) == {"redis-agent-sessions[memory]"}


def _runs(page: str, line: int, argv: list[str], cwd: Path) -> None:
    """Run one block (``argv``) bounded by TIMEOUT: it exits 0 and prints something."""
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=environment(page, line),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{page}:{line}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{page}:{line} printed nothing"


@pytest.mark.parametrize(("page", "line", "code"), PYTHON, ids=ids(PYTHON))
def test_python_block_runs_as_written(
    page: str, line: int, code: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if "127.0.0.1:6379" not in code:
        _runs(page, line, [sys.executable, "-W", "error", "-c", code], tmp_path)
        return
    request.getfixturevalue("local_redis")
    # Run twice in a row, as a reader would: the block works under a prefix of its own and
    # cleans up, so the second run finds nothing of the first; what it leaves expires within a
    # minute (a delete's retry token, the event log of a prefix emptied), never stays. Its
    # prefixes' keys that were not there before are removed after it.
    patterns = [f"{name}:*" for name in set(_EXAMPLE_PREFIX.findall(code))]
    client = redis.Redis(*LOCAL_REDIS)
    try:
        before = {k for p in patterns for k in client.scan_iter(match=p, count=1000)}
        try:
            for _ in range(2):
                _runs(page, line, [sys.executable, "-W", "error", "-c", code], tmp_path)
                left = {k for p in patterns for k in client.scan_iter(match=p, count=1000)}
                kept = {k: client.pttl(k) for k in left - before}
                assert all(0 < ms <= 60_000 for ms in kept.values()), (page, line, kept)
        finally:
            after = {k for p in patterns for k in client.scan_iter(match=p, count=1000)}
            if after - before:
                client.delete(*(after - before))
    finally:
        client.close()


_EXAMPLE_PREFIX = re.compile(r"""prefix\s*=\s*f["']([\w-]+):\{uuid""")
"""The fixed part of a prefix an example makes unique (``prefix=f"quickstart:{uuid…}:"``)."""


@pytest.mark.parametrize(("page", "line", "code"), SHELL, ids=ids(SHELL))
def test_shell_block_runs_as_written(page: str, line: int, code: str, tmp_path: Path) -> None:
    _runs(page, line, ["bash", "-c", "set -euo pipefail\n" + code], tmp_path)
