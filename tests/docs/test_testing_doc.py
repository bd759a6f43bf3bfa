"""docs/testing.md's example runs as written, through the installed pytest plugin."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_the_plugin_example_passes_as_a_users_test_file(tmp_path: Path) -> None:
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    (tmp_path / "test_example.py").write_text(block, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-o", "asyncio_mode=auto", "test_example.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_plugin_is_registered_and_adds_only_its_fixtures(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_nothing_of_ours():\n    assert True\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--fixtures",
         "test_plain.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ours = set(re.findall(r"^(rs_\w+)", done.stdout, re.M))
    assert ours == {"rs_store", "rs_async_store", "rs_events"}
