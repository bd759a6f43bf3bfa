"""What the commands share: where they work (:class:`Target`), their common options, the
consoles they print on, and the group that turns errors into one line and an exit status.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import click
import orjson
import redis
from rich.console import Console

from ..errors import SessionError
from ..store import RedisStore

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_URL = "redis://localhost:6379/0"
DEFAULT_PREFIX = "rs:"
PIPELINE_BATCH = 200
PLAIN_WIDTH = 160
"""Console width when stdout is not a terminal and COLUMNS is unset (keeps keys whole)."""


def make_console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else PLAIN_WIDTH
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def echo_json(data: object) -> None:
    """Print ``data`` as indented JSON on stdout."""
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def when(value: datetime | None) -> str:
    """A timestamp as the tables show it (UTC, to the second); ``-`` for None."""
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def human_bytes(n: float | None) -> str:
    """A byte count with a binary unit; ``n/a`` for None."""
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Target:
    """Where an operator command works: a store URL and a key prefix."""

    url: str
    prefix: str

    @contextmanager
    def open(self, **options: Any) -> Iterator[RedisStore]:
        """A store for this target (``options`` go to the store), closed afterwards."""
        store = RedisStore.from_url(self.url, prefix=self.prefix, **options)
        try:
            yield store
        finally:
            store.close()


def store_options(fn: F) -> F:
    """Add ``--url`` and ``--prefix``; the command receives them as ``target: Target``."""

    @click.option(
        "--url",
        envvar="REDIS_URL",
        default=DEFAULT_URL,
        show_default=True,
        help="Store URL (redis://, rediss://, unix://, redis+cluster://, redis+sentinel://, "
        "memory://NAME); env REDIS_URL.",
    )
    @click.option(
        "--prefix",
        envvar="REDIS_SESSION_PREFIX",
        default=DEFAULT_PREFIX,
        show_default=True,
        help="Key prefix of the store; env REDIS_SESSION_PREFIX.",
    )
    @functools.wraps(fn)
    def wrapper(*args: Any, url: str, prefix: str, **kwargs: Any) -> Any:
        return fn(*args, target=Target(url, prefix), **kwargs)

    return wrapper  # type: ignore[return-value]


def json_option(fn: F) -> F:
    """Add ``--json``: machine-readable output (the command receives ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(fn)


def passphrase_option(fn: F) -> F:
    """Add ``--passphrase`` (env ``REDIS_SESSION_PASSPHRASE``; asked for when missing) for
    commands that read or write encrypted session content; the command receives ``passphrase``.
    """
    return click.option(
        "--passphrase",
        envvar="REDIS_SESSION_PASSPHRASE",
        prompt=True,
        hide_input=True,
        help="Passphrase of the encrypted store; env REDIS_SESSION_PASSPHRASE.",
    )(fn)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class CliGroup(click.Group):
    """A group that turns the library's and redis-py's errors into one line and status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; the library's, redis-py's and argument errors become one line."""
        try:
            return super().invoke(ctx)
        except click.ClickException:
            raise
        except SessionError as exc:
            raise click.ClickException(one_line(exc)) from None
        except redis.RedisError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {one_line(exc)}") from None
        except (ValueError, OSError) as exc:
            raise click.ClickException(one_line(exc)) from None
