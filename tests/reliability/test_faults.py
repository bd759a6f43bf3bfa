"""Faults injected into a redis-server of the test's own while writers append: the server frozen
past the socket timeout (SIGSTOP, ``CLIENT PAUSE WRITE``/``ALL``), SIGKILLed and restarted, and
the listener's pub/sub connection killed. Writers behave as callers should: a call that raised
has an unknown outcome, so they send the same message (same id) again until acknowledged. Then
every acknowledged message must be stored exactly once, in each writer's order; figures go to
the recorder (``tests/support/figures.py``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_session import AsyncRedisStore, Message, RedisStore, Session, SessionError
from tests.support.consistency import Ledger, audit_keys, check_histories
from tests.support.faults import OwnServer
from tests.support.figures import Recorder
from tests.support.servers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.redis]

SOCKET_TIMEOUT = 0.1
FREEZE = 0.6
"""Shorter than the least redis-py's default retries can take (11 tries x the socket timeout)."""
RESENDS = 100
PACE = 0.002
"""Between two appends of one writer (a caller does other work too; spares this machine)."""
FROZEN_NO_RETRY = {True: "until a caller saw an error, +0.2 s", False: "1.0 s"}


class Writer(threading.Thread):
    """Appends ``f"{name}:{n}"`` to one session until stopped (at most ``limit`` messages).

    A call that raises is re-sent with the same message (same id) after 50 ms, at most
    ``RESENDS`` times; a re-send answering False proves the failed call had been applied.
    """

    def __init__(
        self, store: RedisStore, key: str, name: str, limit: int = 5000, resends: int = RESENDS
    ) -> None:
        super().__init__(daemon=True)
        self.store, self.key, self.name, self.limit = store, key, name, limit
        self.resends = resends
        self.stop = threading.Event()
        self.acked: list[str] = []
        self.unknown: list[str] = []
        self.errors: Counter[str] = Counter()
        self.applied_despite_error = 0
        self.not_applied_after_error = 0
        self.false_first = 0
        self.longest_call = 0.0
        self.crash: BaseException | None = None

    def run(self) -> None:
        try:
            for n in range(self.limit):
                if self.stop.is_set():
                    return
                self._send(Message(role="user", content=f"{self.name}:{n}"))
                time.sleep(PACE)
        except BaseException as exc:  # reported by the test
            self.crash = exc

    def _send(self, msg: Message) -> None:
        failed = False
        for _ in range(1 + self.resends):
            started = time.monotonic()
            try:
                new = self.store.append_message(self.key, msg)
            except (redis.RedisError, SessionError) as exc:
                self.errors[type(exc).__name__] += 1
                failed = True
                if self.stop.is_set() or not self.resends:
                    break
                time.sleep(0.05)
                continue
            finally:
                self.longest_call = max(self.longest_call, time.monotonic() - started)
            if not failed and not new:
                self.false_first += 1  # redis-py's own retry found its earlier attempt stored
            if failed:
                if new:
                    self.not_applied_after_error += 1
                else:
                    self.applied_despite_error += 1
            self.acked.append(msg.content)
            return
        self.unknown.append(msg.content)

    def wait_for(self, acked: int, timeout: float = 15.0) -> None:
        assert wait_until(lambda: len(self.acked) >= acked, timeout), (self.name, self.errors)


def _store(server: OwnServer, prefix: str, *, retry: bool, timeout: float) -> RedisStore:
    kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if not retry:
        kwargs["retry"] = Retry(NoBackoff(), 0)
    return RedisStore(redis.Redis(port=server.port, **kwargs), prefix=prefix, ttl=600)


def _check(server: OwnServer, prefix: str, key: str, writers: list[Writer]) -> dict[str, int]:
    """Every acknowledged message once, in its writer's order; the keys audited."""
    ledger = Ledger(live={key})
    ledger.ack(key, "create", "init")
    for w in writers:
        assert w.crash is None, w.crash
        assert not w.is_alive()
        ledger.ack(key, w.name, *w.acked)
        ledger.maybe(key, *w.unknown)
    reader = RedisStore.from_url(server.url, prefix=prefix)
    try:
        stored = [m.content for m in reader.get_history(key)]
        audit = audit_keys(reader.client, prefix, ttl=True)
    finally:
        reader.close()
    verdict = check_histories(ledger, {key: stored})
    assert verdict.ok, verdict
    assert audit.ok, audit
    return verdict.summary()


