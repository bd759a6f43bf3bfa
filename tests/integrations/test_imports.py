"""The integrations are optional: ``import redis_session`` loads no framework, and an
integration imported without its extra names the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

BLOCK = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Block())
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_importing_the_package_loads_no_framework() -> None:
    code = (
        "import sys, redis_session, redis_session.integrations\n"
        "loaded = sorted(m for m in sys.modules if m in ('agents', 'langgraph') or m.startswith("
        "('google.adk', 'agents.', 'langgraph.')))\n"
        "print(loaded)"
    )
    done = run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "top", "extra"),
    [
        ("redis_session.integrations.adk", "google", "redis-agent-sessions[adk]"),
        (
            "redis_session.integrations.openai_agents",
            "agents",
            "redis-agent-sessions[openai-agents]",
        ),
        ("redis_session.integrations.langgraph", "langgraph", "redis-agent-sessions[langgraph]"),
    ],
)
def test_a_missing_extra_is_named(module: str, top: str, extra: str) -> None:
    code = BLOCK.format(blocked={top}) + (
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = run(code)
    assert done.returncode == 0, done.stderr
    assert f"pip install '{extra}'" in done.stdout
