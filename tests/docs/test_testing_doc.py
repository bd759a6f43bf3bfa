"""docs/testing.md's example runs as written, through the installed pytest plugin, as a user
runs it: a test file in a directory of its own with no pytest configuration but what the page
shows, and nothing installed but what the page's ``pip install`` line names (every other
distribution that redis-session's extras bring is hidden: ``tests/support/extras.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.extras import hiding, pip_requirements

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
MARK = re.compile(r"^@pytest\.mark\.asyncio\b.*\n", re.M)


def _page() -> str:
    return DOC.read_text(encoding="utf-8")


def _block(lang: str) -> str:
    (block,) = re.findall(rf"^```{lang}\n(.*?)^```", _page(), re.S | re.M)
    return str(block)


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest ARGS`` in ``cwd`` as the page's reader runs it (no PYTEST_* settings of ours)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=cwd,
        env=hiding(["redis-agent-sessions", *pip_requirements(_page())], env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_page_says_what_to_install() -> None:
    assert pip_requirements(_page()) == ["redis-agent-sessions[memory]", "pytest", "pytest-asyncio"]


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_the_plugin_example_passes_as_a_users_test_file(mode: str, tmp_path: Path) -> None:
    example = _block("python")
    if mode == "auto":  # the configuration the page shows, and no mark
        (tmp_path / "pyproject.toml").write_text(_block("toml"), encoding="utf-8")
        example = MARK.sub("", example)
        assert "asyncio" not in example.replace("import pytest", "")
    (tmp_path / "test_example.py").write_text(example, encoding="utf-8")
    done = _pytest(tmp_path, "test_example.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"asyncio: mode=Mode.{mode.upper()}" in done.stdout
    assert re.search(r"\b3 passed in ", done.stdout), done.stdout  # no warning in the tests
    if mode == "auto":  # configured as the page shows: not a line more
        assert done.stderr == ""
    else:  # only pytest-asyncio's own warning about its configuration, as the page says
        warned = re.findall(r"\w+Warning: .*", done.stderr)
        assert len(warned) == 1 and "asyncio_default_fixture_loop_scope" in warned[0], warned


def test_the_plugin_is_registered_and_adds_only_its_fixtures(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_nothing_of_ours():\n    assert True\n")
    done = _pytest(tmp_path, "--fixtures", "test_plain.py")
    assert done.returncode == 0, done.stderr
    ours = set(re.findall(r"^(rs_\w+)", done.stdout, re.M))
    assert ours == {"rs_store", "rs_async_store", "rs_events"}
