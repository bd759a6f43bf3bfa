"""docs/architecture.md keeps up with the tree: its layers table and its diagram name every
module of the package, and no module that is gone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
LAYERS = PAGE[PAGE.index("## Layers") : PAGE.index("## The life of one request")]


def modules() -> set[str]:
    """``codec``, ``_speedups.c``, ``cli/``: the package's modules and subpackages."""
    package = ROOT / "redis_session"
    found = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    found |= {p.name for p in package.glob("*.c")}
    found |= {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()}
    return found


def table() -> str:
    return "\n".join(line for line in LAYERS.splitlines() if line.startswith("| "))


def diagram() -> str:
    found = re.search(r"```mermaid\n(.*?)```", LAYERS, re.S)
    assert found is not None, "the layers' diagram"
    return found.group(1)


def named(text: str) -> set[str]:
    """The module names in ``text`` (``aio.py`` as ``aio``)."""
    words = set(re.findall(r"[_a-z][_a-z0-9]*(?:\.c|\.py|/)?", text))
    return {w.removesuffix(".py") for w in words}


@pytest.mark.parametrize("part", ["table", "diagram"])
def test_every_module_is_placed_in_a_layer(part: str) -> None:
    text = table() if part == "table" else diagram()
    assert sorted(modules() - named(text)) == []


def test_the_table_names_no_module_that_is_gone() -> None:
    cited = set(re.findall(r"`([_a-z][_a-z0-9]*(?:\.py|\.c|/)?)`", table()))
    cited = {c.removesuffix(".py") for c in cited}
    # Backquoted words of the table that are not modules: names of things inside them.
    others = {"lua/", "_prelude.lua", "listen", "await", "expire"}
    assert sorted(c for c in cited - modules() - others if not c[0].isupper()) == []
