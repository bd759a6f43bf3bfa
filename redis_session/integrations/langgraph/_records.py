"""The records of a thread as stored, without I/O: what a ``put`` and a ``put_writes`` send,
how a read's entries become LangGraph's ``CheckpointTuple`` and ``DeltaChannelHistory``, the
lexical ranges a listing reads.

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
from collections.abc import Iterable, Sequence
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

from ...errors import InvalidArgument

THREAD_PREFIX = "langgraph/"
"""A thread's session key: this, then the thread id percent-encoded (no ``/``, no ``:``)."""
PAGE = 100
"""Checkpoints one ``langgraph_read`` call returns at most while listing."""
GUARDED = frozenset({"loop", "input"})
"""The sources of the checkpoints ``exclusive_steps`` allows one of per parent: a step of a run
and a run's input (a fork by ``update_state`` is an ``update``, or a ``fork``)."""


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
