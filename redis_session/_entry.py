"""The ``redis-session`` console script: the command line, or how to install it.

The command line needs the ``cli`` extra (click, rich); a worker that only talks to Redis
installs the package without it, and then the script says what to install instead of
failing with a traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run ``redis_session.cli.main``; exit 1 with a hint when the ``cli`` extra is missing."""
    try:
        from .cli import main as cli_main
    except ImportError as exc:
        if exc.name not in ("click", "rich") and not str(exc.name or "").startswith("rich."):
            raise
        print(
            f"redis-session: the command line needs {exc.name}: "
            "pip install 'redis-session[cli]' (the embedded memory:// store: '[cli,memory]')",
            file=sys.stderr,
        )
        raise SystemExit(1) from None
    cli_main()
