"""The fast path: every use of another project's private names, in one module, checked once.

The store runs on public APIs: redis-py's clients, pools and connections, hiredis, pydantic's
validation and ``model_construct``. A few things are faster, or cleaner, through names the
projects do not publish (a module or attribute starting with ``_``, an object's layout). Each
such *piece* lives here, with the names it uses, a check of those names made once per process
(:func:`probe`, run when :mod:`redis_session.codec` is imported) and a public fallback that the
rest of the package takes whenever the piece is off:

============  ==================================================  ===========================
piece         private names                                       off: the package uses
============  ==================================================  ===========================
decoder       ``_speedups`` (C) writes pydantic's model slots     pydantic's validation
              (``__pydantic_fields_set__``, ``__pydantic_extra__``
              ``__pydantic_private__``) by their member
              descriptors' offsets, shares one fields set per
              combination of fields, and takes the models it
              builds out of the collector's tracking
reclass       an instance validated as the codec's decode-only    ``Message`` validation
              subclass of ``Message`` gets ``__class__`` =
              ``Message`` (same fields, same layout)
idle-order    redis.asyncio pool's ``_available_connections``     redis-py's order
              (a connected idle connection handed out first)
loop-close    redis.asyncio pool's ``_available_connections`` /   nothing closed: sockets go
              ``_in_use_connections``, ``ClusterNode._connections``,  when collected
              a connection's ``_writer``/``_reader``, asyncio's
              transport ``_sock`` / ``_closing``, a cluster
              client's ``_initialize``
cluster-seed  ``RedisCluster.commands_parser.commands``            the new client asks a node
============  ==================================================  ===========================

What each buys is measured in docs/benchmarks.md ("The fast path"); a piece worth less than
3% of the fleet loop or of a cold read was removed rather than kept here.

**The check.** :func:`probe` looks at every name a piece uses (present, of the type and layout
expected) and, for the two pieces that build models, decodes a fixed set of stored messages
both ways and compares the results field by field (types, fields set, equality, hashing,
pickling). A piece whose check fails is off for the process, and one WARNING line on the
``redis_session`` logger names the piece, what failed and the versions installed (an INFO line
where the C module was not built: a pure-Python install, expected). Nothing else
changes: every read and write gives the same result on either path (the contract suite runs
on both). ``REDIS_SESSION_PURE_PYTHON=1`` turns every piece off.

**Versions.** A piece is on for any version of redis-py and pydantic while its check passes,
not only for the versions the suite ran on (:data:`TESTED`): the checks test exactly the
assumptions a piece makes (a name, a layout, the models it builds against pydantic's own), so
a release that breaks one turns the piece off rather than the store, and a release that keeps
them all needs no release of ours to stay fast. ``redis-session --version`` and ``doctor``
say which pieces are on.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import pickle
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from enum import Enum
from importlib import metadata
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:  # the type a type checker knows; at run time, type(BaseModel) (public)
    from pydantic._internal._model_construction import ModelMetaclass as ModelMetaclass
else:
    ModelMetaclass = type(BaseModel)
"""pydantic's model metaclass, as ``type(BaseModel)`` gives it (redis_session.models derives
the one that turns a constructor's ``ValidationError`` into ``InvalidArgument``)."""

log = logging.getLogger("redis_session")

PURE_ENV = "REDIS_SESSION_PURE_PYTHON"
"""The environment variable that turns every piece off (set to anything but empty)."""

TESTED = {"redis": "8.2", "pydantic": "2.10-2.14", "pydantic-core": "2.27-2.50", "python": "3.11"}
"""The versions the suite ran the fast path on (each piece stays on beyond them while its
check passes: see the module docstring)."""

PIECES = ("decoder", "reclass", "idle-order", "loop-close", "cluster-seed")


@dataclass(frozen=True)
class Piece:
    """One piece of the fast path: whether it is on, and why not."""

    name: str
    on: bool
    why_off: str = ""


