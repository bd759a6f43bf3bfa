"""Turns: one worker at a time in a session, with fencing tokens (sans-I/O; see ``_core``).

A claim sets the session's turn key (``<token>:<call token>``, expiring with the lease) when
nobody holds it; the token grows with every claim of the session (meta field ``tk``). Writes
made through the turn carry the key's value and are refused inside their script (``TurnLost``)
once the lease ran out or a later claim took over, so a worker paused past its lease cannot
write after the next one took the turn. A claim that finds the turn held waits on the
session's wake list (``BLPOP``, at most :data:`WAKE_STEP` s at a time and never past the
holder's lease), which a release pushes to: the next claimer is woken at once, not by a poll.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from .. import _clock, contracts
from ..errors import InvalidArgument, TurnBusy
from ..keys import check_key
from ..status import Ctx, Status, check
from .args import token
from .requests import Commands, Op
from .sessions import NO_FENCE, Fence
from .trees import Trees

WAKE_STEP = 1.0
"""Seconds one wait for a release blocks at most (below any sane socket timeout)."""
WAKE_MS = 2_000
"""How long a release's wake waits for a waiter (ms)."""


def lease_ms(seconds: object, argument: str = "lease") -> int:
    """A lease in whole milliseconds (> 0)."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not seconds > 0:
        raise InvalidArgument(argument, f"must be seconds > 0, got {seconds!r}")
    return max(1, round(seconds * 1000))


_HELD: ContextVar[tuple[tuple[object, str, Fence], ...]] = ContextVar(
    "redis_session_turns_held", default=()
)
"""The turns held in this context (a thread, an asyncio task and the tasks it starts): which
store's (its :class:`Turns`), of which session, with which fence."""


class Turns:
    """Claims, renewals and releases of sessions' turns."""

    def __init__(self, trees: Trees) -> None:
        self.trees = trees

    def held(self, key: str) -> Fence:
        """The fence of the turn of session ``key`` this store holds in this context (inside
        ``with store.turn(key)``), else ``NO_FENCE``: the store's own writes to ``key`` there
        go through the turn, refused with ``TurnLost`` once it is not the holder's.
        """
        for turns, held_key, fence in _HELD.get():
            if turns is self and held_key == key:
                return fence
        return NO_FENCE

    @contextlib.contextmanager
    def holding(self, key: str, fence: Fence) -> Iterator[None]:
        """Mark ``key``'s turn held with ``fence`` in this context for the block."""
        marker = _HELD.set((*_HELD.get(), (self, key, fence)))
        try:
            yield
        finally:
            _HELD.reset(marker)

    def claim(self, key: str, lease: float, wait: float) -> Op[Fence]:
        """Claim session ``key``'s turn for ``lease`` seconds, waiting up to ``wait`` seconds
        for its holder to release it (``TurnBusy`` after). Returns the turn's fence.
        """
        key = check_key(key)
        ms = lease_ms(lease)
        if not isinstance(wait, int | float) or isinstance(wait, bool) or not wait >= 0:
            raise InvalidArgument("wait", f"must be seconds >= 0, got {wait!r}")
        sk, root = self.trees.keys(key)
        keys = (*root, sk.turn)
        call = token()
        started = _clock.monotonic()
        while True:
            reply = yield contracts.claim_turn(
                root=root, turn=sk.turn, lease_ms=ms, call_token=call
            )
            if contracts.status(reply) != Status.TURN_BUSY:
                claimed = contracts.parsed(contracts.Claimed, check(reply, Ctx(key, keys)))
                return Fence(f"{claimed.token}:{call}", claimed.token)
            waited = _clock.monotonic() - started
            left = wait - waited
            if left <= 0:
                raise TurnBusy(key, waited)
            held = contracts.parsed(contracts.TurnHeld, reply).pttl / 1000
            step = max(0.01, min(left, WAKE_STEP, held if held > 0 else WAKE_STEP))
            yield Commands([("BLPOP", sk.wake, f"{step:.3f}")])

    def renew(self, key: str, fence: Fence, lease: float) -> Op[None]:
        """Extend the turn's lease to ``lease`` seconds from now; ``TurnLost`` when it is no
        longer the caller's.
        """
        ms = lease_ms(lease)
        sk = self.trees.keys(key)[0]
        reply = yield contracts.renew_turn(turn=sk.turn, fence=fence.value, lease_ms=ms)
        check(reply, Ctx(key, (sk.turn,), token=fence.token))

    def release(self, key: str, fence: Fence) -> Op[bool]:
        """Give the turn back (and wake one waiter); False when it was not the caller's any
        more (its lease ran out, or another claim took it).
        """
        sk = self.trees.keys(key)[0]
        call = contracts.release_turn(
            turn=sk.turn, wake=sk.wake, fence=fence.value, wake_ms=WAKE_MS
        )
        reply = yield call
        return contracts.parsed(contracts.Released, check(reply, Ctx(key, call.keys))).released
