"""``bench/bench_frameworks.py --quick`` on a real Redis: both phases run, the output has the
rows, ratios and round-trip counts the docs quote, every session was checked and nothing is
left behind. Timings are not checked (only that there are some).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.support.servers import Server

pytest.importorskip("agents")
pytest.importorskip("google.adk")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_frameworks.py"


@pytest.mark.redis
@pytest.mark.slow
def test_quick_run_reports_both_frameworks(redis_server: Server, tmp_path: Path) -> None:
    out = tmp_path / "frameworks.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--url", redis_server.url, "--json", str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OpenAI Agents Runner.run" in result.stdout and "ADK Runner.run_async" in result.stdout
    data = json.loads(out.read_text())
    assert (data["rounds"], data["warmup"]) == (3, 1) and 1 <= data["events"] <= 50  # --quick
    assert data["lengths_ok"] is True
    assert data["cleanup"]["left"] == 0 and data["cleanup"]["deleted"] > 0

    for phase, ours, theirs in (
        ("openai_agents", "ours: RedisAgentSession", "SDK RedisSession"),
        ("adk", "ours: RedisSessionService", None),  # DatabaseSessionService needs SQLAlchemy
    ):
        facts = data["phases"][phase]
        rows = {row["store"]: row for row in facts["rows"]}
        assert all(facts["lengths_ok"].values()), facts["lengths_ok"]
        assert facts["sessions_per_store"] * facts["turns_per_session"] >= 4  # warm-up + rounds
        base = [row for row in rows.values() if row["role"] == "framework"]
        assert len(base) == 1 and base[0]["ratio_to_framework_store"] == 1.0
        assert theirs is None or base[0]["store"] == theirs
        assert rows[ours]["role"] == "ours" and rows[ours]["on_redis"] is True
        for row in rows.values():
            assert row["n"] == 3 and row["median_us"] > 0 and row["p90_us"] >= row["median_us"]
            assert row["ratio_to_framework_store"] > 0 and row["client_cpu_median_us"] > 0
            if row["on_redis"]:  # round trips and commands counted, the server's share read
                assert 1 <= row["round_trips_min"] <= row["round_trips_max"]
                assert row["commands_min"] >= row["round_trips_min"]
                assert row["server_calls_median"] >= 1 and row["server_us_median"] >= 0
            else:
                assert row["round_trips_min"] is None and row["server_us_median"] is None

    client = redis.Redis.from_url(redis_server.url)
    try:
        assert list(client.scan_iter(match=f"{data['prefix']}*")) == []
    finally:
        client.close()
