"""``redis-session demo``: simulated agent workers, a progress bar, a summary and the
consistency check (see :mod:`._simulation`).
"""

from __future__ import annotations

import shlex
import uuid
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..models import SessionLifecycleEvent
from . import _simulation
from ._common import CliError, Target, echo_json, json_option, literal, make_console, text


def _event_line(event: SessionLifecycleEvent) -> Text:
    line = Text("  event ", style="dim")
    line.append(f"{literal(event.type):<8}", style="bold cyan")
    line.append(literal(event.key or event.parent_key))
    if event.child_key:
        line.append(literal(f"  ← {event.agent_name}"), style="magenta")
    return line


def _demo_table(result: _simulation.DemoResult, url: str, prefix: str) -> Table:
    c = result.counts
    cfg = result.config
    seen = ", ".join(f"{t} {result.events[t]}" for t in _simulation.COUNTED_EVENTS)
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
        table.add_row(name, text(value))
    return table


def _demo_json(result: _simulation.DemoResult, url: str, prefix: str) -> dict[str, Any]:
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


def _problems(result: _simulation.DemoResult) -> str:
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
    return "; ".join(problems + result.errors)


def _verdict(result: _simulation.DemoResult) -> Text:
    if result.ok:
        return Text(
            f"consistency OK: nothing lost or duplicated ({result.messages:,} messages, "
            f"all children merged, all events seen)",
            style="bold green",
        )
    return text(f"consistency FAILED: {_problems(result)}", "bold red")


@click.command(short_help="Simulated agent workers, then a consistency check.")
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
    config = _simulation.DemoConfig(workers=workers, sessions=sessions, turns=turns, seed=seed)
    console = make_console(stderr=as_json)
    printed = 0
    with Target(url, prefix).open(ttl=3600) as store:
        console.print(
            Text.assemble(
                ("demo", "bold"),
                literal(
                    f": {workers} agent workers × {turns} turns on {sessions} sessions, store {url}"
                ),
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
            result = _simulation.run_demo(
                store, config, on_event=on_event, on_turn=lambda: progress.advance(task)
            )
        if not keep:
            _simulation.cleanup(store, config)
    if as_json:
        echo_json(_demo_json(result, url, prefix))
    else:
        out = make_console()
        out.print(_demo_table(result, url, prefix))
        out.print(_verdict(result))
        if keep and Target(url, prefix).is_memory:
            out.print(
                text(
                    "not kept: a memory:// store lives inside this process and is gone with it; "
                    "give --url of a Redis server with --keep to look at the sessions with ls",
                    "dim",
                )
            )
        elif keep:
            hint = shlex.join(["redis-session", "ls", "--url", url, "--prefix", prefix])
            out.print(text(f"kept: {hint}"))
    if not result.ok:
        raise CliError(f"consistency check failed: {_problems(result)}", kind="ConsistencyFailed")
