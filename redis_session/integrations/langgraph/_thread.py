"""The operations of the two savers (generators of requests the store runs, see
:mod:`redis_session.extension`): a thread's keys, the calls of this package's scripts
(``_contracts``) and the plain commands beside them. The records they carry: ``_records``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote

from ... import contracts
from ...contracts import Head, Key
from ...errors import ConcurrentChange
from ...extension import Commands, Extension, Op, Request, ScriptCall
from ...status import Ctx, Status, check
from . import _contracts as C
from ._records import Put, thread_key

SCRIPTS = (
    "langgraph_put",
    "langgraph_put_writes",
    "langgraph_read",
    "langgraph_remove",
    "langgraph_dump",
    "langgraph_copy",
    "langgraph_walk",
)
"""This package's scripts (``<name>.lua`` beside this module)."""
_SHARED = resources.files(__package__).joinpath("_langgraph.lua").read_text(encoding="utf-8")
"""What the scripts share (``_langgraph.lua``), put in front of each."""
SOURCES = {
    name: _SHARED
    + "\n"
    + resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    for name in SCRIPTS
}
RUN_PREFIX = "langgraph-run/"
BATCH = 100
"""Checkpoints one ``langgraph_remove`` call takes."""
WALK = 100
"""Ancestors one ``langgraph_walk`` call visits at most."""
MAX_COPY_FIELDS = 1_000_000
"""The largest thread ``copy_thread`` copies (data hash fields: about 2 per checkpoint, 2 per
channel version, 1 per pending write); a larger one raises ``TooLarge``."""


class StepTaken(ConcurrentChange):
    """``exclusive_steps``: another worker already wrote the checkpoint that follows
    ``parent`` in namespace ``checkpoint_ns`` of thread ``key`` (``child`` is its id): this
    worker's run of that step lost the race and stored nothing. Reload the thread
    (``get_state``) and go on from its newest checkpoint.
    """

    def __init__(self, key: str, parent: str, child: str) -> None:
        super().__init__(key, f"checkpoint {parent} already has a child: {child}")
        self.parent = parent
        self.child = child


@dataclass(frozen=True, slots=True)
class ThreadKeys:
    """The Redis keys of one thread, all in its session tree's slot."""

    session: str
    data: str
    order: str


def keys_of(ext: Extension, thread_id: object) -> ThreadKeys:
    """The keys of thread ``thread_id`` under ``ext``'s prefix."""
    key = thread_key(thread_id)
    schema = ext.schema
    body = schema.session(key).meta[len(schema.prefix) + len("meta:") :]
    return ThreadKeys(key, f"{schema.prefix}lgdata:{body}", f"{schema.prefix}lgorder:{body}")


def run_registry(ext: Extension, run_id: str) -> str:
    """The set of the threads that hold checkpoints of run ``run_id`` (in the run's slot)."""
    schema = ext.schema
    meta = schema.session(RUN_PREFIX + quote(run_id, safe="")).meta
    return f"{schema.prefix}lgrun:{meta[len(schema.prefix) + len('meta:') :]}"


def one(request: Request) -> Op[Any]:
    """An operation of one request."""
    return (yield request)


