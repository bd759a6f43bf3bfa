"""``redis-session demo``: workers, sub-agents, compaction, events, and the consistency check."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from redis_session import Message, RedisStore
from redis_session.cli._simulation import DemoConfig, run_demo

from .conftest import Place, invoke, keys_under

SMALL = ["--workers", "3", "--sessions", "2", "--turns", "12"]


def test_demo_summary_on_memory() -> None:
    result = invoke("demo", *SMALL)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for row in ("demo summary", "sessions", "messages", "merges", "events seen", "ops/s"):
        assert row in out
    assert "latency p50" in out and "latency p99" in out
    assert "consistency OK: nothing lost or duplicated" in out
    assert "agents at work" in out  # the progress bar
    assert "event create" in out  # the listener's lines


def test_demo_json_counts_add_up() -> None:
    result = invoke("demo", *SMALL, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["consistent"] is True
    assert (data["lost"], data["duplicated"], data["unexpected"], data["unmerged"]) == (0, 0, 0, 0)
    assert data["sessions"] == 2
    assert data["appended"] == 3 * 12 * 3  # three messages a turn
    assert data["forks"] == data["merges"] == 3 * 4  # every third turn
    assert data["compactions"] >= 1
    assert data["events_seen"] == data["events_expected"]
    assert data["events_seen"]["create"] == 2
    assert data["operations"] > data["appended"] / 3
    assert 0 < data["p50_ms"] <= data["p99_ms"]
    assert data["errors"] == []


@pytest.mark.redis
def test_demo_on_a_real_redis_cleans_up(real: Place) -> None:
    result = invoke("demo", *SMALL, "--url", real.url, "--prefix", real.prefix, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["consistent"] is True
    assert keys_under(real.url, real.prefix) == []


@pytest.mark.redis
def test_demo_keep_leaves_sessions_for_ls(real: Place) -> None:
    result = invoke("demo", *SMALL, "--url", real.url, "--prefix", real.prefix, "--keep")
    assert result.exit_code == 0, result.output
    assert f"kept: redis-session ls --url {real.url} --prefix {real.prefix}" in result.stdout
    listed = json.loads(invoke("ls", *real.args(), "--json").stdout)
    assert sorted(s["key"] for s in listed["sessions"]) == ["chat:0", "chat:1"]


def test_demo_fails_when_a_write_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    original = RedisStore.append_messages

    def lossy(self: RedisStore, key: str, messages: Sequence[Message]) -> int:
        calls["n"] += 1
        if calls["n"] == 5:
            return len(messages)  # reports success, writes nothing
        return original(self, key, messages)

    monkeypatch.setattr(RedisStore, "append_messages", lossy)
    result = invoke("demo", *SMALL)
    assert result.exit_code == 1
    assert "consistency FAILED: 3 lost" in result.stdout


def test_run_demo_counts_events_and_reports_worker_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    with RedisStore.from_url("memory://", prefix="d:") as store:
        result = run_demo(
            store,
            DemoConfig(workers=2, sessions=1, turns=6),
            on_event=lambda e: seen.append(e.type),
        )
        assert result.ok
        assert sorted(seen) == sorted(result.expected_events.elements())

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

    with RedisStore.from_url("memory://", prefix="d:") as store:
        monkeypatch.setattr(store, "fork_child", broken)
        failed = run_demo(store, DemoConfig(workers=1, sessions=1, turns=3))
    assert not failed.ok
    assert failed.errors == ["worker 0: RuntimeError: boom"]


def test_run_demo_refuses_a_bad_config() -> None:
    with RedisStore.from_url("memory://") as store, pytest.raises(ValueError, match="compact_at"):
        run_demo(store, DemoConfig(keep=10, compact_at=5))
