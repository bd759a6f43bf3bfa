"""Every operator command, in-process (click's CliRunner), on a real Redis and on memory://."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import click
import pytest
from click.testing import Result

from redis_session import (
    ChildSessionConfig,
    Message,
    Session,
    SessionNotFound,
    ToolCall,
    Usage,
)
from redis_session.cli._common import passphrase_option

from .conftest import Place, invoke, keys_under, seed

# -- ls ---------------------------------------------------------------------------------------


def test_ls_pages_most_recent_first(place: Place) -> None:
    seed(place, 5)
    first = json.loads(invoke("ls", *place.args(), "--limit", "2", "--json").stdout)
    assert [s["key"] for s in first["sessions"]] == ["s4", "s3"]
    assert first["more"] is True
    assert all(s["messages"] == 3 for s in first["sessions"])
    last = json.loads(invoke("ls", *place.args(), "--limit", "2", "--page", "3", "--json").stdout)
    assert [s["key"] for s in last["sessions"]] == ["s0"]
    assert last["more"] is False

    human = invoke("ls", *place.args(), "--limit", "2")
    assert human.exit_code == 0
    out = human.stdout
    assert "s4" in out and "s3" in out and "s2" not in out
    assert out.index("s4") < out.index("s3")
    hint = f"more: redis-session ls --url {place.url} --prefix {place.prefix} --limit 2 --page 2"
    assert hint in out


def test_ls_without_sessions(place: Place) -> None:
    result = invoke("ls", *place.args())
    assert result.exit_code == 0
    assert f"no sessions under prefix {place.prefix!r}" in result.stdout
    assert json.loads(invoke("ls", *place.args(), "--json").stdout)["sessions"] == []


@pytest.mark.redis
def test_ls_reads_url_and_prefix_from_the_environment(real: Place) -> None:
    seed(real, 2)
    env = {"REDIS_URL": real.url, "REDIS_SESSION_PREFIX": real.prefix}
    result = invoke("ls", "--json", env=env)
    assert [s["key"] for s in json.loads(result.stdout)["sessions"]] == ["s1", "s0"]


# -- show -------------------------------------------------------------------------------------


def test_show_session_human_and_json(place: Place) -> None:
    seed(place, 2, messages=5)
    data = json.loads(invoke("show", "s1", *place.args(), "--json").stdout)
    assert data["key"] == "s1"
    assert data["agent_id"] == "agent"
    assert data["metadata"] == {"lang": "en"}
    assert data["message_count"] == 5
    assert [m["content"] for m in data["history"]] == [f"s1 message {n}" for n in range(5)]
    assert data["history"][1]["tool_calls"][0]["name"] == "lookup"

    last = json.loads(invoke("show", "s1", *place.args(), "--last", "2", "--json").stdout)
    assert last["message_count"] == 5
    assert [m["content"] for m in last["history"]] == ["s1 message 3", "s1 message 4"]

    human = invoke("show", "s1", *place.args(), "--last", "2")
    assert human.exit_code == 0
    out = human.stdout
    assert "s1 message 4" in out and "s1 message 3" in out and "s1 message 2" not in out
    assert "5 (showing the last 2)" in out
    assert "lookup({}) = 42" in out
    assert "metadata lang" in out


def test_show_child_session_and_children_of_a_parent(place: Place) -> None:
    seed(place, 1)
    with place.store() as store:
        child = store.fork_child("s0", "researcher", ChildSessionConfig(inherit_history=1))
        store.append_child_message(child.key, Message(role="assistant", content="found it"))
    data = json.loads(invoke("show", child.key, *place.args(), "--json").stdout)
    assert data["parent_key"] == "s0"
    assert data["agent_name"] == "researcher"
    assert [m["content"] for m in data["history"]] == ["s0 message 2", "found it"]
    assert data["merged_at"] is None

    parent = json.loads(invoke("show", "s0", *place.args(), "--json").stdout)
    assert [c["key"] for c in parent["children"]] == [child.key]
    human = invoke("show", "s0", *place.args()).stdout
    assert "children" in human and "1 (0 merged, 1 open)" in human
    line = next(line for line in human.splitlines() if line.startswith("open child"))
    assert f"{child.key}  (researcher)" in line
    with place.store() as store:
        store.merge_child(child.key, "done")
    merged = invoke("show", child.key, *place.args(), "--json")
    assert json.loads(merged.stdout)["merged_at"] is not None
    assert "1 (1 merged, 0 open)" in invoke("show", "s0", *place.args()).stdout


def test_show_missing_session_is_one_error_line(place: Place) -> None:
    result = invoke("show", "nope", *place.args())
    assert result.exit_code == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: session 'nope' not found")
    assert ("memory:// is a store inside one process" in line) == (place.url.startswith("memory"))


# -- events -----------------------------------------------------------------------------------


def _while_running(args: list[str], produce: Callable[[int], None]) -> Result:
    """Run the CLI in a thread and call ``produce(n)`` until it returns (bounded)."""
    box: dict[str, Result] = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", invoke(*args)))
    thread.start()
    deadline = time.monotonic() + 20
    n = 0
    while thread.is_alive() and time.monotonic() < deadline:
        produce(n)
        n += 1
        time.sleep(0.05)
    thread.join(timeout=30)
    assert not thread.is_alive(), "the events command did not stop"
    return box["result"]


def test_events_prints_lifecycle_events(place: Place) -> None:
    tag = uuid.uuid4().hex[:6]
    with place.store() as store:

        def produce(n: int) -> None:
            store.create(Session(key=f"ev-{tag}-{n}"))

        result = _while_running(
            ["events", *place.args(), "--count", "3", "--timeout", "20", "--json"], produce
        )
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 3
    assert {e["type"] for e in lines} == {"create"}
    assert all(e["key"].startswith(f"ev-{tag}-") for e in lines)
    assert "3 events" in result.stderr


def test_events_human_lines_and_type_filter(place: Place) -> None:
    with place.store() as store:

        def produce(n: int) -> None:
            store.create(Session(key=f"f{n}"))
            store.delete(f"f{n}")

        result = _while_running(
            ["events", *place.args(), "--count", "2", "--timeout", "20", "--type", "delete"],
            produce,
        )
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert all(" delete " in line for line in lines)
    assert "create" not in result.stdout


def test_events_stops_at_the_timeout(place: Place) -> None:
    started = time.monotonic()
    result = invoke("events", *place.args(), "--timeout", "0.3")
    assert result.exit_code == 0
    assert time.monotonic() - started < 5
    assert result.stdout == ""
    assert "0 events" in result.stderr


def test_events_since_replays_the_log_and_prints_where_to_resume(place: Place) -> None:
    tag = uuid.uuid4().hex[:6]
    with place.store() as store:
        for n in range(3):
            store.create(Session(key=f"log-{tag}-{n}"))
        first = invoke("events", *place.args(), "--since", "earliest", "--timeout", "2", "--json")
        ours = [json.loads(line) for line in first.stdout.splitlines()]
        ours = [e for e in ours if e["key"].startswith(f"log-{tag}-")]
        assert [e["key"] for e in ours] == [f"log-{tag}-{n}" for n in range(3)]
        last = json.loads(first.stdout.splitlines()[-1])["cursor"]  # where the command stopped
        assert f"resume with --since {last}" in " ".join(first.stderr.split())
        cursor = ours[-1]["cursor"]
        store.create(Session(key=f"log-{tag}-3"))
    again = invoke("events", *place.args(), "--since", cursor, "--count", "1", "--timeout", "10")
    assert again.exit_code == 0
    (line,) = again.stdout.splitlines()  # exactly the one after the cursor
    assert line.split()[-2:] == ["create", f"log-{tag}-3"]


def test_events_in_a_group_acknowledges_what_it_printed(place: Place) -> None:
    tag = uuid.uuid4().hex[:6]
    group = f"g-{tag}"
    with place.store() as store:
        for n in range(2):
            store.create(Session(key=f"grp-{tag}-{n}"))
        result = invoke(
            "events", *place.args(), "--group", group, "--consumer", "c1", "--since",
            "earliest", "--type", "create", "--count", "2", "--timeout", "10",
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        assert f"as {group}/c1" in result.stderr
        assert store.pending(group) == []  # printed, then acknowledged
    alone = invoke("events", *place.args(), "--consumer", "c1", "--timeout", "0.1")
    assert alone.exit_code == 2 and "--consumer needs --group" in alone.stderr


# -- compact ----------------------------------------------------------------------------------


def test_compact_keeps_the_newest_messages(place: Place) -> None:
    seed(place, 1, messages=12)
    data = json.loads(invoke("compact", "s0", *place.args(), "--keep", "4", "--json").stdout)
    assert data == {"key": "s0", "before": 12, "removed": data["removed"], "after": 5}
    with place.store() as store:
        history = store.get_history("s0")
    assert history[0].role.value == "system"
    assert history[0].content.startswith("[Compacted Summary]\n8 earlier messages")
    assert [m.content for m in history[1:]] == [f"s0 message {n}" for n in range(8, 12)]

    human = invoke("compact", "s0", *place.args(), "--keep", "1", "--summary", "short")
    assert human.exit_code == 0
    assert "s0: compacted messages 0..3 into one summary (5 → 2 messages)" in human.stdout
    with place.store() as store:
        assert store.get_history("s0")[0].content == "[Compacted Summary]\nshort"


def test_compact_with_nothing_to_do(place: Place) -> None:
    seed(place, 1, messages=3)
    result = invoke("compact", "s0", *place.args())
    assert result.exit_code == 0
    assert "s0: nothing to compact (3 messages, keeping 10)" in result.stdout
    with place.store() as store:
        assert len(store.get_history("s0")) == 3


def test_compact_missing_session(place: Place) -> None:
    result = invoke("compact", "nope", *place.args())
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: session 'nope' not found"


# -- branch, rewind ---------------------------------------------------------------------------


def test_branch_and_rewind(place: Place) -> None:
    seed(place, 1, messages=6)
    with place.store() as store:
        ids = [m.id for m in store.get_history("s0")]
    made = json.loads(invoke("branch", "s0", "b", "--at", ids[2], *place.args(), "--json").stdout)
    assert made == {"key": "b", "branch_of": "s0", "branch_at": ids[2], "messages": 3}
    human = invoke("rewind", "s0", "--after", ids[3], "--keep-as", "k", *place.args())
    assert human.exit_code == 0, human.stderr
    assert (
        human.stdout.strip()
        == f"s0: removed 2 messages after {ids[3]}; the whole session is kept as k"
    )
    with place.store() as store:
        assert [m.id for m in store.get_history("s0")] == ids[:4]
        assert [m.id for m in store.get_history("k")] == ids
        assert [m.id for m in store.get_history("b")] == ids[:3]
    gone = invoke("rewind", "s0", "--after", "nope", *place.args())
    assert gone.exit_code == 1
    assert gone.stderr.strip() == "Error: session 's0' holds no message 'nope'"
    taken = invoke("branch", "s0", "b", *place.args())
    assert taken.exit_code == 1 and "'b'" in taken.stderr


def test_show_marks_a_tool_call_without_an_answer(place: Place) -> None:
    seed(place, 1, messages=1)
    calls = [
        ToolCall(id="open", name="look", input="{}"),
        ToolCall(id="done", name="look", input="{}", output="ok"),
    ]
    with place.store() as store:
        store.append_message("s0", Message(role="assistant", tool_calls=calls))
    data = json.loads(invoke("show", "s0", *place.args(), "--json").stdout)
    assert data["open_tool_calls"] == ["open"]
    human = invoke("show", "s0", *place.args()).stdout
    assert human.count("[no answer]") == 1
    with place.store() as store:
        assert store.cleanup_failed_turn("s0") == 1
    assert json.loads(invoke("show", "s0", *place.args(), "--json").stdout)["open_tool_calls"] == []


# -- delete -----------------------------------------------------------------------------------


def test_delete_sessions(place: Place) -> None:
    seed(place, 3)
    result = invoke("delete", "s0", "s1", *place.args())
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["deleted s0", "deleted s1"]
    with place.store() as store:
        for key in ("s0", "s1"):
            with pytest.raises(SessionNotFound):
                store.get(key)
        assert [s.key for s in store.list_sessions()] == ["s2"]


def test_delete_missing_session(place: Place) -> None:
    seed(place, 1)
    result = invoke("delete", "s0", "nope", *place.args())
    assert result.exit_code == 1
    assert result.stdout.splitlines() == ["deleted s0"]
    assert result.stderr.strip() == f"Error: no session 'nope' under prefix {place.prefix!r}"
    ok = invoke("delete", "nope", *place.args(), "--missing-ok", "--json")
    assert ok.exit_code == 0
    assert json.loads(ok.stdout) == {"deleted": [], "missing": ["nope"], "skipped": []}


# -- stats ------------------------------------------------------------------------------------


def _stats_sessions(place: Place) -> None:
    with place.store() as store:
        for key, n in (("small", 1), ("big", 40), ("mid", 10)):
            store.create(Session(key=key))
            store.append_messages(
                key, [Message(role="user", content=f"{key} {i} " + "x" * 200) for i in range(n)]
            )


@pytest.mark.redis
def test_stats_measures_memory_per_session(real: Place) -> None:
    _stats_sessions(real)
    data = json.loads(invoke("stats", *real.args(), "--json").stdout)
    assert data["sessions"] == 3
    assert data["messages"] == 51
    assert data["messages_per_session_max"] == 40
    assert data["memory_bytes"] > 51 * 200
    assert data["memory_per_session_max"] > data["memory_per_session_median"] > 0
    assert data["memory_per_message"] == pytest.approx(data["memory_bytes"] / 51)
    assert [row["key"] for row in data["largest"]] == ["big", "mid", "small"]
    assert data["largest"][0]["memory_bytes"] == data["memory_per_session_max"]

    human = invoke("stats", *real.args(), "--top", "1")
    assert human.exit_code == 0
    out = human.stdout
    assert "memory per session (mean)" in out and "KiB" in out
    assert "big" in out and "small" not in out


def test_stats_on_memory_has_no_memory_usage(memory: Place) -> None:
    _stats_sessions(memory)
    data = json.loads(invoke("stats", *memory.args(), "--json").stdout)
    assert (data["sessions"], data["messages"]) == (3, 51)
    assert data["memory_bytes"] is None
    assert data["largest"][0]["key"] == "big"
    human = invoke("stats", *memory.args()).stdout
    assert "n/a" in human
    recent = json.loads(invoke("stats", *memory.args(), "--limit", "1", "--json").stdout)
    assert (recent["sessions"], recent["messages"]) == (1, 10)  # "mid" was written last


def test_stats_of_an_empty_prefix(place: Place) -> None:
    data = json.loads(invoke("stats", *place.args(), "--json").stdout)
    assert (data["sessions"], data["messages"], data["largest"]) == (0, 0, [])


# -- bench ------------------------------------------------------------------------------------


def assert_cleaned_up(result: Result, url: str) -> None:
    """Nothing is left under the bench run's prefix (which its stderr names)."""
    prefix = next(w for w in result.stderr.split() if w.startswith("bench:"))
    assert keys_under(url, prefix) == []


