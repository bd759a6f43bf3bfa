"""Every command keeps the command line's promise: an error is one line on stderr
(``Error: …``), or with ``--json`` one JSON object ``{"error", "type", "exit_code"}``, never a
traceback. For each command of the group: a missing extra (``memory://`` in a subprocess where
the ``memory`` extra is absent, as for a user who installed only ``[cli]``), a refused
connection (reported at once, naming the URL), a bad command line and a bug (whose traceback
``REDIS_SESSION_TRACEBACK=1`` shows).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from redis_session.cli import cli
from redis_session.cli._common import TRACEBACK_ENV, CliGroup, json_option
from tests.support.extras import hiding

from .conftest import ENTRY_POINT, invoke, run

ARGS: dict[str, list[str]] = {  # what each command needs besides --url to reach its store
    "demo": ["--workers", "1", "--sessions", "1", "--turns", "2"],
    "ls": [],
    "show": ["chat"],
    "events": ["--timeout", "0.5"],
    "compact": ["chat"],
    "branch": ["chat", "chat-2"],
    "rewind": ["chat", "--after", ""],
    "delete": ["chat"],
    "stats": [],
    "rekey": [],
    "acl": [],
    "doctor": [],
    "bench": ["--rounds", "1"],
}
NO_URL = {"acl"}  # prints a recipe: no store, no server
PASSPHRASES = {"REDIS_SESSION_PASSPHRASE": "old one", "REDIS_SESSION_NEW_PASSPHRASE": "new one"}
MEMORY_HINT = "pip install 'redis-agent-sessions[memory]'"

WITHOUT_MEMORY: dict[str, tuple[int, str | None]] = {  # status and error type on memory://
    **{name: (1, "ImportError") for name in ARGS},
    "doctor": (1, "usage"),  # nothing to check in-process: said before a store is made
    "bench": (2, "UsageError"),  # needs a real server: said before a store is made
    "acl": (0, None),  # needs no store
}
MODES = [pytest.param(False, id="text"), pytest.param(True, id="json")]


def test_every_command_of_the_group_is_covered() -> None:
    assert set(ARGS) == set(cli.commands)


def one_error(stderr: str, as_json: bool, kind: str, status: int) -> str:
    """The message of the one error ``stderr`` holds (one line, or one JSON object)."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    if as_json:
        error = json.loads(lines[0])
        assert error == {"error": error["error"], "type": kind, "exit_code": status}
        return str(error["error"])
    assert lines[0].startswith("Error: "), lines
    return lines[0].removeprefix("Error: ")


def argv(name: str, url: str | None, as_json: bool) -> list[str]:
    return [
        name,
        *ARGS[name],
        *(["--url", url] if url is not None and name not in NO_URL else []),
        *(["--json"] if as_json else []),
    ]


@pytest.fixture(scope="module")
def refused_url() -> Iterator[str]:
    """A loopback port bound by nobody listening: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"redis://user:secret@127.0.0.1:{sock.getsockname()[1]}/0"


@pytest.mark.slow
@pytest.mark.parametrize("as_json", MODES)
@pytest.mark.parametrize("name", sorted(ARGS))
def test_a_missing_extra_is_one_line_saying_what_to_install(name: str, as_json: bool) -> None:
    status, kind = WITHOUT_MEMORY[name]
    done = subprocess.run(
        [str(ENTRY_POINT), *argv(name, "memory://", as_json)],
        env=hiding(["redis-agent-sessions[cli]"], {**PASSPHRASES, **_env()}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == status, done.stderr
    if kind is None:
        assert done.stderr == "" and done.stdout
        return
    assert done.stdout == ""
    message = one_error(done.stderr, as_json, kind, status)
    if kind == "ImportError":
        assert MEMORY_HINT in message


@pytest.mark.slow
@pytest.mark.parametrize("as_json", MODES)
@pytest.mark.parametrize("name", sorted(set(ARGS) - NO_URL))
def test_a_refused_connection_is_one_line_naming_the_url(
    name: str, as_json: bool, refused_url: str
) -> None:
    done = run([str(ENTRY_POINT)], *argv(name, refused_url, as_json), env=PASSPHRASES)
    assert done.returncode == 1
    assert done.stdout == ""
    message = one_error(done.stderr, as_json, "ConnectionError", 1)
    assert refused_url.replace("user:secret@", "") in message and "secret" not in message
    assert "Connection refused" in message


@pytest.mark.parametrize("name", sorted(set(ARGS) - NO_URL))
def test_a_refused_connection_fails_within_a_second(name: str, refused_url: str) -> None:
    started = time.monotonic()
    result = invoke(*argv(name, refused_url, False), env=PASSPHRASES)
    elapsed = time.monotonic() - started
    assert result.exit_code == 1 and "Connection refused" in result.stderr
    assert elapsed < 1.0, elapsed  # the store's client would retry for ~4 s


@pytest.mark.parametrize("as_json", MODES)
@pytest.mark.parametrize("name", sorted(ARGS))
def test_a_bad_command_line_is_one_line(name: str, as_json: bool) -> None:
    result = invoke(name, "--no-such-option", *(["--json"] if as_json else []))
    assert result.exit_code == 2
    message = one_error(result.stderr, as_json, "UsageError", 2)
    assert "No such option '--no-such-option'" in message
    if not as_json:
        assert message.endswith(f" {name} -h)")  # (see redis-session NAME -h)


@pytest.mark.parametrize("as_json", MODES)
@pytest.mark.parametrize("name", sorted(ARGS))
def test_a_bug_is_one_line_and_its_traceback_one_variable_away(
    name: str, as_json: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(*args: Any, **kwargs: Any) -> None:
        raise KeyError("a key no one set")

    monkeypatch.setattr(cli.commands[name], "callback", bug)
    args = argv(name, None, as_json)
    result = invoke(*args, env={TRACEBACK_ENV: ""})
    assert result.exit_code == 1
    message = one_error(result.stderr, as_json, "KeyError", 1)
    assert message.startswith("unexpected KeyError: 'a key no one set'")
    assert f"{TRACEBACK_ENV}=1" in message
    with pytest.raises(KeyError, match="a key no one set"):
        invoke(*args, env={TRACEBACK_ENV: "1"})


def _env() -> dict[str, str]:
    """This process's environment without the store's variables (as ``run`` clears them)."""
    return {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDIS_SESSION_PREFIX")}


def test_library_warnings_are_one_line_each_json_under_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = CliGroup()

    @group.command()
    @json_option
    def warn(as_json: bool) -> None:
        logging.getLogger("redis_session").warning("copy %s down\x1b[2J\nfor now", "k")

    assert group.main(["warn"], standalone_mode=False) == 0
    assert capsys.readouterr().err == "Warning: copy k down\\x1b[2J for now\n"
    assert group.main(["warn", "--json"], standalone_mode=False) == 0
    line = json.loads(capsys.readouterr().err)
    assert line == {"warning": "copy k down\\x1b[2J for now", "level": "warning"}
    assert not logging.getLogger("redis_session").handlers  # removed after the command
