"""docker-compose.yml: a single Redis and a 6-node cluster, as profiles, with health checks.

No Docker engine runs here, and the docker CLI may lack the compose plugin, so the file is read
with PyYAML and checked for what the README promises.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

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
    assert single["ports"] == ["6379:6379"]
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
