"""What the two savers share, without I/O: key names, the records as stored, the scripts'
calls and the operations that run them through the store's extension point
(:mod:`redis_session.extension`).

A thread's data hash holds, per checkpoint ``cp`` (``<ns>\\0<checkpoint id>``): ``c\\0cp``
its record, ``r\\0cp`` its references (run id, parent, the data fields of the channel values
it holds), ``s\\0cp`` its guarded child (``exclusive_steps``); per channel value
``b\\0<ns>\\0<channel>\\0<version>`` the value and ``n\\0...`` how many checkpoints hold it; per
pending write ``w\\0cp\\0<task id>\\0<index>``. The order zset (every member scored 0, read
by lexical range) holds ``c\\0cp`` per checkpoint, ``w\\0...`` per write and
``u\\0<run id>\\0cp`` per checkpoint of a run, ``g\\0<run id>`` per run it held.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple, cast
from urllib.parse import quote, unquote

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ... import contracts
from ...contracts import Head, Key
from ...errors import ConcurrentChange, InvalidArgument
from ...extension import Commands, Extension, Op, Request, ScriptCall
from ...status import Ctx, Status, check
from . import _contracts as C

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
SOURCES = {
    name: resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    for name in SCRIPTS
}
THREAD_PREFIX = "langgraph/"
"""A thread's session key: this, then the thread id percent-encoded (no ``/``, no ``:``)."""
RUN_PREFIX = "langgraph-run/"
BATCH = 100
"""Checkpoints one ``langgraph_remove`` call takes."""
PAGE = 100
"""Checkpoints one ``langgraph_read`` call returns at most while listing."""
GUARDED = frozenset({"loop", "input"})
"""The sources of the checkpoints ``exclusive_steps`` allows one of per parent: a step of a run
and a run's input (a fork by ``update_state`` is an ``update``, or a ``fork``)."""
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


def thread_key(thread_id: object) -> str:
    """The store session key of LangGraph thread ``thread_id``."""
    return THREAD_PREFIX + quote(str(thread_id), safe="")


def thread_of(key: str) -> str:
    """The thread id of store session ``key`` (the inverse of :func:`thread_key`)."""
    return unquote(key[len(THREAD_PREFIX) :])


def _lp(items: Iterable[bytes]) -> bytes:
    """Length-prefixed items (``<len>:<item>``), as the scripts read them."""
    return b"".join(b"%d:%s" % (len(i), i) for i in items)


def _unlp(data: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        colon = data.index(b":", at)
        n = int(data[at:colon])
        out.append(data[colon + 1 : colon + 1 + n])
        at = colon + 1 + n
    return out


def _text(value: Any) -> bytes:
    text = value if isinstance(value, str) else str(value)
    if "\0" in text:
        raise InvalidArgument("config", f"{text!r}: a NUL character in a thread's names")
    return text.encode("utf-8")


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


def next_version(current: str | int | float | None) -> str:
    """LangGraph's string channel versions (as its in-memory and Postgres savers make them):
    a zero-padded counter, then a random fraction (sortable as text).
    """
    if current is None:
        n = 0
    elif isinstance(current, (int, float)):
        n = int(current)
    else:
        n = int(current.split(".")[0])
    return f"{n + 1:032}.{random.random():016}"


class Put(NamedTuple):
    """A checkpoint ready to send (see ``langgraph_put.lua``)."""

    thread_id: str
    cp: bytes
    record: bytes
    refs: bytes
    guard: bytes
    blobs: list[bytes]
    run_id: str
    config: RunnableConfig


def _typed(serde: SerializerProtocol, value: Any) -> tuple[str, bytes]:
    return serde.dumps_typed(value)


def plan_put(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    exclusive: bool,
) -> Put:
    """Serialize a ``put``: the record, its references and the new channel values."""
    conf = config["configurable"]
    thread_id = str(conf["thread_id"])
    ns = conf.get("checkpoint_ns", "") or ""
    nsb = _text(ns)
    parent = conf.get("checkpoint_id")
    c: dict[str, Any] = dict(checkpoint)
    values: dict[str, Any] = c.pop("channel_values")
    ctype, cdata = _typed(serde, c)
    md = get_checkpoint_metadata(config, metadata)
    mtype, mdata = _typed(serde, md)
    record = ormsgpack.packb([ctype, cdata, mtype, mdata, parent or ""])
    cp = nsb + b"\0" + _text(checkpoint["id"])
    run = md.get("run_id")
    run_id = "" if run is None else str(run)
    fields = [
        b"b\0" + nsb + b"\0" + _text(ch) + b"\0" + _text(v)
        for ch, v in checkpoint["channel_versions"].items()
    ]
    parent_cp = b"" if not parent else nsb + b"\0" + _text(parent)
    refs = _lp([run_id.encode(), parent_cp, *fields])
    blobs: list[bytes] = []
    for ch, v in new_versions.items():
        if ch in values:
            t, data = _typed(serde, values[ch])
            blobs += [
                b"b\0" + nsb + b"\0" + _text(ch) + b"\0" + _text(v),
                t.encode() + b"\0" + data,
            ]
    guarded = exclusive and parent and md.get("source") in GUARDED
    guard = parent_cp if guarded else b""
    out: RunnableConfig = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
        }
    }
    return Put(thread_id, cp, record, refs, guard, blobs, run_id, out)


