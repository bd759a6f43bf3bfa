"""What the commands share: where they work (:class:`Target`), their common options, the
consoles they print on (user data always literal), passphrases (asked for only on a terminal),
hints that repeat the command line, the check that a store's server accepts a connection, and
the group that turns every error into one line (or one JSON object) on stderr and a documented
exit status.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import re
import shlex
import socket
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click
import orjson
import redis
from click.core import ParameterSource
from rich.console import Console
from rich.text import Text

from .._dist import DISTRIBUTION, install_hint
from .._transport.endpoint import where as shown_url
from ..errors import PassphraseRequired, SessionError
from ..store import RedisStore

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

DEFAULT_URL = "redis://localhost:6379/0"
DEFAULT_PREFIX = "rs:"
PASSPHRASE_ENV = "REDIS_SESSION_PASSPHRASE"
NEW_PASSPHRASE_ENV = "REDIS_SESSION_NEW_PASSPHRASE"
PIPELINE_BATCH = 200
PLAIN_WIDTH = 160
"""Console width when stdout is not a terminal and COLUMNS is unset (keeps keys whole)."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 3
EXIT_CODES = (
    (EXIT_OK, "success"),
    (EXIT_ERROR, "error: store, server, failed check, passphrase not askable"),
    (EXIT_USAGE, "bad command line"),
    (EXIT_TIMEOUT, "events: --timeout ran out before --count events"),
)
"""The exit statuses of every command, as the group's help and the module docstring list them."""

SECRET_PARAMS = frozenset({"passphrase", "new_passphrase"})
"""Parameters whose values are never repeated in a hint."""

TRACEBACK_ENV = "REDIS_SESSION_TRACEBACK"
"""Set (to anything but empty or 0), an error that is not the command line's own propagates with
its traceback instead of becoming one line."""

CONNECT_CHECK_S = 3.0
"""How long a command waits for its server to accept a connection before it starts (a refused
connection fails at once; 3 s lets one lost SYN be sent again)."""


# -- output -------------------------------------------------------------------------------------


def make_console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) that prints strings literally: no markup, no emoji
    codes, no highlighting, so user data such as ``newbie:x:`` or ``[bold]`` shows as it is.
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else PLAIN_WIDTH
    return Console(
        file=stream, width=width, highlight=False, soft_wrap=False, markup=False, emoji=False
    )


