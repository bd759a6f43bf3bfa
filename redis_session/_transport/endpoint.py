"""What a URL names and how its client is set up, for both flavours (see
``redis_session._transport.url`` for the policy): the scheme, the sentinels of a
``redis+sentinel://`` URL, the embedded server of ``memory://NAME``, the keywords every client
gets, and the :class:`Outage` its retries report to. No client is made here
(``_async/connect.py``, ``_sync/connect.py``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .. import _clock
from .._dist import install_hint
from ..errors import InvalidArgument, UnknownOption

if TYPE_CHECKING:
    from fakeredis import FakeServer

log = logging.getLogger("redis_session")

MEMORY_SCHEME = "memory"
SENTINEL_SCHEME = "redis+sentinel"
DEFAULT_RETRY_ATTEMPTS = 10
DEFAULT_RETRY_SECONDS = 4.3
"""About how long the 10 jittered retries (base 10 ms, cap 1 s) last at most."""
SENTINEL_RETRY_ATTEMPTS = 24
SENTINEL_RETRY_SECONDS = 12.0
"""About how long the 24 retries (base 50 ms, cap 1 s) of a Sentinel client last."""

RETRY_DEADLINE: ContextVar[float | None] = ContextVar("redis_session_retry_deadline", default=None)
"""A ``_clock.monotonic()`` past which the retry policy of a client from a URL sleeps no more:
the failure is raised instead (set by a listener's ``get(timeout)``, see :func:`retries_until`).
"""


@contextlib.contextmanager
def retries_until(deadline: float | None) -> Iterator[None]:
    """Within it (this thread, or this asyncio task), a client from a URL retries a failed
    command only while its next backoff ends before ``deadline`` (None: as always), so that a
    call made by a caller who waits at most until then returns by then, with the failure.
    """
    token = RETRY_DEADLINE.set(deadline)
    try:
        yield
    finally:
        RETRY_DEADLINE.reset(token)


def retry_cut(longest_backoff: float) -> bool:
    """Whether a failed command must not be retried: a backoff of up to ``longest_backoff``
    seconds would end past the deadline :func:`retries_until` set.
    """
    deadline = RETRY_DEADLINE.get()
    return deadline is not None and _clock.monotonic() + longest_backoff >= deadline


DEFAULT_CLIENT_OPTIONS: dict[str, Any] = {"socket_timeout": 10.0, "socket_connect_timeout": 5.0}
"""Socket timeouts every client from a URL gets unless the caller says otherwise."""
DEFAULT_POOL_OPTIONS: dict[str, Any] = {"max_connections": 32, "timeout": 10.0}
"""The bounded pool of a plain client: its size, and how long a caller waits for a connection."""


@functools.cache
def client_keywords(cluster: bool) -> frozenset[str]:
    """The keywords redis-py's clients take as ``from_url`` builds them: the named parameters
    of the connection classes (TCP, TLS, Unix socket, blocking and asyncio) and of the pools,
    and with ``cluster`` those of the cluster clients and the connection keywords they pass on.
    """
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

    classes: list[type] = [
        redis.Connection, redis.SSLConnection, redis.UnixDomainSocketConnection,
        redis.asyncio.Connection, redis.asyncio.SSLConnection,
        redis.asyncio.UnixDomainSocketConnection, redis.ConnectionPool,
        redis.BlockingConnectionPool, redis.asyncio.BlockingConnectionPool,
    ]  # fmt: skip
    names: set[str] = set()
    if cluster:
        classes += [redis.RedisCluster, redis.asyncio.RedisCluster]
        names.update(getattr(redis.cluster, "REDIS_ALLOWED_KEYS", ()))
    for cls in classes:
        for klass in cls.__mro__:
            init = vars(klass).get("__init__")
            if init is not None:
                names.update(
                    name
                    for name, p in inspect.signature(init).parameters.items()
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self"
                )
    return frozenset(names)


def check_client_options(url: str, cluster: bool, given: dict[str, Any]) -> None:
    """Refuse a keyword of ``from_url`` that is neither a store option (split off before) nor a
    keyword of redis-py's client for ``url``: at once, naming it (redis-py would take it and
    fail at the first command, or ``memory://`` ignore it).
    """
    _, _, cluster = parse(url, cluster)
    known = client_keywords(cluster)
    for name in given:
        if name not in known:
            from ..options import StoreOptions  # the store's options: named in the message

            options = ", ".join(sorted(StoreOptions.names()))
            raise UnknownOption(
                name,
                f"neither a store option ({options}) nor a keyword of redis-py's "
                f"{'cluster ' if cluster else ''}client",
            )


def client_options(given: dict[str, Any], *, pool: bool) -> dict[str, Any]:
    """The caller's keywords over the defaults (a plain client's pool's too when ``pool``)."""
    options = {**DEFAULT_CLIENT_OPTIONS, **(DEFAULT_POOL_OPTIONS if pool else {}), **given}
    if options.get("decode_responses"):
        raise InvalidArgument("decode_responses", "must be False (stored values are bytes)")
    return options


def parse(url: object, cluster: bool) -> tuple[str, str, bool]:
    """``(scheme, url for redis-py, cluster)``; ``+cluster`` in the scheme means a cluster."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument("url", f"must be a URL such as redis://host:6379/0, got {url!r}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == SENTINEL_SCHEME:
        return scheme, url, False
    if scheme.endswith("+cluster"):
        scheme, cluster = scheme.removesuffix("+cluster"), True
    if scheme == MEMORY_SCHEME and cluster:
        raise InvalidArgument("url", "memory:// is a single in-process server, not a cluster")
    if scheme not in (MEMORY_SCHEME, "redis", "rediss", "unix", SENTINEL_SCHEME):
        raise InvalidArgument("url", f"unknown scheme {scheme!r} in {url!r}")
    return scheme, f"{scheme}://{rest}", cluster


def where(url: str) -> str:
    """A URL as logs name it: scheme, host, port and path, never a password."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"


def sentinel_target(url: str) -> tuple[list[tuple[str, int]], str, int]:
    """``([(host, port), …], service, db)`` of a ``redis+sentinel://`` URL."""
    parts = urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    if not parts.netloc or not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise InvalidArgument(
            "url", f"must be redis+sentinel://host:port[,…]/service[/db]: {url!r}"
        )
    hosts = []
    for item in parts.netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgument("url", f"sentinel address {item!r} needs host:port")
        hosts.append((host, int(port)))
    return hosts, path[0], int(path[1]) if len(path) == 2 else 0


_servers: dict[str, FakeServer] = {}
_lock = threading.Lock()


def fakeredis_module() -> Any:
    """The fakeredis module (the ``memory`` extra), or an ImportError that says how to get it."""
    try:
        import fakeredis
    except ImportError as exc:
        raise ImportError(f"memory:// needs fakeredis with Lua: {install_hint('memory')}") from exc
    return fakeredis


def memory_server(url: str) -> FakeServer:
    """The embedded server of a ``memory://`` URL: a new one, or the one of its name."""
    fakeredis = fakeredis_module()
    name = urlsplit(url).netloc + urlsplit(url).path
    if not name:
        return fakeredis.FakeServer()  # type: ignore[no-any-return]
    with _lock:
        return _servers.setdefault(name, fakeredis.FakeServer())


_UNKNOWN_NAME = (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None))
"""The resolver's answers that a host name does not exist (a temporary failure heals)."""


