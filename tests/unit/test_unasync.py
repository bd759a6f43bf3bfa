"""tools/unasync.py: (source, target, rules) pairs and one token map; a dead rule fails."""

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


NAMES = {"async": "", "await": "", "aclose": "close"}
NO_WRAPPERS: frozenset[str] = frozenset()
SHUTDOWN = [(r"\bclient\.aclose\(\)", "client.shutdown()")]


def test_every_pair_is_written_with_a_header_naming_its_source(
    tool: ModuleType, tmp_path: Path
) -> None:
    pairs = [pair(tool, tmp_path, "one", []), pair(tool, tmp_path, "two", SHUTDOWN)]
    assert tool.main([], pairs, NAMES, NO_WRAPPERS) == 0
    one = (tmp_path / "one_sync.py").read_text(encoding="utf-8")
    two = (tmp_path / "two_sync.py").read_text(encoding="utf-8")
    assert (
        one.splitlines()[0]
        == f"# Generated from {tmp_path / 'one_async.py'} by tools/unasync.py: edit that one."
    )
    assert "def fetch(client: object) -> None:" in one and "client.close()" in one
    assert two.splitlines()[0].startswith(f"# Generated from {tmp_path / 'two_async.py'} ")
    assert "client.shutdown()" in two and "await" not in two and "async def" not in two
    assert tool.main(["--check"], pairs, NAMES, NO_WRAPPERS) == 0


def test_check_names_each_stale_target_and_only_those(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = [pair(tool, tmp_path, "one", []), pair(tool, tmp_path, "two", [])]
    assert tool.main([], pairs, NAMES, NO_WRAPPERS) == 0
    (tmp_path / "two_sync.py").write_text("# edited by hand\n", encoding="utf-8")
    capsys.readouterr()
    assert tool.main(["--check"], pairs, NAMES, NO_WRAPPERS) == 1
    err = capsys.readouterr().err
    assert "two_sync.py is stale" in err and "one_sync.py" not in err
    (tmp_path / "one_sync.py").unlink()
    assert tool.main(["--check"], pairs, NAMES, NO_WRAPPERS) == 1
    assert "one_sync.py is stale" in capsys.readouterr().err


@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
def test_a_rule_that_matches_nothing_fails_naming_it(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool
) -> None:
    good = pair(tool, tmp_path, "good", SHUTDOWN)
    dead = pair(tool, tmp_path, "dead", [(r"\bAsyncNothing\b", "Nothing")])
    assert tool.main(["--check"] if check else [], [good, dead], NAMES, NO_WRAPPERS) == 1
    err = capsys.readouterr().err
    assert "'\\\\bAsyncNothing\\\\b' matched nothing in" in err and "dead_async.py" in err
    assert not (tmp_path / "good_sync.py").exists()  # nothing written when a rule is dead
    assert not (tmp_path / "dead_sync.py").exists()


@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
def test_a_token_map_entry_used_in_no_pair_fails_naming_it(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool
) -> None:
    pairs = [pair(tool, tmp_path, "one", []), pair(tool, tmp_path, "two", [])]
    names = {**NAMES, "AsyncNothing": "Nothing"}
    assert tool.main(["--check"] if check else [], pairs, names, frozenset({"Listening"})) == 1
    err = capsys.readouterr().err
    assert "'AsyncNothing', 'Listening' matched nothing in" in err
    assert "one_async.py" in err and "two_async.py" in err
    assert not (tmp_path / "one_sync.py").exists()  # nothing written when an entry is dead
    assert not (tmp_path / "two_sync.py").exists()


MAPPED = {
    "async": "",
    "await": "",
    "aclose": "close",
    "AsyncThing": "Thing",
    "redis.asyncio": "redis",
}

ASYNC_CODE = '''"""``AsyncThing``: :class:`AsyncThing`, ``await x.aclose()``, not ``await``."""


async def f(x: AsyncThing) -> Awaitable[redis.asyncio.Redis]:  # an AsyncThing, awaited
    """Close ``x``, an AsyncThing: ``async with x`` then ``await x.aclose()``."""
    text = "AsyncThing: await x.aclose()"
    async with x:
        await x.aclose()
    return Listening(await x.redis.asyncio.aclose(), [AsyncThing])
'''

BLOCKING_CODE = '''"""``Thing``: :class:`Thing`, ``x.close()``, not ``await``."""


def f(x: Thing) -> redis.Redis:  # an AsyncThing, awaited
    """Close ``x``, an AsyncThing: ``with x`` then ``x.close()``."""
    text = "AsyncThing: await x.aclose()"
    with x:
        x.close()
    return x.redis.asyncio.close(), [Thing]
'''


def test_the_token_map_renames_code_and_the_code_in_docstrings_only(tool: ModuleType) -> None:
    """Strings, comments and a docstring's prose stay; a dotted name only where it begins."""
    wrappers = frozenset({"Listening", "Awaitable"})
    assert tool.unasync(ASYNC_CODE, MAPPED, wrappers) == BLOCKING_CODE
    doc = "Close ``x``, an AsyncThing: ``async with x`` then ``await x.aclose()``."
    blocking_doc = "Close ``x``, an AsyncThing: ``with x`` then ``x.close()``."
    assert tool.unasync_doc(doc, MAPPED, wrappers) == blocking_doc


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
