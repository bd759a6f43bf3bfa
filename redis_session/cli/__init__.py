"""The ``redis-session`` command line (also ``python -m redis_session``).

``demo`` runs simulated agent workers on the embedded ``memory://`` store (or ``--url``) and
fails when its consistency check does. The operator commands work on a store given by ``--url``
(``REDIS_URL``, default ``redis://localhost:6379/0``) and ``--prefix``
(``REDIS_SESSION_PREFIX``, default ``rs:``): ``ls``, ``show``, ``events``, ``compact``,
``delete``, ``stats``, ``rekey``, ``acl``, ``doctor`` and ``bench``. Output is for humans by
default and JSON with ``--json``. User data (keys, prefixes, content) is printed literally: no
rich markup or emoji codes, control characters escaped.

Passphrases: ``show`` and ``compact`` open sealed content with ``--passphrase`` (env
``REDIS_SESSION_PASSPHRASE``) when it is sealed; ``rekey`` always needs the old and the new one
(``--new-passphrase``, env ``REDIS_SESSION_NEW_PASSPHRASE``). One missing is asked for on the
terminal; when stdin is not a terminal that is a one-line error instead. ``ls``, ``stats``,
``delete`` and ``events`` open no content and take none.

Errors are one line on stderr (``Error: …``); under ``--json`` one JSON object
``{"error": …, "type": …, "exit_code": …}``. Every error: the store's and the server's, a bad
command line (with where to find help on the same line), a missing extra (the line says what
to ``pip install``) and an unexpected exception, a bug (``Error: unexpected KeyError: … (a bug
in redis-session; REDIS_SESSION_TRACEBACK=1 shows its traceback)``). With
``REDIS_SESSION_TRACEBACK=1`` in the environment, an error that is not the command line's own
propagates with its traceback instead. A command that works on a server first checks that
something accepts a connection at ``--url`` (a socket connect, no retry), so a refused
connection is reported at once, naming the URL, not after the store's client has retried for
seconds. Exit statuses:

- 0: success
- 1: an error (from the store or the server; a failed consistency check or benchmark target;
  a passphrase needed that cannot be asked for; a problem ``doctor`` found)
- 2: a bad command line
- 3: ``events`` stopped at ``--timeout`` before ``--count`` events arrived

One module per command group: :mod:`.sessions` (ls, show, compact, delete, stats),
:mod:`.events`, :mod:`.keys` (rekey), :mod:`.acl`, :mod:`.demo` and :mod:`.bench` (which loads
the repository's ``bench/harness/`` only when it runs: it is not in the wheel); :mod:`._common`
holds what they share.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from .._dist import DISTRIBUTION
from .._transport import fast as _fast
from . import acl, bench, demo, doctor, events, keys, sessions
from ._common import EXIT_CODES, CliGroup, Target, json_option, passphrase_option, store_options

__all__ = ["Target", "cli", "json_option", "main", "passphrase_option", "store_options"]


EPILOG = "\b\nExit status:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_CODES)


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(
    package_name=DISTRIBUTION,
    prog_name="redis-session",
    message="%(prog)s, version %(version)s\nfast path: "
    + _fast.STATUS.summary().replace("%", "%%"),
)
def cli() -> None:
    """LLM-agent sessions in Redis: a demo, and tools for operators.

    Operator commands take --url (env REDIS_URL) and --prefix (env REDIS_SESSION_PREFIX);
    with --json they print JSON, and an error as one JSON object on stderr.
    """


for command in (
    demo.demo,
    sessions.ls_,
    sessions.show,
    events.events,
    sessions.compact,
    sessions.branch,
    sessions.rewind,
    sessions.delete,
    sessions.stats,
    keys.rekey,
    acl.acl,
    doctor.doctor,
    bench.bench,
):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line (the ``redis-session`` entry point); exits with its status."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="redis-session")
