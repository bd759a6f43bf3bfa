"""The ``redis-session`` command line (also ``python -m redis_session``).

``demo`` runs simulated agent workers on the embedded ``memory://`` store (or ``--url``) and
exits 1 when its consistency check fails. The operator commands work on a store given by
``--url`` (``REDIS_URL``, default ``redis://localhost:6379/0``) and ``--prefix``
(``REDIS_SESSION_PREFIX``, default ``rs:``): ``ls``, ``show``, ``events``, ``compact``,
``delete``, ``stats``, ``rekey`` and ``bench``. Output is for humans by default and JSON with
``--json``.
Errors are one line on stderr with exit status 1 (2 for a bad command line).

One module per command group: :mod:`.sessions` (ls, show, compact, delete, stats),
:mod:`.events`, :mod:`.keys` (rekey), :mod:`.demo` and :mod:`.bench`; :mod:`._common` holds
what they share.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from . import bench, demo, events, keys, sessions
from ._common import CliGroup, Target, json_option, passphrase_option, store_options

__all__ = ["Target", "cli", "json_option", "main", "passphrase_option", "store_options"]


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="redis-session", prog_name="redis-session")
def cli() -> None:
    """LLM-agent sessions in Redis: a demo, and tools for operators.

    Operator commands take --url (env REDIS_URL) and --prefix (env REDIS_SESSION_PREFIX).
    """


for command in (
    demo.demo,
    sessions.ls_,
    sessions.show,
    events.events,
    sessions.compact,
    sessions.delete,
    sessions.stats,
    keys.rekey,
    bench.bench,
):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line (the ``redis-session`` entry point); exits with its status."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="redis-session")
