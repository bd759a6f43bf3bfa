"""``redis-session events``: lifecycle events, live or from the event log."""

from __future__ import annotations

import time

import click
import orjson

from .._sync.listen import EventListener, LogListener
from ..models import LifecycleEventType
from ..store import RedisStore
from ._common import Target, TimedOut, json_option, literal, make_console, store_options, text, when

EVENT_TYPES = tuple(t.value for t in LifecycleEventType)


def _listener(
    store: RedisStore,
    since: str | None,
    group: str | None,
    consumer: str | None,
    kinds: set[str] | None,
) -> EventListener | LogListener:
    if since is None and group is None:
        return store.listen(types=kinds)
    if group is None:
        return store.listen(since or "latest", types=kinds)
    return store.listen(since, group=group, consumer=consumer, types=kinds)


@click.command(short_help="Print lifecycle events, live or from the event log.")
@store_options
@click.option(
    "--since",
    default=None,
    metavar="earliest|latest|CURSOR",
    help="Read the event log from there (a cursor this command printed), then follow it; "
    "without: live pub/sub only. With --group: where a group made now starts (default latest: "
    "only events from now on); an existing group goes on from its own place.",
)
@click.option(
    "--group",
    default=None,
    help="Read as a member of this consumer group (made on first use, at --since).",
)
@click.option(
    "--consumer",
    default=None,
    help="The member's name in --group [default: host-pid-random]; events are acknowledged "
    "once printed.",
)
@click.option("--count", type=click.IntRange(1), default=None, help="Stop after N events.")
@click.option(
    "--timeout",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Stop after S seconds (exit status 3 if --count events did not arrive by then).",
)
@click.option(
    "--type",
    "types",
    multiple=True,
    type=click.Choice(EVENT_TYPES, case_sensitive=False),
    help="Only events of this type (repeatable).",
)
@json_option
def events(
    target: Target,
    since: str | None,
    group: str | None,
    consumer: str | None,
    count: int | None,
    timeout: float | None,
    types: tuple[str, ...],
    as_json: bool,
) -> None:
    """Print lifecycle events (JSON Lines with --json); Ctrl-C stops.

    Live by default (pub/sub: at-most-once). With --since, from the event log (none missed
    without an error saying so), and the cursor to resume from is printed at the end (on
    stderr; in the JSON lines as each event's "cursor"). With --group, as a member of a
    consumer group, acknowledging each event once printed; a group made now starts at
    --since (default latest: it waits for new events, and says so); on exit the member gives
    back what it read ahead and did not print, so the next member gets it at once. With
    --count and --timeout, the timeout running out first is exit status 3. Reads no session
    content (events carry keys and agent names only): no passphrase needed.
    """
    if consumer is not None and group is None:
        raise click.UsageError("--consumer needs --group")
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = 0
    err = make_console(stderr=True)
    out = make_console()
    timed_out = False
    kinds = set(types) or None
    durable = since is not None or group is not None
    with target.open() as store, _listener(store, since, group, consumer, kinds) as listener:
        where = "the event log" if durable else store.events_channel
        member = listener.consumer if isinstance(listener, LogListener) and group else ""
        err.print(
            text(f"listening on {where}" + (f" as {group}/{member}" if member else ""), "dim")
        )
        if group is not None and since is None:
            err.print(
                text(
                    f"a group made now starts at the log's end: {group} gets the events from "
                    "now on (--since earliest for what the log holds)",
                    "dim",
                )
            )
        try:
            while count is None or seen < count:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    timed_out = True
                    break
                event = listener.get(timeout=1.0 if left is None else min(left, 1.0))
                if event is None or (types and event.type not in types):
                    continue
                seen += 1
                cursor = getattr(listener, "cursor", "")
                if as_json:
                    record = event.model_dump(mode="json")
                    if cursor:
                        record["cursor"] = cursor
                    click.echo(orjson.dumps(record).decode())
                else:
                    line = text(f"{when(event.timestamp)}  ")
                    line.append(f"{literal(event.type):<8}", style="bold cyan")
                    line.append(literal(event.key or event.parent_key))
                    if event.child_key:
                        line.append(literal(f"  child {event.child_key} ({event.agent_name})"))
                    out.print(line)
                if group is not None and isinstance(listener, LogListener):
                    listener.ack(event)  # printed: done
        except KeyboardInterrupt:
            pass
        cursor = getattr(listener, "cursor", "")
    err.print(text(f"{seen} event{'s' if seen != 1 else ''}", "dim"))
    if cursor:
        err.print(text(f"cursor {cursor}  (resume with --since {cursor})", "dim"))
    if timed_out and count is not None:
        raise TimedOut(
            f"timed out after {timeout:g} s with {seen} of {count} events", kind="TimedOut"
        )