_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def literal(value: str, *, multiline: bool = False) -> str:
    """``value`` with control characters (and bidirectional overrides) written as escapes
    (``\\x1b``), so user data cannot move the cursor, recolour or rewrite the terminal.
    ``multiline`` keeps newlines and tabs (message content).
    """
    if value.isprintable():
        return value
    out = []
    for ch in value:
        if multiline and ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) == "Cc" or ch in _BIDI:
            out.append(ascii(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)


def text(value: str, style: str = "", *, multiline: bool = False) -> Text:
    """User data as a rich ``Text``: printed literally (see :func:`literal`)."""
    return Text(literal(value, multiline=multiline), style=style)


def echo(value: str, *, err: bool = False) -> None:
    """Print a plain line (user data in it escaped as :func:`literal` does)."""
    click.echo(literal(value), err=err)


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


def repeat_command(ctx: click.Context, **changes: object) -> str:
    """The command line of ``ctx`` as a shell command to paste: every argument and every
    option the user gave (on the command line or through its environment variable), with
    ``changes`` applied (option name → new value), each word quoted with ``shlex.quote``.
    Passphrases are never repeated (they stay in the environment or get asked for).
    """
    words = ["redis-session", *ctx.command_path.split()[1:]]
    options: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name is None or name in SECRET_PARAMS:
            continue
        given = ctx.get_parameter_source(name) in (
            ParameterSource.COMMANDLINE,
            ParameterSource.ENVIRONMENT,
        )
        if not given and name not in changes:
            continue
        value = changes.get(name, ctx.params.get(name))
        if isinstance(param, click.Argument):
            values = value if isinstance(value, tuple | list) else (value,)
            words += [str(v) for v in values]
            continue
        flag = next((o for o in param.opts if o.startswith("--")), param.opts[0])
        if isinstance(param, click.Option) and param.is_flag:
            options += [flag] if value else []
        elif isinstance(value, tuple | list):
            for item in value:
                options += [flag, str(item)]
        elif value is not None:
            options += [flag, str(value)]
    return shlex.join(words + options)


# -- where a command works -------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where an operator command works: a store URL and a key prefix."""

    url: str
    prefix: str

    @property
    def is_memory(self) -> bool:
        """Whether the store is ``memory://``: in-process, so empty in every new process."""
        return self.url.split("://", 1)[0].lower() == "memory"

    @contextmanager
    def open(self, **options: Any) -> Iterator[RedisStore]:
        """A store for this target (``options`` go to the store), closed afterwards.

        The server must accept a connection first (:func:`check_reachable`): a refused one
        fails the command at once rather than after the store's client has retried for
        seconds. Connection errors later on name the URL too.
        """
        check_reachable(self.url)
        store = RedisStore.from_url(self.url, prefix=self.prefix, **options)
        try:
            yield store
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            name = type(exc).__name__
            raise CliError(f"{name}: {shown_url(self.url)}: {one_line(exc)}", kind=name) from None
        finally:
            store.close()

    def read(self, passphrase: str | None, run: Callable[[RedisStore], T]) -> T:
        """``run(store)`` on a store without a passphrase; if sealed content stops it
        (``PassphraseRequired``), again on a store opened with ``passphrase`` (or one asked for
        on the terminal; without a terminal, a one-line error). A passphrase is used only when
        the content needs one, so reading a cleartext store never writes a keyring to it.

        ``run`` must fail before it writes when content is sealed (the store checks that).
        """
        try:
            with self.open() as store:
                return run(store)
        except PassphraseRequired as exc:
            if passphrase is None:
                passphrase = ask_passphrase(
                    "Passphrase", option="--passphrase", envvar=PASSPHRASE_ENV, reason=str(exc)
                )
        with self.open(passphrase=passphrase) as store:
            return run(store)


def _addresses(url: str) -> list[str | tuple[str, int]]:
    """Where a store URL's server listens: a unix socket's path, or ``(host, port)`` (every
    sentinel of a Sentinel URL); nothing for ``memory://`` or a URL the store refuses anyway.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "unix":
        path = urlsplit(url).path
        return [path] if path else []
    if scheme.removesuffix("+cluster").removesuffix("+sentinel") not in ("redis", "rediss"):
        return []
    default = 26379 if scheme.endswith("+sentinel") else 6379
    found: list[str | tuple[str, int]] = []
    for item in urlsplit(url).netloc.rpartition("@")[2].split(","):
        v6 = re.fullmatch(r"\[([^\]]*)\](?::(\d*))?", item)
        host, _, port = (v6.group(1), "", v6.group(2) or "") if v6 else item.partition(":")
        if not host or not (port.isdigit() or not port):
            return []
        found.append((host, int(port or default)))
    return found


def check_reachable(url: str, timeout: float = CONNECT_CHECK_S) -> None:
    """Fail with one line naming ``url`` (without its password) unless its server accepts a
    connection (one of a Sentinel URL's sentinels): a socket connect, no command and no
    retry, so a refused connection is reported at once. ``memory://`` needs no check.
    """
    reasons = []
    for address in _addresses(url):
        try:
            if isinstance(address, str):
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.settimeout(timeout)
                    sock.connect(address)
            else:
                socket.create_connection(address, timeout=timeout).close()
            return
        except OSError as exc:
            reasons.append(exc.strerror or str(exc) or type(exc).__name__)
    if reasons:
        why = "; ".join(dict.fromkeys(reasons))
        raise CliError(
            f"ConnectionError: cannot connect to {shown_url(url)}: {why}", kind="ConnectionError"
        )


def store_options(fn: F) -> F:
    """Add ``--url`` and ``--prefix``; the command receives them as ``target: Target``."""

    @click.option(
        "--url",
        envvar="REDIS_URL",
        default=DEFAULT_URL,
        show_default=True,
        callback=_checked_url,
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
    """Add ``--json``: machine-readable output, and errors as JSON on stderr (the command
    receives ``as_json``).
    """
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (errors too, on stderr)."
    )(fn)


# -- passphrases -------------------------------------------------------------------------------


def passphrase_option(fn: F) -> F:
    """Add ``--passphrase`` (env ``REDIS_SESSION_PASSPHRASE``) for commands that read or write
    sealed session content; the command receives ``passphrase`` (None when neither was given:
    resolve it with :func:`ask_passphrase` or :meth:`Target.read`).
    """
    return click.option(
        "--passphrase",
        envvar=PASSPHRASE_ENV,
        default=None,
        help=f"Passphrase of an encrypted store; env {PASSPHRASE_ENV}. Asked for when needed "
        "and stdin is a terminal.",
    )(fn)


def stdin_is_tty() -> bool:
    """Whether stdin is a terminal a passphrase can be asked on."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached
        return False


def ask_passphrase(
    label: str, *, option: str, envvar: str, confirm: bool = False, reason: str = ""
) -> str:
    """Ask for a passphrase on the terminal (hidden; twice with ``confirm``). Without a
    terminal on stdin, a one-line error (exit 1) naming the option and the environment
    variable instead: never a prompt that reads a pipe or waits for input that cannot come.
    """
    if not stdin_is_tty():
        why = f"{reason}: " if reason else ""
        raise CliError(
            f"{why}{label.lower()} needed: give {option} or set {envvar} "
            "(stdin is not a terminal to ask on)",
            kind="PassphraseRequired",
        )
    value: str = click.prompt(label, hide_input=True, confirmation_prompt=confirm, err=True)
    return value


# -- errors and exit statuses ------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _checked_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--url`` with a scheme the store knows, else a bad command line (exit status 2)."""
    from .._transport.endpoint import parse
    from ..errors import InvalidArgument

    try:
        parse(value, False)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc).removeprefix("url: "), ctx, param) from None
    return value


