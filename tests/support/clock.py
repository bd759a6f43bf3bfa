"""A clock the test moves, put in place of ``redis_session._clock`` (the clock of the store's own
deadlines and pauses) by the ``clock`` fixture (``tests/conftest.py``).

It runs with real time, plus what the test added: :meth:`FakeClock.advance` jumps it forward
(the next listener poll, claim or reap is due at once: no sleep); :meth:`FakeClock.freeze`
stops its monotonic time (the store's deadlines and pauses), so that "not yet" holds however
slow the machine, until an ``advance``; its wall time (``_clock.time``, set against the
timestamps the server writes) keeps running with the server's, plus the jumps. The store's own
pauses (backoffs, a listener's wait with nothing subscribed) jump it instead of sleeping, and
are kept in :attr:`FakeClock.pauses`. Redis's own time is not this clock: TTLs, idle times and
blocking reads (``XREAD BLOCK``, ``BLPOP``) run on the server's, so a test waits for those
with a bounded poll (:func:`wait_gone`), and a frozen clock does not end a listener's
``get(timeout)`` (only an event does).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from redis_session import _clock
from tests.support.servers import wait_until


class FakeClock:
    """Real time plus the test's jumps, or frozen; see the module's docstring."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        """The store's own pauses (seconds), in order: each jumped the clock, none slept."""
        self._lock = threading.Lock()
        self._offset = 0.0  # monotonic: the jumps, less the time spent frozen
        self._jumps = 0.0
        self._frozen: float | None = None  # the real monotonic time it stopped at

    def _real(self) -> float:
        return time.monotonic() if self._frozen is None else self._frozen

    def monotonic(self) -> float:
        """``_clock.monotonic``: real monotonic time (or where it froze) plus the jumps."""
        with self._lock:
            return self._real() + self._offset

    def time(self) -> float:
        """``_clock.time``: the wall clock plus the jumps (it runs on while frozen)."""
        with self._lock:
            return time.time() + self._jumps

    def advance(self, seconds: float) -> None:
        """Jump forward ``seconds`` (never back)."""
        assert seconds >= 0, "a clock never goes back"
        with self._lock:
            self._offset += seconds
            self._jumps += seconds

    def freeze(self) -> None:
        """Stop the monotonic clock where it is: it moves by :meth:`advance` (and the store's
        pauses) only, until :meth:`thaw`.
        """
        with self._lock:
            if self._frozen is None:
                self._frozen = time.monotonic()

    def thaw(self) -> None:
        """Let the clock run with real time again, from where it stood (no jump)."""
        with self._lock:
            if self._frozen is not None:
                self._offset -= time.monotonic() - self._frozen
                self._frozen = None

    def sleep(self, seconds: float) -> None:
        """``_clock.sleep``: jump instead of sleeping; let other threads run."""
        self.pauses.append(seconds)
        self.advance(max(0.0, seconds))
        time.sleep(0)

    async def async_sleep(self, seconds: float) -> None:
        """``_clock.async_sleep``: jump instead of sleeping; let other tasks run."""
        self.pauses.append(seconds)
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
        """Put this clock in place of ``redis_session._clock``'s functions (undone by
        ``monkeypatch`` after the test).
        """
        for name in ("monotonic", "time", "sleep", "async_sleep"):
            monkeypatch.setattr(_clock, name, getattr(self, name))
        return self


def wait_gone(client: Any, *keys: str | bytes, timeout: float = 10.0) -> None:
    """Wait (a bounded poll of the server) until none of ``keys`` exists: their TTL ran out on
    the server's clock, which no test moves. Fails after ``timeout`` seconds.
    """
    assert wait_until(lambda: client.exists(*keys) == 0, timeout, 0.01), (
        f"still there after {timeout} s: {[k for k in keys if client.exists(k)]}"
    )
