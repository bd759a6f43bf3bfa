"""The distribution's name is ours (``redis-agent-sessions``: ``redis-session`` on the package
index is another project's, a web-framework session library of 2018), in ``pyproject.toml``,
in every doc and in every message of the package that says what to install.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from redis_session._dist import DISTRIBUTION, install_hint

ROOT = Path(__file__).resolve().parents[2]
OTHER = re.compile(
    r"pip install[^#\n&|;]*?\bredis(?:-session|[_.]session(?=[\s'\"\[]|$))(?![-\w])",
    re.IGNORECASE,
)
"""The other project's name as an argument of ``pip install`` (up to a comment or the next
command on the line)."""


def _texts() -> list[Path]:
    docs = [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]
    code = [*(ROOT / "redis_session").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]
    return [*docs, *code, ROOT / "pyproject.toml", ROOT / ".ci" / "run"]


def test_pyproject_and_the_package_agree_on_the_name() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == "redis-agent-sessions"
    assert importlib.metadata.distribution(DISTRIBUTION).metadata["Name"] == DISTRIBUTION
    assert install_hint("memory") == "pip install 'redis-agent-sessions[memory]'"


def test_no_doc_or_message_names_another_distribution() -> None:
    found = []
    for path in _texts():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bredis[-_]session\[", line) or OTHER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


def test_the_check_catches_the_other_name() -> None:
    assert OTHER.search("pip install 'redis-session[memory]'")
    assert OTHER.search("pip install redis-session")
    assert not OTHER.search("pip install 'redis-agent-sessions[memory]'")
    assert not OTHER.search("pip install -e '.[test]' && .venv/bin/redis-session demo")
    assert not OTHER.search("pip install -e '.[cli]'  # + the redis-session command line")
    assert not OTHER.search("pip install x and the redis_session.get span")
    assert OTHER.search("pip install redis_session")
