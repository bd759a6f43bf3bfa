"""``redis-session rekey``: rotating the passphrase of an encrypted store, on a real Redis
(memory:// is per process, and the subprocess run needs the same server).
"""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from redis_session import Message, RedisStore, RekeyProgress, Session, WrongPassphrase
from redis_session.cli import _common, cli

from .conftest import Place, invoke, run

pytestmark = pytest.mark.redis

OLD = "old passphrase"
NEW = "new passphrase"
FAST_KDF = 10
"""scrypt work of the seeded keyring; recorded in it, so the command's stores reuse it."""


def _store(place: Place, passphrase: str) -> RedisStore:
    return RedisStore.from_url(
        place.url, prefix=place.prefix, passphrase=passphrase, kdf_work=FAST_KDF
    )


def seed_encrypted(place: Place, count: int, messages: int = 3) -> list[str]:
    """Sessions ``e0..`` sealed under ``OLD``, with ``messages`` messages and one metadata value."""
    keys = [f"e{i}" for i in range(count)]
    with _store(place, OLD) as store:
        for key in keys:
            store.create(Session(key=key, agent_id="agent", metadata={"secret": f"{key} meta"}))
            store.append_messages(
                key, [Message(role="user", content=f"{key} message {n}") for n in range(messages)]
            )
    return keys


def assert_rotated(place: Place, keys: list[str], messages: int = 3) -> None:
    with _store(place, NEW) as store:
        for key in keys:
            session = store.get(key)
            assert session.metadata == {"secret": f"{key} meta"}
            assert [m.content for m in session.history] == [
                f"{key} message {n}" for n in range(messages)
            ]
    with _store(place, OLD) as store, pytest.raises(WrongPassphrase):
        store.get(keys[0])


def test_rekey_rotates_and_reports(real: Place) -> None:
    keys = seed_encrypted(real, 5)
    result = invoke(
        "rekey", *real.args(), "--passphrase", OLD, "--new-passphrase", NEW, "--batch-size", "2"
    )
    assert result.exit_code == 0, result.output
    assert "rekeyed: 5 sessions and 0 values re-sealed in 2 passes" in result.stdout
    assert "rekey pass 2" in result.stdout  # the bar, reset for the pass that found nothing
    assert "5/5 sessions, 0 values re-sealed" in result.stdout
    assert_rotated(real, keys)


def test_rekey_json(real: Place) -> None:
    keys = seed_encrypted(real, 3, messages=2)
    result = invoke("rekey", *real.args(), "--passphrase", OLD, "--new-passphrase", NEW, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "prefix": real.prefix,
        "sessions_resealed": 3,
        "values_resealed": 0,  # each keeps its data key: only its wrap changes
        "passes": 2,
        "resumed": False,
    }
    assert "3/3 sessions, 0 values re-sealed" in result.stderr  # the bar stays off stdout
    assert_rotated(real, keys, messages=2)


def test_rekey_takes_passphrases_from_environment_and_prompt(
    real: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = seed_encrypted(real, 2)
    env = {"REDIS_SESSION_PASSPHRASE": OLD, "REDIS_SESSION_NEW_PASSPHRASE": NEW}
    result = invoke("rekey", *real.args(), "--json", env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sessions_resealed"] == 2
    assert_rotated(real, keys)

    typed = f"{OLD} typed"
    monkeypatch.setattr(_common, "stdin_is_tty", lambda: True)  # CliRunner's stdin is a pipe
    prompted = CliRunner().invoke(
        cli,
        ["rekey", *real.args(), "--passphrase", NEW, "--json"],
        input=f"{typed}\n{typed}\n",
        catch_exceptions=False,
    )
    assert prompted.exit_code == 0, prompted.output
    with _store(real, typed) as store:
        assert store.get(keys[0]).metadata == {"secret": "e0 meta"}


class _Crash(Exception):
    pass


def test_rekey_resumes_an_interrupted_rotation(real: Place) -> None:
    keys = seed_encrypted(real, 4)

    def crash(progress: RekeyProgress) -> None:
        raise _Crash

    with _store(real, OLD) as store, pytest.raises(_Crash):
        store.rekey(NEW, batch_size=2, progress=crash)
    other = invoke("rekey", *real.args(), "--passphrase", OLD, "--new-passphrase", "other")
    assert other.exit_code == 1
    assert "a rotation to another passphrase is under way" in other.stderr
    result = invoke("rekey", *real.args(), "--passphrase", OLD, "--new-passphrase", NEW)
    assert result.exit_code == 0, result.output
    assert "(resumed an interrupted rotation)" in result.stdout
    assert_rotated(real, keys)


def test_wrong_old_passphrase_is_one_line_and_status_1(real: Place) -> None:
    keys = seed_encrypted(real, 2)
    result = invoke("rekey", *real.args(), "--passphrase", "nope", "--new-passphrase", NEW)
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: wrong passphrase"), lines
    with _store(real, OLD) as store:  # nothing changed
        assert store.get(keys[1]).history[0].content == "e1 message 0"


def test_new_passphrase_must_differ(real: Place) -> None:
    result = invoke("rekey", *real.args(), "--passphrase", OLD, "--new-passphrase", OLD)
    assert result.exit_code == 2
    assert "the new passphrase is the old one" in result.stderr


def test_rekey_in_a_subprocess(real: Place) -> None:
    keys = seed_encrypted(real, 3)
    result = run(
        [sys.executable, "-m", "redis_session"],
        "rekey",
        *real.args(),
        "--json",
        env={"REDIS_SESSION_PASSPHRASE": OLD, "REDIS_SESSION_NEW_PASSPHRASE": NEW},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sessions_resealed"] == 3
    assert_rotated(real, keys)