def plan_writes(
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> tuple[str, bytes, list[bytes]]:
    """Serialize a ``put_writes``: thread id, checkpoint and the scripts' triples."""
    conf = config["configurable"]
    thread_id = str(conf["thread_id"])
    cp = _text(conf.get("checkpoint_ns", "") or "") + b"\0" + _text(conf["checkpoint_id"])
    triples: list[bytes] = []
    for i, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, i)
        t, data = _typed(serde, value)
        packed = ormsgpack.packb([task_id, idx, channel, t, data, task_path])
        triples += [_text(task_id) + b"\0" + str(idx).encode(), b"1" if idx < 0 else b"0", packed]
    return thread_id, cp, triples


def _loads(serde: SerializerProtocol, typed: bytes) -> Any:
    t, _, data = typed.partition(b"\0")
    return serde.loads_typed((t.decode(), data))


def tuple_of(serde: SerializerProtocol, thread_id: str, entry: Sequence[Any]) -> CheckpointTuple:
    """A ``langgraph_read`` entry as LangGraph's ``CheckpointTuple``."""
    cp, record, refs, values, writes = entry
    ns_b, _, cid_b = bytes(cp).partition(b"\0")
    ns, cid = ns_b.decode(), cid_b.decode()
    ctype, cdata, mtype, mdata, parent = ormsgpack.unpackb(record)
    checkpoint = cast(Checkpoint, serde.loads_typed((ctype, cdata)))
    channel_values: dict[str, Any] = {}
    for field, value in zip(_unlp(bytes(refs))[2:], values, strict=True):
        if value is not None:
            channel_values[field.split(b"\0")[2].decode()] = _loads(serde, bytes(value))
    stored = [ormsgpack.unpackb(w) for w in writes if w is not None]
    stored.sort(key=lambda w: writes_sort_key(w[5], w[0], w[1]))
    pending: list[PendingWrite] = [(w[0], w[2], serde.loads_typed((w[3], w[4]))) for w in stored]
    return CheckpointTuple(
        config={
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
        },
        checkpoint={**checkpoint, "channel_values": channel_values},
        metadata=cast(CheckpointMetadata, serde.loads_typed((mtype, mdata))),
        parent_config=(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
            if parent
            else None
        ),
        pending_writes=pending,
    )


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
        """Unlist the thread from its runs' registries, then delete its data and order."""
        keys = keys_of(self.ext, thread_id)
        commands: list[tuple[Any, ...]] = [
            ("SREM", run_registry(self.ext, r), str(thread_id)) for r in runs
        ]
        commands.append(("DEL", keys.data, keys.order))
        yield Commands(commands)


def bounds(ns: str | None, before: str | None) -> tuple[bytes, bytes]:
    """The ``langgraph_read`` range (high, low) of one namespace or all of them."""
    if ns is None:
        return b"(c\1", b"(c\0"
    nsb = _text(ns)
    high = b"(c\0" + nsb + b"\0" + _text(before) if before else b"(c\0" + nsb + b"\1"
    return high, b"(c\0" + nsb + b"\0"


def runs_in(members: Iterable[bytes]) -> set[str]:
    """The run ids of order members ``g\\0<run id>``."""
    return {m[2:].decode() for m in members}


def to_prune(members: Sequence[bytes]) -> list[bytes]:
    """Of the ``c\\0<ns>\\0<id>`` members (sorted), every one but each namespace's newest."""
    drop: list[bytes] = []
    for m, after in itertools.pairwise(members):
        if after[2:].partition(b"\0")[0] == m[2:].partition(b"\0")[0]:
            drop.append(m[2:])
    return drop


