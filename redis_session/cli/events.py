"""``redis-session events``: lifecycle events as they are published."""

from __future__ import annotations

import time

import click
import orjson
from rich.text import Text

from ._common import Target, json_option, make_console, store_options, when


@click.command(short_help="Print lifecycle events as they are published.")
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
    err = make_console(stderr=True)
    out = make_console()
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
                    line = Text(f"{when(event.timestamp)}  ")
                    line.append(f"{event.type:<8}", style="bold cyan")
                    line.append(event.key or event.parent_key)
                    if event.child_key:
                        line.append(f"  child {event.child_key} ({event.agent_name})")
                    out.print(line)
        except KeyboardInterrupt:
            pass
    err.print(f"{seen} event{'s' if seen != 1 else ''}", style="dim")
