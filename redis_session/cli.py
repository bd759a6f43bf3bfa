"""The ``redis-session`` command line (also ``python -m redis_session``).

``demo`` runs simulated agent workers on the embedded ``memory://`` store (or ``--url``) and
exits 1 when its consistency check fails. The operator commands work on a store given by
``--url`` (``REDIS_URL``, default ``redis://localhost:6379/0``) and ``--prefix``
(``REDIS_SESSION_PREFIX``, default ``rs:``): ``ls``, ``show``, ``events``, ``compact``,
``delete``, ``stats``, ``rekey`` and ``bench``. Output is for humans by default and JSON with
``--json``.
Errors are one line on stderr with exit status 1 (2 for a bad command line).
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import click
import orjson
import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from . import _demo
from ._keyring import RekeyProgress, RekeyReport
from .errors import SessionError, SessionNotFound
from .keys import KeySchema, parent_of
from .models import ChildSession, Message, Session, SessionLifecycleEvent
from .store import RedisStore

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_URL = "redis://localhost:6379/0"
DEFAULT_PREFIX = "rs:"
PIPELINE_BATCH = 200
PLAIN_WIDTH = 160
"""Console width when stdout is not a terminal and COLUMNS is unset (keeps keys whole)."""


# -- plumbing shared by the commands ----------------------------------------------------------


def _console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else PLAIN_WIDTH
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def _echo_json(data: object) -> None:
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _bytes(n: float | None) -> str:
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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class _Cli(click.Group):
    """A group that turns the library's and redis-py's errors into one line and status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException:
            raise
        except SessionError as exc:
            raise click.ClickException(_one_line(exc)) from None
        except redis.RedisError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {_one_line(exc)}") from None
        except (ValueError, OSError) as exc:
            raise click.ClickException(_one_line(exc)) from None


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="redis-session", prog_name="redis-session")
def cli() -> None:
    """LLM-agent sessions in Redis: a demo, and tools for operators.

    Operator commands take --url (env REDIS_URL) and --prefix (env REDIS_SESSION_PREFIX).
    """


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line (the ``redis-session`` entry point); exits with its status."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="redis-session")


# -- demo -------------------------------------------------------------------------------------


def _event_line(event: SessionLifecycleEvent) -> Text:
    line = Text("  event ", style="dim")
    line.append(f"{event.type:<8}", style="bold cyan")
    line.append(event.key or event.parent_key)
    if event.child_key:
        line.append(f"  ← {event.agent_name}", style="magenta")
    return line


