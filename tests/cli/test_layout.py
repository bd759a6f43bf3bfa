"""The command line's layout as a user meets it: importing the library or the CLI does not
import the benchmark machinery (the repository's ``bench/harness/``), which only
``redis-session bench`` loads; where it cannot (an install without the checkout) the command
says so in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from redis_session.cli.bench import HARNESS_MISSING

PROBE = """
import sys
import {module}
loaded = sorted(m for m in sys.modules if m == "bench" or m.startswith("bench."))
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
    print(exc.code, "bench.harness" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.split() == ["1", "True"], (done.stdout, done.stderr)
    assert "Error: ConnectionError: " in done.stderr


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_without_the_harness_the_bench_command_says_how_to_run_it(as_json: bool) -> None:
    """As from a wheel (tests/packaging/test_wheel.py runs the wheel's own): ``bench`` is not
    importable, and the command says in one line to run it from a checkout.
    """
    probe = f"""
import sys
sys.modules["bench"] = None  # what an install without the checkout finds: no such module
from redis_session.cli import main
main(["bench", "--url", "redis://127.0.0.1:1/0"{', "--json"' if as_json else ""}])
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    (line,) = done.stderr.splitlines()
    if as_json:
        assert json.loads(line) == {"error": HARNESS_MISSING, "type": "ImportError", "exit_code": 1}
    else:
        assert line == f"Error: {HARNESS_MISSING}"
    assert "from a source checkout" in line and "pip install -e '.[cli]'" in line


def test_a_module_the_harness_needs_is_not_reported_as_a_missing_harness() -> None:
    probe = """
import sys
sys.modules["pstats"] = None  # imported by the harness, not by the CLI
from redis_session.cli import main
main(["bench", "--url", "redis://127.0.0.1:1/0"])
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "source checkout" not in done.stderr and "pstats" in done.stderr
