"""How much one script call or one request does at most, and how often an operation tries
again: the bounds that keep every script short (no script may block Redis).

:class:`Limits` holds the ones a store can be given smaller (the tests make them small, to
run long operations in many steps); the rest are constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InvalidArgument

READ_BUDGET = 4 * 1024 * 1024
"""Bytes one read script returns at most; a longer history is read in steps (read_range)."""
STEP_MESSAGES = 2_000
"""Messages one script call copies at most (a merge, an inheriting fork): more go in steps."""
BATCH_MESSAGES = 10_000
"""Messages one append call takes at most (one script call: each message is server time)."""
BATCH_BYTES = 64 * 1024 * 1024
"""Bytes of messages one append call takes at most."""
STEP_BYTES = 1024 * 1024
"""Bytes of messages one step of a copy (a branch's staging) takes at most: ~3 ms of server
time a MiB through a script's arguments (docs/benchmarks.md, "Branch and rewind")."""
STAGE_LEASE_MS = 30_000
"""How long a staged operation's lease and staging list last between two of its steps."""
WRITE_ATTEMPTS = 8
"""Sends of one write whose key, tree or sealed versions kept changing under it."""
READ_ATTEMPTS = 4
"""Reads in steps begun again after the list changed under them."""
DELETE_RETRY_MS = 60_000
"""How long a delete called without an idempotency key keeps its own fresh call token (in the
session's ``gone:`` string, at most ``expired_grace``), so that redis-py's retry of it after a
lost reply (a ``from_url`` client's: ~4 s, ~12 s through Sentinel) answers True, the first
send's result."""
SCAN_COUNT = 1000
"""Index entries (or keys) one step of a listing reads at most."""


@dataclass(slots=True)
class Limits:
    """The per-call bounds of one store."""

    read_budget: int = READ_BUDGET
    step_messages: int = STEP_MESSAGES
    batch_messages: int = BATCH_MESSAGES
    batch_bytes: int = BATCH_BYTES

    def batches(
        self, elements: Sequence[bytes], most: int | None = None, most_bytes: int | None = None
    ) -> list[list[bytes]]:
        """``elements`` in runs that one script call takes (at most ``most`` elements and
        ``most_bytes`` bytes each, at most :attr:`batch_messages` and :attr:`batch_bytes`).
        """
        out: list[list[bytes]] = [[]]
        size = 0
        most = self.batch_messages if most is None else min(most, self.batch_messages)
        budget = self.batch_bytes if most_bytes is None else min(most_bytes, self.batch_bytes)
        for element in elements:
            if out[-1] and (len(out[-1]) >= most or size + len(element) > budget):
                out.append([])
                size = 0
            out[-1].append(element)
            size += len(element)
        return out

    def check_batch(self, elements: Sequence[bytes], argument: str) -> None:
        """Refuse more messages than one script call takes: a batch is one atomic step."""
        if len(self.batches(elements)) > 1:
            raise InvalidArgument(
                argument,
                f"{len(elements):,} messages ({sum(map(len, elements)):,} bytes) are more than "
                f"one atomic append takes (batch_messages={self.batch_messages:,}, "
                f"batch_bytes={self.batch_bytes:,}): append them in several calls",
            )
