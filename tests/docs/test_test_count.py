"""docs/testing-backends.md states the suite's size as a collection counted it, with that
count's commit and date; the suite as collected now is within ``TOLERANCE`` of it, so the
number cannot drift silently (it said ~2,300 while the suite had grown to 2,731).
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "testing-backends.md"
TOLERANCE = 0.03
STATED = re.compile(
    r"([\d,]+) tests \(`pytest --collect-only -q` at ([0-9a-f]{7,40}), (\d{4}-\d\d-\d\d);"
)


def stated() -> tuple[int, str, date]:
    found = STATED.search(" ".join(PAGE.read_text(encoding="utf-8").split()))
    assert found, f"{PAGE.name} states no test count with the commit and date of its count"
    count, commit, day = found.groups()
    return int(count.replace(",", "")), commit, date.fromisoformat(day)


def test_the_count_names_a_commit_of_this_repository() -> None:
    _, commit, day = stated()
    assert day <= date.today()
    if (ROOT / ".git").exists():  # an sdist has no history to look in
        done = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, check=False
        )
        assert done.returncode == 0, f"{commit} is not a commit of this repository"


@pytest.mark.slow
def test_the_stated_test_count_is_the_suites() -> None:
    count, _, _ = stated()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    collected = re.search(r"^(\d+) tests? collected", done.stdout, re.M)
    assert collected, done.stdout[-2000:] + done.stderr[-2000:]
    now = int(collected.group(1))
    assert abs(now - count) <= TOLERANCE * count, (
        f"{PAGE.name} says {count:,} tests; the suite collects {now:,}: "
        "state the new count with its commit and date"
    )
