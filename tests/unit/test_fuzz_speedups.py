"""A small fuzz of the C module under AddressSanitizer and UBSan (``tools/fuzz_speedups.py``,
which a developer runs longer): every entry point fed damaged input, any sanitizer report or
any element read otherwise than pydantic's validation reads it fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "fuzz_speedups.py"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc to build the sanitized module")
def test_the_c_module_survives_damaged_input_under_the_sanitizers() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL), "--examples", "3000", "--seed", str(os.getpid())],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode == 2 and "not found" in done.stderr:
        if os.environ.get("CI") == "true":
            pytest.fail(done.stderr)
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert "read as validation reads them" in done.stdout
