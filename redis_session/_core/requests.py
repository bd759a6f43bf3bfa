"""The requests an operation yields to the store that drives it (see ``_core``); built once
per operation step and never changed (plain, not frozen, dataclasses: cheaper to build).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..models import SessionLifecycleEvent

T = TypeVar("T")


@dataclass(slots=True)
class ScriptCall:
    """Run script ``name`` (EVALSHA, reloaded on NOSCRIPT) with these KEYS and ARGV."""

    name: str
    keys: Sequence[str | bytes]
    args: Sequence[bytes | str | int]
    write: bool = True
    """Whether the script may write (only writes wait for replicas)."""
    after: Sequence[tuple[Any, ...]] = ()
    """Read commands sent right behind a read-only script in the same pipeline (one round
    trip, not atomic with it: the caller checks what changed between). With any, the reply is
    the list of every reply, a failed command's exception in its place.
    """


@dataclass(slots=True)
class Commands:
    """Send plain commands in one pipeline; the reply is their replies. Never a MULTI/EXEC
    (Redis refuses MULTI out of memory): what must be read at one moment is a script.
    """

    commands: Sequence[tuple[Any, ...]]
    errors_as_values: bool = False
    """Reply with a failed command's exception in its place instead of raising it."""
    read_only: bool = False
    """Every command only reads (sending them again is safe): on a client the store made
    from a URL they may go out on a pooled connection directly
    (``_transport.url.sync_replies``), the replies as redis-py's protocol reader gives them (a
    hash as a mapping with RESP3, a flat list with RESP2)."""
    direct: bool = False
    """On a cluster, send each command to the node serving its key through that node's own
    client, one after the other, each reply (or error: an unreachable node's, at once) in its
    place: the cluster client spends ~4 s of retries and slot-map refreshes on a dead node.
    A command whose slot moved goes through the cluster client. For the best-effort reads
    and writes of copies kept on several nodes (the registry of index shards).
    """


@dataclass(slots=True)
class Emit:
    """Hand a lifecycle event to the in-process hook; the reply is None."""

    event: SessionLifecycleEvent


@dataclass(slots=True)
class Compute:
    """Run ``fn`` (CPU-bound: scrypt) and reply with its result. The asyncio store runs it in a
    worker thread, so a store's first operation does not stall the event loop for ~0.1 s.
    """

    fn: Callable[[], Any]


Request = ScriptCall | Commands | Emit | Compute
Op = Generator[Request, Any, T]
