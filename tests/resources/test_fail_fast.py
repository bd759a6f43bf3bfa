"""What cannot heal fails at once: a wrong or missing password, an unknown host, a TLS
certificate that does not verify, a Unix socket that is not there raise on the first try,
typed, in the library and in the CLI; what can heal (a server that is down, restarting, failing
over) is still retried. On private servers of the test's own.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_session import AsyncRedisStore, RedisStore
from tests.support.servers import Server, free_port, redis_binary, wait_until

FAST = 0.5
"""Seconds within which a failure that cannot heal must be raised (redis-py alone: ~0.01 s)."""
CLI = [sys.executable, "-m", "redis_session"]


@pytest.fixture
def with_password(private_server: Callable[..., Server]) -> Iterator[Server]:
    server = private_server()
    admin = server.client()
    admin.config_set("requirepass", "secret")
    yield server
    redis.Redis.from_url(server.url, password="secret").config_set("requirepass", "")


def _url(server: Server, auth: str = "") -> str:
    return server.url.replace("redis://", f"redis://{auth}")


def _sync_fails(url: str, error: type[Exception]) -> float:
    store = RedisStore.from_url(url, prefix="ff:")
    started = time.monotonic()
    with pytest.raises(error):
        store.get("s")
    took = time.monotonic() - started
    store.close()
    return took


def _async_fails(url: str, error: type[Exception]) -> float:
    async def go() -> float:
        store = AsyncRedisStore.from_url(url, prefix="ff:")
        started = time.monotonic()
        with pytest.raises(error):
            await store.get("s")
        took = time.monotonic() - started
        await store.close()
        return took

    return asyncio.run(go())


def _cli_fails(url: str) -> tuple[float, str]:
    """(seconds the CLI took beyond the interpreter's start and imports, its stderr): the
    start is measured by ``--version`` right before, so that a loaded machine's slow start
    (2.7 s seen beside two CPU hogs) is not taken for the ~4 s of retries this rules out.
    """
    started = time.monotonic()
    subprocess.run([*CLI, "--version"], capture_output=True, timeout=60, check=True)
    start = time.monotonic() - started
    started = time.monotonic()
    done = subprocess.run(
        [*CLI, "ls", "--url", url], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, (done.returncode, done.stderr)
    return time.monotonic() - started - start, done.stderr


@pytest.mark.parametrize("auth", [":wrong@", ""], ids=["wrong password", "no password"])
def test_credentials_the_server_refuses_fail_at_once(with_password: Server, auth: str) -> None:
    url = _url(with_password, auth)
    assert _sync_fails(url, redis.AuthenticationError) < FAST
    assert _async_fails(url, redis.AuthenticationError) < FAST
    took, stderr = _cli_fails(url)
    assert "AuthenticationError" in stderr and len(stderr.strip().splitlines()) == 1
    assert took < FAST + 1.0  # beyond the interpreter's start (retries took ~4 s)
    good = RedisStore.from_url(_url(with_password, ":secret@"), prefix="ff:")
    assert good.list_sessions() == []  # the right one works
    good.close()


def test_an_unknown_host_fails_at_once() -> None:
    url = "redis://no-such-host.invalid:6379/0"
    assert _sync_fails(url, redis.ConnectionError) < FAST
    assert _async_fails(url, redis.ConnectionError) < FAST
    took, stderr = _cli_fails(url)
    assert took < FAST + 1.0  # beyond the interpreter's start (retries took ~4 s)
    assert "not known" in stderr and len(stderr.strip().splitlines()) == 1


def test_sentinels_at_an_unknown_host_fail_at_once() -> None:
    # No sentinel host name resolves: no primary will be found however long one retries.
    url = "redis+sentinel://no-such-host.invalid:26379/mymaster"
    assert _sync_fails(url, redis.ConnectionError) < FAST
    assert _async_fails(url, redis.ConnectionError) < FAST


def test_sentinels_that_may_come_back_are_still_retried() -> None:
    from redis.asyncio.sentinel import MasterNotFoundError as AsyncMasterNotFound
    from redis.sentinel import MasterNotFoundError

    from redis_session._transport.endpoint import may_heal_through

    down = may_heal_through([("127.0.0.1", free_port())])  # resolves: a sentinel may start
    gone = may_heal_through([("no-such-host.invalid", 26379), ("also-gone.invalid", 26379)])
    for error in (MasterNotFoundError("none"), AsyncMasterNotFound("none")):
        assert down(error) and not gone(error)
    assert gone(redis.ConnectionError("refused"))  # anything else: as for any client
    assert not gone(redis.AuthenticationError("wrong"))


def test_a_missing_unix_socket_fails_at_once(tmp_path: Path) -> None:
    url = f"unix://{tmp_path / 'nothing.sock'}"
    assert _sync_fails(url, redis.ConnectionError) < FAST
    assert _async_fails(url, redis.ConnectionError) < FAST


def test_a_certificate_that_does_not_verify_fails_at_once(tmp_path: Path) -> None:
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file",
         str(cert), "--tls-auth-clients", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        trusted: Any = redis.Redis(
            port=port, ssl=True, ssl_ca_certs=str(cert), ssl_check_hostname=False,
            socket_timeout=1,
        )  # fmt: skip
        assert wait_until(lambda: _pings(trusted), 10), "the TLS server did not start"
        url = f"rediss://127.0.0.1:{port}/0"  # verified against the system's CAs: it fails
        assert _sync_fails(url, redis.ConnectionError) < FAST
        assert _async_fails(url, redis.ConnectionError) < FAST
        trusted.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def test_a_server_that_is_down_is_still_retried(private_server: Callable[..., Server]) -> None:
    # What can heal keeps the retry policy: the store waits for a server that comes back.
    server = private_server()
    port = server.port
    server.stop()
    url = f"redis://127.0.0.1:{port}/0"
    store = RedisStore.from_url(url, prefix="ff:")
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        store.get("s")
    assert time.monotonic() - started > 1.0  # retried with backoff (about 4 s in all)
    store.close()
