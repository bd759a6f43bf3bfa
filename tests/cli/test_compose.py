"""docker-compose.yml: a single Redis and a 6-node cluster, as profiles, with health checks,
and none of them reachable beyond loopback without a password.

No Docker engine runs here, and the docker CLI may lack the compose plugin, so the file is read
with PyYAML and checked for what the README promises.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.cluster import _free_cluster_port
from tests.support.servers import redis_binary, wait_until

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
yaml = pytest.importorskip("yaml", reason="PyYAML reads docker-compose.yml")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert set(data) <= {"services"} | {k for k in data if k.startswith("x-")}
    found: dict[str, Any] = data["services"]
    return found


def _nodes(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if name.startswith("redis-node-")}


def test_single_redis_profile(services: dict[str, Any]) -> None:
    single = services["redis"]
    assert single["profiles"] == ["single"]
    assert single["ports"] == ["127.0.0.1:6379:6379"]
    assert single["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert single["command"][0] == "redis-server"


def test_cluster_profile_has_six_healthy_nodes(services: dict[str, Any]) -> None:
    nodes = _nodes(services)
    assert len(nodes) == 6
    ports = []
    for node in nodes.values():
        assert node["profiles"] == ["cluster"]
        command = node["command"]
        port = command[command.index("--port") + 1]
        ports.append(port)
        assert command[command.index("--cluster-enabled") + 1] == "yes"
        assert f"nodes-{port}.conf" in command
        assert node["healthcheck"]["test"] == ["CMD", "redis-cli", "-p", port, "ping"]
        assert node["healthcheck"]["retries"] > 0
    assert sorted(ports) == [str(p) for p in range(7000, 7006)]


def test_cluster_init_waits_for_every_node_and_creates_the_cluster(
    services: dict[str, Any],
) -> None:
    init = services["cluster-init"]
    assert init["profiles"] == ["cluster"]
    assert init["restart"] == "no"
    assert init["depends_on"] == {
        name: {"condition": "service_healthy"} for name in _nodes(services)
    }
    script = init["command"][-1]
    assert "--cluster create" in script and "--cluster-replicas 1" in script
    assert all(f"127.0.0.1:{p}" in script for p in range(7000, 7006))
    assert "cluster_state:ok" in script  # running it again leaves a formed cluster alone


def test_every_service_uses_one_image(services: dict[str, Any]) -> None:
    assert {s["image"] for s in services.values()} == {"redis:7.4"}


def test_docker_compose_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI")
    probe = subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, timeout=30, check=False
    )
    if probe.returncode != 0:
        pytest.skip("the docker CLI has no compose plugin")
    for profile in ("single", "cluster"):
        result = subprocess.run(
            [docker, "compose", "-f", str(COMPOSE), "--profile", profile, "config", "--quiet"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr


LOOPBACK = {"127.0.0.1", "::1", "[::1]", "localhost"}


def _runs_a_server(service: dict[str, Any]) -> bool:
    command = service.get("command")
    return command is None or command[0] == "redis-server"  # the image's default is the server


def _published_on(port: object) -> str:
    """The host address a ``ports`` entry publishes on ("" for all interfaces)."""
    if isinstance(port, dict):
        return str(port.get("host_ip", ""))
    parts = str(port).rsplit(":", 2)
    return parts[0] if len(parts) == 3 else ""


def _binds(command: list[str]) -> list[str]:
    if "--bind" not in command:
        return []  # redis-server's default: every interface
    start = command.index("--bind") + 1
    out = []
    for word in command[start:]:
        if word.startswith("--"):
            break
        out += word.split()
    return out


def test_no_server_listens_beyond_loopback_without_a_password(services: dict[str, Any]) -> None:
    servers = {name: s for name, s in services.items() if _runs_a_server(s)}
    assert len(servers) == 7  # the single Redis and six cluster nodes
    for name, service in servers.items():
        command = service.get("command") or []
        if "--requirepass" in command or "--aclfile" in command:
            continue  # a password guards it wherever it listens
        for port in service.get("ports", []):
            assert _published_on(port) in LOOPBACK, (name, port)
        if service.get("network_mode") == "host":
            binds = [b.removeprefix("-") for b in _binds(command)]
            assert binds and set(binds) <= LOOPBACK, (name, command)


def test_the_checks_catch_an_exposed_service() -> None:
    assert _published_on("6379:6379") == ""
    assert _published_on({"target": 6379, "published": 6379}) == ""
    assert _published_on("127.0.0.1:6379:6379") == "127.0.0.1"
    assert _binds(["redis-server", "--port", "7000"]) == []
    assert _binds(["redis-server", "--bind", "0.0.0.0", "--port", "7000"]) == ["0.0.0.0"]


def _outside_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent for a UDP connect
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_a_cluster_node_as_composed_answers_on_loopback_only(services: dict[str, Any]) -> None:
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH to start a node as docker-compose.yml does")
    command = list(services["redis-node-0"]["command"])
    port = _free_cluster_port(set())  # its cluster-bus twin (port + 10000) free too
    command[command.index("--port") + 1] = str(port)
    workdir = tempfile.mkdtemp(prefix="rs-compose-")
    proc = subprocess.Popen(
        [binary, *command[1:], "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        inside = redis.Redis(port=port, socket_timeout=2)
        assert wait_until(inside.ping, 10), "the node did not start"
        assert inside.config_get("bind") == {"bind": "127.0.0.1"}
        inside.close()
        outside = _outside_address()
        if outside is not None:
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((outside, port), timeout=2).close()
    finally:
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
