"""Encryption at rest: nothing said in cleartext, loud failures, bound ciphertexts, rotation."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest

from redis_session import (
    ChildSessionConfig,
    CorruptData,
    DecryptionFailed,
    EncryptionError,
    Message,
    PassphraseRequired,
    RedisStore,
    RekeyProgress,
    Session,
    SessionError,
    SessionNotEncrypted,
    ToolCall,
    WrongPassphrase,
    crypto,
)
from tests.conftest import Backend, StoreFactory

WORK = 10  # scrypt n = 2**10 keeps tests fast; the default is 2**15
OLD, NEW = "correct horse battery staple", "tr0ub4dor&3"


def raw_values(backend: Backend) -> dict[bytes, list[bytes]]:
    """Every key under the test's prefix with every name and value it holds."""
    client = backend.sync_client()
    out: dict[bytes, list[bytes]] = {}
    for key in client.scan_iter(match=f"{backend.prefix}*", count=1000):
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "hash":
            values = [b for pair in client.hgetall(key).items() for b in pair]
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "zset":
            values = client.zrange(key, 0, -1)
        elif kind == "set":
            values = list(client.smembers(key))
        elif kind == "stream":  # the event log: key names and event fields, no content
            values = [v for _, fields in client.xrange(key) for f in fields.items() for v in f]
        else:
            values = [client.get(key)]
        out[bytes(key)] = [bytes(v) for v in values]
    return out


def leaks(backend: Backend, markers: list[str]) -> list[tuple[bytes, str]]:
    found = []
    for key, values in raw_values(backend).items():
        for marker in markers:
            needle = marker.encode()
            if needle in key or any(needle in v for v in values):
                found.append((key, marker))
    return found


def marker(tag: str) -> str:
    return f"MARK-{tag}-{uuid.uuid4().hex[:12]}"


async def test_nothing_said_sits_in_redis_as_cleartext(
    make_store: StoreFactory, backend: Backend
) -> None:
    store = make_store(passphrase=OLD, kdf_work=WORK)
    m = {name: marker(name) for name in (
        "content", "input", "output", "sig", "meta", "meta2", "update", "child", "summary",
        "merge", "compact", "history", "appended",
    )}  # fmt: skip
    await store.create(
        Session(
            key="s1",
            metadata={"note": m["meta"]},
            history=[Message(role="user", content=m["history"])],
        )
    )
    call = ToolCall(
        id="c1", name="lookup", input=m["input"], output=m["output"],
        thought=True, thought_signature=m["sig"].encode(),
    )  # fmt: skip
    await store.append_message("s1", Message(role="assistant", content=m["content"]))
    await store.append_messages("s1", [Message(role="assistant", tool_calls=[call])])
    await store.update_metadata("s1", set={"other": m["meta2"]})
    await store.update(Session(key="s1", metadata={"note": m["update"], "other": m["meta2"]}))
    child = await store.fork_child("s1", "researcher", ChildSessionConfig(inherit_history=1))
    await store.append_child_message(child.key, Message(role="user", content=m["child"]))
    summary_child = await store.fork_child("s1", "writer")
    await store.merge_child(child.key, "")
    await store.merge_child(summary_child.key, m["merge"])
    await store.compact_messages("s1", 0, m["compact"])
    last = Message(role="user", content="with metadata")
    await store.append_message("s1", last, metadata={"turn": m["appended"]})

    assert leaks(backend, list(m.values())) == []
    session = await store.get("s1")
    contents = [msg.content for msg in session.history]
    assert contents[0] == "[Compacted Summary]\n" + m["compact"]
    assert m["child"] in contents and m["merge"] in contents
    assert session.metadata == {"note": m["update"], "other": m["meta2"], "turn": m["appended"]}
    calls = [c for msg in session.history for c in msg.tool_calls]
    assert calls == [call]
    assert (await store.get_child(child.key)).history[-1].content == m["child"]


