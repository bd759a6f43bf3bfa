"""The command line on an encrypted store, as an operator meets it: ``show`` and ``compact``
open sealed sessions with ``--passphrase`` or ``REDIS_SESSION_PASSPHRASE``, ask for it on a
terminal, and say what to do (exit 1, one line) when stdin is no terminal; the commands that
open no content work without it; ``rekey`` never prints ``GetPassWarning`` / ``Aborted!``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis

from redis_session import Message, RedisStore, Session
from redis_session.cli import _common

from .conftest import ENTRY_POINT, SUBPROCESS_TIMEOUT, Place, invoke, run, run_in_terminal

PASS = "correct horse"
FAST_KDF = 10
"""scrypt work of the seeded keyring; recorded in it, so the command's stores reuse it."""
NEEDED = (
    "Error: session 's0' is encrypted; open the store with its passphrase: passphrase needed: "
    "give --passphrase or set REDIS_SESSION_PASSPHRASE (stdin is not a terminal to ask on)"
)


def seed_sealed(place: Place, messages: int = 12) -> None:
    """Session ``s0`` sealed under ``PASS``, with ``messages`` messages and one metadata value."""
    with RedisStore.from_url(
        place.url, prefix=place.prefix, passphrase=PASS, kdf_work=FAST_KDF
    ) as store:
        store.create(Session(key="s0", agent_id="agent", metadata={"secret": "meta value"}))
        store.append_messages(
            "s0", [Message(role="user", content=f"sealed {n}") for n in range(messages)]
        )


def sealed_history(place: Place) -> list[str]:
    with RedisStore.from_url(place.url, prefix=place.prefix, passphrase=PASS) as store:
        return [m.content for m in store.get_history("s0")]


def test_show_opens_a_sealed_session_with_the_option_or_the_environment(place: Place) -> None:
    seed_sealed(place, messages=3)
    by_option = invoke("show", "s0", *place.args(), "--passphrase", PASS, "--json")
    assert by_option.exit_code == 0, by_option.stderr
    data = json.loads(by_option.stdout)
    assert [m["content"] for m in data["history"]] == ["sealed 0", "sealed 1", "sealed 2"]
    assert data["metadata"] == {"secret": "meta value"}

    by_env = invoke("show", "s0", *place.args(), env={"REDIS_SESSION_PASSPHRASE": PASS})
    assert by_env.exit_code == 0, by_env.stderr
    assert "sealed 2" in by_env.stdout and "meta value" in by_env.stdout


def test_compact_opens_and_seals_with_the_passphrase(place: Place) -> None:
    seed_sealed(place)
    result = invoke(
        "compact", "s0", *place.args(), "--keep", "2", env={"REDIS_SESSION_PASSPHRASE": PASS}
    )
    assert result.exit_code == 0, result.stderr
    assert "s0: compacted messages 0..9 into one summary (12 → 3 messages)" in result.stdout
    history = sealed_history(place)
    assert history[0].startswith("[Compacted Summary]\n10 earlier messages")
    assert history[1:] == ["sealed 10", "sealed 11"]
    with place.store() as plain, pytest.raises(Exception, match="encrypted"):
        plain.get_history("s0")  # the summary was sealed too: no cleartext was written


@pytest.mark.parametrize("command", ["show", "compact"])
def test_without_a_terminal_a_missing_passphrase_is_one_line_and_status_1(
    place: Place, command: str
) -> None:
    seed_sealed(place)
    result = invoke(command, "s0", *place.args())  # CliRunner's stdin is not a terminal
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [NEEDED]
    assert len(sealed_history(place)) == 12  # compact wrote nothing

    as_json = invoke(command, "s0", *place.args(), "--json")
    assert as_json.exit_code == 1
    error = json.loads(as_json.stderr)
    assert error["type"] == "PassphraseRequired" and error["exit_code"] == 1
    assert "give --passphrase or set REDIS_SESSION_PASSPHRASE" in error["error"]


def test_a_wrong_passphrase_is_one_line_and_status_1(place: Place) -> None:
    seed_sealed(place)
    result = invoke("show", "s0", *place.args(), "--passphrase", "nope")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: wrong passphrase"), lines


