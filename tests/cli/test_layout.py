"""The command line's layout as a user meets it: importing the library or the CLI does not
import the benchmark machinery, which only ``redis-session bench`` loads.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
import {module}
heavy = ("redis_session.bench",)
loaded = sorted(m for m in sys.modules if m.startswith(heavy))
print(",".join(loaded))
"""


@pytest.mark.parametrize("module", ["redis_session", "redis_session.cli", "redis_session.__main__"])
def test_importing_does_not_load_the_benchmark(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_bench_command_loads_it_when_it_runs() -> None:
    probe = """
import sys
from redis_session.cli import main
try:
    main(["bench", "--url", "redis://127.0.0.1:1/0", "--rounds", "1"])
except SystemExit as exc:
    print(exc.code, "redis_session.bench" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.split() == ["1", "True"], (done.stdout, done.stderr)
    assert "Error: ConnectionError: " in done.stderr