def _caller_saw(writers: list[Writer]) -> str:
    errors = sum((w.errors for w in writers), Counter[str]())
    longest = max(w.longest_call for w in writers)
    found = sum(w.false_first for w in writers)
    if not errors:
        return (
            f"no error: redis-py retried inside the call (longest call {longest:.1f} s); "
            f"{found} call(s) answered False: the retry found the first attempt stored"
        )
    applied = sum(w.applied_despite_error for w in writers)
    fresh = sum(w.not_applied_after_error for w in writers)
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(errors.items()))
    return (
        f"{kinds}; the same message re-sent: {applied} had been applied (re-send answered "
        f"False), {fresh} had not (stored by the re-send)"
    )


def _run_writers(
    server: OwnServer, prefix: str, *, retry: bool, timeout: float, count: int,
    resends: int = RESENDS,
) -> tuple[str, list[Writer], list[RedisStore]]:  # fmt: skip
    setup = RedisStore.from_url(server.url, prefix=prefix, ttl=600)
    key = "s"
    setup.create(Session(key=key, history=[Message(role="user", content="init")]))
    setup.close()
    stores = [_store(server, prefix, retry=retry, timeout=timeout) for _ in range(count)]
    writers = [Writer(s, key, f"w{i}", resends=resends) for i, s in enumerate(stores)]
    for w in writers:
        w.start()
    return key, writers, stores


def _finish(writers: list[Writer], stores: list[RedisStore]) -> None:
    for w in writers:
        w.stop.set()
    for w in writers:
        w.join(timeout=30)
    for s in stores:
        s.close()


FREEZES = {
    "SIGSTOP": ("SIGSTOP / SIGCONT of the server process", None),
    "PAUSE-WRITE": ("CLIENT PAUSE <ms> WRITE", "WRITE"),
    "PAUSE-ALL": ("CLIENT PAUSE <ms> ALL", "ALL"),
}


@pytest.mark.parametrize("retry", [True, False], ids=["redis-py-retry", "no-retry"])
@pytest.mark.parametrize("fault", list(FREEZES))
def test_server_frozen_past_the_socket_timeout(
    own_server: Callable[..., OwnServer], figures: Recorder, fault: str, retry: bool
) -> None:
    server = own_server()
    prefix = f"fz-{fault.lower()}:"
    label, pause_mode = FREEZES[fault]
    admin: Any = server.client(socket_timeout=5)
    key, writers, stores = _run_writers(
        server, prefix, retry=retry, timeout=SOCKET_TIMEOUT, count=2
    )
    injections = 0
    try:
        for _ in range(2):
            for w in writers:
                w.wait_for(len(w.acked) + 20)
            errors_before = sum(sum(w.errors.values()) for w in writers)
            seen_error = lambda: sum(sum(w.errors.values()) for w in writers) > errors_before  # noqa: E731
            injections += 1
            if pause_mode is None:
                server.stop_process()
                try:
                    if retry:
                        time.sleep(FREEZE)
                    else:  # frozen until a caller has seen the fault, however slow this machine
                        assert wait_until(seen_error, 8)
                        time.sleep(0.2)
                finally:
                    server.continue_process()
            else:  # timed: under PAUSE ALL not even CLIENT UNPAUSE is served (Redis 7.0)
                ms = round(FREEZE * 1000) if retry else 1000
                admin.execute_command("CLIENT", "PAUSE", ms, pause_mode)
                time.sleep(ms / 1000)
                if not retry:
                    assert wait_until(seen_error, 8)
            for w in writers:
                w.wait_for(len(w.acked) + 10)  # writes succeed again
    finally:
        _finish(writers, stores)
        admin.close()
    summary = _check(server, prefix, key, writers)
    figures.record(
        f"server frozen: {label}",
        client="redis-py default retry (10x)" if retry else "no retry",
        socket_timeout=SOCKET_TIMEOUT,
        frozen_for=f"{FREEZE} s" if retry else FROZEN_NO_RETRY[pause_mode is None],
        injections=injections,
        outcome=_caller_saw(writers),
        acknowledged=summary["acknowledged"],
        lost=summary["lost"],
        duplicated=summary["duplicated"],
        unknown_outcome=sum(len(w.unknown) for w in writers),
    )
    assert summary["lost"] == 0 and summary["duplicated"] == 0
    if not retry:
        assert sum(sum(w.errors.values()) for w in writers) >= injections