async def test_the_keyring_is_the_stores_salt_and_checksum(make_store: StoreFactory) -> None:
    store = make_store(passphrase=OLD, kdf_work=WORK)
    await store.list_sessions()
    salt = await store.get_salt(crypto.CURRENT)
    check = await store.get_checksum(crypto.CURRENT)
    assert len(salt) == 16
    assert check.startswith(b"rs1:scrypt:10:8:1:")
    assert OLD.encode() not in salt + check


async def test_a_wrong_passphrase_fails_before_touching_anything(
    make_store: StoreFactory, backend: Backend
) -> None:
    right = make_store(passphrase=OLD, kdf_work=WORK)
    await right.create(Session(key="w", history=[Message(role="user", content="hi")]))
    before = raw_values(backend)
    wrong = make_store(passphrase="not it", kdf_work=WORK)
    for attempt in (
        wrong.create(Session(key="w2")),
        wrong.append_message("w", Message(role="user", content="intrusion")),
        wrong.delete("w"),
        wrong.get("w"),
        wrong.list_sessions(),
    ):
        with pytest.raises(WrongPassphrase, match="wrong passphrase") as info:
            await attempt
        assert "not it" not in str(info.value)
    assert raw_values(backend) == before
    assert [m.content for m in (await right.get("w")).history] == ["hi"]


async def test_sealed_data_without_a_passphrase_raises(make_store: StoreFactory) -> None:
    sealed = make_store(passphrase=OLD, kdf_work=WORK)
    await sealed.create(Session(key="n", metadata={"k": "v"}))
    await sealed.append_message("n", Message(role="user", content="secret"))
    child = await sealed.fork_child("n", "sub")
    await sealed.append_child_message(child.key, Message(role="user", content="c"))
    plain = make_store()
    for read in (plain.get("n"), plain.get_history("n"), plain.get_child(child.key)):
        with pytest.raises(PassphraseRequired, match="'n'|child"):
            await read
    for write in (
        plain.append_message("n", Message(role="user", content="cleartext!")),
        plain.update_metadata("n", set={"x": "cleartext!"}),
        plain.append_child_message(child.key, Message(role="user", content="cleartext!")),
        plain.merge_child(child.key, "cleartext!"),
        plain.compact_messages("n", 0, "cleartext!"),
    ):
        with pytest.raises(PassphraseRequired):
            await write
    history = await sealed.get_history("n")
    assert [m.content for m in history] == ["secret"]
    assert (await sealed.get_child(child.key)).merged_at is None
    await sealed.append_message("n", Message(role="assistant", content="newest"))
    recent = await sealed.get("n", last=1)
    assert [m.content for m in recent.history] == ["newest"] and recent.metadata == {"k": "v"}
    with pytest.raises(PassphraseRequired):
        await plain.get("n", last=0)  # sealed metadata, even with no message read


@pytest.mark.parametrize("metadata", [{"k": "v"}, {}], ids=["metadata", "no-metadata"])
async def test_sealed_fields_alone_without_a_passphrase_raise(
    make_store: StoreFactory, metadata: dict[str, str]
) -> None:
    # A sealed session with no message to read: its sealed scalars (and metadata) alone say
    # that a passphrase is needed, never that the record is damaged.
    sealed = make_store(passphrase=OLD, kdf_work=WORK)
    await sealed.create(Session(key="f", agent_id="a7", model="m", metadata=metadata))
    plain = make_store()
    for read in (plain.get("f"), plain.get("f", last=0)):
        with pytest.raises(PassphraseRequired):
            await read
    assert (await sealed.get("f")).agent_id == "a7"


