"""``redis-session rekey``: rotating the passphrase of an encrypted store."""

from __future__ import annotations

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from .._core.rekey import RekeyProgress, RekeyReport
from ._common import (
    NEW_PASSPHRASE_ENV,
    PASSPHRASE_ENV,
    Target,
    ask_passphrase,
    echo_json,
    json_option,
    make_console,
    passphrase_option,
    store_options,
)


def _rekey_summary(report: RekeyReport) -> str:
    passes = f"{report.passes} pass{'es' if report.passes != 1 else ''}"
    sessions = f"{report.sessions_resealed:,} session{'s' if report.sessions_resealed != 1 else ''}"
    line = f"rekeyed: {sessions} and {report.values_resealed:,} values re-sealed in {passes}"
    return line + (" (resumed an interrupted rotation)" if report.resumed else "")


@click.command(short_help="Rotate the passphrase of an encrypted store.")
@store_options
@passphrase_option
@click.option(
    "--new-passphrase",
    envvar=NEW_PASSPHRASE_ENV,
    default=None,
    help=f"The passphrase to rotate to; env {NEW_PASSPHRASE_ENV}. Asked for (twice) when "
    "missing and stdin is a terminal.",
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
    target: Target,
    passphrase: str | None,
    new_passphrase: str | None,
    batch_size: int,
    as_json: bool,
) -> None:
    """Rotate an encrypted store to a new passphrase; seal sessions of an older format.

    Online: workers with either passphrase keep reading and writing meanwhile. An interrupted
    rotation resumes when run again with the same new passphrase. Afterwards the old
    passphrase opens nothing. A passphrase not given (option or environment) is asked for on
    the terminal; without one (stdin a pipe or /dev/null) that is an error, exit status 1.
    """
    if passphrase is None:
        passphrase = ask_passphrase("Passphrase", option="--passphrase", envvar=PASSPHRASE_ENV)
    if new_passphrase is None:
        new_passphrase = ask_passphrase(
            "New passphrase", option="--new-passphrase", envvar=NEW_PASSPHRASE_ENV, confirm=True
        )
    if not new_passphrase:
        raise click.UsageError("the new passphrase is empty")
    if new_passphrase == passphrase:
        raise click.UsageError("the new passphrase is the old one")
    console = make_console(stderr=as_json)
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
        echo_json(
            {
                "prefix": target.prefix,
                "sessions_resealed": report.sessions_resealed,
                "values_resealed": report.values_resealed,
                "passes": report.passes,
                "resumed": report.resumed,
            }
        )
    else:
        make_console().print(Text(_rekey_summary(report), style="green"))