def may_heal(error: BaseException) -> bool:
    """Whether a failed connection or command may succeed if tried again: not when the server
    refused the credentials (``AuthenticationError``) or the user's rights
    (``AuthorizationError``), the host name does not resolve (``EAI_NONAME``; a temporary
    resolver failure heals), the server's TLS certificate does not verify, or a Unix socket's
    path does not exist. The retry policies of ``from_url``'s clients raise those at once.
    """
    from redis.exceptions import AuthenticationError, AuthorizationError

    if isinstance(error, AuthenticationError | AuthorizationError):
        return False
    cause = error.__cause__
    if isinstance(cause, socket.gaierror):
        return cause.errno not in _UNKNOWN_NAME
    if isinstance(cause, ssl.SSLCertVerificationError):
        return False
    return not (isinstance(cause, OSError) and cause.errno == errno.ENOENT)


def _resolves(host: str) -> bool:
    """Whether ``host`` resolves, or may (a temporary resolver failure); False when the name
    is unknown (``EAI_NONAME``).
    """
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        return exc.errno not in _UNKNOWN_NAME
    return True


def may_heal_through(hosts: list[tuple[str, int]]) -> Callable[[BaseException], bool]:
    """:func:`may_heal` for a client that finds its primary through the sentinels at
    ``hosts``: no primary found while not one sentinel's host name resolves cannot heal
    either (looked up only then, on the failure).
    """
    from redis.asyncio.sentinel import MasterNotFoundError as AsyncMasterNotFound
    from redis.sentinel import MasterNotFoundError

    def check(error: BaseException) -> bool:
        if not may_heal(error):
            return False
        if isinstance(error, (MasterNotFoundError, AsyncMasterNotFound)):
            return any(_resolves(host) for host, _ in hosts)
        return True

    return check


class Outage:
    """Whether the server behind a client is failing, shared by the retry policies of all of the
    client's connections: the first retried failure of an outage is logged at warning (where,
    what, how long the retries last), the first success after it at info; nothing in between.
    Copies of a retry policy (redis-py deep-copies one per connection) share it.
    """

    def __init__(self, where: str, retries: int, seconds: float) -> None:
        self.where, self.retries, self.seconds = where, retries, seconds
        self.down = False
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> Outage:
        return self

    def failed(self, error: Exception) -> None:
        """A call failed and will be retried (or has run out of retries)."""
        with self._lock:
            if self.down:
                return
            self.down = True
        log.warning(
            "redis_session: %s failed (%s: %s); retrying up to %d times over about %.0f s",
            self.where, type(error).__name__, error, self.retries, self.seconds,
        )  # fmt: skip

    def recovered(self) -> None:
        """A call succeeded."""
        if self.down:
            with self._lock:
                self.down = False
            log.info("redis_session: %s answers again", self.where)