async def test_a_flipped_byte_fails_authentication(
    make_store: StoreFactory, backend: Backend
) -> None:
    store = make_store(passphrase=OLD, kdf_work=WORK)
    await store.create(Session(key="t", metadata={"k": "v"}))
    await store.append_message("t", Message(role="user", content="original"))
    await store.create(Session(key="other", history=[Message(role="user", content="fine")]))
    raw = backend.sync_client()
    sk = backend.schema.session("t")
    element = bytearray(raw.lindex(sk.msgs, 0))
    element[-3] ^= 0x01
    raw.lset(sk.msgs, 0, bytes(element))
    with pytest.raises(DecryptionFailed, match="'t'.*message 0.*authentication") as info:
        await store.get("t")
    assert isinstance(info.value, CorruptData) and isinstance(info.value, EncryptionError)
    with pytest.raises(DecryptionFailed):
        await store.get_history("t", last=1)
    element[-3] ^= 0x01
    raw.lset(sk.msgs, 0, bytes(element))
    value = bytearray(raw.hget(sk.meta, "e:k"))
    value[20] ^= 0x80
    raw.hset(sk.meta, "e:k", bytes(value))
    with pytest.raises(DecryptionFailed, match="metadata 'k'"):
        await store.get("t")
    assert [m.content for m in await store.get_history("t")] == ["original"]
    assert [m.content for m in (await store.get("other")).history] == ["fine"]


async def test_ciphertexts_are_bound_to_their_session_and_place(
    make_store: StoreFactory, backend: Backend
) -> None:
    store = make_store(passphrase=OLD, kdf_work=WORK)
    await store.create(Session(key="a", metadata={"x": "ax", "y": "ay"}))
    await store.create(Session(key="b", metadata={"x": "bx"}))
    await store.append_messages(
        "a",
        [Message(id="m1", role="user", content="a1"), Message(id="m2", role="user", content="a2")],
    )
    await store.append_message("b", Message(id="m1", role="user", content="b1"))
    raw = backend.sync_client()
    a, b = backend.schema.session("a"), backend.schema.session("b")

    # The same message id in another session: the element moved whole still fails.
    saved = raw.lindex(b.msgs, 0)
    raw.lset(b.msgs, 0, raw.lindex(a.msgs, 0))
    with pytest.raises(DecryptionFailed, match="'b'"):
        await store.get("b")
    raw.lset(b.msgs, 0, saved)
    # Another message's ciphertext under this message's id.
    first, second = raw.lrange(a.msgs, 0, 1)
    raw.lset(a.msgs, 1, second[: len(b'{"id":"m2",')] + first[len(b'{"id":"m1",') :])
    with pytest.raises(DecryptionFailed, match="'a'"):
        await store.get_history("a")
    raw.lset(a.msgs, 1, second)
    # Metadata values swapped between names, and between sessions.
    ax, ay = raw.hget(a.meta, "e:x"), raw.hget(a.meta, "e:y")
    raw.hset(a.meta, mapping={"e:x": ay, "e:y": ax})
    with pytest.raises(DecryptionFailed, match="metadata"):
        await store.get("a")
    raw.hset(a.meta, mapping={"e:x": ax, "e:y": ay})
    raw.hset(b.meta, "e:x", ax)
    with pytest.raises(DecryptionFailed, match="'b'"):
        await store.get("b")
    assert (await store.get("a")).metadata == {"x": "ax", "y": "ay"}


async def test_secrets_never_show_in_repr_or_errors(make_store: StoreFactory) -> None:
    store = make_store(passphrase=OLD, kdf_work=WORK)
    await store.create(Session(key="r"))
    holder: Any = store.sync if hasattr(store, "sync") else store
    core: Any = holder._core
    texts = [
        repr(store), repr(core.keyring.passphrase), str(core.keyring.passphrase),
        repr(core.keyring.master), repr(core.keyring.session_keys),
    ]  # fmt: skip
    secrets = [core.keyring.master.raw, core.keyring.session_keys["r"].raw]
    for text in texts:
        assert OLD not in text
        assert not any(k.hex() in text or repr(k) in text for k in secrets)
    wrong = make_store(passphrase="WRONG-" + OLD, kdf_work=WORK)
    with pytest.raises(WrongPassphrase) as info:
        await wrong.get("r")
    assert OLD not in str(info.value) and OLD not in repr(info.value.args)


