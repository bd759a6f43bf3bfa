"""The unit and contract tests pass with the fast path off (``REDIS_SESSION_PURE_PYTHON=1``:
every private piece of ``redis_session/_transport/fast.py`` off, as after a dependency's release
moved one, and no C module), on fakeredis and a real Redis: run here in a process of their own,
so that the README's one test command covers both paths (the main run covers the fast path on
every backend).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


PARTS = {
    "unit": ["tests/unit"],
    "contract-fake": ["tests/contract", "-m", "not (redis or valkey or cluster or sentinel)"],
    "contract-redis": ["tests/contract", "-m", "redis"],
}
"""Three nested runs, so that the suite's workers take them side by side (~160 s in one)."""


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("part", list(PARTS))
def test_the_unit_and_contract_tests_pass_with_the_fast_path_off(part: str) -> None:
    env = {**os.environ, "REDIS_SESSION_PURE_PYTHON": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-x", *PARTS[part]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1150, check=False,
    )  # fmt: skip
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout.splitlines()[-1], tail
