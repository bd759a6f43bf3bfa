"""A server (or a proxy, or a man in the middle of a connection without TLS) that answers a
store's script call with a damaged reply: the worker stays alive, and the store raises what
redis-py raises (its replies are read by redis-py with hiredis: no reader of our own).

Each case runs the store in a subprocess, so that a crash would show as its exit status.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

DAMAGED = {
    "huge bulk length": b"$9223372036854775807\r\n",
    "huge map count": b"%4611686018427387904\r\n",
    "array count 2**32": b"*4294967296\r\n",
    "map count 2**32": b"%4294967296\r\n",
    "negative array count": b"*-5\r\n",
    "huge integer": b":99999999999999999999999\r\n",
    "map count 2**62 nested": b"*1\r\n%4611686018427387904\r\n",
}
QUICK = {"huge map count", "array count 2**32", "map count 2**32", "negative array count",
         "huge integer", "map count 2**62 nested"}  # fmt: skip
"""hiredis refuses these at once ("Multi-bulk length out of range", ...); a huge bulk length
is a reply that has not all arrived: the read waits for it until the socket's timeout."""

STORE = """
import sys, time
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis_session import Message, RedisStore
store = RedisStore.from_url(
    sys.argv[1], prefix="damaged:", socket_timeout=1.0, retry=Retry(NoBackoff(), 0)
)
started = time.monotonic()
try:
    store.append_message("s", Message(role="user", content="hi"))
except Exception as exc:
    print(type(exc).__name__, round(time.monotonic() - started, 3))
else:
    print("accepted", round(time.monotonic() - started, 3))
store.close()
"""


def _commands(buffer: bytearray) -> Iterator[list[bytes]]:
    """The whole RESP commands (arrays of bulk strings) at the start of ``buffer``, taken."""
    while buffer.startswith(b"*") and b"\r\n" in buffer:
        end = buffer.index(b"\r\n")
        count, at, args = int(buffer[1:end]), end + 2, []
        for _ in range(count):
            line = buffer.find(b"\r\n", at)
            if line < 0:
                return
            size = int(buffer[at + 1 : line])
            if len(buffer) < line + 2 + size + 2:
                return
            args.append(bytes(buffer[line + 2 : line + 2 + size]))
            at = line + 2 + size + 2
        del buffer[:at]
        yield args


HELLO = b"-ERR unknown command 'HELLO'\r\n"
"""What a server without RESP3 answers ``HELLO``: redis-py goes on with RESP2."""


class DamagingServer:
    """Answers every command ``+OK`` but a script call, which gets ``reply``."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        buffer = bytearray()
        with conn:
            while not self.stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                for command in _commands(buffer):
                    name = command[0].upper()
                    if name in (b"EVALSHA", b"EVAL"):
                        conn.sendall(self.reply)
                    else:
                        conn.sendall(HELLO if name == b"HELLO" else b"+OK\r\n")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.listener.close()


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_reply_never_kills_the_worker(case: str) -> None:
    server = DamagingServer(DAMAGED[case])
    try:
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        done = subprocess.run(
            [sys.executable, "-c", STORE, f"redis://127.0.0.1:{server.port}/0"],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
    finally:
        server.close()
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    name, seconds = done.stdout.split()
    assert name != "accepted"
    if case in QUICK:  # refused at once, as hiredis refuses it
        assert name in ("InvalidResponse", "ResponseError", "ConnectionError"), name
        assert float(seconds) < 1.0
    else:  # waits for the rest of the reply: the socket's timeout
        assert name == "TimeoutError" and float(seconds) < 10


def test_the_damaging_server_answers_as_redis_does_otherwise() -> None:
    import redis

    server = DamagingServer(b"+fine\r\n")
    try:
        client = redis.Redis(port=server.port, socket_timeout=2)
        started = time.monotonic()
        assert client.eval("return 1", 0) == b"fine" and client.set("k", "v") is True
        assert time.monotonic() - started < 2
        client.close()
    finally:
        server.close()