class CliError(click.ClickException):
    """A failure reported as one line (``Error: …``) or, under ``--json``, as one JSON object
    ``{"error": message, "type": kind, "exit_code": …}`` on stderr; exit status 1.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class TimedOut(CliError):
    """``events`` stopped at its ``--timeout`` before ``--count`` events arrived: status 3."""

    exit_code = EXIT_TIMEOUT


def missing_dependency(exc: ImportError) -> str:
    """An ImportError as one line that says what to install: its own message when it says so
    (the library's do, e.g. ``memory://`` without the ``memory`` extra), else the extra of
    the distribution that requires the missing module, from the installed package's metadata.
    """
    message = one_line(exc)
    if "pip install" in message:
        return message
    wanted = (exc.name or "").partition(".")[0].replace("_", "-").lower()
    extras = []
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    for requirement in requires:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)", requirement)
        if name and extra and re.sub(r"[._]", "-", name.group().lower()) == wanted:
            extras.append(extra.group(1))
    return f"{message}: {install_hint(extras[0] if extras else 'cli,memory')}"


def wants_traceback() -> bool:
    """Whether ``REDIS_SESSION_TRACEBACK`` asks for errors with their traceback."""
    return os.environ.get(TRACEBACK_ENV, "") not in ("", "0")


def _wants_json(argv: Sequence[str]) -> bool:
    words = list(argv)
    if "--" in words:
        words = words[: words.index("--")]
    return "--json" in words


def _report(exc: click.ClickException | click.Abort, as_json: bool) -> int:
    """Print ``exc`` on stderr (click's form, or JSON) and return its exit status."""
    if isinstance(exc, click.Abort):
        message, kind, code = "aborted", "Aborted", EXIT_ERROR
    else:
        message, code = literal(" ".join(exc.format_message().split())), exc.exit_code
        if isinstance(exc, CliError):
            kind = exc.kind
        else:
            kind = "UsageError" if isinstance(exc, click.UsageError) else "Error"
    if as_json:
        payload = {"error": message, "type": kind, "exit_code": code}
        click.echo(orjson.dumps(payload).decode(), err=True)
    elif isinstance(exc, click.Abort):
        click.echo("Aborted!", err=True)
    elif isinstance(exc, click.UsageError) and exc.ctx is not None:
        helps = exc.ctx.help_option_names[0] if exc.ctx.help_option_names else "--help"
        click.echo(f"Error: {message} (see {exc.ctx.command_path} {helps})", err=True)
    else:
        click.echo(f"Error: {message}", err=True)
    return code


class _WarningLines(logging.Handler):
    """The library's log records of WARNING and above (an outage waited out, a record
    skipped) as the command line prints its errors: one line each on stderr, ``Warning: …``
    (user data escaped as :func:`literal` does), or one JSON object ``{"warning": …,
    "level": …}`` under ``--json``; not the bare text of Python's last-resort handler.
    """

    def __init__(self, as_json: bool) -> None:
        super().__init__(logging.WARNING)
        self.as_json = as_json

    def emit(self, record: logging.LogRecord) -> None:
        message = literal(" ".join(record.getMessage().split()))
        if self.as_json:
            line = {"warning": message, "level": record.levelname.lower()}
            click.echo(orjson.dumps(line).decode(), err=True)
        else:
            click.echo(f"{record.levelname.capitalize()}: {message}", err=True)


class CliGroup(click.Group):
    """The ``redis-session`` group: every error becomes one line (one JSON object under
    ``--json``) on stderr: the library's, redis-py's, argument errors and a missing extra
    (what to pip install) exit with status 1, a bad command line with 2, and an unexpected
    exception (a bug) with 1 too, its traceback shown only with ``REDIS_SESSION_TRACEBACK=1``;
    see :data:`EXIT_CODES`.
    """

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, turning the errors it raises into :class:`CliError`."""
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if wants_traceback():
                raise
            raise self.reported(exc) from None

    @staticmethod
    def reported(exc: Exception) -> CliError:
        """``exc`` as the one-line :class:`CliError` the group reports."""
        name = type(exc).__name__
        if isinstance(exc, SessionError):
            return CliError(one_line(exc), kind=name)
        if isinstance(exc, redis.RedisError):
            return CliError(f"{name}: {one_line(exc)}", kind=name)
        if isinstance(exc, ImportError):
            return CliError(missing_dependency(exc), kind=name)
        if isinstance(exc, ValueError | OSError):
            return CliError(one_line(exc), kind=name)
        return CliError(
            f"unexpected {name}: {one_line(exc)} (a bug in redis-session; "
            f"{TRACEBACK_ENV}=1 shows its traceback)",
            kind=name,
        )

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        """Run the command line; report an error on stderr and exit with its status (return
        it when not ``standalone_mode``).
        """
        argv = list(sys.argv[1:] if args is None else args)
        logger = logging.getLogger("redis_session")
        lines = None if logger.handlers else _WarningLines(_wants_json(argv))
        if lines is not None:  # a program that set up logging keeps its own
            logger.addHandler(lines)
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else EXIT_OK
        except (click.ClickException, click.Abort) as exc:
            code = _report(exc, _wants_json(argv))
        finally:
            if lines is not None:
                logger.removeHandler(lines)
        if standalone_mode:
            sys.exit(code)
        return code