class Scripts:
    """The operations of one saver over one store (its extension point)."""

    def __init__(self, ext: Extension, refresh_on_read: bool) -> None:
        self.ext = ext
        self.refresh_on_read = refresh_on_read

    def _tree_write(
        self, keys: ThreadKeys, build: Callable[[Sequence[Key], Head], ScriptCall], *passed: int
    ) -> Op[Any]:
        """The store's loop for a script that writes the thread's tree (``build`` is given
        the tree's members and head as they are known at each send).
        """
        ext = self.ext
        root = ext.root_keys(keys.session)

        def send(_: Any) -> ScriptCall:
            return build(ext.members(keys.session), ext.head(keys.session))

        ctx = Ctx(keys.session, [*root, keys.data, keys.order])
        return ext.write(keys.session, send, ctx, passed)

    def put(self, plan: Put) -> Op[None]:
        """Store a planned checkpoint; ``StepTaken`` when its guard refuses it."""
        keys = keys_of(self.ext, plan.thread_id)
        root = self.ext.root_keys(keys.session)

        def build(members: Sequence[Key], head: Head) -> ScriptCall:
            return C.langgraph_put(
                root=root, data=keys.data, order=keys.order, members=members, head=head,
                session_key=keys.session, checkpoint=plan.cp, record=plan.record,
                refs=plan.refs, guard=plan.guard, blobs=plan.blobs,
            )  # fmt: skip

        reply = yield from self._tree_write(keys, build, Status.STALE)
        if contracts.status(reply) == Status.STALE:
            parent = plan.guard.partition(b"\0")[2].decode()
            child = bytes(reply[1]).partition(b"\0")[2].decode()
            raise StepTaken(keys.session, parent, child)

    def register_run(self, plan: Put) -> Op[None]:
        """Name the thread in its run's registry (before its checkpoint is stored: the
        registry may name a thread that holds none of the run's, never miss one).
        """
        yield from self.register(plan.thread_id, [plan.run_id])

    def register(self, thread_id: str, runs: Iterable[str]) -> Op[None]:
        """Name the thread in the registries of ``runs`` (each expiring at twice the TTL)."""
        commands: list[tuple[Any, ...]] = []
        ttl = self.ext.options.ttl_ms
        for run_id in runs:
            key = run_registry(self.ext, run_id)
            commands.append(("SADD", key, thread_id))
            if ttl:
                commands.append(("PEXPIRE", key, 2 * ttl))
        if commands:
            yield Commands(commands)

    def put_writes(self, thread_id: str, cp: bytes, triples: list[bytes]) -> Op[int]:
        """Store a task's writes (``plan_writes``' triples); how many were stored."""
        keys = keys_of(self.ext, thread_id)
        root = self.ext.root_keys(keys.session)

        def build(members: Sequence[Key], head: Head) -> ScriptCall:
            return C.langgraph_put_writes(
                root=root, data=keys.data, order=keys.order, members=members, head=head,
                session_key=keys.session, checkpoint=cp, writes=triples,
            )  # fmt: skip

        reply = yield from self._tree_write(keys, build)
        return contracts.parsed(C.Stored, reply).stored

    def read(
        self, thread_id: str, high: bytes, low: bytes, count: int, exact: bytes = b""
    ) -> Op[list[Any]]:
        """``langgraph_read``'s entries (none when the thread is not there)."""
        ext = self.ext
        keys = keys_of(ext, thread_id)
        root = ext.root_keys(keys.session)

        def build(members: Sequence[Key], head: Head) -> ScriptCall:
            return C.langgraph_read(
                root=root, data=keys.data, order=keys.order, members=members, head=head,
                high=high, low=low, count=count, exact=exact,
            )  # fmt: skip

        if self.refresh_on_read and ext.options.ttl_ms:
            reply = yield from self._tree_write(keys, build, Status.NOT_FOUND, Status.EXPIRED)
        else:
            reply = yield build((), ext.head(keys.session)._replace(ttl_ms=0))
        if contracts.status(reply) in (Status.NOT_FOUND, Status.EXPIRED):
            return []
        return contracts.parsed(C.Read, check(reply, Ctx(keys.session))).checkpoints

    def remove(self, thread_id: str, cps: Sequence[bytes]) -> Op[int]:
        """Remove checkpoints ``cps`` of the thread, ``BATCH`` per script."""
        keys = keys_of(self.ext, thread_id)
        ctx = Ctx(keys.session, [keys.data, keys.order])
        removed = 0
        for i in range(0, len(cps), BATCH):
            call = C.langgraph_remove(
                data=keys.data, order=keys.order, checkpoints=cps[i : i + BATCH]
            )
            removed += contracts.parsed(C.Removed, check((yield call), ctx)).removed
        return removed

    def members(self, thread_id: str, low: bytes, high: bytes) -> Op[list[bytes]]:
        """The order zset's members in ``[low, high)`` by lexical range, in pages."""
        keys = keys_of(self.ext, thread_id)
        out: list[bytes] = []
        start = b"[" + low
        while True:
            (page,) = yield Commands(
                [("ZRANGEBYLEX", keys.order, start, b"(" + high, "LIMIT", 0, 1000)],
                read_only=True,
            )
            out += [bytes(m) for m in page]
            if len(page) < 1000:
                return out
            start = b"(" + bytes(page[-1])

    def walk(
        self, thread_id: str, start: bytes, high: bytes, low: bytes, channels: Sequence[str]
    ) -> Op[tuple[list[Any], bytes]]:
        """``WALK`` ancestors of ``start`` at most (see ``langgraph_walk.lua``)."""
        keys = keys_of(self.ext, thread_id)
        call = C.langgraph_walk(
            data=keys.data, order=keys.order, start=start, high=high, low=low, steps=WALK,
            channels=channels,
        )  # fmt: skip
        reply = check((yield call), Ctx(keys.session, [keys.data, keys.order]))
        walked = contracts.parsed(C.Walked, reply)
        return list(walked.walked), bytes(walked.last)

    def forget_run(self, thread_id: str, run_id: str) -> Op[None]:
        """The thread holds no checkpoint of run ``run_id`` any more."""
        keys = keys_of(self.ext, thread_id)
        yield Commands([("ZREM", keys.order, b"g\0" + run_id.encode())])

    def snapshot(self, thread_id: str) -> Op[tuple[list[bytes], list[bytes]]]:
        """One snapshot of the thread's data hash (pairs) and order (members)."""
        keys = keys_of(self.ext, thread_id)
        call = C.langgraph_dump(data=keys.data, order=keys.order, max_fields=MAX_COPY_FIELDS)
        reply = yield call
        dumped = contracts.parsed(
            C.Dumped, check(reply, Ctx(keys.session, [keys.data, keys.order]))
        )
        return [bytes(v) for v in dumped.fields], [bytes(m) for m in dumped.entries]

    def load(self, thread_id: str, fields: list[bytes], entries: list[bytes]) -> Op[None]:
        """Write a dump into the thread (``langgraph_copy``)."""
        keys = keys_of(self.ext, thread_id)
        root = self.ext.root_keys(keys.session)

        def build(members: Sequence[Key], head: Head) -> ScriptCall:
            return C.langgraph_copy(
                root=root, data=keys.data, order=keys.order, members=members, head=head,
                session_key=keys.session, fields=fields, entries=entries,
            )  # fmt: skip

        yield from self._tree_write(keys, build)

    def drop_data(self, thread_id: str, runs: Iterable[str]) -> Op[None]:
        """Unlist the thread from its runs' registries and delete its data and order (after
        the store deleted its session: a put racing the delete leaves no key unheld).
        """
        keys = keys_of(self.ext, thread_id)
        commands: list[tuple[Any, ...]] = [
            ("SREM", run_registry(self.ext, r), str(thread_id)) for r in runs
        ]
        commands.append(("DEL", keys.data, keys.order))
        yield Commands(commands)


def smembers(key: str) -> Commands:
    """Read a run registry."""
    return Commands([("SMEMBERS", key)], read_only=True)


def delete_key(key: str) -> Commands:
    """Delete a run registry."""
    return Commands([("DEL", key)])
