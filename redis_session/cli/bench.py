"""``redis-session bench``: the store against raw redis-py floors on a real Redis.

The measuring machinery is a tool of the repository, ``bench/harness/`` (:mod:`bench.harness`),
not part of the wheel: the command imports it when it runs, which works from a checkout or an
editable install (the repository's root is importable there). Elsewhere, e.g. installed from a
wheel, the command fails with one line saying how to run it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ._common import (
    DEFAULT_URL,
    CliError,
    check_reachable,
    echo_json,
    json_option,
    make_console,
    text,
)

if TYPE_CHECKING:
    from bench.harness import Bench
    from bench.harness.fleet import FleetSize

HARNESS = ("bench", "bench.harness")  # the modules a wheel's install does not have
HARNESS_MISSING = (
    "redis-session bench runs from a source checkout (its harness, bench/harness/, is not in "
    "the wheel): in a clone of the repository run pip install -e '.[cli]', then "
    "redis-session bench"
)


def _bench_table(bench: Bench) -> Table:
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
            r.target_text.replace("<=", "≤").replace("x", "×", 1),
            Text(r.verdict, style=style),
        )
    return table


@click.command(short_help="Benchmark the store against raw redis-py floors.")
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
@click.option(
    "--gc",
    "gc_mode",
    type=click.Choice(["freeze", "on", "off"]),
    default="freeze",
    show_default=True,
    help="The garbage collector while timing: freeze (the prebuilt inputs frozen, so that "
    "collections scan only what the timed calls make), on, or off.",
)
@click.option("--check", is_flag=True, help="Exit 1 when a target is missed.")
@click.option(
    "--fleet",
    is_flag=True,
    help="Only the fleet rows: a cold get, workers without session affinity, an append over "
    "the caller's own redis.Redis.",
)
@click.option(
    "--fleet-size",
    default="16x400x300",
    show_default=True,
    help="With --fleet: WORKERSxSESSIONSxMESSAGES.",
)
@click.option(
    "--routing",
    type=click.Choice(["random", "sticky"]),
    default="random",
    show_default=True,
    help="With --fleet: a turn goes to any worker, or always to its session's.",
)
@click.option(
    "--turns",
    type=click.IntRange(1),
    default=None,
    help="With --fleet: timed turns of the fleet loop [default: 3,000].",
)
@click.option(
    "--fleet-warmup",
    type=click.IntRange(0),
    default=None,
    help="With --fleet: turns run before the timed ones, which fill the read caches "
    "[default: 2,000].",
)
@click.option(
    "--read-cache-bytes",
    type=click.IntRange(0),
    default=None,
    help="With --fleet: each worker's read cache bound in bytes (0: none) [default: the "
    "store's, 64 MiB]; a bound below the sessions' size makes most reads cold.",
)
@json_option
def bench(
    url: str,
    rounds: int,
    get_rounds: int,
    gc_mode: str,
    check: bool,
    fleet: bool,
    fleet_size: str,
    routing: str,
    turns: int | None,
    fleet_warmup: int | None,
    read_cache_bytes: int | None,
    as_json: bool,
) -> None:
    """Benchmark the store against raw redis-py floors (interleaved timings) on a real Redis.

    Holds up to ~130 MB in Redis meanwhile under a bench:<random>: prefix, deleted at the end.
    """
    if url.split("://", 1)[0] not in ("redis", "rediss", "unix"):
        raise click.UsageError("bench needs a real Redis server: --url redis://host:port/db")
    try:
        import bench.harness as measuring  # heavy imports, only for this command
    except ModuleNotFoundError as exc:
        if exc.name not in HARNESS:
            raise  # the harness is there, a module it needs is not: the usual one-line report
        raise CliError(HARNESS_MISSING, kind="ImportError") from None

    check_reachable(url)
    if fleet:
        from bench.harness.fleet import FleetSize, parse_size

        try:
            workers, sessions, messages = parse_size(fleet_size)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--fleet-size") from None
        given = {"turns": turns, "warmup": fleet_warmup}  # None: the harness's default
        size = FleetSize(
            workers,
            sessions,
            messages,
            routing=routing,
            read_cache_bytes=read_cache_bytes,
            **{name: value for name, value in given.items() if value is not None},
        )
        _fleet(url, rounds, get_rounds or 300, size, check, as_json)
        return

    started = time.perf_counter()
    runner = measuring.Bench(url, rounds, get_rounds or max(50, rounds // 10))
    console = make_console(stderr=as_json)
    try:
        info = measuring.server_info(runner)
        console.print(
            text(f"redis {info['redis_version']} at {url}, {rounds} rounds, prefix {runner.prefix}")
        )
        progress = Progress(
            TextColumn("{task.description:<44}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        with progress:
            task = progress.add_task("setup", total=measuring.PHASE_COUNT)
            measuring.run_phases(
                runner,
                gc_mode=gc_mode,
                on_phase=lambda name, s: progress.update(
                    task, advance=1, description=f"{name}: done"
                ),
            )
    finally:
        runner.cleanup()
        runner.close()
    passed = measuring.all_targets_pass(runner)
    total = time.perf_counter() - started
    if as_json:
        echo_json(measuring.payload(runner, info, gc_mode=gc_mode, passed=passed, total=total))
    else:
        out = make_console()
        out.print(_bench_table(runner))
        rt = runner.extra["round_trips"]
        out.print(
            f"round trips per append: {rt['sync_client_writes_per_append']:.2f} (sync), "
            f"{rt['async_client_writes_per_append']:.2f} (async); target 1"
        )
        verdict = "all targets met" if passed else "some targets missed"
        out.print(f"{verdict}; {total:.1f} s", style="green" if passed else "red")
    if check and not passed:
        raise CliError("some benchmark targets were missed (see the table)", kind="TargetMissed")


def _fleet(
    url: str, rounds: int, get_rounds: int, size: FleetSize, check: bool, as_json: bool
) -> None:
    """``bench --fleet``: the rows of ``bench.harness.fleet``, printed or as JSON."""
    from bench.harness import Bench
    from bench.harness.fleet import run_fleet

    runner = Bench(url, rounds, get_rounds)
    console = make_console(stderr=as_json)
    shape = f"{size.workers}x{size.sessions}x{size.messages}"
    cache = "default" if size.read_cache_bytes is None else f"{size.read_cache_bytes} bytes"
    console.print(
        text(
            f"fleet rows at {url}: {shape} ({size.routing}), {size.turns} turns after "
            f"{size.warmup}, read caches {cache}, prefix {runner.prefix}"
        )
    )
    try:
        run_fleet(runner, size)
    finally:
        runner.cleanup()
        runner.close()
    passed = all(r.verdict != "FAIL" for r in runner.rows)
    fl = runner.extra["fleet"]
    if as_json:
        echo_json({"rows": [r.as_json() for r in runner.rows], "fleet": fl, "passed": passed})
    else:
        out = make_console()
        out.print(_bench_table(runner))
        out.print(
            f"fleet: {fl['above_floor_us']['wall']:.1f} µs above its floor "
            f"({fl['above_floor_us']['client_cpu']:.1f} µs client CPU); read cache "
            f"{fl['read_cache_hits']} hits, {fl['read_cache_misses']} misses"
        )
    if check and not passed:
        raise CliError("some benchmark targets were missed (see the table)", kind="TargetMissed")