def _demo_table(result: _demo.DemoResult, url: str, prefix: str) -> Table:
    c = result.counts
    cfg = result.config
    seen = ", ".join(f"{t} {result.events[t]}" for t in _demo.COUNTED_EVENTS)
    rows = [
        ("store", f"{url} (prefix {prefix})"),
        ("workers", f"{cfg.workers} threads × {cfg.turns} turns"),
        ("sessions", f"{result.sessions}"),
        ("messages", f"{result.messages:,} stored ({c['appended']:,} appended)"),
        ("forks", f"{c['forks']} sub-agent children, inheriting 2 messages each"),
        (
            "merges",
            f"{c['merges']} ({c['merged_summaries']} as one summary, "
            f"{c['merges'] - c['merged_summaries']} as the child's own messages)",
        ),
        ("compactions", f"{c['compactions']} ({c['compacted']:,} messages summarised)"),
        ("events seen", f"{sum(result.events.values())} ({seen})"),
        ("operations", f"{result.ops:,} in {result.elapsed:.2f} s"),
        ("ops/s", f"{result.ops / result.elapsed:,.0f}" if result.elapsed else "-"),
        ("latency p50", f"{result.percentile(0.5) * 1e3:.2f} ms"),
        ("latency p99", f"{result.percentile(0.99) * 1e3:.2f} ms"),
    ]
    table = Table(title="demo summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, Text(value))
    return table


def _demo_json(result: _demo.DemoResult, url: str, prefix: str) -> dict[str, Any]:
    return {
        "url": url,
        "prefix": prefix,
        "workers": result.config.workers,
        "turns": result.config.turns,
        "sessions": result.sessions,
        "messages": result.messages,
        "appended": result.counts["appended"],
        "forks": result.counts["forks"],
        "merges": result.counts["merges"],
        "compactions": result.counts["compactions"],
        "events_seen": dict(result.events),
        "events_expected": dict(result.expected_events),
        "operations": result.ops,
        "elapsed_s": result.elapsed,
        "ops_per_s": result.ops / result.elapsed if result.elapsed else 0.0,
        "p50_ms": result.percentile(0.5) * 1e3,
        "p99_ms": result.percentile(0.99) * 1e3,
        "lost": result.lost,
        "duplicated": result.duplicated,
        "unexpected": result.unexpected,
        "unmerged": result.unmerged,
        "missing_events": result.missing_events,
        "errors": result.errors,
        "consistent": result.ok,
    }


def _verdict(result: _demo.DemoResult) -> Text:
    if result.ok:
        return Text(
            f"consistency OK: nothing lost or duplicated ({result.messages:,} messages, "
            f"all children merged, all events seen)",
            style="bold green",
        )
    problems = [
        f"{n} {what}"
        for n, what in (
            (result.lost, "lost"),
            (result.duplicated, "duplicated"),
            (result.unexpected, "unexpected"),
            (result.unmerged, "children unmerged or missing"),
            (result.missing_events, "events missing"),
        )
        if n
    ]
    problems += result.errors
    return Text("consistency FAILED: " + "; ".join(problems), style="bold red")


@cli.command(short_help="Simulated agent workers, then a consistency check.")
@click.option("--url", default="memory://", show_default=True, help="Store URL.")
@click.option("--prefix", default=None, help="Key prefix [default: demo:<random>:].")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--sessions", type=click.IntRange(1, 10_000), default=8, show_default=True)
@click.option(
    "--turns", type=click.IntRange(0), default=40, show_default=True, help="Turns per worker."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--show-events",
    type=click.IntRange(0),
    default=12,
    show_default=True,
    help="Print the first N lifecycle events as they arrive (all are counted).",
)
@click.option("--keep", is_flag=True, help="Keep the demo's sessions (default: delete them).")
@json_option
def demo(
    url: str,
    prefix: str | None,
    workers: int,
    sessions: int,
    turns: int,
    seed: int,
    show_events: int,
    keep: bool,
    as_json: bool,
) -> None:
    """Simulated agent workers share sessions: turns with tool calls, sub-agents forked and
    merged, long histories compacted; then a consistency check (exit 1 if it fails).
    """
    prefix = prefix or f"demo:{uuid.uuid4().hex[:8]}:"
    config = _demo.DemoConfig(workers=workers, sessions=sessions, turns=turns, seed=seed)
    console = _console(stderr=as_json)
    printed = 0
    with Target(url, prefix).open(ttl=3600) as store:
        console.print(
            Text.assemble(
                ("demo", "bold"),
                f": {workers} agent workers × {turns} turns on {sessions} sessions, store {url}",
            )
        )
        progress = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("turns, {task.fields[events]} events"),
            TimeElapsedColumn(),
            console=console,
        )

        def on_event(event: SessionLifecycleEvent) -> None:
            nonlocal printed
            progress.update(task, events=progress.tasks[task].fields["events"] + 1)
            if printed < show_events:
                printed += 1
                progress.console.print(_event_line(event))
            elif printed == show_events and show_events:
                printed += 1
                progress.console.print("  … more events, counted in the summary", style="dim")

        with progress:
            task = progress.add_task("agents at work", total=workers * turns, events=0)
            result = _demo.run_demo(
                store, config, on_event=on_event, on_turn=lambda: progress.advance(task)
            )
        if not keep:
            _demo.cleanup(store, config)
    if as_json:
        _echo_json(_demo_json(result, url, prefix))
    else:
        out = _console()
        out.print(_demo_table(result, url, prefix))
        out.print(_verdict(result))
        if keep:
            out.print(f"kept: redis-session ls --url {url} --prefix {prefix}")
    if not result.ok:
        raise click.exceptions.Exit(1)


