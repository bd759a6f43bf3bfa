"""The commands on sessions: ``ls``, ``show``, ``compact``, ``branch``, ``rewind``, ``delete``
and ``stats``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.table import Table

from .. import codec
from .._core.conversation import open_tool_calls
from ..errors import CorruptData, ForeignKey, SessionNotFound
from ..keys import KeySchema, parent_of
from ..models import ChildSession, Message, Session, Usage
from ..store import RedisStore
from ._common import (
    PIPELINE_BATCH,
    CliError,
    Target,
    echo,
    echo_json,
    human_bytes,
    json_option,
    make_console,
    passphrase_option,
    repeat_command,
    store_options,
    text,
    when,
)

MEMORY_NOTE = (
    "memory:// is a store inside one process: it starts empty in every new process, so "
    "sessions written by another one (a worker, `redis-session demo`) are not here; "
    "give --url of a Redis server to see those"
)


def _message_counts(store: RedisStore, keys: Sequence[str], where: str) -> list[int | None]:
    """The length of each session's message list; None (and the key reported, see
    :func:`codec.log_bad_record`) where that list's key holds another program's value.
    """
    schema = KeySchema(store.prefix)
    client: Any = store.client
    counts: list[int | None] = []
    for i in range(0, len(keys), PIPELINE_BATCH):
        pipe = client.pipeline(transaction=False)
        batch = keys[i : i + PIPELINE_BATCH]
        for key in batch:
            pipe.llen(schema.session(key).msgs)
        for key, n in zip(batch, pipe.execute(raise_on_error=False), strict=True):
            counts.append(None if _foreign(client, schema, key, n, where) else int(n))
    return counts


def _usages(store: RedisStore, keys: Sequence[str]) -> list[Usage | None]:
    """Each session's usage (its meta hash's fields; None where they are not whole numbers,
    reported as :func:`_message_counts` reports a foreign list).
    """
    schema = KeySchema(store.prefix)
    client: Any = store.client
    out: list[Usage | None] = []
    for i in range(0, len(keys), PIPELINE_BATCH):
        pipe = client.pipeline(transaction=False)
        batch = keys[i : i + PIPELINE_BATCH]
        for key in batch:
            pipe.hmget(schema.session(key).meta, *codec.USAGE_FIELDS)
        for key, reply in zip(batch, pipe.execute(raise_on_error=False), strict=True):
            try:
                if isinstance(reply, Exception):
                    raise CorruptData(key, f"its meta hash cannot be read: {reply}")
                fields = dict(zip(codec.USAGE_FIELDS, reply, strict=True))
                out.append(codec.decode_usage(key, fields.get))
            except CorruptData as exc:
                codec.log_bad_record("usage", exc)
                out.append(None)
    return out


def _spent(usage: Usage | None) -> str:
    """A usage in one cell: ``input / output`` tokens (``-``: unknown)."""
    if usage is None:
        return "-"
    return f"{usage.input_tokens:,} / {usage.output_tokens:,}"


def _foreign(client: Any, schema: KeySchema, key: str, reply: object, where: str) -> bool:
    """Whether a reply about session ``key``'s message list says that list's key is another
    program's (reported, see :func:`codec.log_bad_record`); another error is raised.
    """
    if not isinstance(reply, Exception):
        return False
    if not codec.is_wrong_type(reply):
        raise reply
    name = schema.session(key).msgs
    held = codec.type_name(client.type(name))
    codec.log_bad_record(where, ForeignKey(key, name, held))
    return True


def _skipped_json(records: Sequence[CorruptData]) -> list[dict[str, str]]:
    return [
        {"key": r.key, "redis_key": getattr(r, "redis_key", ""), "error": str(r)} for r in records
    ]


def _report_skipped(records: Sequence[CorruptData]) -> None:
    """Name every record a command skipped, one line each on stderr."""
    for record in records:
        echo(f"skipped: {record}", err=True)


@click.command("ls")
@store_options
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True, help="Page size.")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True)
@json_option
@click.pass_context
def ls_(ctx: click.Context, target: Target, limit: int, page: int, as_json: bool) -> None:
    """List sessions, most recently updated first, one page at a time.

    Reads no session content: an encrypted store lists without its passphrase.
    """
    with target.open() as store, codec.skipped_records() as skipped:
        rows = store.list_sessions(limit=limit + 1, offset=(page - 1) * limit)
        more, rows = len(rows) > limit, rows[:limit]
        counts = _message_counts(store, [r.key for r in rows], "ls")
        usages = _usages(store, [r.key for r in rows])
    listed = [(r, n, u) for r, n, u in zip(rows, counts, usages, strict=True) if n is not None]
    if as_json:
        echo_json(
            {
                "page": page,
                "limit": limit,
                "more": more,
                "sessions": [
                    {
                        **r.model_dump(mode="json"),
                        "messages": n,
                        "usage": None if u is None else u.model_dump(),
                    }
                    for r, n, u in listed
                ],
                "skipped": _skipped_json(skipped),
            }
        )
        return
    _report_skipped(skipped)
    rows = [r for r, _, _ in listed]
    console = make_console()
    if not rows:
        console.print(text(f"no sessions under prefix {target.prefix!r} (page {page})"))
        if target.is_memory:
            console.print(text(f"note: {MEMORY_NOTE}", "dim"))
        return
    title = text(f"sessions under {target.prefix!r}, page {page}")
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right", style="dim")
    table.add_column("key", overflow="fold")
    table.add_column("messages", justify="right")
    table.add_column("usage in / out", justify="right")
    table.add_column("updated (UTC)")
    table.add_column("created (UTC)")
    first = (page - 1) * limit
    for n, (row, count, usage) in enumerate(listed, start=first + 1):
        table.add_row(
            str(n),
            text(row.key),
            str(count),
            _spent(usage),
            when(row.updated_at),
            when(row.created_at),
        )
    console.print(table)
    if more:
        console.print(text(f"more: {repeat_command(ctx, page=page + 1)}", "dim"))


def _message_table(messages: Sequence[Message], first: int) -> Table:
    """The messages as rows; a tool call left without an answer is marked (``cleanup_failed_turn``
    would close it).
    """
    dangling = {id(call) for call in open_tool_calls(messages)}
    table = Table(show_lines=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("role", style="bold")
    table.add_column("author")
    table.add_column("tokens", justify="right")
    table.add_column("content", overflow="fold")
    for n, msg in enumerate(messages, start=first):
        content = text(msg.content, multiline=True)
        for call in msg.tool_calls:
            content.append_text(text(f"\n→ {call.name}({call.input})", "yellow", multiline=True))
            if call.output:
                content.append_text(text(f" = {call.output}", "yellow", multiline=True))
            elif id(call) in dangling:
                content.append_text(text("  [no answer]", "bold red"))
        if msg.usage is not None:
            spent = f"\n[usage {_spent(msg.usage)} tokens, {msg.usage.requests} requests]"
            content.append_text(text(spent, "dim"))
        role = text(msg.role.value)
        tokens = "" if msg.tokens is None else f"{msg.tokens:,}"
        table.add_row(str(n), when(msg.timestamp), role, text(msg.author), tokens, content)
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
        data["open_tool_calls"] = [c.id for c in open_tool_calls(shown)]
        data["children"] = [
            c.model_dump(mode="json", exclude={"history", "config"}) for c in children
        ]
        echo_json(data)
        return
    console = make_console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("session", text(session.key))
    for name in ("agent_id", "channel_type", "channel_id", "model"):
        value = getattr(session, name)
        if value:
            head.add_row(name, text(value))
    head.add_row("created", f"{when(session.created_at)} UTC")
    head.add_row("updated", f"{when(session.updated_at)} UTC")
    for name, value in sorted(session.metadata.items()):
        head.add_row(text(f"metadata {name}"), text(value, multiline=True))
    head.add_row("messages", f"{total}" + (f" (showing the last {len(shown)})" if last else ""))
    held = session.context_tokens
    head.add_row("tokens held", "unknown" if held is None else f"{held:,}")
    spent = session.usage
    head.add_row(
        "usage",
        f"{spent.input_tokens:,} in, {spent.output_tokens:,} out, {spent.requests:,} requests",
    )
    if session.max_usage_tokens is not None:
        head.add_row("usage budget", f"{session.max_usage_tokens:,} tokens (0: none)")
    if children:
        merged = sum(1 for c in children if c.is_merged())
        head.add_row(
            "children", f"{len(children)} ({merged} merged, {len(children) - merged} open)"
        )
    for child in children:
        if not child.is_merged():  # the merged ones are in --json
            head.add_row("open child", text(f"{child.key}  ({child.agent_name})"))
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
        echo_json(data)
        return
    console = make_console()
    state = f"merged {when(child.merged_at)} UTC" if child.is_merged() else "open"
    console.print(text(f"child session {child.key}", "bold"))
    console.print(text(f"parent {child.parent_key}, agent {child.agent_name}, {state}"))
    console.print(f"messages {total}" + (f" (showing the last {len(shown)})" if last else ""))
    spent = child.usage
    console.print(
        f"usage {spent.input_tokens:,} in, {spent.output_tokens:,} out, {spent.requests:,} requests"
    )
    if shown:
        console.print(_message_table(shown, total - len(shown)))


@click.command(short_help="Show one session: fields, children, messages.")
@store_options
@click.argument("key")
@click.option("--last", type=click.IntRange(1), default=None, help="Only the newest N messages.")
@passphrase_option
@json_option
def show(target: Target, key: str, last: int | None, passphrase: str | None, as_json: bool) -> None:
    """Show one session (or child session): its fields, children and messages.

    Sealed content is opened with --passphrase (env REDIS_SESSION_PASSPHRASE), asked for on
    a terminal when it is needed and missing.
    """

    def read(store: RedisStore) -> ChildSession | tuple[Session, list[ChildSession], int]:
        try:
            session = store.get(key, last)  # --last N reads only the newest N messages
        except SessionNotFound as exc:
            if parent_of(key) is None:
                if target.is_memory:  # the usual surprise there: say why, as ls does
                    raise CliError(f"{exc} ({MEMORY_NOTE})", kind=type(exc).__name__) from None
                raise
            return store.get_child(key)
        total = len(session.history)
        if last is not None and total == last:  # there may be more: count them
            client: Any = store.client
            total = max(total, int(client.llen(KeySchema(store.prefix).session(key).msgs)))
        return session, store.children_of(key), total

    found = target.read(passphrase, read)
    if isinstance(found, ChildSession):
        _show_child(found, last, as_json)
    else:
        session, children, total = found
        _show_session(session, children, last, as_json, total)


@click.command(short_help="Replace old messages of a session with one summary.")
@store_options
@click.argument("key")
@click.option(
    "--keep", type=click.IntRange(0), default=10, show_default=True, help="Newest messages kept."
)
@click.option("--summary", default=None, help="Summary text [default: a note of what was cut].")
@passphrase_option
@json_option
def compact(
    target: Target,
    key: str,
    keep: int,
    summary: str | None,
    passphrase: str | None,
    as_json: bool,
) -> None:
    """Replace all but the newest --keep messages of KEY with one summary message.

    Sealed content is opened (and the summary sealed) with --passphrase (env
    REDIS_SESSION_PASSPHRASE), asked for on a terminal when it is needed and missing.
    """

    def run(store: RedisStore) -> tuple[int, int, int, int]:
        history = store.get_history(key)  # sealed: PassphraseRequired here, before any write
        up_to = len(history) - keep - 1
        removed = 0
        if up_to >= 0:
            note = summary
            if note is None:
                span = f"{when(history[0].timestamp)} to {when(history[up_to].timestamp)} UTC"
                note = f"{up_to + 1} earlier messages ({span}) compacted by redis-session"
            removed = store.compact_messages(key, up_to, note, expect_id=history[up_to].id)
        return len(history), up_to, removed, len(store.get_history(key))

    before, up_to, removed, after = target.read(passphrase, run)
    if as_json:
        echo_json({"key": key, "before": before, "removed": removed, "after": after})
    elif up_to < 0:
        echo(f"{key}: nothing to compact ({before} messages, keeping {keep})")
    else:
        echo(f"{key}: compacted messages 0..{up_to} into one summary ({before} → {after} messages)")


@click.command(short_help="Copy a session, up to a message, under a new key.")
@store_options
@click.argument("key")
@click.argument("new_key")
@click.option("--at", "at", default=None, help="The id of the last message copied [default: all].")
@passphrase_option
@json_option
def branch(
    target: Target, key: str, new_key: str, at: str | None, passphrase: str | None, as_json: bool
) -> None:
    """Branch KEY into NEW_KEY: its fields, metadata and messages up to --at (all by default),
    atomically (store.branch). KEY stays as it is.

    A sealed store's messages are opened and sealed again under NEW_KEY with --passphrase (env
    REDIS_SESSION_PASSPHRASE), asked for on a terminal when it is needed and missing.
    """
    made = target.read(passphrase, lambda store: store.branch(key, new_key, at=at))
    if as_json:
        echo_json(
            {"key": made.key, "branch_of": key, "branch_at": made.branch_at,
             "messages": len(made.history)}
        )  # fmt: skip
    else:
        echo(f"{new_key}: branched from {key} with {len(made.history)} messages")


@click.command(short_help="Remove the messages of a session after one message.")
@store_options
@click.argument("key")
@click.option("--after", required=True, help="The id of the last message kept ('' : none).")
@click.option("--keep-as", default=None, help="First branch the session as it is to this key.")
@passphrase_option
@json_option
def rewind(
    target: Target,
    key: str,
    after: str,
    keep_as: str | None,
    passphrase: str | None,
    as_json: bool,
) -> None:
    """Remove every message of KEY after message --after, atomically (store.rewind); with
    --keep-as, the session as it was is branched there first, so nothing is lost.
    """

    def run(store: RedisStore) -> int:
        return store.rewind(key, after=after, keep_as=keep_as)

    removed = target.read(passphrase, run)
    if as_json:
        echo_json({"key": key, "removed": removed, "kept_as": keep_as})
    else:
        kept = f"; the whole session is kept as {keep_as}" if keep_as else ""
        echo(f"{key}: removed {removed} messages after {after or 'the start'}{kept}")


@click.command(short_help="Delete sessions (messages and children included).")
@store_options
@click.argument("keys", nargs=-1, required=True)
@click.option("--missing-ok", is_flag=True, help="Exit 0 even when a key has no session.")
@json_option
def delete(target: Target, keys: tuple[str, ...], missing_ok: bool, as_json: bool) -> None:
    """Delete sessions (with their messages and children).

    Opens no session content: an encrypted store deletes without its passphrase.
    """
    done: dict[str, bool] = {}
    foreign: list[ForeignKey] = []
    with target.open() as store:
        for key in keys:
            try:
                done[key] = store.delete(key)
            except ForeignKey as exc:  # another program's key: left as it is, and named
                foreign.append(exc)
    missing = [k for k, existed in done.items() if not existed]
    if as_json:
        echo_json(
            {
                "deleted": [k for k, d in done.items() if d],
                "missing": missing,
                "skipped": _skipped_json(foreign),
            }
        )
    else:
        for key, existed in done.items():
            if existed:
                echo(f"deleted {key}")
    if foreign:
        names = "; ".join(str(exc) for exc in foreign)
        raise CliError(f"not deleted: {names}", kind="ForeignKey")
    if missing and not missing_ok:
        names = ", ".join(repr(k) for k in missing)
        raise CliError(f"no session {names} under prefix {target.prefix!r}", kind="SessionNotFound")


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
            if _foreign(client, schema, key, llen, "stats"):
                continue
            memory = None
            if not any(isinstance(u, Exception) for u in usage):
                memory = sum(int(u or 0) for u in usage)
            out.append(_SessionStats(key, int(llen), memory))
    return out


@click.command(short_help="Sessions, messages and memory per session.")
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
    keys of its children; 'n/a' when the server has no MEMORY USAGE (memory://). Reads no
    session content: an encrypted store is measured without its passphrase.
    """
    with target.open() as store, codec.skipped_records() as skipped:
        rows = _collect_stats(store, limit)
        spent = store.usage()
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
        "usage": spent.model_dump(),
        "largest": [
            {"key": r.key, "messages": r.messages, "memory_bytes": r.memory} for r in largest
        ],
        "skipped": _skipped_json(skipped),
    }
    if as_json:
        echo_json(summary)
        return
    _report_skipped(skipped)
    console = make_console()
    table = Table(
        title=text(f"sessions under {target.prefix!r}"), show_header=False, title_justify="left"
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("sessions", f"{len(rows):,}")
    table.add_row("messages", f"{messages:,}")
    table.add_row("messages per session (mean)", f"{summary['messages_per_session_mean']:,.1f}")
    table.add_row("messages per session (max)", f"{summary['messages_per_session_max']:,}")
    table.add_row("memory", human_bytes(total_memory))
    table.add_row("memory per session (mean)", human_bytes(summary["memory_per_session_mean"]))
    table.add_row("memory per session (median)", human_bytes(summary["memory_per_session_median"]))
    table.add_row("memory per session (max)", human_bytes(summary["memory_per_session_max"]))
    table.add_row("memory per message", human_bytes(summary["memory_per_message"]))
    table.add_row("usage: input tokens", f"{spent.input_tokens:,}")
    table.add_row("usage: output tokens", f"{spent.output_tokens:,}")
    table.add_row("usage: requests", f"{spent.requests:,}")
    console.print(table)
    if largest:
        big = Table(title=f"largest {len(largest)}", title_justify="left")
        big.add_column("key", overflow="fold")
        big.add_column("messages", justify="right")
        big.add_column("memory", justify="right")
        for r in largest:
            big.add_row(text(r.key), f"{r.messages:,}", human_bytes(r.memory))
        console.print(big)
