"""The command line as users start it: ``python -m redis_session`` and the ``redis-session``
entry point, in a subprocess.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from .conftest import ENTRY_POINT, Place, run, seed


def test_demo(command: list[str]) -> None:
    result = run(command, "demo", "--workers", "2", "--sessions", "2", "--turns", "10")
    assert result.returncode == 0, result.stderr
    assert "demo summary" in result.stdout
    assert "consistency OK: nothing lost or duplicated" in result.stdout


def test_the_readme_demo_runs_in_well_under_a_minute() -> None:
    started = time.monotonic()
    result = run([str(ENTRY_POINT)], "demo")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "4 threads × 40 turns" in result.stdout
    assert "consistency OK" in result.stdout
    assert elapsed < 30, elapsed


@pytest.mark.redis
def test_ls_and_show(command: list[str], real: Place) -> None:
    seed(real, 2)
    listed = run(command, "ls", *real.args())
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.index("s1") < listed.stdout.index("s0")
    shown = run(command, "show", "s0", "--last", "1", "--json", *real.args())
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["message_count"] == 3
    assert [m["content"] for m in data["history"]] == ["s0 message 2"]


@pytest.mark.redis
def test_ls_takes_url_and_prefix_from_the_environment(real: Place) -> None:
    seed(real, 1)
    env = {"REDIS_URL": real.url, "REDIS_SESSION_PREFIX": real.prefix}
    result = run([sys.executable, "-m", "redis_session"], "ls", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert [s["key"] for s in json.loads(result.stdout)["sessions"]] == ["s0"]


def test_error_is_one_line_and_status_1(command: list[str]) -> None:
    result = run(command, "ls", "--url", "redis://127.0.0.1:1/0")
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ConnectionError: "), lines
    assert "Traceback" not in result.stderr


def test_usage_error_is_status_2(command: list[str]) -> None:
    result = run(command, "show")
    assert result.returncode == 2
    assert "Missing argument 'KEY'" in result.stderr


def test_version_and_help(command: list[str]) -> None:
    version = run(command, "--version")
    assert version.returncode == 0 and version.stdout.startswith("redis-session, version ")
    assert version.stdout.splitlines()[1].startswith("fast path: ")  # which pieces are on
    helped = run(command, "--help")
    for name in (
        "demo",
        "ls",
        "show",
        "events",
        "compact",
        "delete",
        "stats",
        "rekey",
        "acl",
        "bench",
    ):
        assert f"  {name} " in helped.stdout


@pytest.mark.redis
def test_operator_commands_through_the_entry_point(real: Place) -> None:
    seed(real, 2, messages=12)
    tool = [str(ENTRY_POINT)]
    compacted = run(tool, "compact", "s0", "--keep", "2", *real.args())
    assert compacted.returncode == 0, compacted.stderr
    assert "s0: compacted messages 0..9 into one summary (12 → 3 messages)" in compacted.stdout
    stats = run(tool, "stats", "--json", *real.args())
    data = json.loads(stats.stdout)
    assert (data["sessions"], data["messages"]) == (2, 15)
    assert data["memory_bytes"] > 0
    events = run(tool, "events", "--timeout", "0.5", *real.args())
    assert events.returncode == 0 and "0 events" in events.stderr
    deleted = run(tool, "delete", "s0", "s1", *real.args())
    assert deleted.stdout.splitlines() == ["deleted s0", "deleted s1"]
    listed = run(tool, "ls", "--json", *real.args())
    assert json.loads(listed.stdout)["sessions"] == []


@pytest.mark.redis
def test_bench_through_the_entry_point(real: Place) -> None:
    result = run(
        [str(ENTRY_POINT)], "bench", "--url", real.url, "--rounds", "3", "--get-rounds", "3"
    )
    assert result.returncode == 0, result.stderr
    assert "store vs raw redis-py floors" in result.stdout
    assert "append_message sync @10,000" in result.stdout
    assert "round trips per append: 1.00 (sync), 1.00 (async)" in result.stdout
