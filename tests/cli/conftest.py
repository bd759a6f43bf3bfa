"""Fixtures of the command-line tests: a runner, and stores under a unique prefix on a real
Redis (the suite's ``redis_server``) or on a named in-process ``memory://`` server.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from redis_session import Message, RedisStore, Session, ToolCall
from redis_session.cli import cli
from tests.conftest import unique_prefix
from tests.support.servers import Server

ENTRY_POINT = Path(sys.executable).parent / "redis-session"
SUBPROCESS_TIMEOUT = 90


@dataclass
class Place:
    """Where a test's sessions live: a store URL and a prefix of its own."""

    url: str
    prefix: str

    def store(self) -> RedisStore:
        return RedisStore.from_url(self.url, prefix=self.prefix)

    def args(self) -> list[str]:
        return ["--url", self.url, "--prefix", self.prefix]


def _purge(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        for key in list(client.scan_iter(match=f"{prefix}*", count=1000)):
            client.delete(key)
    finally:
        client.close()


def keys_under(url: str, prefix: str) -> list[bytes]:
    """The keys under ``prefix`` on the server at ``url`` (what a run left behind)."""
    client = redis.Redis.from_url(url)
    try:
        return list(client.scan_iter(match=f"{prefix}*", count=1000))
    finally:
        client.close()


@pytest.fixture
def real(redis_server: Server) -> Iterator[Place]:
    """A unique prefix on the real Redis; its keys are deleted afterwards."""
    place = Place(redis_server.url, unique_prefix())
    yield place
    _purge(place.url, place.prefix)


@pytest.fixture
def memory() -> Place:
    """A named in-process memory:// server of this test only (shared by stores in-process)."""
    return Place(f"memory://cli-{uuid.uuid4().hex[:10]}", "rs:")


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "memory"])
def place(request: pytest.FixtureRequest) -> Place:
    """The real Redis, then memory://: for commands meaningful on both."""
    fixture: Place = request.getfixturevalue("real" if request.param == "redis" else "memory")
    return fixture


def seed(place: Place, count: int, messages: int = 3) -> list[str]:
    """Create sessions ``s0..s<count-1>`` (s0 oldest) with ``messages`` messages each."""
    keys = [f"s{i}" for i in range(count)]
    with place.store() as store:
        for key in keys:
            store.create(Session(key=key, agent_id="agent", metadata={"lang": "en"}))
            batch = [
                Message(
                    role="user" if n % 2 == 0 else "assistant",
                    content=f"{key} message {n}",
                    tool_calls=[ToolCall(id=f"c{n}", name="lookup", input="{}", output="42")]
                    if n % 2
                    else [],
                )
                for n in range(messages)
            ]
            if batch:
                store.append_messages(key, batch)
            time.sleep(0.003)  # the listing orders by updated_at in ms: keep the order strict
    return keys


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process; the result keeps stdout and stderr apart."""
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def run(
    command: list[str], *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a subprocess (``command`` is the interpreter with ``-m redis_session``
    or the entry point), bounded by a timeout.
    """
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDIS_SESSION_PREFIX")
    }
    full_env.update({"COLUMNS": "200", **(env or {})})
    return subprocess.run(
        [*command, *args],
        stdin=subprocess.DEVNULL,  # as in a pipeline: never the terminal running the tests
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        env=full_env,
        check=False,
    )


@pytest.fixture(
    params=[
        pytest.param([sys.executable, "-m", "redis_session"], id="python-m"),
        pytest.param([str(ENTRY_POINT)], id="entry-point"),
    ]
)
def command(request: pytest.FixtureRequest) -> list[str]:
    """The two ways to start the command line."""
    cmd: list[str] = request.param
    if not Path(cmd[0]).exists():
        pytest.fail(f"{cmd[0]} is missing: run pip install -e . in this environment")
    return cmd


@dataclass
class Terminal:
    """What a run in a pseudo-terminal showed (stdout and stderr interleaved, as on screen)."""

    returncode: int
    screen: str


def run_in_terminal(
    command: list[str],
    *args: str,
    answers: Sequence[tuple[str, str]],
    env: dict[str, str] | None = None,
    timeout: float = SUBPROCESS_TIMEOUT,
) -> Terminal:
    """Run the CLI with a pseudo-terminal as stdin, stdout and stderr, as a user at a terminal
    does, in a session of its own (so a prompt can never reach the terminal running the tests).
    Each ``(prompt, answer)`` is typed once ``prompt`` shows, in order. Bounded by ``timeout``.
    """
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("REDIS_URL", "REDIS_SESSION_"))
    }
    full_env.update({"COLUMNS": "200", "TERM": "dumb", **(env or {})})
    main, child = os.openpty()
    proc = subprocess.Popen(
        [*command, *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env=full_env,
        start_new_session=True,
        close_fds=True,
    )
    os.close(child)
    screen = b""
    pending = list(answers)
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no end within {timeout} s; screen so far: {screen!r}")
            ready, _, _ = select.select([main], [], [], min(left, 0.2))
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: the child closed its side
                    chunk = b""
                if not chunk:
                    break
                screen += chunk
            if pending and pending[0][0].encode() in screen[seen:]:
                prompt, answer = pending.pop(0)
                seen = screen.index(prompt.encode(), seen) + len(prompt)
                os.write(main, answer.encode() + b"\n")
            if not ready and proc.poll() is not None:
                break
        returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(main)
    return Terminal(returncode, screen.decode(errors="replace").replace("\r\n", "\n"))
