"""The clock of the store's own deadlines and pauses: a claim's wait for a turn, a listener's
timeouts, polls, claims and backoffs, the reaper's pause per index shard, a registry copy's
pause, the failover window, the wait for a pooled connection, OpenTelemetry's look for an SDK.

The code calls these functions through the module (``_clock.monotonic()``), looked up at each
call, so that a test can put a clock of its own in their place and move time instead of
sleeping through it (``tests/support/clock.py``). Redis's own time is not this clock: TTLs,
a stream entry's idle time, ``BLPOP``'s and ``XREAD``'s blocks run on the server's.
"""

from __future__ import annotations

import asyncio
import time as _time


def monotonic() -> float:
    """Seconds on a clock that never goes back (``time.monotonic``): deadlines and pauses."""
    return _time.monotonic()


def time() -> float:
    """Seconds since the epoch (``time.time``): set against timestamps the server wrote."""
    return _time.time()


def sleep(seconds: float) -> None:
    """Pause this thread for ``seconds`` (``time.sleep``)."""
    _time.sleep(seconds)


async def async_sleep(seconds: float) -> None:
    """Pause this task for ``seconds`` (``asyncio.sleep``)."""
    await asyncio.sleep(seconds)
