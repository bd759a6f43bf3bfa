"""Every use of another project's private names lives in ``redis_session/_transport/fast.py``: no
other module of the package imports a private module or name of another project (a dotted part
starting with ``_``), whether it runs or only type-checks.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "redis_session"
FAST = PACKAGE / "_transport" / "fast.py"
ALLOWED = {FAST}


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _foreign_private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "redis_session":
                continue
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [f"{path.name}:{node.lineno} {n}" for n in names if _private(n)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "redis_session" and _private(alias.name):
                    found.append(f"{path.name}:{node.lineno} {alias.name}")
    return found


def test_no_module_but_the_fast_path_imports_another_project_s_private_names() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if p not in ALLOWED]
    assert len(modules) > 40
    found = [hit for path in modules for hit in _foreign_private_imports(path)]
    assert found == []


def test_the_check_sees_a_private_import() -> None:
    fast = _foreign_private_imports(FAST)
    assert any("pydantic._internal" in hit for hit in fast)
