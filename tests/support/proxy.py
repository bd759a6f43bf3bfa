"""A loopback TCP proxy that can lose a reply after the server applied the request.

``drop_replies_to(b"EVALSHA", n)``: for the next ``n`` requests containing that marker (after
``skip`` more that pass), the request is forwarded, the server's reply is read and thrown
away, and the client's connection is closed, which is what a network fault after the write
looks like to redis-py.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class LossyProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._marker = b""
        self._to_drop = 0
        self._to_skip = 0
        self.dropped = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept, daemon=True)

    def drop_replies_to(self, marker: bytes, count: int = 1, skip: int = 0) -> None:
        with self._lock:
            self._marker, self._to_drop, self._to_skip = marker, count, skip

    def _arm(self, chunk: bytes) -> bool:
        with self._lock:
            if self._to_drop > 0 and self._marker in chunk:
                if self._to_skip > 0:
                    self._to_skip -= 1
                    return False
                self._to_drop -= 1
                return True
        return False

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
        client.settimeout(0.2)
        try:
            while not self._stop.is_set():
                try:
                    chunk = client.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                upstream.sendall(chunk)
                reply = self._read_reply(upstream)
                if self._arm(chunk):
                    with self._lock:
                        self.dropped += 1
                    return  # the write happened; the reply is lost with the connection
                client.sendall(reply)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    @staticmethod
    def _read_reply(upstream: socket.socket) -> bytes:
        # Requests here are one command at a time (no pipelines), so one recv burst that ends
        # in CRLF and stops arriving is one whole reply; a short wait catches a split reply.
        data = upstream.recv(1 << 20)
        upstream.settimeout(0.02)
        try:
            while True:
                more = upstream.recv(1 << 20)
                if not more:
                    break
                data += more
        except TimeoutError:
            pass
        finally:
            upstream.settimeout(5)
        return data

    def __enter__(self) -> LossyProxy:
        self._accept_thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._listener.close()
        self._accept_thread.join(timeout=2)
        for t in self._threads:
            t.join(timeout=2)
