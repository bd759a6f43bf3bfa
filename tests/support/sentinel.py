"""A real Sentinel setup on loopback: 1 primary, 1 replica, 3 sentinels, stopped by PID."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.sentinel

from tests.support.servers import NodeProcesses, free_port, wait_until

SERVICE = "rs"
DOWN_AFTER_MS = 2000


@dataclass
class SentinelSetup(NodeProcesses):
    primary_port: int
    replica_port: int
    sentinel_ports: list[int]
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    args: dict[int, list[str]] = field(default_factory=dict)
    workdir: Path | None = None

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def sentinel(self) -> Any:
        make: Any = redis.sentinel.Sentinel
        return make(
            [("127.0.0.1", p) for p in self.sentinel_ports], sentinel_kwargs={"socket_timeout": 1.0}
        )

    def client(self, **kwargs: Any) -> redis.Redis:
        master: redis.Redis = self.sentinel().master_for(SERVICE, **kwargs)
        return master

    def primary_port_now(self) -> int:
        return int(self.sentinel().discover_master(SERVICE)[1])

    def restart_as_replica(self, port: int, primary_port: int) -> None:
        """Start a killed data node again (empty: no persistence) as a replica of
        ``primary_port`` (left alone, Sentinel converts it only when it notices, up to ~10 s)."""
        self.restart(port, "--replicaof", "127.0.0.1", str(primary_port))


def start_sentinel(binary: str, timeout: float = 30.0) -> SentinelSetup:
    """Start the primary, its replica and three sentinels; wait until all agree. Tried twice,
    on new ports: a port ``free_port`` chose can be taken by another test process before the
    server binds it (that server exits and the setup never becomes ready; in one CI run a
    worker's 207 Sentinel tests errored so)."""
    try:
        return _start_sentinel(binary, timeout)
    except RuntimeError:
        return _start_sentinel(binary, timeout)


def _start_sentinel(binary: str, timeout: float) -> SentinelSetup:
    workdir = Path(tempfile.mkdtemp(prefix="rs-sentinel-"))
    setup = SentinelSetup(free_port(), 0, [], workdir=workdir)
    try:

        def server(port: int, *extra: str) -> None:
            d = workdir / str(port)
            d.mkdir(exist_ok=True)
            args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", str(d), "--repl-diskless-sync", "yes",
                    "--repl-diskless-sync-delay", "0", *extra]  # fmt: skip
            setup.args[port] = args
            setup.restart(port)

        server(setup.primary_port)
        setup.replica_port = free_port()
        server(setup.replica_port, "--replicaof", "127.0.0.1", str(setup.primary_port))
        for _ in range(3):
            port = free_port()
            conf = workdir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {setup.primary_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            setup.processes[port] = subprocess.Popen(
                [binary, str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
            setup.sentinel_ports.append(port)

        def ready() -> bool:
            replica = redis.Redis(port=setup.replica_port, socket_timeout=1)
            try:
                if replica.info("replication").get("master_link_status") != "up":
                    return False
            finally:
                replica.close()
            for port in setup.sentinel_ports:
                s = redis.Redis(port=port, socket_timeout=1)
                try:
                    info: Any = s.sentinel_master(SERVICE)
                    if int(info["num-slaves"]) < 1 or int(info["num-other-sentinels"]) < 2:
                        return False
                finally:
                    s.close()
            return True

        if not wait_until(ready, timeout, interval=0.1):
            raise RuntimeError("the sentinel setup did not become ready")
        return setup
    except BaseException:
        setup.stop()
        raise
