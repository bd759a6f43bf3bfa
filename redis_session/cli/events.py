"""``redis-session events``: lifecycle events as they are published."""

from __future__ import annotations

import time

import click
import orjson

from ..models import LifecycleEventType
from ._common import Target, TimedOut, json_option, literal, make_console, store_options, text, when

EVENT_TYPES = tuple(t.value for t in LifecycleEventType)


@click.command(short_help="Print lifecycle events as they are published.")
@store_options
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
    target: Target, count: int | None, timeout: float | None, types: tuple[str, ...], as_json: bool
) -> None:
    """Print lifecycle events as they are published (JSON Lines with --json); Ctrl-C stops.

    With --count and --timeout, the timeout running out first is exit status 3. Reads no
    session content (events carry keys and agent names only): no passphrase needed.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    seen = 0
    err = make_console(stderr=True)
    out = make_console()
    timed_out = False
    with target.open() as store, store.listen() as listener:
        err.print(text(f"listening on {store.events_channel}", "dim"))
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
                if as_json:
                    click.echo(orjson.dumps(event.model_dump(mode="json")).decode())
                else:
                    line = text(f"{when(event.timestamp)}  ")
                    line.append(f"{literal(event.type):<8}", style="bold cyan")
                    line.append(literal(event.key or event.parent_key))
                    if event.child_key:
                        line.append(literal(f"  child {event.child_key} ({event.agent_name})"))
                    out.print(line)
        except KeyboardInterrupt:
            pass
    err.print(text(f"{seen} event{'s' if seen != 1 else ''}", "dim"))
    if timed_out and count is not None:
        raise TimedOut(
            f"timed out after {timeout:g} s with {seen} of {count} events", kind="TimedOut"
        )
