"""The ``redis-session`` console script: the command line, or how to install it.

The command line needs the ``cli`` extra (click, rich); a worker that only talks to Redis
installs the package without it, and then the script says what to install instead of
failing with a traceback: one line on stderr, or with ``--json`` the command line's JSON
error object (see :mod:`redis_session.cli`). Any other failure to load the command line is
one line too, with its traceback when ``REDIS_SESSION_TRACEBACK=1``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn

from ._dist import install_hint

TRACEBACK_ENV = "REDIS_SESSION_TRACEBACK"


def _fail(message: str, kind: str) -> NoReturn:
    """Report ``message`` as the command line reports errors, and exit 1."""
    words = sys.argv[1:]
    if "--json" in (words[: words.index("--")] if "--" in words else words):
        error = {"error": message, "type": kind, "exit_code": 1}
        print(json.dumps(error, separators=(",", ":")), file=sys.stderr)
    else:
        print(f"Error: {message}", file=sys.stderr)
    raise SystemExit(1)


def main() -> None:
    """Run ``redis_session.cli.main``; exit 1 with a hint when the ``cli`` extra is missing."""
    try:
        from .cli import main as cli_main
    except ImportError as exc:
        if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        kind = type(exc).__name__
        if (exc.name or "").partition(".")[0] in ("click", "rich"):
            _fail(
                f"the command line needs {exc.name}: {install_hint('cli')} "
                "(the embedded memory:// store: '[cli,memory]')",
                kind,
            )
        detail = " ".join(str(exc).split()) or kind
        _fail(f"cannot load the command line: {detail} ({TRACEBACK_ENV}=1 shows why)", kind)
    cli_main()
