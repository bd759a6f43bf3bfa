"""tools/unasync.py: several (source, target, rules) pairs; a rule matching nothing fails."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "unasync.py"

SOURCE = '''"""A module."""


async def fetch(client: object) -> None:
    """Fetch."""
    await client.aclose()
'''


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync_tool", TOOL)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load()


def pair(tool: ModuleType, folder: Path, name: str, rules: list[tuple[str, str]]) -> object:
    source = folder / f"{name}_async.py"
    source.write_text(SOURCE, encoding="utf-8")
    return tool.Pair(source, folder / f"{name}_sync.py", rules)


RULES = [(r"\basync def\b", "def"), (r"\bawait ", ""), (r"\baclose\(\)", "close()")]


def test_every_pair_is_written_with_a_header_naming_its_source(
    tool: ModuleType, tmp_path: Path
) -> None:
    pairs = [pair(tool, tmp_path, "one", RULES), pair(tool, tmp_path, "two", RULES[:2])]
    assert tool.main([], pairs) == 0
    one = (tmp_path / "one_sync.py").read_text(encoding="utf-8")
    two = (tmp_path / "two_sync.py").read_text(encoding="utf-8")
    assert (
        one.splitlines()[0]
        == f"# Generated from {tmp_path / 'one_async.py'} by tools/unasync.py: edit that one."
    )
    assert "def fetch(client: object) -> None:" in one and "client.close()" in one
    assert two.splitlines()[0].startswith(f"# Generated from {tmp_path / 'two_async.py'} ")
    assert "client.aclose()" in two and "await" not in two
    assert tool.main(["--check"], pairs) == 0


def test_check_names_each_stale_target_and_only_those(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = [pair(tool, tmp_path, "one", RULES), pair(tool, tmp_path, "two", RULES)]
    assert tool.main([], pairs) == 0
    (tmp_path / "two_sync.py").write_text("# edited by hand\n", encoding="utf-8")
    capsys.readouterr()
    assert tool.main(["--check"], pairs) == 1
    err = capsys.readouterr().err
    assert "two_sync.py is stale" in err and "one_sync.py" not in err
    (tmp_path / "one_sync.py").unlink()
    assert tool.main(["--check"], pairs) == 1
    assert "one_sync.py is stale" in capsys.readouterr().err


@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
def test_a_rule_that_matches_nothing_fails_naming_it(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool
) -> None:
    good = pair(tool, tmp_path, "good", RULES)
    dead = pair(tool, tmp_path, "dead", [*RULES, (r"\bAsyncNothing\b", "Nothing")])
    assert tool.main(["--check"] if check else [], [good, dead]) == 1
    err = capsys.readouterr().err
    assert "'\\\\bAsyncNothing\\\\b' matched nothing in" in err and "dead_async.py" in err
    assert not (tmp_path / "good_sync.py").exists()  # nothing written when a rule is dead
    assert not (tmp_path / "dead_sync.py").exists()


def test_the_repository_pairs_are_checked(tool: ModuleType) -> None:
    """Each generated module names its source; ``--check`` passes on the repository."""
    pairs = {tool.shown(p.source): tool.shown(p.target) for p in tool.PAIRS}
    assert pairs == {
        f"redis_session/_async/{name}": f"redis_session/_sync/{name}"
        for name in ("store.py", "connect.py", "listen.py")
    }
    for p in tool.PAIRS:
        first = p.target.read_text(encoding="utf-8").splitlines()[0]
        assert (
            first == f"# Generated from {tool.shown(p.source)} by tools/unasync.py: edit that one."
        )
    done = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
