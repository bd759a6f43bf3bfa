"""No import circle in the package (issue #44): no module imports, through any chain of imports,
a module that imports it back, whether the import runs at import time, inside a function or
only for the type checker. Importing ``a.b.c`` also runs ``a/b/__init__.py`` (unless the
importer is inside ``a.b``, where it already ran): a subpackage's ``__init__`` that imported
its operations would close a circle through it, so those count too. The package's own
``redis_session/__init__.py``, which every import of a submodule runs first, does not.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "redis_session"


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name → file, for every module and package of the package at ``root``."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that importing ``name`` runs, one step away."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
            full = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:
                sub = f"{full}.{alias.name}"
                targets.add(sub if sub in modules else full)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    root = name.split(".")[0]
    runs = set()
    for target in targets & modules.keys():
        parts = target.split(".")
        for depth in range(2, len(parts)):  # the subpackages on the way, past the root
            package = ".".join(parts[:depth])
            if not name.startswith(package + ".") and name != package:
                runs.add(package)
        runs.add(target)
    runs.discard(root)
    runs.discard(name)
    return runs


def circles(root: Path) -> list[list[str]]:
    """Every import circle among the modules of the package at ``root`` (Tarjan's strongly
    connected components of more than one module), each sorted; none is ``[]``.
    """
    modules = _modules(root)
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    return found


def test_the_package_has_no_import_circle() -> None:
    assert len(_modules(PACKAGE)) > 60
    assert circles(PACKAGE) == []


def test_the_check_sees_a_circle_through_a_subpackage_s_init(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "_core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import contracts\n")
    (pkg / "contracts.py").write_text("from ._core.requests import Call\n")
    (pkg / "_core" / "requests.py").write_text("class Call: ...\n")
    (pkg / "_core" / "ops.py").write_text("from .. import contracts\n")
    (pkg / "_core" / "__init__.py").write_text('"""Nothing."""\n')
    assert circles(pkg) == []
    (pkg / "_core" / "__init__.py").write_text("from . import ops\n")
    assert circles(pkg) == [["pkg._core", "pkg._core.ops", "pkg.contracts"]]
