"""``redis-session acl`` as an operator uses it: print the line, pipe it into redis-cli, give
the user a password, and run the demo's agent workers as that user.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from typing import Any

import pytest
import redis

from redis_session.acl import acl_rules, commands, setuser_line
from tests.support.servers import Server

from .conftest import ENTRY_POINT, SUBPROCESS_TIMEOUT, invoke, run


def test_acl_prints_the_recipe_line() -> None:
    result = invoke("acl", "--prefix", "app:", "--user", "worker")
    assert result.exit_code == 0
    assert result.stdout == setuser_line("app:", "worker") + "\n"
    assert result.stdout.startswith("ACL SETUSER worker on resetkeys ~app:* resetchannels ")
    assert " +rpop " in result.stdout and " +lset " in result.stdout  # pop_message, rekey


def test_acl_json_and_the_prefix_from_the_environment() -> None:
    result = invoke("acl", "--json", env={"REDIS_SESSION_PREFIX": "env:"})
    data = json.loads(result.stdout)
    assert data["prefix"] == "env:" and data["user"] == "redis-session"
    assert data["rules"] == acl_rules("env:")
    assert data["commands"] == list(commands())
    assert data["line"] == setuser_line("env:", "redis-session")


def test_acl_refuses_a_prefix_no_pattern_can_hold() -> None:
    result = invoke("acl", "--prefix", "two words:", "--json")
    assert result.exit_code == 1
    error = json.loads(result.stderr)
    assert error["type"] == "InvalidArgument" and error["error"].startswith("prefix: ")


@pytest.mark.redis
def test_the_line_piped_into_redis_cli_makes_a_user_the_demo_runs_as(
    redis_server: Server,
) -> None:
    cli = shutil.which("redis-cli") or shutil.which("valkey-cli")
    if cli is None:
        pytest.skip("no redis-cli on PATH")
    prefix, user, password = f"acl{uuid.uuid4().hex[:6]}:", f"u{uuid.uuid4().hex[:6]}", "s3cret"
    line = run([str(ENTRY_POINT)], "acl", "--prefix", prefix, "--user", user)
    assert line.returncode == 0, line.stderr
    admin: Any = redis.Redis.from_url(redis_server.url)
    try:
        for command in (line.stdout, f"ACL SETUSER {user} >{password}\n"):
            done = subprocess.run(
                [cli, "-u", redis_server.url],
                input=command,
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_TIMEOUT,
                check=False,
            )
            assert done.stdout.strip() == "OK", (done.stdout, done.stderr)
        host_port = redis_server.url.split("://", 1)[1].rsplit("@", 1)[-1]
        url = f"redis://{user}:{password}@{host_port}"
        demo = run(
            [str(ENTRY_POINT)], "demo", "--url", url, "--prefix", prefix, "--turns", "9", "--json"
        )
        assert demo.returncode == 0, demo.stderr
        assert json.loads(demo.stdout)["consistent"] is True
        denied = run([str(ENTRY_POINT)], "ls", "--url", url, "--prefix", "other:", "--json")
        assert denied.returncode == 1
        assert json.loads(denied.stderr)["type"] == "NoPermissionError"
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        for key in admin.scan_iter(match=f"{prefix}*"):
            admin.delete(key)
        admin.close()