# -- operator commands --------------------------------------------------------------------------


def _message_counts(store: RedisStore, keys: Sequence[str]) -> list[int]:
    schema = KeySchema(store.prefix)
    client: Any = store.client
    counts: list[int] = []
    for i in range(0, len(keys), PIPELINE_BATCH):
        pipe = client.pipeline(transaction=False)
        for key in keys[i : i + PIPELINE_BATCH]:
            pipe.llen(schema.session(key).msgs)
        counts += [int(n) for n in pipe.execute()]
    return counts


@cli.command("ls")
@store_options
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True, help="Page size.")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True)
@json_option
def ls_(target: Target, limit: int, page: int, as_json: bool) -> None:
    """List sessions, most recently updated first, one page at a time."""
    with target.open() as store:
        rows = store.list_sessions(limit=limit + 1, offset=(page - 1) * limit)
        more, rows = len(rows) > limit, rows[:limit]
        counts = _message_counts(store, [r.key for r in rows])
    if as_json:
        _echo_json(
            {
                "page": page,
                "limit": limit,
                "more": more,
                "sessions": [
                    {**r.model_dump(mode="json"), "messages": n}
                    for r, n in zip(rows, counts, strict=True)
                ],
            }
        )
        return
    console = _console()
    if not rows:
        console.print(f"no sessions under prefix {target.prefix!r} (page {page})")
        return
    table = Table(title=f"sessions under {target.prefix!r}, page {page}", title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("key", overflow="fold")
    table.add_column("messages", justify="right")
    table.add_column("updated (UTC)")
    table.add_column("created (UTC)")
    first = (page - 1) * limit
    for n, (row, count) in enumerate(zip(rows, counts, strict=True), start=first + 1):
        table.add_row(
            str(n), Text(row.key), str(count), _when(row.updated_at), _when(row.created_at)
        )
    console.print(table)
    if more:
        hint = f"redis-session ls --page {page + 1} --limit {limit}"
        if target.prefix != DEFAULT_PREFIX:
            hint += f" --prefix {target.prefix}"
        console.print(Text(f"more: {hint}", style="dim"))


def _message_table(messages: Sequence[Message], first: int) -> Table:
    table = Table(show_lines=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("role", style="bold")
    table.add_column("author")
    table.add_column("content", overflow="fold")
    for n, msg in enumerate(messages, start=first):
        content = Text(msg.content)
        for call in msg.tool_calls:
            content.append(f"\n→ {call.name}({call.input})", style="yellow")
            if call.output:
                content.append(f" = {call.output}", style="yellow")
        table.add_row(str(n), _when(msg.timestamp), msg.role.value, Text(msg.author), content)
    return table


def _show_session(
    session: Session, children: list[ChildSession], last: int | None, as_json: bool, total: int
) -> None:
    shown = session.history[-last:] if last else session.history
    first = total - len(shown)
    if as_json:
        data = session.model_dump(mode="json", exclude={"history"})
        data["message_count"] = total
        data["history"] = [m.model_dump(mode="json") for m in shown]
        data["children"] = [
            c.model_dump(mode="json", exclude={"history", "config"}) for c in children
        ]
        _echo_json(data)
        return
    console = _console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("session", Text(session.key))
    for name in ("agent_id", "channel_type", "channel_id", "model"):
        value = getattr(session, name)
        if value:
            head.add_row(name, Text(value))
    head.add_row("created", f"{_when(session.created_at)} UTC")
    head.add_row("updated", f"{_when(session.updated_at)} UTC")
    for name, value in sorted(session.metadata.items()):
        head.add_row(f"metadata {name}", Text(value))
    head.add_row("messages", f"{total}" + (f" (showing the last {len(shown)})" if last else ""))
    if children:
        merged = sum(1 for c in children if c.is_merged())
        head.add_row(
            "children", f"{len(children)} ({merged} merged, {len(children) - merged} open)"
        )
    for child in children:
        if not child.is_merged():  # the merged ones are in --json
            head.add_row("open child", Text(f"{child.key}  ({child.agent_name})"))
    console.print(head)
    if shown:
        console.print(_message_table(shown, first))


def _show_child(child: ChildSession, last: int | None, as_json: bool) -> None:
    total = len(child.history)
    shown = child.history[-last:] if last else child.history
    if as_json:
        data = child.model_dump(mode="json", exclude={"history"})
        data["message_count"] = total
        data["history"] = [m.model_dump(mode="json") for m in shown]
        _echo_json(data)
        return
    console = _console()
    state = f"merged {_when(child.merged_at)} UTC" if child.is_merged() else "open"
    console.print(Text(f"child session {child.key}", style="bold"))
    console.print(Text(f"parent {child.parent_key}, agent {child.agent_name}, {state}"))
    console.print(f"messages {total}" + (f" (showing the last {len(shown)})" if last else ""))
    if shown:
        console.print(_message_table(shown, total - len(shown)))


@cli.command(short_help="Show one session: fields, children, messages.")
@store_options
@click.argument("key")
@click.option("--last", type=click.IntRange(1), default=None, help="Only the newest N messages.")
@json_option
def show(target: Target, key: str, last: int | None, as_json: bool) -> None:
    """Show one session (or child session): its fields, children and messages."""
    with target.open() as store:
        try:
            session = store.get(key, last)  # --last N reads only the newest N messages
        except SessionNotFound:
            if parent_of(key) is None:
                raise
            _show_child(store.get_child(key), last, as_json)
            return
        total = len(session.history)
        if last is not None and total == last:  # there may be more: count them
            client: Any = store.client
            total = max(total, int(client.llen(KeySchema(store.prefix).session(key).msgs)))
        children = store.children_of(key)
    _show_session(session, children, last, as_json, total)


@cli.command(short_help="Print lifecycle events as they are published.")
@store_options
@click.option("--count", type=click.IntRange(1), default=None, help="Stop after N events.")
@click.option(
    "--timeout", type=click.FloatRange(0, min_open=True), default=None, help="Stop after S seconds."
)
@click.option(
    "--type", "types", multiple=True, help="Only events of this type (repeatable), e.g. merge."
)
@json_option
def events(
    target: Target, count: int | None, timeout: float | None, types: tuple[str, ...], as_json: bool
) -> None:
    """Print lifecycle events as they are published (JSON Lines with --json); Ctrl-C stops."""
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = 0
    err = _console(stderr=True)
    out = _console()
    with target.open() as store, store.listen() as listener:
        err.print(f"listening on {store.events_channel}", style="dim")
        try:
            while count is None or seen < count:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                event = listener.get(timeout=1.0 if left is None else min(left, 1.0))
                if event is None or (types and event.type not in types):
                    continue
                seen += 1
                if as_json:
                    click.echo(orjson.dumps(event.model_dump(mode="json")).decode())
                else:
                    line = Text(f"{_when(event.timestamp)}  ")
                    line.append(f"{event.type:<8}", style="bold cyan")
                    line.append(event.key or event.parent_key)
                    if event.child_key:
                        line.append(f"  child {event.child_key} ({event.agent_name})")
                    out.print(line)
        except KeyboardInterrupt:
            pass
    err.print(f"{seen} event{'s' if seen != 1 else ''}", style="dim")


@cli.command(short_help="Replace old messages of a session with one summary.")
@store_options
@click.argument("key")
@click.option(
    "--keep", type=click.IntRange(0), default=10, show_default=True, help="Newest messages kept."
)
@click.option("--summary", default=None, help="Summary text [default: a note of what was cut].")
@json_option
def compact(target: Target, key: str, keep: int, summary: str | None, as_json: bool) -> None:
    """Replace all but the newest --keep messages of KEY with one summary message."""
    with target.open() as store:
        history = store.get_history(key)
        up_to = len(history) - keep - 1
        removed = 0
        if up_to >= 0:
            if summary is None:
                span = f"{_when(history[0].timestamp)} to {_when(history[up_to].timestamp)} UTC"
                summary = f"{up_to + 1} earlier messages ({span}) compacted by redis-session"
            removed = store.compact_messages(key, up_to, summary, expect_id=history[up_to].id)
        after = len(store.get_history(key))
    if as_json:
        _echo_json({"key": key, "before": len(history), "removed": removed, "after": after})
    elif up_to < 0:
        click.echo(f"{key}: nothing to compact ({len(history)} messages, keeping {keep})")
    else:
        click.echo(
            f"{key}: compacted messages 0..{up_to} into one summary "
            f"({len(history)} → {after} messages)"
        )


@cli.command(short_help="Delete sessions (messages and children included).")
@store_options
@click.argument("keys", nargs=-1, required=True)
@click.option("--missing-ok", is_flag=True, help="Exit 0 even when a key has no session.")
@json_option
def delete(target: Target, keys: tuple[str, ...], missing_ok: bool, as_json: bool) -> None:
    """Delete sessions (with their messages and children)."""
    with target.open() as store:
        done = {key: store.delete(key) for key in keys}
    missing = [k for k, existed in done.items() if not existed]
    if as_json:
        _echo_json({"deleted": [k for k, d in done.items() if d], "missing": missing})
    else:
        for key, existed in done.items():
            if existed:
                click.echo(f"deleted {key}")
    if missing and not missing_ok:
        names = ", ".join(repr(k) for k in missing)
        raise click.ClickException(f"no session {names} under prefix {target.prefix!r}")


@dataclass
class _SessionStats:
    key: str
    messages: int
    memory: int | None


def _collect_stats(store: RedisStore, limit: int | None) -> list[_SessionStats]:
    schema = KeySchema(store.prefix)
    client: Any = store.client
    keys = [s.key for s in store.list_sessions(limit=limit)]
    out: list[_SessionStats] = []
    for i in range(0, len(keys), PIPELINE_BATCH):
        batch = keys[i : i + PIPELINE_BATCH]
        pipe = client.pipeline(transaction=False)
        for key in batch:
            sk = schema.session(key)
            pipe.llen(sk.msgs)
            for name in (sk.meta, sk.msgs, sk.ids, sk.kids):
                pipe.execute_command("MEMORY", "USAGE", name, "SAMPLES", "0")
        replies = pipe.execute(raise_on_error=False)
        for n, key in enumerate(batch):
            llen, *usage = replies[n * 5 : n * 5 + 5]
            if isinstance(llen, Exception):
                raise llen
            memory = None
            if not any(isinstance(u, Exception) for u in usage):
                memory = sum(int(u or 0) for u in usage)
            out.append(_SessionStats(key, int(llen), memory))
    return out


@cli.command(short_help="Sessions, messages and memory per session.")
@store_options
@click.option(
    "--top", type=click.IntRange(0), default=10, show_default=True, help="List the N largest."
)
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=None,
    help="Only the N most recently updated sessions [default: all].",
)
@json_option
def stats(target: Target, top: int, limit: int | None, as_json: bool) -> None:
    """Sessions, messages and memory per session (MEMORY USAGE of each session's keys).

    Memory covers a session's own keys (fields, messages, id digests, child list), not the
    keys of its children; 'n/a' when the server has no MEMORY USAGE (memory://).
    """
    with target.open() as store:
        rows = _collect_stats(store, limit)
    memories = [r.memory for r in rows if r.memory is not None]
    known = len(memories) == len(rows) and bool(rows)
    messages = sum(r.messages for r in rows)
    total_memory = sum(memories) if known else None
    largest = sorted(rows, key=lambda r: (r.memory or 0, r.messages), reverse=True)[:top]
    summary: dict[str, Any] = {
        "prefix": target.prefix,
        "sessions": len(rows),
        "messages": messages,
        "messages_per_session_mean": messages / len(rows) if rows else 0.0,
        "messages_per_session_max": max((r.messages for r in rows), default=0),
        "memory_bytes": total_memory,
        "memory_per_session_mean": statistics.fmean(memories) if known else None,
        "memory_per_session_median": statistics.median(memories) if known else None,
        "memory_per_session_max": max(memories) if known else None,
        "memory_per_message": total_memory / messages if total_memory and messages else None,
        "largest": [
            {"key": r.key, "messages": r.messages, "memory_bytes": r.memory} for r in largest
        ],
    }
    if as_json:
        _echo_json(summary)
        return
    console = _console()
    table = Table(
        title=f"sessions under {target.prefix!r}", show_header=False, title_justify="left"
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("sessions", f"{len(rows):,}")
    table.add_row("messages", f"{messages:,}")
    table.add_row("messages per session (mean)", f"{summary['messages_per_session_mean']:,.1f}")
    table.add_row("messages per session (max)", f"{summary['messages_per_session_max']:,}")
    table.add_row("memory", _bytes(total_memory))
    table.add_row("memory per session (mean)", _bytes(summary["memory_per_session_mean"]))
    table.add_row("memory per session (median)", _bytes(summary["memory_per_session_median"]))
    table.add_row("memory per session (max)", _bytes(summary["memory_per_session_max"]))
    table.add_row("memory per message", _bytes(summary["memory_per_message"]))
    console.print(table)
    if largest:
        big = Table(title=f"largest {len(largest)}", title_justify="left")
        big.add_column("key", overflow="fold")
        big.add_column("messages", justify="right")
        big.add_column("memory", justify="right")
        for r in largest:
            big.add_row(Text(r.key), f"{r.messages:,}", _bytes(r.memory))
        console.print(big)


def _rekey_summary(report: RekeyReport) -> str:
    passes = f"{report.passes} pass{'es' if report.passes != 1 else ''}"
    sessions = f"{report.sessions_resealed:,} session{'s' if report.sessions_resealed != 1 else ''}"
    line = f"rekeyed: {sessions} and {report.values_resealed:,} values re-sealed in {passes}"
    return line + (" (resumed an interrupted rotation)" if report.resumed else "")


@cli.command(short_help="Rotate the passphrase and data key of an encrypted store.")
@store_options
@passphrase_option
@click.option(
    "--new-passphrase",
    envvar="REDIS_SESSION_NEW_PASSPHRASE",
    prompt=True,
    hide_input=True,
    confirmation_prompt=True,
    help="The passphrase to rotate to; env REDIS_SESSION_NEW_PASSPHRASE.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Sessions re-sealed per batch.",
)
@json_option
def rekey(
    target: Target, passphrase: str, new_passphrase: str, batch_size: int, as_json: bool
) -> None:
    """Rotate an encrypted store to a new passphrase and data key, re-sealing every session.

    Online: workers with either passphrase keep reading and writing meanwhile. An interrupted
    rotation resumes when run again with the same new passphrase. Afterwards the old
    passphrase opens nothing.
    """
    if not new_passphrase:
        raise click.UsageError("the new passphrase is empty")
    if new_passphrase == passphrase:
        raise click.UsageError("the new passphrase is the old one")
    console = _console(stderr=as_json)
    progress = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("sessions, {task.fields[values]:,} values re-sealed"),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("rekey pass 1", total=None, values=0)
    current_pass = 1

    def on_progress(p: RekeyProgress) -> None:
        nonlocal current_pass
        if not progress.live.is_started:  # shown once the passphrase opened the keyring
            progress.start()
        if p.pass_number != current_pass:
            current_pass = p.pass_number
            progress.reset(task, description=f"rekey pass {p.pass_number}")
        progress.update(
            task, completed=p.sessions_done, total=p.sessions_total, values=p.values_resealed
        )

    with target.open(passphrase=passphrase) as store:
        try:
            report = store.rekey(new_passphrase, batch_size=batch_size, progress=on_progress)
        finally:
            if progress.live.is_started:
                progress.stop()
    if as_json:
        _echo_json(
            {
                "prefix": target.prefix,
                "sessions_resealed": report.sessions_resealed,
                "values_resealed": report.values_resealed,
                "passes": report.passes,
                "resumed": report.resumed,
            }
        )
    else:
        _console().print(Text(_rekey_summary(report), style="green"))


def _bench_table(bench: Any) -> Table:
    table = Table(title="store vs raw redis-py floors (µs; ratio of medians)", title_justify="left")
    for name in ("case", "store med", "store p99", "floor med", "floor p99", "ratio", "target"):
        table.add_column(name, justify="left" if name == "case" else "right")
    table.add_column("verdict")
    for r in bench.rows:
        unit = "B" if r.unit == "B" else ""

        def num(v: float | None, unit: str = unit) -> str:
            return "-" if v is None else f"{v:,.1f}{unit}"

        style = {"PASS": "green", "FAIL": "bold red"}.get(r.verdict, "dim")
        table.add_row(
            r.case,
            num(r.store),
            num(r.store_p99),
            num(r.floor),
            num(r.floor_p99),
            f"{r.ratio:.2f}×",
            "-" if r.target is None else f"≤ {r.target:.2f}×",
            Text(r.verdict, style=style),
        )
    return table


@cli.command(short_help="Benchmark the store against raw redis-py floors.")
@click.option(
    "--url",
    envvar="REDIS_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="A real Redis server (redis:// or unix://); env REDIS_URL.",
)
@click.option(
    "--rounds", type=click.IntRange(1), default=3000, show_default=True, help="Timed rounds."
)
@click.option(
    "--get-rounds", type=click.IntRange(0), default=0, help="Rounds of get() [default: rounds/10]."
)
@click.option("--gc", "gc_mode", type=click.Choice(["freeze", "on", "off"]), default="freeze")
@click.option("--check", is_flag=True, help="Exit 1 when a target is missed.")
@json_option
def bench(url: str, rounds: int, get_rounds: int, gc_mode: str, check: bool, as_json: bool) -> None:
    """Benchmark the store against raw redis-py floors (interleaved timings) on a real Redis.

    Holds up to ~130 MB in Redis meanwhile under a bench:<random>: prefix, deleted at the end.
    """
    if url.split("://", 1)[0] not in ("redis", "rediss", "unix"):
        raise click.UsageError("bench needs a real Redis server: --url redis://host:port/db")
    from . import _bench  # heavy imports, only for this command

    started = time.perf_counter()
    runner = _bench.Bench(url, rounds, get_rounds or max(50, rounds // 10))
    console = _console(stderr=as_json)
    try:
        info = _bench.server_info(runner)
        console.print(
            Text(f"redis {info['redis_version']} at {url}, {rounds} rounds, prefix {runner.prefix}")
        )
        progress = Progress(
            TextColumn("{task.description:<44}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        with progress:
            task = progress.add_task("setup", total=_bench.PHASE_COUNT)
            _bench.run_phases(
                runner,
                gc_mode=gc_mode,
                on_phase=lambda name, s: progress.update(
                    task, advance=1, description=f"{name}: done"
                ),
            )
    finally:
        runner.cleanup()
        runner.client.close()
    passed = _bench.all_targets_pass(runner)
    total = time.perf_counter() - started
    if as_json:
        _echo_json(_bench.payload(runner, info, gc_mode=gc_mode, passed=passed, total=total))
    else:
        out = _console()
        out.print(_bench_table(runner))
        rt = runner.extra["round_trips"]
        out.print(
            f"round trips per append: {rt['sync_client_writes_per_append']:.2f} (sync), "
            f"{rt['async_client_writes_per_append']:.2f} (async); target 1"
        )
        verdict = "all targets met" if passed else "some targets missed"
        out.print(f"{verdict}; {total:.1f} s", style="green" if passed else "red")
    if check and not passed:
        raise click.exceptions.Exit(1)