async def test_a_cleartext_session_is_refused_with_a_passphrase_then_rekey_seals_it(
    make_store: StoreFactory, backend: Backend
) -> None:
    plain = make_store()
    secret = marker("legacy")
    await plain.create(Session(key="old", metadata={"m": secret}))
    await plain.append_message("old", Message(role="user", content=secret))
    sealed = make_store(passphrase=OLD, kdf_work=WORK)
    for read in (sealed.get_history, sealed.get):
        with pytest.raises(SessionNotEncrypted, match="'old'"):  # it could be a stripped one
            await read("old")
    with pytest.raises(SessionNotEncrypted, match="'old'"):
        await sealed.append_message("old", Message(role="user", content="new"))
    assert len(await plain.get_history("old")) == 1
    report = await sealed.rekey(OLD)
    assert report.sessions_resealed == 1 and report.values_resealed == 2
    assert leaks(backend, [secret]) == []
    await sealed.append_message("old", Message(role="user", content="now sealed"))
    session = await sealed.get("old")
    assert [m.content for m in session.history] == [secret, "now sealed"]
    assert session.metadata == {"m": secret}


async def test_migrate_secrets_failing_changes_nothing_with_a_keyring(
    make_store: StoreFactory,
) -> None:
    store = make_store(passphrase=OLD, kdf_work=WORK)
    await store.create(Session(key="k"))
    await store.set_salt("default", b"s1")
    await store.set_checksum("default", b"c1")
    for name in ("a", "b", "c"):
        await store.set_secret(name, name.encode())

    def reencrypt(value: bytes) -> bytes:
        if value == b"b":
            raise RuntimeError("the provider failed on b")
        return b"new-" + value

    with pytest.raises(RuntimeError):
        await store.migrate_secrets(reencrypt, b"s2", b"c2")
    assert [await store.get_secret(n) for n in ("a", "b", "c")] == [b"a", b"b", b"c"]
    assert (await store.get_salt("default"), await store.get_checksum("default")) == (
        b"s1",
        b"c1",
    )
    assert await store.migrate_secrets(lambda v: b"new-" + v, b"s2", b"c2") == 3
    await store.create(Session(key="still", history=[Message(role="user", content="ok")]))
    assert (await store.get_history("still"))[0].content == "ok"


def element_formats(backend: Backend) -> set[int]:
    """The format byte of every message element under the prefix (sessions and children;
    0 for a cleartext one).
    """
    formats = set()
    for key, values in raw_values(backend).items():
        if b":msgs:" in key or b":cmsgs:" in key:
            for v in values:
                body = v[8:] if b":cmsgs:" in key else v
                parts = crypto.split_element(body)
                formats.add(0 if parts is None else parts[1][0])
    return formats


def master_wraps(backend: Backend) -> set[bytes]:
    """The master key wraps the sessions' key records (meta field ``dk``) carry."""
    client = backend.sync_client()
    wraps = set()
    for key in client.scan_iter(match=f"{backend.prefix}*", count=1000):
        if b":meta:" in bytes(key):
            dk = client.hget(key, "dk")
            record = crypto.parse_dk(bytes(dk)) if dk else None
            if record is not None:
                wraps.add(record[2])
    return wraps


async def seed(store: Any, n: int) -> dict[str, list[str]]:
    expected: dict[str, list[str]] = {}
    for i in range(n):
        key = f"rk{i}"
        history = [Message(role="user", content=f"{key}-{j}") for j in range(3)]
        await store.create(Session(key=key, metadata={"i": str(i)}, history=history))
        child = await store.fork_child(key, "sub", ChildSessionConfig(inherit_history=1))
        await store.append_child_message(child.key, Message(role="user", content=f"{key}-c"))
        expected[key] = [m.content for m in history]
    return expected