@pytest.mark.redis
def test_bench_measures_against_the_floors(real: Place) -> None:
    result = invoke("bench", "--url", real.url, "--rounds", "5", "--get-rounds", "5", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    cases = [row["case"] for row in data["rows"]]
    assert "append_message sync @10,000" in cases and "get_history(last=20) @1,000" in cases
    assert all(row["store_median"] > 0 and row["floor_median"] > 0 for row in data["rows"])
    assert data["round_trips"]["sync_client_writes_per_append"] == 1
    assert data["rounds"] == 5
    assert_cleaned_up(result, real.url)


@pytest.mark.redis
def test_bench_fleet_takes_its_sizes_and_the_read_cache_bound(real: Place) -> None:
    args = ("--fleet-size", "2x4x6", "--turns", "12", "--fleet-warmup", "4")
    result = invoke(
        "bench", "--url", real.url, "--fleet", *args, "--read-cache-bytes", "0",
        "--rounds", "3", "--get-rounds", "2", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert "fleet loop: 2 workers x 4 sessions of 6, random" in [r["case"] for r in data["rows"]]
    size = data["fleet"]["size"]
    assert (size["turns"], size["warmup"], size["read_cache_bytes"]) == (12, 4, 0)
    # no read cache: every timed turn's read is a miss
    assert (data["fleet"]["read_cache_hits"], data["fleet"]["read_cache_misses"]) == (0, 12)
    assert_cleaned_up(result, real.url)


def test_bench_fleet_help_names_the_harness_defaults() -> None:
    from bench.harness.fleet import FleetSize

    page = " ".join(invoke("bench", "--help").stdout.split())
    assert f"timed turns of the fleet loop [default: {FleetSize.turns:,}]" in page
    assert f"fill the read caches [default: {FleetSize.warmup:,}]" in page


def test_bench_refuses_memory() -> None:
    result = invoke("bench", "--url", "memory://")
    assert result.exit_code == 2
    assert "bench needs a real Redis server" in result.stderr


# -- errors and shared options ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ls", "--url", "redis://127.0.0.1:1/0"], "Error: ConnectionError: "),
        (["ls", "--url", "memory://x", "--prefix", "a{b"], "Error: prefix: must not contain"),
        (["show", "", "--url", "memory://x"], "Error: key: must not be empty"),
    ],
)
def test_errors_are_one_line_and_status_1(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


def test_usage_errors_are_status_2() -> None:
    assert invoke("ls", "--bogus").exit_code == 2
    bad_url = invoke("ls", "--url", "127.0.0.1:6611")  # no scheme: a bad command line
    assert bad_url.exit_code == 2 and "Invalid value for '--url': must be a URL" in bad_url.stderr
    assert invoke("nope").exit_code == 2
    assert invoke("ls", "--limit", "0").exit_code == 2


def test_passphrase_option_reads_the_environment_and_never_prompts() -> None:
    seen: dict[str, Any] = {}

    @click.command()
    @passphrase_option
    def probe(passphrase: str | None) -> None:
        seen["passphrase"] = passphrase

    from click.testing import CliRunner

    result = CliRunner().invoke(probe, [], env={"REDIS_SESSION_PASSPHRASE": "s3cret"})
    assert result.exit_code == 0
    assert seen == {"passphrase": "s3cret"}
    result = CliRunner().invoke(probe, [], input="typed\n")
    assert result.exit_code == 0
    assert seen == {"passphrase": None}  # resolved later, only when content needs it
    assert result.output == ""


# -- usage ------------------------------------------------------------------------------------


def test_ls_show_and_stats_print_usage_and_tokens(place: Place) -> None:
    store = place.store()
    try:
        store.create(Session(key="u", max_usage_tokens=5_000))
        store.append_message("u", Message(role="user", content="q", tokens=3))
        spent = Usage(input_tokens=1_200, output_tokens=345, requests=1)
        store.append_message("u", Message(role="assistant", content="a", tokens=7, usage=spent))
        store.create(Session(key="idle"))
    finally:
        store.close()
    rows = json.loads(invoke("ls", *place.args(), "--json").stdout)["sessions"]
    by_key = {row["key"]: row["usage"] for row in rows}
    assert by_key["u"] == spent.model_dump() and by_key["idle"] == Usage().model_dump()
    assert "1,200 / 345" in invoke("ls", *place.args()).stdout

    data = json.loads(invoke("show", "u", *place.args(), "--json").stdout)
    assert data["usage"] == spent.model_dump() and data["max_usage_tokens"] == 5_000
    assert [m["tokens"] for m in data["history"]] == [3, 7]
    human = invoke("show", "u", *place.args()).stdout
    assert "1,200 in, 345 out, 1 requests" in human and "5,000 tokens" in human
    assert "[usage 1,200 / 345 tokens, 1 requests]" in human

    stats = json.loads(invoke("stats", *place.args(), "--json").stdout)
    assert stats["usage"] == spent.model_dump()
    assert "usage: input tokens" in invoke("stats", *place.args()).stdout