class Listing:
    """Which checkpoints of the pages a listing reads it returns (by checkpoint id,
    ``before``, metadata ``filter``, ``limit``).
    """

    def __init__(
        self,
        serde: SerializerProtocol,
        thread_id: str,
        config: RunnableConfig,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> None:
        self.serde, self.thread_id, self.filter = serde, thread_id, filter
        self.wanted = get_checkpoint_id(config)
        self.before_id = get_checkpoint_id(before) if before else None
        self.left = limit
        ns = config["configurable"].get("checkpoint_ns")
        self.exact = b""
        if self.wanted and ns is not None:
            self.exact = _text(ns) + b"\0" + _text(self.wanted)
        self.high, self.low = bounds(ns, self.before_id)
        self.count = PAGE if filter or limit is None else max(1, min(limit, PAGE))

    @property
    def done(self) -> bool:
        """Whether the listing needs no more pages."""
        return self.left is not None and self.left <= 0

    def take(self, page: Sequence[Any]) -> list[CheckpointTuple]:
        """The checkpoints of ``page`` the listing returns; moves the range past it."""
        out: list[CheckpointTuple] = []
        for entry in page:
            if self.done:
                break
            cid = bytes(entry[0]).partition(b"\0")[2].decode()
            if self.wanted and cid != self.wanted:
                continue
            if self.before_id and cid >= self.before_id:
                continue
            tup = tuple_of(self.serde, self.thread_id, entry)
            if self.filter and not all(tup.metadata.get(k) == v for k, v in self.filter.items()):
                continue
            if self.left is not None:
                self.left -= 1
            out.append(tup)
        if page:
            self.high = b"(c\0" + bytes(page[-1][0])
        return out

    def last(self, page: Sequence[Any]) -> bool:
        """Whether ``page`` was the listing's last."""
        return self.done or bool(self.exact) or len(page) < self.count


def point(serde: SerializerProtocol, config: RunnableConfig) -> Listing:
    """The listing of ``get_tuple``: the checkpoint ``config`` names, else its namespace's
    newest.
    """
    conf = dict(config["configurable"])
    conf["checkpoint_ns"] = conf.get("checkpoint_ns", "") or ""
    return Listing(serde, str(conf["thread_id"]), {"configurable": conf}, None, None, 1)


def smembers(key: str) -> Commands:
    """Read a run registry."""
    return Commands([("SMEMBERS", key)], read_only=True)


def delete_key(key: str) -> Commands:
    """Delete a run registry."""
    return Commands([("DEL", key)])


class DeltaWalk:
    """LangGraph's ``get_delta_channel_history`` over the pages of ``langgraph_walk``: per
    channel, the writes of the ancestors back to the nearest one holding a value of it (the
    seed), as ``InMemorySaver`` gives them.
    """

    def __init__(self, serde: SerializerProtocol, config: RunnableConfig, channels: Sequence[str]):
        self.serde = serde
        self.channels = list(channels)
        self.listing = point(serde, config)
        self.start = self.listing.exact
        self.remaining = set(channels)
        self.collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        self.seeds: dict[str, Any] = {}

    def take(self, walked: Sequence[Any], last: bytes) -> bool:
        """Fold one page in; whether the walk goes on (from ``last``)."""
        for _cp, found, writes in walked[1:]:
            stored = sorted(
                (ormsgpack.unpackb(w) for w in writes if w is not None),
                key=lambda w: writes_sort_key(w[5], w[0], w[1]),
            )
            for w in reversed(stored):
                if w[2] in self.remaining:
                    value = self.serde.loads_typed((w[3], w[4]))
                    self.collected[w[2]].append((w[0], w[2], value))
            for i in range(0, len(found), 2):
                channel = bytes(found[i]).decode()
                self.seeds[channel] = _loads(self.serde, bytes(found[i + 1]))
                self.remaining.discard(channel)
        self.start = last
        return bool(last) and bool(self.remaining)

    def result(self) -> dict[str, DeltaChannelHistory]:
        """The history of each channel asked for."""
        out: dict[str, DeltaChannelHistory] = {}
        for channel in self.channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(self.collected[channel]))}
            if channel in self.seeds:
                entry["seed"] = self.seeds[channel]
            out[channel] = entry
        return out