@dataclass
class Status:
    """Which pieces of the fast path this process runs (see :func:`probe`)."""

    pieces: dict[str, Piece] = field(default_factory=dict)

    @property
    def on(self) -> list[str]:
        """The names of the pieces that are on."""
        return [p.name for p in self.pieces.values() if p.on]

    @property
    def off(self) -> list[Piece]:
        """The pieces that are off."""
        return [p for p in self.pieces.values() if not p.on]

    def summary(self) -> str:
        """One line: ``on`` (every piece), ``off (why)`` or ``partly on (...)``."""
        if not self.off:
            return "on (" + ", ".join(self.on) + ")"
        whys = {p.why_off for p in self.off}
        reasons = "; ".join(f"{p.name}: {p.why_off}" for p in self.off)
        if not self.on:
            return f"off ({whys.pop() if len(whys) == 1 else reasons})"
        return f"partly on ({', '.join(self.on)}; off: {reasons})"


STATUS = Status()
_probed = threading.Lock()

# -- what the rest of the package calls (set by probe(); None / False: the piece is off) ------

DECODE: Callable[[Sequence[bytes]], tuple[list[Any], list[int], int]] | None = None
"""The C decoder's ``decode(items)``: the messages, None for each element not in the encoder's
own form, the positions of those, and the bytes of the elements that are bytes."""
RECLASS = False
"""Whether :func:`reclass` may be called."""


