"""One redis-server process owned by a test, for injecting faults into it: freeze it (SIGSTOP /
SIGCONT or ``CLIENT PAUSE``), SIGKILL it and start it again on the same port (empty, or from its
append-only file), kill client connections. Stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.servers import NodeProcesses, free_port, redis_binary, valkey_binary, wait_until


@dataclass
class OwnServer(NodeProcesses):
    """A single server started by the test. ``persistent`` gives it an append-only file fsynced
    before every reply (``appendfsync always``), so an acknowledged write survives SIGKILL."""

    port: int
    persistent: bool = False
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    args: dict[int, list[str]] = field(default_factory=dict)
    workdir: Path | None = None
    kills: int = 0
    freezes: int = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        return self.processes[self.port].pid

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(port=self.port, **kwargs)  # type: ignore[arg-type]

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Wait until the server answers PING (with an append-only file: has loaded it)."""
        client = self.client(socket_timeout=1)
        try:
            if not wait_until(lambda: client.ping(), timeout, interval=0.02):
                raise RuntimeError(f"server on port {self.port} not ready within {timeout}s")
        finally:
            client.close()

    def kill_and_restart(self, down_for: float = 0.0) -> None:
        """SIGKILL the server, leave it down ``down_for`` seconds, start it again, wait for it."""
        self.kill(self.port)
        self.kills += 1
        if down_for > 0:
            wait_until(lambda: False, down_for, interval=min(down_for, 0.05))
        self.restart(self.port)
        self.wait_ready()

    def stop_process(self) -> None:
        """SIGSTOP: the process keeps its sockets (connects still succeed) but answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)
        self.freezes += 1

    def continue_process(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


def server_binary() -> str | None:
    return redis_binary() or valkey_binary()


def start_own(binary: str, *, persistent: bool = False) -> OwnServer:
    """Start ``binary`` on a free port in its own directory and wait for PING."""
    workdir = Path(tempfile.mkdtemp(prefix="rs-fault-"))
    server = OwnServer(port=free_port(), persistent=persistent, workdir=workdir)
    durability = ["--appendonly", "yes", "--appendfsync", "always"] if persistent else [
        "--appendonly", "no",
    ]  # fmt: skip
    server.args[server.port] = [
        binary, "--port", str(server.port), "--bind", "127.0.0.1", "--save", "",
        *durability, "--dir", str(workdir),
    ]  # fmt: skip
    try:
        server.restart(server.port)
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server
