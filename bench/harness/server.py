"""A private ``redis-server`` for a benchmark script: on a free loopback port, no persistence,
in a temporary directory; stopped and removed afterwards. The shared server is never touched.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def private_server(name: str) -> Iterator[int]:
    """Start ``redis-server`` (from PATH), wait until it accepts connections, yield its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    workdir = tempfile.mkdtemp(prefix=f"bench-{name}-")
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
         "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):  # bounded: 5 s at most
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
