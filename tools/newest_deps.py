"""Whether every runtime dependency (and the test backends' fakeredis) is installed at its newest
release on the package index: ``.ci/run`` runs it after the suite, which a fresh venv installed
at the newest releases (no upper bounds), so the suite ran on them. Exit 1 naming any that is
not; 0 when all are (each printed with its version).
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata

PACKAGES = ("redis", "hiredis", "pydantic", "cryptography", "orjson", "fakeredis", "lupa")
"""pydantic-core is not among them: each pydantic release pins its own."""


def newest(name: str) -> str | None:
    """The newest release of ``name`` on the configured index (``pip index versions``)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    found = re.match(rf"{re.escape(name)} \(([^)]+)\)", done.stdout.strip(), re.IGNORECASE)
    return found.group(1) if found else None


def main() -> int:
    """Print each package's installed and newest version; 1 when one is behind."""
    behind = []
    for name in PACKAGES:
        installed = metadata.version(name)
        latest = newest(name)
        mark = "newest" if latest in (None, installed) else f"BEHIND (newest {latest})"
        if latest is None:
            mark = "newest unknown (index not reached)"
        print(f"{name} {installed}: {mark}")
        if latest is not None and latest != installed:
            behind.append(name)
    return 1 if behind else 0


if __name__ == "__main__":
    sys.exit(main())