def test_unacknowledged_appends_are_stored_once_or_not_at_all(
    own_server: Callable[..., OwnServer], figures: Recorder
) -> None:
    """Callers that give up on a timed-out append and go on: each such message is stored at
    most once (SIGSTOP: the server runs the abandoned request when it continues), and every
    acknowledged one exactly once, in order."""
    server = own_server()
    prefix = "giveup:"
    key, writers, stores = _run_writers(
        server, prefix, retry=False, timeout=SOCKET_TIMEOUT, count=2, resends=0
    )
    try:
        for _ in range(3):
            for w in writers:
                w.wait_for(len(w.acked) + 20)
            unknown_before = sum(len(w.unknown) for w in writers)
            server.stop_process()
            try:
                assert wait_until(lambda: sum(len(w.unknown) for w in writers) > unknown_before, 8)
                time.sleep(0.2)
            finally:
                server.continue_process()
        for w in writers:
            w.wait_for(len(w.acked) + 10)
    finally:
        _finish(writers, stores)
    summary = _check(server, prefix, key, writers)
    unknown = sum(len(w.unknown) for w in writers)
    figures.record(
        "server frozen (SIGSTOP), callers give up on a timed-out append",
        client="no retry, no re-send",
        injections=3,
        outcome=f"TimeoutError x{unknown}: of those messages {summary['unknown_applied']} were "
        f"stored (once), {summary['unknown_absent']} not at all",
        acknowledged=summary["acknowledged"],
        lost=summary["lost"],
        duplicated=summary["duplicated"],
        unknown_outcome=unknown,
    )
    assert summary["lost"] == 0 and summary["duplicated"] == 0
    assert unknown >= 3 and summary["unknown_applied"] + summary["unknown_absent"] == unknown


@pytest.mark.parametrize("retry", [True, False], ids=["redis-py-retry", "no-retry"])
def test_server_killed_and_restarted_from_its_append_only_file(
    own_server: Callable[..., OwnServer], figures: Recorder, retry: bool
) -> None:
    """SIGKILL while three writers append, down for a second, restarted from its AOF
    (``appendfsync always``: a reply is sent only after the write is on disk)."""
    server = own_server(persistent=True)
    prefix = "kill:"
    key, writers, stores = _run_writers(server, prefix, retry=retry, timeout=1.0, count=3)
    kills = 0
    gaps: list[float] = []
    try:
        for _ in range(2):
            for w in writers:
                w.wait_for(len(w.acked) + 20)
            before = [len(w.acked) for w in writers]
            killed_at = time.monotonic()
            server.kill_and_restart(down_for=1.0)
            kills += 1
            for w, n in zip(writers, before, strict=True):
                w.wait_for(n + 10)
            gaps.append(time.monotonic() - killed_at)
    finally:
        _finish(writers, stores)
    summary = _check(server, prefix, key, writers)
    figures.record(
        "server SIGKILLed, restarted from its AOF (appendfsync always)",
        client="redis-py default retry (10x)" if retry else "no retry",
        down_for="1.0 s",
        injections=kills,
        outcome=_caller_saw(writers)
        + f"; writes acknowledged again {min(gaps):.1f}-{max(gaps):.1f} s after the kill",
        acknowledged=summary["acknowledged"],
        lost=summary["lost"],
        duplicated=summary["duplicated"],
        unknown_outcome=sum(len(w.unknown) for w in writers),
    )
    assert summary["lost"] == 0 and summary["duplicated"] == 0
    if not retry:
        assert sum(sum(w.errors.values()) for w in writers) >= kills


