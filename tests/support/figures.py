"""Figures reported by the reliability tests, written as JSON at the end of the run.

Each fault or soak test (tests/reliability/, tests/cluster/, tests/failover/) calls
``figures.record(...)`` with what it injected and what it saw (a ``topology`` field puts a
cluster or Sentinel row in a table of its own); ``tests/conftest.py`` adds the outcome of related
tests (lost-reply, fuzz example counts, the listener's ``CLIENT KILL`` tests) and writes
everything to ``$RS_FIGURES`` or ``build/reliability.json``; ``tools/reliability_report.py``
renders that as ``RELIABILITY.md``.
"""

from __future__ import annotations

import json
import os
import platform
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "build" / "reliability.json"


class Recorder:
    """Collects rows (one per fault case, soak run, or related test) during a pytest session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.faults: list[dict[str, Any]] = []
        self.soaks: list[dict[str, Any]] = []
        self.fuzz: list[dict[str, Any]] = []
        self.related: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self.attacks: dict[tuple[str, str], list[str]] = {}
        self.server: dict[str, str] = {}

    def record(
        self,
        fault: str,
        *,
        injections: int,
        outcome: str,
        acknowledged: int,
        lost: int,
        duplicated: int,
        **extra: Any,
    ) -> None:
        """One fault case: what was injected, how often, what callers saw, what the data says."""
        row = {
            "fault": fault, "injections": injections, "outcome": outcome,
            "acknowledged": acknowledged, "lost": lost, "duplicated": duplicated, **extra,
        }  # fmt: skip
        with self._lock:
            self.faults.append(row)

    def record_resource(self, **row: Any) -> None:
        """One production-condition case (memory limits, eviction, huge operations, client
        limits): what was set up, what callers saw, what the data says.
        """
        with self._lock:
            self.resources.append(row)

    def record_attack(self, *, attack: str, outcome: str, backend: str) -> None:
        """One hostile-writer attack (tests/security/) and its outcome on ``backend``."""
        with self._lock:
            backends = self.attacks.setdefault((attack, outcome), [])
            if backend not in backends:
                backends.append(backend)

    def record_soak(self, **row: Any) -> None:
        with self._lock:
            self.soaks.append(row)

    def record_fuzz(self, test: str, passing: int, failing: int, invalid: int) -> None:
        with self._lock:
            self.fuzz.append(
                {"test": test, "passing": passing, "failing": failing, "invalid": invalid}
            )

    def record_related(self, test: str, outcome: str, seconds: float) -> None:
        with self._lock:
            self.related.append({"test": test, "outcome": outcome, "seconds": round(seconds, 2)})

    def merge(self, data: dict[str, Any]) -> None:
        """Add what another recorder (an xdist worker's, :meth:`as_json`) collected."""
        with self._lock:
            self.faults += data.get("faults", [])
            self.soaks += data.get("soak", [])
            self.resources += data.get("resources", [])
            self.fuzz += data.get("fuzz", [])
            self.related += data.get("related_tests", [])
            for row in data.get("attacks", []):
                backends = self.attacks.setdefault((row["attack"], row["outcome"]), [])
                backends += [b for b in row["backends"] if b not in backends]
            self.server = self.server or data.get("server", {})

    def empty(self) -> bool:
        return not (self.faults or self.soaks or self.fuzz or self.resources or self.attacks)

    def as_json(self) -> dict[str, Any]:
        return {
            "generated": datetime.now(UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "server": self.server,
            "faults": self.faults,
            "soak": self.soaks,
            "resources": self.resources,
            "attacks": [
                {"attack": a, "outcome": o, "backends": b} for (a, o), b in self.attacks.items()
            ],
            "fuzz": self.fuzz,
            "related_tests": self.related,
        }

    def write(self, path: Path | None = None) -> Path:
        target = path or Path(os.environ.get("RS_FIGURES") or DEFAULT_PATH)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.as_json(), indent=2, sort_keys=False) + "\n")
        return target


FIGURES = Recorder()
"""The recorder of this pytest session."""
