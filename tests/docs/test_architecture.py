"""docs/architecture.md keeps up with the tree: its layers table and its diagram name every
module of the package, and no module that is gone; its directory listing is the package's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "redis_session"
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
LAYERS = PAGE[PAGE.index("## Layers") : PAGE.index("## The life of one request")]
NAME = r"[_a-z][_a-z0-9]*(?:/[_a-z][_a-z0-9]*)*(?:\.c|\.py|/)?"
"""A module as the page names it: ``codec``, ``_core/reads``, ``_transport/_speedups.c``,
``cli/`` (``.py`` may follow)."""


def subpackages() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def modules() -> set[str]:
    """``codec``, ``cli/``, ``_core/reads``, ``_transport/_speedups.c``: the package's modules,
    its public subpackages as a whole (``cli/``, ``integrations/``) and the modules of its
    private ones (``_core/``, ``_transport/``, ``_async/``, ``_sync/``) by their path."""
    found = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    found |= {p.name for p in PACKAGE.glob("*.c")}
    for sub in subpackages():
        if not sub.name.startswith("_"):
            found.add(f"{sub.name}/")
            continue
        found |= {f"{sub.name}/{p.stem}" for p in sub.glob("*.py") if p.stem != "__init__"}
        found |= {f"{sub.name}/{p.name}" for p in sub.glob("*.c")}
    return found


def table() -> str:
    return "\n".join(line for line in LAYERS.splitlines() if line.startswith("| "))


def diagram() -> str:
    found = re.search(r"```mermaid\n(.*?)```", LAYERS, re.S)
    assert found is not None, "the layers' diagram"
    return found.group(1)


def listing() -> set[str]:
    """The files of the directory listing (``├── name``, four columns a level deep), by their
    path in the package: ``aio.py``, ``_core/reads.py``, ``cli/``."""
    found = re.search(r"```text\nredis_session/\n(.*?)```", LAYERS, re.S)
    assert found is not None, "the directory listing"
    paths: set[str] = set()
    folders: list[str] = []
    for line in found.group(1).splitlines():
        entry = re.match(r"((?:[│ ]   )*)[├└]── (\S+)", line)
        assert entry is not None, line
        depth, name = len(entry.group(1)) // 4, entry.group(2)
        del folders[depth:]
        path = "".join(folders) + name
        paths.add(path)
        if name.endswith("/"):
            folders.append(name)
    return paths


def named(text: str) -> set[str]:
    """The module names in ``text`` (``aio.py`` as ``aio``)."""
    return {w.removesuffix(".py") for w in re.findall(NAME, text)}


@pytest.mark.parametrize("part", ["table", "diagram"])
def test_every_module_is_placed_in_a_layer(part: str) -> None:
    text = table() if part == "table" else diagram()
    assert sorted(modules() - named(text)) == []


def test_the_table_names_no_module_that_is_gone() -> None:
    cited = {c.removesuffix(".py") for c in re.findall(f"`({NAME})`", table())}
    # Backquoted words of the table that are not modules: names of things inside them.
    others = {"lua/", "_prelude.lua", "listen", "await", "expire", "tools/unasync"}
    assert sorted(c for c in cited - modules() - others if not c[0].isupper()) == []


def test_the_listing_is_the_package() -> None:
    """Every module, C source and stub of the package, each subpackage's ``__init__.py`` with
    it; a public subpackage (``cli/``) as one line."""
    files = {f"{p.name}/" for p in subpackages() if not p.name.startswith("_")}
    for path in PACKAGE.rglob("*"):
        relative = path.relative_to(PACKAGE)
        public = not relative.parts[0].startswith("_") and len(relative.parts) > 1
        if path.suffix in {".py", ".c", ".pyi"} and not public:
            files.add(relative.as_posix())
    files |= {f"{p.name}/" for p in subpackages() if p.name.startswith("_")}
    assert sorted(listing() ^ files) == []