def test_server_killed_and_restarted_empty(
    own_server: Callable[..., OwnServer], figures: Recorder
) -> None:
    """Without persistence a restart loses every session, by configuration: the store must then
    say so (SessionNotFound), never recreate a session piecemeal from a retried append."""
    server = own_server()
    prefix = "empty:"
    _, writers, stores = _run_writers(server, prefix, retry=True, timeout=1.0, count=2)
    try:
        for w in writers:
            w.wait_for(20)
        server.kill_and_restart(down_for=0.2)
        assert wait_until(lambda: all(w.errors.get("SessionNotFound") for w in writers), 15)
    finally:
        _finish(writers, stores)
    client = server.client()
    try:
        audit = audit_keys(client, prefix, ttl=True)
        leftover = sorted(bytes(k).decode() for k in client.scan_iter(match=f"{prefix}*"))
    finally:
        client.close()
    assert audit.ok, audit
    assert leftover == [], leftover  # no append recreated a half session
    figures.record(
        "server SIGKILLed, restarted empty (no persistence)",
        client="redis-py default retry (10x)",
        down_for="0.2 s",
        injections=1,
        outcome="every later append raised SessionNotFound; no key recreated "
        "(the data loss is the server's configuration, not counted below)",
        acknowledged=sum(len(w.acked) for w in writers),
        lost=0,
        duplicated=0,
        data_lost_by_configuration=sum(len(w.acked) for w in writers),
    )


def test_listener_resubscribes_after_each_client_kill(
    own_server: Callable[..., OwnServer], figures: Recorder
) -> None:
    server = own_server()
    store = RedisStore.from_url(server.url, prefix="pubsub:")
    admin = server.client(socket_timeout=5)
    listener = store.listen()
    received: list[str] = []
    created: list[str] = []
    kills = 0
    connections: set[str] = set()
    try:
        for round_ in range(3):
            key = f"before-{round_}"
            store.create(Session(key=key))
            created.append(key)
            event = listener.get(timeout=10)
            assert event is not None and event.key == key
            received.append(event.key)
            (subscriber,) = admin.client_list(_type="pubsub")
            assert subscriber["id"] not in connections  # a new connection after every kill
            connections.add(subscriber["id"])
            assert admin.client_kill_filter(_type="pubsub") >= 1
            kills += 1
            got = None
            for n in range(40):  # events published while it resubscribes may be missed
                key = f"after-{round_}-{n}"
                store.create(Session(key=key))
                created.append(key)
                got = listener.get(timeout=0.25)
                if got is not None:
                    received.append(got.key)
                    break
            assert got is not None, f"no event after kill {kills}"
        # Resubscribed by the listener, or by redis-py's own retry on the client's policy.
        (subscriber,) = admin.client_list(_type="pubsub")
        assert subscriber["id"] not in connections
        assert all(store.get(k).key == k for k in created)
    finally:
        listener.close()
        store.close()
        admin.close()
    duplicated = sum(n - 1 for n in Counter(received).values())
    figures.record(
        "CLIENT KILL TYPE pubsub of a listening EventListener",
        client="store.listen()",
        injections=kills,
        outcome=f"resubscribed after each of {kills} kills (a new pub/sub connection each time); "
        "an event arrived after every kill "
        f"({len(created) - len(received)} published during the gaps were missed: "
        "pub/sub is at-most-once, as documented)",
        acknowledged=len(created),
        lost=0,
        duplicated=duplicated,
    )
    assert duplicated == 0


async def test_async_listener_resubscribes_after_client_kill(
    own_server: Callable[..., OwnServer],
) -> None:
    """``CLIENT KILL TYPE pubsub`` cuts every subscriber of a server: on a private one, so that
    no other test's listener is cut (a shared server's kill failed a neighbour in CI)."""
    server = own_server()
    store = AsyncRedisStore.from_url(server.url, prefix="apubsub:")
    admin = server.client(socket_timeout=5)
    listener = await store.listen()
    try:
        await store.create(Session(key="before"))
        first = await listener.get(timeout=5)
        assert first is not None and first.key == "before"
        assert admin.client_kill_filter(_type="pubsub") >= 1
        got = None
        for n in range(40):  # bounded; events published while it resubscribes may be missed
            await store.create(Session(key=f"after-{n}"))
            got = await listener.get(timeout=0.25)
            if got is not None:
                break
        assert got is not None and got.key.startswith("after-")
        assert listener.reconnects >= 1
    finally:
        await listener.aclose()
        await store.close()
        admin.close()
