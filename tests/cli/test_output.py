"""What the command line prints, as a user meets it: hints that run as pasted, user data printed
literally, validated event types, errors as JSON under ``--json``, and the exit statuses.
"""

from __future__ import annotations

import json
import shlex
import sys
import uuid

import pytest

from redis_session import Message, Session

from .conftest import ENTRY_POINT, Place, invoke, run, seed

# -- hints ------------------------------------------------------------------------------------


def _hint(stdout: str) -> list[str]:
    (line,) = [line for line in stdout.splitlines() if line.startswith("more: ")]
    words = shlex.split(line.removeprefix("more: "))
    assert words[0] == "redis-session"
    return words[1:]


def test_the_next_page_hint_runs_as_pasted_on_the_same_store(place: Place) -> None:
    seed(place, 5)
    first = invoke("ls", *place.args(), "--limit", "2")
    args = _hint(first.stdout)
    assert args == ["ls", *place.args(), "--limit", "2", "--page", "2"]
    second = invoke(*args, "--json")
    assert [s["key"] for s in json.loads(second.stdout)["sessions"]] == ["s2", "s1"]
    third = invoke(*_hint(invoke(*args).stdout))
    assert "s0" in third.stdout and "more:" not in third.stdout


@pytest.mark.redis
def test_the_hint_repeats_options_given_through_the_environment(real: Place) -> None:
    seed(real, 3)
    env = {"REDIS_URL": real.url, "REDIS_SESSION_PREFIX": real.prefix}
    args = _hint(invoke("ls", "--limit", "1", env=env).stdout)
    assert args == ["ls", *real.args(), "--limit", "1", "--page", "2"]  # pasted elsewhere too
    assert [s["key"] for s in json.loads(invoke(*args, "--json").stdout)["sessions"]] == ["s1"]


def test_the_hint_quotes_what_the_shell_would_split(memory: Place) -> None:
    odd = Place(memory.url, "it's a [b] $HOME *:")
    seed(odd, 2)
    out = invoke("ls", *odd.args(), "--limit", "1").stdout
    assert f"--prefix {shlex.quote(odd.prefix)} --limit 1 --page 2" in out
    assert _hint(out) == ["ls", *odd.args(), "--limit", "1", "--page", "2"]


def test_the_hint_leaves_out_what_the_user_did_not_give(memory: Place) -> None:
    seed(Place(memory.url, "rs:"), 2)
    args = _hint(invoke("ls", "--url", memory.url, "--limit", "1").stdout)
    assert args == ["ls", "--url", memory.url, "--limit", "1", "--page", "2"]


def test_memory_store_without_sessions_says_why() -> None:
    result = invoke("ls", "--url", "memory://")
    assert result.exit_code == 0
    out = " ".join(result.stdout.split())
    assert "no sessions under prefix 'rs:' (page 1)" in out
    assert "memory:// is a store inside one process" in out
    assert "give --url of a Redis server" in out


@pytest.mark.redis
def test_a_redis_store_without_sessions_has_no_memory_note(real: Place) -> None:
    result = invoke("ls", *real.args())
    assert result.exit_code == 0
    assert "memory://" not in result.stdout


def test_demo_keep_on_memory_says_the_sessions_go_with_the_process() -> None:
    result = invoke("demo", "--workers", "1", "--sessions", "1", "--turns", "2", "--keep")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "kept: redis-session" not in out
    assert "not kept: a memory:// store lives inside this process and is gone with it" in out


# -- user data printed literally ---------------------------------------------------------------

MARKUP_PREFIX = "newbie:x:[bold]b[/bold]:"
"""An emoji code (``:x:``) and rich markup: printed as typed, never as ❌ or bold."""


def _literal_place(memory: Place) -> Place:
    place = Place(memory.url, MARKUP_PREFIX)
    with place.store() as store:
        store.create(
            Session(key="k:smile:[red]r[/red]", agent_id=":rocket:", metadata={"m": "[i]v[/i]"})
        )
        store.append_message(
            "k:smile:[red]r[/red]",
            Message(role="user", content="[link=x]click[/link] :thumbs_up: \x1b[31mred\x1b[0m"),
        )
    return place


def test_ls_and_stats_print_prefixes_and_keys_as_they_are(memory: Place) -> None:
    place = _literal_place(memory)
    for args in (["ls"], ["stats"]):
        result = invoke(*args, *place.args())
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert MARKUP_PREFIX in out, out
        assert "k:smile:[red]r[/red]" in out
        assert "❌" not in out and "😄" not in out


def test_show_prints_content_as_it_is_and_escapes_control_characters(memory: Place) -> None:
    place = _literal_place(memory)
    out = invoke("show", "k:smile:[red]r[/red]", *place.args()).stdout
    assert "k:smile:[red]r[/red]" in out and ":rocket:" in out and "[i]v[/i]" in out
    assert "[link=x]click[/link] :thumbs_up:" in out
    assert "\x1b" not in out  # the terminal is not recoloured by a message
    assert "\\x1b[31mred\\x1b[0m" in out
    data = json.loads(invoke("show", "k:smile:[red]r[/red]", *place.args(), "--json").stdout)
    assert data["history"][0]["content"].endswith("\x1b[31mred\x1b[0m")  # JSON keeps it exact


