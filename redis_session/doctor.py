"""What a server must be for the store, checked: :func:`diagnose` (``redis-session doctor``).

Each check is ``ok``, ``warn`` (works, but a risk the operator should know of) or ``problem``
(the store will lose or refuse data there). Everything is read with ``INFO``, which any user
may run; ``CONFIG GET`` (for the ``save`` schedule) and ``ACL DRYRUN`` (for the rights of the
store's user) need admin rights on most servers: refused, the check says so once and moves on.

- **eviction policy**: the store needs ``noeviction``. Any other policy can evict one key of a
  session (reported as ``CorruptData``, never hidden) or the encryption keyring.
- **memory limit**: ``maxmemory`` 0 lets Redis take all the machine's memory.
- **persistence**: neither AOF nor RDB snapshots: a restart loses every session.
- **replication**: a replica takes no writes.
- **ACL**: every command the store sends (:func:`redis_session.acl.commands`) allowed for the
  user, on a key under the prefix.
- **cluster**: the cluster's state is ``ok``, every slot is served, and no slot is open for a move
  (marked migrating/importing: a reshard in progress or aborted), with the fix command.
- **index registry** (cluster): the three copies of the registry of index shards answer, agree,
  sit on different nodes, and name every index shard that exists (an unnamed one hides its
  sessions from ``list_sessions``), with the fix.
- **server version**: Redis >= 7.0 or Valkey.
- **fast path**: which pieces of this process's fast path
  (:mod:`redis_session._transport.fast`) are on; a piece turned off (a dependency that moved,
  ``REDIS_SESSION_PURE_PYTHON``) is a warning.
- **index records**: members of the session index that are not a key this store wrote (they
  are skipped by ``list_sessions``).
- **keys under the prefix**: a sample of up to :data:`KEY_SAMPLE` keys under the prefix
  (``SCAN``), each checked against the store's key schema: a name the store does not use, a
  value of another type than the store writes under that name, or a session hash without the
  store's schema version is another program's key (the store skips it in listings, refuses
  to read it as a session and never deletes it). Named, the first :data:`NAMED` of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from . import acl, codec
from ._transport import fast as _fast
from .keys import KeySchema

OK, WARN, PROBLEM = "ok", "warn", "problem"
SCAN_COUNT = 1000
KEY_SAMPLE = 10_000
"""Keys under the prefix the doctor looks at, at most (SCAN, in pipelines of SCAN_COUNT)."""
NAMED = 5
"""Foreign keys named in the report (the count covers all of them)."""


@dataclass
class Check:
    """One finding: ``name``, ``status`` (ok / warn / problem), what was seen, what to do."""

    name: str
    status: str
    detail: str
    advice: str = ""


@dataclass
class Report:
    """Every check of :func:`diagnose`; ``ok`` when none is a problem."""

    server: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether no check found a problem (warnings allowed)."""
        return all(c.status != PROBLEM for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        """The report as plain data."""
        return {"server": self.server, "ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def _info(client: Any, section: str) -> dict[str, Any]:
    """``INFO section``; on a cluster client, the first node's."""
    info: Any = client.info(section)
    if info and all(isinstance(v, dict) for v in info.values()) and ":" in next(iter(info)):
        return dict(next(iter(info.values())))  # a cluster client: node -> section
    return dict(info)


def fast_path_check() -> Check:
    """Which pieces of this process's fast path are on (:mod:`redis_session._transport.fast`):
    ``ok`` when all of them, else ``warn`` (the store works the same, some reads are slower).
    """
    status = _fast.STATUS
    if not status.off:
        return Check("fast path", OK, status.summary())
    return Check(
        "fast path",
        WARN,
        status.summary(),
        "reads decode at pydantic's speed where the decoder is off: see docs/production.md, "
        "The fast path",
    )


def diagnose(client: Any, prefix: str = "rs:", *, acl_user: str | None = None) -> Report:
    """Check ``client``'s server for the store under ``prefix`` (see the module docstring).

    ``acl_user``: the user whose rights to check (default: the connection's own user).
    """
    server = _info(client, "server")
    name = "valkey" if "valkey_version" in server else "redis"
    version = str(server.get("valkey_version") or server.get("redis_version", "?"))
    report = Report(server=f"{name} {version}")
    checks = report.checks
    major = int(str(server.get("redis_version", "0")).split(".")[0] or 0)
    checks.append(
        Check("server version", OK, report.server)
        if major >= 7
        else Check("server version", PROBLEM, report.server, "use Redis >= 7.0 or Valkey")
    )
    checks.append(fast_path_check())
    memory = _info(client, "memory")
    policy = str(memory.get("maxmemory_policy", "?"))
    limit = int(memory.get("maxmemory", 0))
    if policy == "noeviction":
        checks.append(Check("eviction policy", OK, "noeviction"))
    else:
        checks.append(
            Check(
                "eviction policy",
                PROBLEM,
                f"{policy}: Redis may evict single keys of a session, or the keyring",
                "CONFIG SET maxmemory-policy noeviction (writes are then refused at the limit, "
                "with OutOfMemoryError, and nothing is lost)",
            )
        )
    checks.append(
        Check("memory limit", OK, f"maxmemory {limit:,} bytes")
        if limit
        else Check(
            "memory limit",
            WARN,
            "maxmemory 0: no limit, Redis can take all the machine's memory",
            "set maxmemory (with noeviction)",
        )
    )
    persistence = _info(client, "persistence")
    aof = bool(int(persistence.get("aof_enabled", 0)))
    save = _config(client, "save")
    if aof:
        checks.append(Check("persistence", OK, "append-only file"))
    elif save is None:
        checks.append(
            Check(
                "persistence",
                WARN,
                "no append-only file; the snapshot schedule is unknown (CONFIG GET refused)",
                "make sure RDB snapshots or AOF are on",
            )
        )
    elif save:
        checks.append(Check("persistence", OK, f"RDB snapshots ({save})"))
    else:
        checks.append(
            Check(
                "persistence",
                WARN,
                "neither AOF nor RDB snapshots: a restart loses every session",
                "appendonly yes (appendfsync everysec) or a save schedule",
            )
        )
    replication = _info(client, "replication")
    role = str(replication.get("role", "?"))
    if role in ("slave", "replica"):
        checks.append(
            Check("replication", PROBLEM, "a replica: it takes no writes", "connect to the primary")
        )
    else:
        replicas = int(replication.get("connected_slaves", 0))
        checks.append(Check("replication", OK, f"{role}, {replicas} replica(s)"))
    checks.append(_acl_check(client, prefix, acl_user))
    if isinstance(client, redis.RedisCluster):
        checks.append(_cluster_check(client))
        checks.append(_registry_check(client, prefix))
    checks.append(_index_check(client, prefix))
    checks.append(_keys_check(client, prefix))
    return report


def _config(client: Any, name: str) -> str | None:
    try:
        got: Any = client.config_get(name)
    except redis.ResponseError:
        return None
    if got and all(isinstance(v, dict) for v in got.values()):
        got = next(iter(got.values()))
    return None if name not in got else str(got[name])


def _acl_check(client: Any, prefix: str, user: str | None) -> Check:
    try:
        who = user or str(client.acl_whoami())
    except redis.ResponseError as exc:
        return Check("ACL", WARN, f"ACL WHOAMI refused: {exc}", "run doctor as an admin")
    key = f"{prefix}doctor:probe"
    channel = KeySchema(prefix).events_channel
    missing: list[str] = []
    for command in acl.commands():
        words = command.split("|")
        fill = channel if command in ("subscribe", "publish", "ssubscribe", "spublish") else key
        for count in (3, 2, 1, 0, 4, 5):  # DRYRUN checks arity: find the count that fits
            try:
                answer = client.execute_command("ACL", "DRYRUN", who, *words, *[fill] * count)
            except redis.exceptions.NoPermissionError as exc:
                return Check(
                    "ACL",
                    WARN,
                    f"the rights of user {who!r} cannot be checked here ({exc})",
                    f"run `redis-session doctor --acl-user {who}` as an admin",
                )
            except redis.ResponseError:
                continue  # this probe does not fit the command (arity, a subcommand): another
            text = answer.decode() if isinstance(answer, bytes) else str(answer)
            if text != "OK":
                missing.append(command)
            break
    if missing:
        return Check(
            "ACL",
            PROBLEM,
            f"user {who!r} may not run {', '.join(missing)} on keys under {prefix!r}",
            f"ACL SETUSER as `redis-session acl --prefix {prefix} --user {who}` prints",
        )
    return Check("ACL", OK, f"user {who!r} may run every command the store sends")


def open_slots(client: Any) -> list[str]:
    """The slots a primary of cluster ``client`` has marked migrating or importing (its own
    line of ``CLUSTER NODES``), as ``"<slot> migrating on <host:port>"`` / ``"... importing
    on ..."``.
    """
    found: list[str] = []
    for node in client.get_primaries():
        nodes = client.get_redis_connection(node).execute_command("CLUSTER NODES")
        for entry in nodes.values():  # redis-py parses the reply: address -> node's fields
            if "myself" in str(entry.get("flags", "")):
                for move in entry.get("migrations", ()):
                    found.append(f"{move['slot']} {move['state']} on {node.host}:{node.port}")
    return sorted(found)


def _cluster_check(client: Any) -> Check:
    info: Any = client.cluster_info()
    if isinstance(info, dict) and info and all(isinstance(v, dict) for v in info.values()):
        info = next(iter(info.values()))
    state = str(info.get("cluster_state", "?"))
    slots = int(info.get("cluster_slots_ok", 0))
    node = client.get_default_node()
    fix = f"redis-cli --cluster fix {node.host}:{node.port}"
    if state != "ok" or slots != 16384:
        return Check(
            "cluster",
            PROBLEM,
            f"state {state}, {slots} of 16384 slots served: the other slots have no owner that"
            " answers, and every operation on their sessions fails",
            fix,
        )
    moving = open_slots(client)
    if moving:
        return Check(
            "cluster",
            PROBLEM,
            f"state ok, 16384 slots served, {len(moving)} slot(s) open for a move: "
            + ", ".join(moving[:NAMED])
            + ": operations on their sessions wait up to failover_window, then SlotMigrating"
            " (a reshard in progress, or one that was aborted)",
            f"if no reshard is running: {fix}",
        )
    return Check("cluster", OK, "state ok, 16384 slots served, no slot open for a move")


def _registered(client: Any, schema: KeySchema) -> tuple[dict[str, set[str]], list[str]]:
    """The members of each registry copy that answers, and the copies that do not (named
    with their error).
    """
    held: dict[str, set[str]] = {}
    down: list[str] = []
    for copy in schema.index_registries:
        try:
            held[copy] = {bytes(m).decode() for m in client.smembers(copy)}
        except redis.RedisError as exc:
            down.append(f"{copy} ({exc})")
    return held, down


def _registry_check(client: Any, prefix: str) -> Check:
    """On a cluster: the registry copies answer, agree, sit on different nodes, and name every
    index shard that exists (probed: 16384 EXISTS in pipelines).
    """
    schema = KeySchema(prefix, cluster=True)
    held, down = _registered(client, schema)
    named = set().union(*held.values())
    shards = schema.all_indexes()
    found: set[str] = set()
    for i in range(0, len(shards), SCAN_COUNT):
        batch = shards[i : i + SCAN_COUNT]
        pipe = client.pipeline(transaction=False)
        for shard in batch:
            pipe.exists(shard)
        found.update(s for s, n in zip(batch, pipe.execute(), strict=True) if n)
    unnamed = sorted(found - named)
    if unnamed:
        return Check(
            "index registry",
            PROBLEM,
            f"{len(unnamed)} index shard(s) exist that no registry copy names ("
            + ", ".join(unnamed[:NAMED])
            + "): list_sessions does not show their sessions",
            "run store.repair_index() (it probes every shard and names them in every copy)",
        )
    if down:
        return Check(
            "index registry",
            WARN,
            f"{len(down)} of 3 registry copies unreachable: " + ", ".join(down),
            "bring their node back; listing repairs the copy then",
        )
    short = {copy: len(named - members) for copy, members in held.items() if named - members}
    nodes = {client.get_node_from_key(copy).name for copy in schema.index_registries}
    primaries = len({n.name for n in client.get_primaries()})
    if short:
        detail = ", ".join(f"{copy} lacks {n}" for copy, n in short.items())
        return Check(
            "index registry",
            WARN,
            f"the registry copies disagree: {detail} of {len(named)} shards",
            "list_sessions gives each copy what it lacks: run one listing",
        )
    if len(nodes) < min(3, primaries):
        return Check(
            "index registry",
            WARN,
            f"the 3 registry copies sit on {len(nodes)} node(s) of {primaries}: one node down"
            " stops listing",
            "spread the slots of "
            + ", ".join(f"{c} (slot {client.keyslot(c)})" for c in schema.index_registries)
            + " over different primaries (redis-cli --cluster reshard)",
        )
    return Check(
        "index registry",
        OK,
        f"3 copies on {len(nodes)} nodes name all {len(found)} index shards that exist",
    )


def _index_check(client: Any, prefix: str) -> Check:
    schema = KeySchema(prefix, cluster=isinstance(client, redis.RedisCluster))
    indexes = (
        schema.all_indexes()
        if not schema.cluster
        else sorted(set().union(*_registered(client, schema)[0].values()))
    )
    bad = total = 0
    for index in indexes:
        for member, _ in client.zscan_iter(index, count=SCAN_COUNT):
            total += 1
            try:
                bytes(member).decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
    if bad:
        return Check(
            "index records",
            WARN,
            f"{bad} of {total} index members are not a key this store wrote (list_sessions "
            "skips them)",
            "ZREM them from the index",
        )
    return Check("index records", OK, f"{total} sessions indexed")


def _keys_check(client: Any, prefix: str) -> Check:
    schema = KeySchema(prefix)
    names: list[str] = []
    for raw in client.scan_iter(match=acl.glob_escape(prefix) + "*", count=SCAN_COUNT):
        names.append(bytes(raw).decode("utf-8", "replace") if isinstance(raw, bytes) else raw)
        if len(names) >= KEY_SAMPLE:
            break
    foreign: list[str] = []
    for i in range(0, len(names), SCAN_COUNT):
        batch = names[i : i + SCAN_COUNT]
        pipe = client.pipeline(transaction=False)
        for name in batch:
            pipe.type(name)
            pipe.hexists(name, "v") if schema.expected_type(name) == "hash" else pipe.exists(name)
        replies = pipe.execute(raise_on_error=False)
        for n, name in enumerate(batch):
            held, versioned = codec.type_name(replies[2 * n]), replies[2 * n + 1]
            wanted = schema.expected_type(name)
            if held == "none":
                continue  # gone since the scan
            kind = name[len(prefix) :].partition(":{")[0]
            if wanted != held or (kind in ("meta", "child") and versioned is not True):
                foreign.append(f"{name!r} ({held})")
    sampled = f"{len(names):,} keys" + (" (a sample)" if len(names) >= KEY_SAMPLE else "")
    if foreign:
        shown = ", ".join(foreign[:NAMED]) + (", ..." if len(foreign) > NAMED else "")
        return Check(
            "keys under the prefix",
            WARN,
            f"{len(foreign):,} of {sampled} under {prefix!r} are not this store's: {shown}",
            "move other programs' keys out of the store's prefix (the store skips them, "
            "refuses to read them as sessions and never deletes them)",
        )
    return Check("keys under the prefix", OK, f"{sampled} under {prefix!r}, all the store's")
