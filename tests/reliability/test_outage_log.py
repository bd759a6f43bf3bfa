"""A store that retries a refused connection says so: one WARNING per outage naming the server
(never a password), one INFO when it answers again, nothing per retry."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from redis_session import AsyncRedisStore, RedisStore
from tests.conftest import IN_CI
from tests.support.servers import free_port

pytestmark = pytest.mark.redis


def records(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "redis_session"]


@pytest.fixture
def later_server() -> Iterator[tuple[int, threading.Thread]]:
    """A free port, and a thread that starts redis-server on it 0.4 s after it is started."""
    binary = shutil.which("redis-server")
    if binary is None:
        if IN_CI:
            pytest.fail("CI=true and no redis-server", pytrace=False)
        pytest.skip("no redis-server")
    port, workdir = free_port(), tempfile.mkdtemp(prefix="rs-outage-")
    procs: list[subprocess.Popen[bytes]] = []

    def run() -> None:
        time.sleep(0.4)
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL))

    yield port, threading.Thread(target=run)
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
    shutil.rmtree(workdir, ignore_errors=True)


def test_a_refused_connection_is_logged_once_and_its_end_too(
    later_server: tuple[int, threading.Thread], caplog: pytest.LogCaptureFixture
) -> None:
    port, starter = later_server
    caplog.set_level(logging.INFO, logger="redis_session")
    store = RedisStore.from_url(f"redis://:hunter2@127.0.0.1:{port}/0", prefix="outage:")
    starter.start()
    try:
        assert store.list_sessions() == []  # rides through the outage on its retries
        store.list_sessions()
    finally:
        starter.join()
        store.close()
    (warning, info) = records(caplog)
    assert warning[0] == logging.WARNING and info[0] == logging.INFO
    assert f"redis://127.0.0.1:{port}/0 failed (ConnectionError" in warning[1]
    assert "retrying up to 10 times" in warning[1] and "hunter2" not in warning[1]
    assert info[1] == f"redis_session: redis://127.0.0.1:{port}/0 answers again"


def test_the_async_store_logs_it_too(
    later_server: tuple[int, threading.Thread], caplog: pytest.LogCaptureFixture
) -> None:
    port, starter = later_server
    caplog.set_level(logging.INFO, logger="redis_session")

    async def main() -> None:
        async with AsyncRedisStore.from_url(f"redis://127.0.0.1:{port}/0", prefix="o:") as store:
            starter.start()
            await asyncio.gather(*(store.list_sessions() for _ in range(4)))

    asyncio.run(main())
    starter.join()
    levels = [level for level, _ in records(caplog)]
    assert levels == [logging.WARNING, logging.INFO]


def test_a_server_that_never_answers_gives_one_warning_then_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="redis_session")
    port = free_port()
    store = RedisStore.from_url(f"redis://127.0.0.1:{port}/0")
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        store.list_sessions()
    took = time.monotonic() - started
    store.close()
    assert [level for level, _ in records(caplog)] == [logging.WARNING]
    assert 0.5 < took < 10, took