def test_events_print_the_channel_and_keys_as_they_are(memory: Place) -> None:
    place = _literal_place(memory)
    from .test_commands import _while_running

    with place.store() as store:

        def produce(n: int) -> None:
            store.create(Session(key=f":x:[b]{n}"))

        result = _while_running(
            ["events", *place.args(), "--count", "1", "--timeout", "20"], produce
        )
    assert result.exit_code == 0, result.output
    assert f"listening on {MARKUP_PREFIX}events" in result.stderr
    assert ":x:[b]" in result.stdout and "❌" not in result.stdout + result.stderr


def test_delete_and_compact_lines_escape_control_characters(memory: Place) -> None:
    with memory.store() as store:
        store.create(Session(key="bell\x07"))
    result = invoke("delete", "bell\x07", *memory.args())
    assert result.stdout == "deleted bell\\x07\n"


# -- events: types and the timeout status --------------------------------------------------------


def test_an_unknown_event_type_is_a_usage_error() -> None:
    result = invoke("events", "--url", "memory://", "--type", "bogus", "--timeout", "0.1")
    assert result.exit_code == 2
    assert "Invalid value for '--type': 'bogus' is not one of" in result.stderr
    assert "'merge'" in result.stderr


def test_event_types_are_case_insensitive(place: Place) -> None:
    from .test_commands import _while_running

    with place.store() as store:

        def produce(n: int) -> None:
            store.create(Session(key=f"c{n}"))
            store.delete(f"c{n}")

        args = ["events", *place.args(), "--count", "1", "--timeout", "20", "--type", "DELETE"]
        result = _while_running([*args, "--json"], produce)
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["type"] for line in result.stdout.splitlines()] == ["delete"]


def test_events_that_time_out_before_count_exit_3(place: Place) -> None:
    result = invoke("events", *place.args(), "--count", "2", "--timeout", "0.3")
    assert result.exit_code == 3
    assert result.stderr.strip().splitlines()[-2:] == [
        "0 events",
        "Error: timed out after 0.3 s with 0 of 2 events",
    ]
    as_json = invoke("events", *place.args(), "--count", "2", "--timeout", "0.3", "--json")
    assert as_json.exit_code == 3
    last = json.loads(as_json.stderr.strip().splitlines()[-1])
    assert last == {
        "error": "timed out after 0.3 s with 0 of 2 events",
        "type": "TimedOut",
        "exit_code": 3,
    }


# -- errors under --json ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "kind", "message"),
    [
        (["show", "nope", "--url", "memory://"], 1, "SessionNotFound", "session 'nope' not found"),
        (["ls", "--url", "redis://127.0.0.1:1/0"], 1, "ConnectionError", "ConnectionError: "),
        (["ls", "--url", "nonsense"], 2, "UsageError", "Invalid value for '--url'"),
        (["ls", "--url", "memory://", "--limit", "0"], 2, "UsageError", "Invalid value"),
        (["ls", "--bogus"], 2, "UsageError", "No such option"),
        (["bench", "--url", "memory://"], 2, "UsageError", "bench needs a real Redis server"),
    ],
)
def test_errors_under_json_are_one_json_object_on_stderr(
    args: list[str], code: int, kind: str, message: str
) -> None:
    plain = invoke(*args)
    result = invoke(*args, "--json")
    assert result.exit_code == plain.exit_code == code
    assert result.stdout == ""
    error = json.loads(result.stderr)
    assert error["type"] == kind
    assert error["exit_code"] == code
    assert message in error["error"], error


def test_delete_of_a_missing_key_prints_its_result_then_the_error(memory: Place) -> None:
    seed(memory, 1)
    result = invoke("delete", "s0", "nope", *memory.args(), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"deleted": ["s0"], "missing": ["nope"], "skipped": []}
    assert json.loads(result.stderr) == {
        "error": "no session 'nope' under prefix 'rs:'",
        "type": "SessionNotFound",
        "exit_code": 1,
    }


def test_a_demo_that_fails_its_check_reports_it_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from redis_session import RedisStore

    original = RedisStore.append_messages
    calls = {"n": 0}

    def lossy(self: RedisStore, key: str, messages: list[Message]) -> int:
        calls["n"] += 1
        return len(messages) if calls["n"] == 3 else original(self, key, messages)

    monkeypatch.setattr(RedisStore, "append_messages", lossy)
    result = invoke("demo", "--workers", "1", "--sessions", "1", "--turns", "6", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["consistent"] is False
    error = json.loads(result.stderr.strip().splitlines()[-1])
    assert error["type"] == "ConsistencyFailed"
    assert error["error"].startswith("consistency check failed: 3 lost")


def test_errors_as_json_from_the_entry_point() -> None:
    result = run(
        [str(ENTRY_POINT)], "show", "nope", "--url", f"memory://{uuid.uuid4().hex}", "--json"
    )
    assert result.returncode == 1
    error = json.loads(result.stderr)
    assert error["type"] == "SessionNotFound" and error["exit_code"] == 1
    assert error["error"].startswith("session 'nope' not found (memory:// is a store inside")


# -- the exit statuses, documented ---------------------------------------------------------------


def test_help_and_docstring_list_the_exit_statuses() -> None:
    import redis_session.cli

    helped = run([sys.executable, "-m", "redis_session"], "--help")
    assert helped.returncode == 0
    lines = [" ".join(line.split()) for line in helped.stdout.splitlines()]
    for expected in ("0 success", "1 error:", "2 bad command line", "3 events: --timeout"):
        assert any(line.startswith(expected) for line in lines), (expected, helped.stdout)
    doc = redis_session.cli.__doc__ or ""
    for expected in ("- 0: success", "- 1: an error", "- 2: a bad command line", "- 3: ``events``"):
        assert expected in doc
