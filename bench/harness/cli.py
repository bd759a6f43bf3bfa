"""The command line the small benchmark scripts share: the Redis to measure, one count, and a
fresh key prefix for the run's keys."""

from __future__ import annotations

import argparse
import uuid

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def bench_args(
    doc: str | None, count: str, default: int, what: str, argv: list[str] | None
) -> tuple[argparse.Namespace, str]:
    """``--url`` and ``--<count>`` (an int, ``default``, described by ``what``) parsed from
    ``argv``, and a ``bench:<random>:`` prefix for the keys the run makes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--url", default=DEFAULT_URL, help="Redis to measure")
    parser.add_argument(f"--{count}", type=int, default=default, help=what)
    return parser.parse_args(argv), f"bench:{uuid.uuid4().hex[:8]}:"
