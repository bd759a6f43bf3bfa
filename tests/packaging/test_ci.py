"""``.ci/run`` runs the README's two opening command lines as written, before it installs
anything else: a set-up step the README lacks then fails CI instead of a newcomer's first run.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```bash\n(.*?)^```$", text, re.M | re.S)
    assert block is not None, "the README has no bash block"
    return block.group(1).splitlines()


def test_the_readme_opens_with_set_up_and_demo_then_the_test_command() -> None:
    setup, tests = readme_commands()
    assert setup.startswith("python3 -m venv .venv && ")
    assert "pip install -e '.[test]'" in setup and setup.endswith("redis-session demo")
    assert tests == ".venv/bin/python -m pytest"


def test_ci_runs_exactly_the_readme_lines_before_installing_anything_else(tmp_path: Path) -> None:
    """The script's own extraction, run on the README, gives the README's lines; nothing is
    installed before them."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    extract = next(line for line in script.splitlines() if line.startswith("mapfile -t readme"))
    done = subprocess.run(
        ["bash", "-c", f'{extract}\nprintf "%s\\n" "${{readme[@]}}"'],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines() == readme_commands()
    setup = script.index('bash -euo pipefail -c "${readme[0]}"')
    assert "pip install" not in script[:setup], "something is installed before the README's lines"
    _, test_command = readme_commands()
    calls = [line.split("#")[0].strip() for line in script[setup:].splitlines()]
    assert [c for c in calls if "pytest" in c and not c.startswith("echo")] == [test_command], (
        "CI runs the README's test command, and no other"
    )
    assert f'"${{readme[1]}}" != "{test_command}"' in script  # and checks the README says it
