"""The distribution's name on the package index (the import name is ``redis_session``), and the
install hint every message that names an extra gives: one place for both.
"""

from __future__ import annotations

DISTRIBUTION = "redis-agent-sessions"
"""What ``pip install`` takes (``pyproject.toml``'s ``[project] name``)."""


def install_hint(extras: str) -> str:
    """``pip install '<distribution>[<extras>]'``: what to run for the extras named."""
    return f"pip install '{DISTRIBUTION}[{extras}]'"
