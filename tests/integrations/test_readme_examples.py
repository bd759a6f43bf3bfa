"""The integration examples of ``docs/integrations.md`` (moved there from the README) run as
written (``memory://``, no model is called)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def examples(text: str) -> list[str]:
    """The ``python`` code blocks of a page's text."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_the_page_has_one_example_per_framework() -> None:
    found = examples(PAGE.read_text(encoding="utf-8"))
    assert len(found) == 2
    assert "redis_session.integrations.adk" in found[0]
    assert "redis_session.integrations.openai_agents" in found[1]


@pytest.mark.parametrize("index", [0, 1], ids=["adk", "openai-agents"])
def test_integration_example_runs(index: int) -> None:
    code = examples(PAGE.read_text(encoding="utf-8"))[index]
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