def versions() -> dict[str, str]:
    """The installed versions the fast path depends on."""
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in ("redis", "hiredis", "pydantic", "pydantic-core"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def _turn_off(name: str, why: str, level: int = logging.WARNING) -> None:
    STATUS.pieces[name] = Piece(name, False, why)
    found = ", ".join(f"{k} {v}" for k, v in versions().items())
    log.log(
        level,
        "redis_session: fast path piece %r off (%s); the public path serves (%s)",
        name,
        why,
        found,
    )


def probe(
    message: type[BaseModel],
    tool_call: type[BaseModel],
    roles: type[Enum],
    usage: type[BaseModel],
) -> Status:
    """Check every piece once per process (later calls return the same :data:`STATUS`), the
    two that build models against pydantic's validation of ``message`` and ``tool_call`` (the
    package's ``Message``, ``ToolCall`` and ``MessageRole``, given by :mod:`redis_session.codec`:
    this module imports nothing of the package's models, which derive their metaclass here).
    """
    global DECODE, RECLASS
    with _probed:
        if STATUS.pieces:
            return STATUS
        if os.environ.get(PURE_ENV):
            for name in PIECES:
                STATUS.pieces[name] = Piece(name, False, f"{PURE_ENV} is set")
            return STATUS
        checks: dict[str, Callable[[], Any]] = {
            "decoder": lambda: _check_decoder(message, tool_call, roles, usage),
            "reclass": lambda: _check_reclass(message, tool_call),
            "idle-order": _check_idle_order,
            "loop-close": _check_loop_close,
            "cluster-seed": _check_cluster_seed,
        }
        for name, check in checks.items():
            try:
                found = check()
            except NotBuilt as exc:  # installed without a C compiler: expected, said at INFO
                _turn_off(name, str(exc), logging.INFO)
                continue
            except Exception as exc:  # any surprise turns the piece off, never the import
                _turn_off(name, f"{type(exc).__name__}: {exc}")
                continue
            STATUS.pieces[name] = Piece(name, True)
            if name == "decoder":
                DECODE = found
            elif name == "reclass":
                RECLASS = True
        return STATUS


class Unexpected(Exception):
    """A private name is not what a piece expects."""


class NotBuilt(Exception):
    """The C module was not built (no C compiler at install, or a pure-Python wheel)."""


def _expect(ok: object, what: str) -> None:
    if not ok:
        raise Unexpected(what)


# -- decoder and reclass: models built without pydantic's validation ---------------------------

SLOTS = ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
"""The slots of pydantic's BaseModel the C decoder fills (besides ``__dict__``)."""

SAMPLES: tuple[bytes, ...] = (
    b'{"id":"a1","role":"user","content":"hi \\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\n",'
    b'"timestamp":"2026-01-02T03:04:05.123456Z"}',
    b'{"id":"b2","role":"assistant","timestamp":"2026-01-02T03:04:05Z","tool_calls":'
    b'[{"id":"c1","name":"f","input":"{}","output":"ok","thought":true},'
    b'{"id":"c2","name":"g","input":"[1]"}],"author":"x"}',
    b'{"id":"c3","tokens":7,"role":"tool","content":"\xc3\xa9\xe2\x82\xac",'
    b'"timestamp":"1999-12-31T23:59:59.000001Z"}',
    b'{"id":"e5","tokens":0,"role":"user","timestamp":"2026-01-02T03:04:05Z"}',
    b'{"id":"f6","tokens":12,"role":"assistant","content":"x","timestamp":"2026-01-02T03:04:05Z",'
    b'"usage":{"input_tokens":1099511627776,"output_tokens":5,"requests":1}}',
    b'{"id":"g7","role":"assistant","timestamp":"2026-01-02T03:04:05Z","author":"a",'
    b'"usage":{"requests":2}}',
    b'{"id":"h8","role":"assistant","timestamp":"2026-01-02T03:04:05Z","usage":{}}',
    b'{"id":"i9","role":"assistant","timestamp":"2026-01-02T03:04:05Z",'
    b'"usage":{"input_tokens":3,"requests":1}}',
    b'{"id":"d4","role":"model","timestamp":"2026-01-02T03:04:05.500000Z","tool_calls":'
    b'[{"id":"c1","name":"f","input":""}]}',
)
"""Stored messages in the encoder's own form (``codec.encode_message``), every shape of it."""
FOREIGN = b'{"role":"user","id":"x","timestamp":"2026-01-02T03:04:05Z"}'
"""A message in another writer's form: the C decoder leaves it to validation."""


def _same(built: Any, reference: Any, what: str, tool_call: type[BaseModel]) -> None:
    """``built`` is what pydantic's validation gives (``reference``), as a user sees it (a
    message or a ``tool_call``).
    """
    _expect(type(built) is type(reference), f"{what}: type {type(built).__name__}")
    _expect(built == reference, f"{what}: not equal to pydantic's")
    _expect(list(vars(built)) == list(vars(reference)), f"{what}: fields in another order")
    _expect(
        [type(v) for v in vars(built).values()] == [type(v) for v in vars(reference).values()],
        f"{what}: field types differ",
    )
    _expect(built.model_fields_set == reference.model_fields_set, f"{what}: fields set differs")
    _expect(built.__pydantic_extra__ is None, f"{what}: extra is not None")
    _expect(built.__pydantic_private__ is None, f"{what}: private is not None")
    _expect(built.model_dump_json() == reference.model_dump_json(), f"{what}: JSON differs")
    _expect(hash(built) == hash(reference), f"{what}: hash differs")
    back = pickle.loads(pickle.dumps(built))
    _expect(back == built and type(back.model_fields_set) is set, f"{what}: pickling")
    _expect(copy.copy(built) == built, f"{what}: copy")
    if "timestamp" in vars(built):  # a message (not a tool call, not a usage)
        offset = built.timestamp.utcoffset()
        _expect(offset is not None and not offset, f"{what}: timestamp not UTC")
        _expect(built.model_copy(update={"content": "z"}).content == "z", f"{what}: model_copy")
        for call, ref in zip(built.tool_calls, reference.tool_calls, strict=True):
            _same(call, ref, f"{what}'s tool call", tool_call)
        if built.usage is not None or reference.usage is not None:
            _same(built.usage, reference.usage, f"{what}'s usage", tool_call)


def _check_decoder(
    message: type[BaseModel], tool_call: type[BaseModel], roles: type[Enum], usage: type[BaseModel]
) -> Callable[[Sequence[bytes]], tuple[list[Any], list[int], int]]:
    try:
        from . import _speedups
    except ImportError as exc:
        raise NotBuilt(f"the C module is not built: {exc}") from None
    for name in SLOTS:
        descriptor = _static(BaseModel, name)
        _expect(type(descriptor).__name__ == "member_descriptor", f"BaseModel.{name} is no slot")
    for cls in (message, tool_call, usage):
        _expect(not vars(cls).get("__slots__"), f"{cls.__name__} slots")
        _expect(cls.__dictoffset__ != 0, f"{cls.__name__} has no __dict__")
    _speedups.configure(
        {role.value: role for role in roles},
        message,
        tool_call,
        decoded_utc(),
        _defaults(message),
        _defaults(tool_call),
        SharedFieldsSet,
        usage,
        _defaults(usage),
    )
    built, left, size = _speedups.decode([*SAMPLES, FOREIGN])
    _expect(left == [len(SAMPLES)], f"left {left} for {len(SAMPLES)} samples and one foreign")
    _expect(size == sum(map(len, [*SAMPLES, FOREIGN])), f"size {size}")
    for i, raw in enumerate(SAMPLES):
        _same(built[i], message.model_validate_json(raw), f"sample {i}", tool_call)
    return _speedups.decode


def _check_reclass(message: type[BaseModel], tool_call: type[BaseModel]) -> None:
    class Twin(message):  # type: ignore[valid-type,misc]
        id: str

    for i, raw in enumerate(SAMPLES):
        twin = Twin.model_validate_json(raw)
        _expect(type(twin) is Twin, "a subclass validates as itself")
        object.__setattr__(twin, "__class__", message)
        _same(twin, message.model_validate_json(raw), f"sample {i} re-classed", tool_call)


def reclass(models: list[Any], cls: type) -> None:
    """Make every one of ``models`` (validated as a subclass of ``cls`` that adds no field and
    no slot) an instance of ``cls``. Only while :data:`RECLASS`.
    """
    set_class = object.__setattr__
    for model in models:
        set_class(model, "__class__", cls)


def decoded_utc() -> Any:
    """The tzinfo pydantic-core gives a parsed UTC timestamp (every message the fast pieces
    build carries it; pydantic's own ``Message`` validation gives ``datetime.UTC``).
    """
    from pydantic import AwareDatetime, TypeAdapter

    return TypeAdapter(AwareDatetime).validate_json(b'"2000-01-01T00:00:00Z"').tzinfo


def read_tzinfo() -> Any:
    """The tzinfo of the timestamps a read decodes to on this process's path."""
    return decoded_utc() if (DECODE is not None or RECLASS) else UTC


def _defaults(model: Any) -> dict[str, Any]:
    """Each field's default (None for a field the stored form always holds)."""
    return {
        name: None if f.is_required() or f.default_factory else f.default
        for name, f in model.model_fields.items()
    }


class SharedFieldsSet(set[str]):
    """The ``model_fields_set`` of a message (or tool call) the C decoder built: one set per
    combination of fields, shared by every model decoded with those fields (a set of its own
    per model, made and freed with it, is a share of decoding worth saving). Equal to the set
    validation gives. Refuses to be changed in place, which would change it for the other
    models too; a copy (``copy.copy``, ``set(...)``, ``model_copy``) and a pickled one are
    plain sets.
    """

    __slots__ = ()

    def __copy__(self) -> set[str]:
        return set(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (set, (list(self),))

    def __repr__(self) -> str:
        return repr(set(self))

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "the fields set of a decoded message is shared with other messages: "
            "change a copy of it (set(message.model_fields_set))"
        )

    add = discard = remove = pop = clear = update = _refuse
    difference_update = intersection_update = symmetric_difference_update = _refuse
    __ior__ = __iand__ = __isub__ = __ixor__ = _refuse


# -- idle-order: a connected idle connection first (redis.asyncio pools) -----------------------


def _sample_async_pool() -> Any:
    import redis.asyncio

    return redis.asyncio.BlockingConnectionPool(max_connections=2)


def _check_idle_order() -> None:
    import redis.asyncio

    pool = _sample_async_pool()
    _expect(type(_own(pool, "_available_connections")) is list, "_available_connections")
    _expect(
        callable(getattr(redis.asyncio.ConnectionPool, "get_available_connection", None)),
        "ConnectionPool.get_available_connection",
    )


def idle_connections(pool: Any) -> list[Any] | None:
    """The list of ``pool``'s idle connections (a redis.asyncio pool, which hands out its
    last one next), or None when the piece is off.
    """
    if not STATUS.pieces.get("idle-order", Piece("", False)).on:
        return None
    idle = getattr(pool, "_available_connections", None)
    return idle if type(idle) is list else None


# -- loop-close: the sockets of a closed event loop's connections ------------------------------


def _check_loop_close() -> None:
    import redis.asyncio
    import redis.asyncio.cluster

    pool = _sample_async_pool()
    _expect(type(_own(pool, "_available_connections")) is list, "_available_connections")
    _expect(type(_own(pool, "_in_use_connections")) is set, "_in_use_connections")
    connection = redis.asyncio.Connection()
    _expect(_own(connection, "_reader") is None, "Connection._reader")
    _expect(_own(connection, "_writer") is None, "Connection._writer")
    node = redis.asyncio.cluster.ClusterNode("127.0.0.1", 1)
    _expect(type(_own(node, "_connections")) is list, "ClusterNode._connections")
    cluster = redis.asyncio.RedisCluster("127.0.0.1", 1)
    _expect(type(_own(cluster, "_initialize")) is bool, "RedisCluster._initialize")
    _expect(hasattr(cluster.nodes_manager, "default_node"), "nodes_manager.default_node")
    import asyncio.selector_events as selector

    names: set[str] = set()
    for transport in ("_SelectorTransport", "_SelectorSocketTransport"):
        names.update(getattr(selector, transport).__init__.__code__.co_names)
    _expect({"_sock", "_closing"} <= names, "asyncio transport _sock/_closing")


def _loop_close_on() -> bool:
    return STATUS.pieces.get("loop-close", Piece("", False)).on


def held_connections(client: Any) -> list[Any]:
    """The connections an asyncio ``client`` holds: its pool's idle and busy ones (a
    Sentinel-managed client's sentinel clients' too); a cluster client's, node by node.
    Empty when the piece is off (they are then closed when collected).
    """
    if not _loop_close_on():
        return []
    nodes_manager = getattr(client, "nodes_manager", None)
    if nodes_manager is not None:  # redis.asyncio.RedisCluster
        nodes = {id(n): n for n in (*nodes_manager.nodes_cache.values(),
                                    *nodes_manager.startup_nodes.values())}  # fmt: skip
        return [c for n in nodes.values() for c in getattr(n, "_connections", ())]
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return []
    found = [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
    ]
    for sentinel in getattr(getattr(pool, "sentinel_manager", None), "sentinels", ()):
        found += held_connections(sentinel)
    return found


def forget_topology(client: Any) -> None:
    """Leave an asyncio cluster client as its ``aclose()`` leaves one (no topology, to be
    initialised again), which it does not warn about when freed.
    """
    if _loop_close_on() and getattr(client, "nodes_manager", None) is not None:
        client.nodes_manager.default_node = None
        client._initialize = True


def close_socket(connection: Any) -> bool:
    """Close the socket of an asyncio ``connection`` whose event loop has closed (its own
    ``disconnect()`` needs that loop), so the server sees it go at once and nothing warns
    when it is collected; whether there was one.
    """
    writer = getattr(connection, "_writer", None)
    transport: Any = getattr(writer, "transport", None)
    sock = getattr(transport, "_sock", None)
    closed = False
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.close()
        transport._sock = None  # its __del__ has nothing left to close or warn about
        transport._closing = True  # nor the stream writer's (it asks is_closing())
        closed = True
    connection._reader = connection._writer = None
    return closed


# -- cluster-seed: a new event loop's cluster client starts without asking a node --------------


def _check_cluster_seed() -> None:
    import redis.asyncio

    cluster = redis.asyncio.RedisCluster("127.0.0.1", 1)
    _expect(type(_own(cluster.commands_parser, "commands")) is dict, "commands_parser.commands")


def copy_command_table(fresh: Any, known: Any) -> None:
    """Give the asyncio cluster client ``fresh`` the command table ``known`` fetched (redis-py
    asks the cluster's first primary for it, and a new client cannot start while that node is
    down); nothing when the piece is off or ``fresh`` has one.
    """
    if not STATUS.pieces.get("cluster-seed", Piece("", False)).on:
        return
    table = getattr(known.commands_parser, "commands", None)
    if not fresh.commands_parser.commands and type(table) is dict:
        fresh.commands_parser.commands = table


def _own(obj: Any, name: str) -> Any:
    """``obj``'s own attribute ``name``: an entry of its ``__dict__`` or an object slot of its
    class, not a property or anything else a release may have put in its place.
    """
    held = getattr(obj, "__dict__", None)
    if held is not None and name in held:
        return held[name]
    descriptor = _static(type(obj), name)
    _expect(type(descriptor).__name__ == "member_descriptor", f"{type(obj).__name__}.{name}")
    return descriptor.__get__(obj, type(obj))


def _static(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    raise Unexpected(f"{cls.__name__}.{name} is missing")