@pytest.mark.slow
def test_rekey_while_threads_append(backend: Backend) -> None:
    old = backend.sync_store(passphrase=OLD, kdf_work=WORK)
    expected = asyncio.run(seed(_Awaiting(old), 12))
    stop = threading.Event()
    acked: dict[str, list[str]] = {k: [] for k in expected}
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        store = backend.sync_store(passphrase=OLD, kdf_work=WORK)
        keys = sorted(expected)[w::4]
        n = 0
        while not stop.is_set() and n < 400:
            key = keys[n % len(keys)]
            content = f"w{w}-{n}"
            try:
                store.append_message(key, Message(role="user", content=content))
            except BaseException as exc:
                errors.append(exc)
                return
            acked[key].append(content)
            n += 1

    threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(4)]
    for t in threads:
        t.start()
    seen: list[RekeyProgress] = []
    rotator = backend.sync_store(passphrase=OLD, kdf_work=WORK)
    report = rotator.rekey(NEW, batch_size=5, progress=seen.append)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert report.sessions_resealed >= 12 and not report.resumed
    assert seen and seen[-1].sessions_done == seen[-1].sessions_total
    assert sum(len(v) for v in acked.values()) > 0

    fresh = backend.sync_store(passphrase=NEW)
    for key, first in expected.items():
        contents = [m.content for m in fresh.get_history(key)]
        assert contents == first + acked[key]
        (child,) = fresh.children_of(key)
        assert [m.content for m in child.history][-1] == f"{key}-c"
    with pytest.raises(WrongPassphrase):
        backend.sync_store(passphrase=OLD).get("rk0")
    assert element_formats(backend) == {crypto.V2}
    master = fresh._core.keyring.master
    assert master is not None and master_wraps(backend) == {master.wrapped}