def test_a_terminal_user_is_asked_when_the_passphrase_is_missing(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_sealed(place, messages=3)
    monkeypatch.setattr(_common, "stdin_is_tty", lambda: True)
    from click.testing import CliRunner

    from redis_session.cli import cli

    result = CliRunner().invoke(cli, ["show", "s0", *place.args()], input=f"{PASS}\n")
    assert result.exit_code == 0, result.output
    assert "Passphrase:" in result.stderr and "sealed 2" in result.stdout


def test_a_passphrase_given_for_a_cleartext_store_writes_no_keyring(real: Place) -> None:
    with real.store() as store:
        store.create(Session(key="plain", history=[Message(role="user", content="hello")]))
    result = invoke("show", "plain", *real.args(), "--passphrase", PASS, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["history"][0]["content"] == "hello"
    client = redis.Redis.from_url(real.url)
    try:
        names = {k.decode() for k in client.scan_iter(match=f"{real.prefix}*")}
    finally:
        client.close()
    assert not any("keyring" in n or "salts" in n for n in names), names


def test_commands_that_open_no_content_need_no_passphrase(place: Place) -> None:
    seed_sealed(place)
    listed = invoke("ls", *place.args(), "--json")
    assert [s["key"] for s in json.loads(listed.stdout)["sessions"]] == ["s0"]
    stats = invoke("stats", *place.args(), "--json")
    assert json.loads(stats.stdout)["messages"] == 12
    events = invoke("events", *place.args(), "--timeout", "0.2")
    assert events.exit_code == 0
    deleted = invoke("delete", "s0", *place.args())
    assert deleted.exit_code == 0 and deleted.stdout == "deleted s0\n"


# -- as a user starts it: a real terminal, a pipe, /dev/null ------------------------------------


@pytest.mark.redis
def test_show_asks_for_the_passphrase_in_a_real_terminal(real: Place) -> None:
    seed_sealed(real, messages=3)
    shown = run_in_terminal(
        [str(ENTRY_POINT)], "show", "s0", *real.args(), answers=[("Passphrase: ", PASS)]
    )
    assert shown.returncode == 0, shown.screen
    assert "sealed 2" in shown.screen
    assert PASS not in shown.screen  # not echoed


@pytest.mark.redis
def test_rekey_asks_for_both_passphrases_in_a_real_terminal(real: Place) -> None:
    seed_sealed(real, messages=2)
    new = "battery staple"
    done = run_in_terminal(
        [sys.executable, "-m", "redis_session"],
        "rekey",
        *real.args(),
        answers=[
            ("Passphrase: ", PASS),
            ("New passphrase: ", new),
            ("Repeat for confirmation: ", new),
        ],
    )
    assert done.returncode == 0, done.screen
    assert "rekeyed: 1 session and 0 values re-sealed" in done.screen
    with RedisStore.from_url(real.url, prefix=real.prefix, passphrase=new) as store:
        assert store.get("s0").metadata == {"secret": "meta value"}


@pytest.mark.redis
@pytest.mark.parametrize("stdin", ["devnull", "pipe"])
def test_rekey_without_a_terminal_says_what_to_do(real: Place, stdin: str) -> None:
    seed_sealed(real, messages=2)
    result = subprocess.run(
        [str(ENTRY_POINT), "rekey", *real.args()],
        stdin=subprocess.DEVNULL if stdin == "devnull" else None,
        input=f"{PASS}\n" if stdin == "pipe" else None,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert "GetPassWarning" not in result.stderr and "Aborted" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "Error: passphrase needed: give --passphrase or set REDIS_SESSION_PASSPHRASE "
        "(stdin is not a terminal to ask on)"
    ]
    assert sealed_history(real) == ["sealed 0", "sealed 1"]  # nothing changed

    new_missing = run(
        [str(ENTRY_POINT)], "rekey", *real.args(), env={"REDIS_SESSION_PASSPHRASE": PASS}
    )
    assert new_missing.returncode == 1
    assert "Error: new passphrase needed: give --new-passphrase or set " in new_missing.stderr
    assert "REDIS_SESSION_NEW_PASSPHRASE" in new_missing.stderr


@pytest.mark.redis
def test_show_in_a_pipeline_reads_the_passphrase_from_the_environment(real: Place) -> None:
    seed_sealed(real, messages=3)
    result = run(
        [str(ENTRY_POINT)],
        "show",
        "s0",
        "--json",
        *real.args(),
        env={"REDIS_SESSION_PASSPHRASE": PASS},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["message_count"] == 3
    missing = run([str(ENTRY_POINT)], "show", "s0", *real.args())
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [NEEDED]
