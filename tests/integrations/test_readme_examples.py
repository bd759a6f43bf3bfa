"""The README's integration examples run as written (``memory://``, no model is called)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Agent framework integrations"


def examples(text: str) -> list[str]:
    """The ``python`` code blocks of the integrations section of a README text."""
    start = text.find(SECTION)
    if start < 0:
        return []
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end >= 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


def readme_examples() -> list[str]:
    found = examples(README.read_text(encoding="utf-8"))
    if not found:
        reason = f"README.md has no {SECTION!r} section with python examples yet"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


@pytest.mark.parametrize("index", [0, 1], ids=["adk", "openai-agents"])
def test_readme_example_runs(index: int) -> None:
    code = readme_examples()[index]
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