class _Awaiting:
    """A blocking store with awaitable methods (for ``seed``)."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


async def test_rekey_with_concurrent_async_writers(backend: Backend) -> None:
    """Tasks append while another task rotates (the threaded test covers the sync store)."""
    made: list[Any] = []

    def make(**options: Any) -> Any:
        made.append(backend.async_store(**options))
        return made[-1]

    try:
        store = make(passphrase=OLD, kdf_work=WORK)
        expected = await seed(store, 6)
        acked: dict[str, list[str]] = {k: [] for k in expected}
        writers = [make(passphrase=OLD, kdf_work=WORK) for _ in range(3)]
        for own in writers:
            await own.list_sessions()  # opened before the rotation begins
        rotated = asyncio.Event()

        async def writer(w: int) -> None:
            own = writers[w]
            for n in range(400):
                key = f"rk{(w + n) % 6}"
                await own.append_message(key, Message(role="user", content=f"a{w}-{n}"))
                acked[key].append(f"a{w}-{n}")
                if rotated.is_set():
                    return

        async def rotate() -> None:
            await asyncio.sleep(0)
            await make(passphrase=OLD, kdf_work=WORK).rekey(NEW, batch_size=2)
            rotated.set()

        await asyncio.wait_for(asyncio.gather(rotate(), *(writer(w) for w in range(3))), 60)
        assert sum(len(v) for v in acked.values()) > 3
        fresh = make(passphrase=NEW)
        for key, first in expected.items():
            contents = [m.content for m in await fresh.get_history(key)]
            assert contents[:3] == first
            assert sorted(contents[3:]) == sorted(acked[key])  # each exactly once
            for w in range(3):  # and in each writer's order
                mine = [c for c in contents if c.startswith(f"a{w}-")]
                assert mine == [c for c in acked[key] if c.startswith(f"a{w}-")]
        with pytest.raises(WrongPassphrase):
            await make(passphrase=OLD).get("rk0")
    finally:
        for s in made:
            await s.close()


async def test_an_interrupted_rekey_loses_nothing_and_resumes(
    make_store: StoreFactory, backend: Backend
) -> None:
    store = make_store(passphrase=OLD, kdf_work=WORK)
    expected = await seed(store, 6)

    class Crash(Exception):
        pass

    def crash_after_first_batch(p: RekeyProgress) -> None:
        if p.sessions_done >= 2:
            raise Crash

    with pytest.raises(Crash):
        await make_store(passphrase=OLD, kdf_work=WORK).rekey(
            NEW, batch_size=2, progress=crash_after_first_batch
        )
    assert len(master_wraps(backend)) == 2  # half rewrapped, half not
    for passphrase in (OLD, NEW):  # both read everything, and both can write, mid-rotation
        reader = make_store(passphrase=passphrase)
        for key, first in expected.items():
            assert [m.content for m in await reader.get_history(key)][:3] == first
        await reader.append_message("rk5", Message(role="user", content=f"mid-{passphrase}"))
    with pytest.raises(WrongPassphrase, match="another passphrase"):
        await make_store(passphrase=OLD).rekey("a third one")

    report = await make_store(passphrase=NEW).rekey(NEW, batch_size=2)
    assert report.resumed
    fresh = make_store(passphrase=NEW)
    for key, first in expected.items():
        contents = [m.content for m in await fresh.get_history(key)]
        assert contents[:3] == first
    assert [m.content for m in await fresh.get_history("rk5")][3:] == [f"mid-{OLD}", f"mid-{NEW}"]
    assert len(master_wraps(backend)) == 1
    with pytest.raises(WrongPassphrase):
        await make_store(passphrase=OLD).get("rk0")


async def test_bad_passphrase_arguments(make_store: StoreFactory) -> None:
    for bad in ("", b"", 42):
        with pytest.raises(ValueError, match="passphrase"):
            make_store(passphrase=bad)
    with pytest.raises(ValueError, match="kdf_work"):
        make_store(passphrase=OLD, kdf_work=4)
    store = make_store(passphrase=OLD, kdf_work=WORK)
    with pytest.raises(ValueError, match="batch_size"):
        await store.rekey(NEW, batch_size=0)
    with pytest.raises(ValueError, match="passphrase"):
        await make_store().rekey(NEW)
    assert issubclass(EncryptionError, SessionError)


async def test_two_stores_opening_a_new_prefix_agree_on_one_keyring(
    make_store: StoreFactory,
) -> None:
    a, b = make_store(passphrase=OLD, kdf_work=WORK), make_store(passphrase=OLD, kdf_work=WORK)
    await asyncio.gather(a.list_sessions(), b.list_sessions())
    await a.create(Session(key="x", history=[Message(role="user", content="from a")]))
    assert [m.content for m in await b.get_history("x")] == ["from a"]


def _slow_kdf(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make scrypt take 0.2 s and record the thread each derivation runs on."""
    threads: list[int] = []
    real = crypto.derive_kek

    def slow(passphrase: Any, salt: bytes, work: int) -> bytes:
        threads.append(threading.get_ident())
        time.sleep(0.2)
        return real(passphrase, salt, work)

    monkeypatch.setattr(crypto, "derive_kek", slow)
    return threads


async def test_scrypt_runs_off_the_event_loop_once_for_concurrent_first_calls(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = _slow_kdf(monkeypatch)
    store = backend.async_store(passphrase=OLD, kdf_work=WORK)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(100):  # bounded: at most ~1 s
            await asyncio.sleep(0.01)
            ticks += 1
            if threads and ticks >= 5:
                return

    try:
        await asyncio.wait_for(
            asyncio.gather(ticker(), *(store.list_sessions() for _ in range(5))), 30
        )
        # The loop kept serving while scrypt slept in a worker thread, and the five first
        # calls waited for one derivation instead of running five.
        assert len(threads) == 1 and threads[0] != threading.get_ident()
        assert ticks >= 5
        await store.create(Session(key="k", history=[Message(role="user", content="x")]))
        assert [m.content for m in await store.get_history("k")] == ["x"]
        assert len(threads) == 1
    finally:
        await store.close()


def test_threads_sharing_a_sync_store_derive_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = _slow_kdf(monkeypatch)
    store = backend.sync_store(passphrase=OLD, kdf_work=WORK)
    errors: list[BaseException] = []

    def first_call() -> None:
        try:
            store.list_sessions()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=first_call) for _ in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    assert not errors and not any(t.is_alive() for t in workers)
    assert len(threads) == 1
