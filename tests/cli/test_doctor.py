"""``redis-session doctor`` against a well-configured and a misconfigured server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from redis_session import acl
from redis_session.doctor import PROBLEM, diagnose
from tests.cli.conftest import invoke
from tests.conftest import IN_CI
from tests.support.servers import Server, redis_binary, start, valkey_binary

pytestmark = pytest.mark.redis


@pytest.fixture
def own() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for server in made:
        server.stop()


def _start(made: list[Server], *extra: str) -> Server:
    binary = redis_binary() or valkey_binary()
    if binary is None:
        if IN_CI:
            pytest.fail("CI=true and no redis-server", pytrace=False)
        pytest.skip("no redis-server")
    server = start(binary, "doctor", *extra)
    made.append(server)
    return server


def _checks(result_stdout: str) -> dict[str, str]:
    return {c["name"]: c["status"] for c in json.loads(result_stdout)["checks"]}


def test_a_well_configured_server_passes(own: list[Server]) -> None:
    server = _start(own, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction",
                    "--appendonly", "yes")  # fmt: skip
    result = invoke("doctor", "--url", server.url, "--json")
    assert result.exit_code == 0, result.output
    checks = _checks(result.stdout)
    assert set(checks.values()) == {"ok"}, checks
    assert {"eviction policy", "memory limit", "persistence", "replication", "ACL",
            "server version", "index records"} <= set(checks)  # fmt: skip
    human = invoke("doctor", "--url", server.url)
    assert human.exit_code == 0 and "eviction policy: noeviction" in human.stdout


def test_a_misconfigured_server_fails_naming_the_problems(own: list[Server]) -> None:
    primary = _start(own, "--maxmemory-policy", "allkeys-lru")
    result = invoke("doctor", "--url", primary.url, "--json")
    assert result.exit_code == 1
    checks = _checks(result.stdout)
    assert checks["eviction policy"] == "problem" and checks["memory limit"] == "warn"
    assert checks["persistence"] == "warn"
    replica = _start(own, "--replicaof", "127.0.0.1", str(primary.port))
    assert _checks(invoke("doctor", "--url", replica.url, "--json").stdout)["replication"] == (
        "problem"
    )
    human = invoke("doctor", "--url", primary.url)
    assert human.exit_code == 1 and "PROBLEM eviction policy: allkeys-lru" in human.stdout


def test_the_rights_of_a_confined_user_are_checked(own: list[Server]) -> None:
    server = _start(own)
    admin: Any = server.client()
    admin.execute_command("ACL", "SETUSER", "worker", *acl.acl_rules("app:"))
    report = diagnose(admin, "app:", acl_user="worker")
    assert {c.name: c.status for c in report.checks}["ACL"] == "ok"
    admin.execute_command("ACL", "SETUSER", "worker", "-rpop", "-lset")
    report = diagnose(admin, "app:", acl_user="worker")
    acl_check = next(c for c in report.checks if c.name == "ACL")
    assert acl_check.status == PROBLEM and "rpop" in acl_check.detail and "lset" in acl_check.detail
    admin.close()


def test_doctor_refuses_memory_urls() -> None:
    result = invoke("doctor", "--url", "memory://x")
    assert result.exit_code != 0 and "in-process" in (result.stderr + result.stdout)
