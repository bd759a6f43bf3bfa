"""Render the figures the reliability tests wrote (JSON) as ``RELIABILITY.md``.

    RS_FIGURES=build/reliability.json .venv/bin/python -m pytest <TESTS>
    .venv/bin/python tools/reliability_report.py [build/reliability.json] [-o RELIABILITY.md]

``TESTS`` (below) are the tests that record figures; the page's "Regenerate" block names them.
Rows that carry a ``topology`` (cluster, Sentinel) get tables of their own after the
single-server ones, whatever order the tests ran in.

Exits 1 when a row reports data lost or duplicated, or a related test did not pass.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = (
    "tests/reliability tests/resources tests/cluster tests/failover tests/security "
    "tests/contract/test_child_races.py tests/contract/test_real_server.py "
    "tests/integrations/test_round_trip_fuzz.py tests/integrations/test_openai_agents.py "
    "tests/unit/test_codec.py tests/unit/test_crypto.py tests/unit/test_decode_paths.py "
    "tests/unit/test_keys.py tests/unit/test_packer.py"
)
"""The tests whose figures make the page: faults, production conditions, cluster and Sentinel
faults, the hostile writer, the lost-reply tests elsewhere and the hypothesis tests counted."""
RELATED_KINDS = (
    ("lost_repl", "Reply lost after the server applied the write (TCP proxy), retried by redis-py"),
    ("would_have_duplicated", "Control: a plain RPUSH through the same lost reply"),
    ("after_client_kill", "`CLIENT KILL TYPE pubsub` of a listener (contract tests)"),
)

NOTES = [
    "- Each fault test starts a redis-server of its own (`tests/support/faults.py`), so it can "
    "stop, pause and kill it without touching anyone's data; the writers use "
    "`socket_timeout=0.1` for freezes. *redis-py default retry* is `redis.Redis(...)`'s 10 "
    "retries with jittered backoff; *no retry* is `Retry(NoBackoff(), 0)`.",
    "- SIGSTOP keeps the server's sockets open: a request sent before or during the freeze is "
    "run when the process continues, even though its caller timed out and left. `CLIENT PAUSE` "
    "holds the command instead, and drops it when its client disconnects, so nothing timed "
    "out was applied. Under `CLIENT PAUSE ALL` not even `CLIENT UNPAUSE` is served (Redis "
    "7.0), so the pauses are timed (`CLIENT PAUSE <ms>`).",
    "- The SIGKILL test runs the server with `appendonly yes` and `appendfsync always` (a reply "
    "leaves only after the write is on disk), so an acknowledged write must survive the kill "
    "and *lost* means something. Without persistence a restart loses everything by "
    "configuration; that case is checked for what callers see (`SessionNotFound`, no session "
    "recreated piecemeal) instead.",
    "- A call that redis-py retried after its first attempt had been applied answers as a "
    "repeat: `append_message` returns False, `compact_messages` 0, `merge_child` 0 messages. "
    "The data is right; the return value does not say the caller's own call did the work.",
    "- The soak (`tests/support/soak.py`) is checkable by design: unique contents, each shared "
    "session compacted by one worker only (with `expect_id`, so what it removed is exactly "
    "what it read), private sessions never re-created after their deletion. The checker "
    "(`tests/support/consistency.py`) reads every history back and scans every key under the "
    "prefix (`PTTL`, child keys' parents, index entries).",
]


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _n(value: int) -> str:
    return f"{value:,}"


def _command(width: int = 92) -> list[str]:
    """The pytest command of :data:`TESTS`, wrapped in shell continuation lines."""
    lines, line = [], "RS_FIGURES=build/reliability.json RS_PERF=1 .venv/bin/python -m pytest"
    for word in TESTS.split():
        if len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = "   "
        line += " " + word
    return [*lines, line]


def _fault_rows(rows: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """The fault table's rows, and whether none of them lost or doubled anything."""
    clean, out = True, []
    for row in rows:
        clean &= row["lost"] == 0 and row["duplicated"] == 0
        out.append(
            f"| {_cell(row['fault'])} | {_cell(row.get('client', ''))} | {row['injections']}x "
            f"| {_cell(row['outcome'])} | {_n(row['acknowledged'])} | **{row['lost']}** "
            f"| **{row['duplicated']}** |"
        )
    return out, clean


def render(data: dict[str, Any]) -> tuple[str, bool]:
    """The Markdown page, and whether every figure is clean (nothing lost or doubled)."""
    clean = True
    server = data.get("server") or {}
    out = [
        "# Reliability under faults, load and bad input",
        "",
        "Generated by `tools/reliability_report.py` from the figures the tests recorded "
        f"(`{data.get('source', 'build/reliability.json')}`, {data['generated']}; "
        f"{server.get('name', 'redis')} {server.get('version', '?')}, Python {data['python']}, "
        f"{data['machine']}). Every number below was measured by a test that also asserts "
        "lost = 0 and duplicated = 0. Regenerate:",
        "",
        "```bash",
        *_command(),
        ".venv/bin/python tools/reliability_report.py build/reliability.json -o RELIABILITY.md",
        "```",
        "",
        "## Faults",
        "",
        "Writers behave as callers should: a call that raised has an unknown outcome, so they "
        "send the same message (same id) again until it is acknowledged. *Lost*: acknowledged "
        "messages missing afterwards; *duplicated*: messages stored more than once.",
        "",
        "| fault | client | injected | what the callers saw | acknowledged | lost | duplicated |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    single = [r for r in data["faults"] if not r.get("topology")]
    spread = [r for r in data["faults"] if r.get("topology")]
    rows, ok = _fault_rows(single)
    out += rows
    clean &= ok
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for test in data.get("related_tests", []):
        for marker, label in RELATED_KINDS:
            if marker in test["test"]:
                groups[label].append(test)
                break
    for label, tests in groups.items():
        passed = sum(t["outcome"] == "passed" for t in tests)
        clean &= passed == len(tests)
        verdict = "0" if passed == len(tests) else f"{len(tests) - passed} test(s) failed"
        control = "Control" in label
        shown = "—" if control else verdict
        note = " (the control is stored twice, as expected)" if control else ""
        out.append(
            f"| {label} | redis-py default retry | {len(tests)}x (one per test) "
            f"| {passed} of {len(tests)} tests passed{note} | — | **{shown}** | **{shown}** |"
        )
    if spread:
        rows, ok = _fault_rows(sorted(spread, key=lambda r: r["topology"] != "cluster"))
        clean &= ok
        out += [
            "",
            "## Faults on a cluster and under Sentinel (tests/cluster/, tests/failover/)",
            "",
            "Private clusters (3 primaries, 3 replicas) and a Sentinel set-up (a primary, a "
            "replica, 3 sentinels) on loopback, started by the tests. The durable rows count "
            "changes acknowledged to a writer against what the store or an event log listener "
            "returned; the live listener rows (pub/sub, at-most-once) count probe events "
            "published every 20 ms, and *lost* there is a probe missed after the listener's "
            "bound to hear again.",
            "",
            "| fault | client | injected | what the callers saw | acknowledged | lost "
            "| duplicated |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            *rows,
        ]
    for soak in data.get("soak", []):
        out += [
            "",
            f"## Soak: {soak['workers']} processes, {soak['seconds']} s",
            "",
            f"{_n(soak['total_ops'])} operations on {soak['shared_sessions']} shared and "
            f"{soak['sessions_checked'] - soak['shared_sessions']} private sessions, while the "
            f"client connections were killed {soak['connection_kills']}x "
            f"({soak['connections_killed']} connections); "
            f"{sum(soak['errors'].values())} raised to the caller.",
            "",
            "| operation | count |",
            "| --- | --- |",
            *[f"| {op} | {_n(n)} |" for op, n in soak["ops"].items()],
            "",
            "| check | result |",
            "| --- | --- |",
        ]
        checks = [
            ("acknowledged messages checked", soak["acknowledged"]),
            ("lost (must be 0)", soak["lost"]),
            ("duplicated (must be 0)", soak["duplicated"]),
            ("out of a writer's order (must be 0)", soak["out_of_order"]),
            ("merged children not adjacent (must be 0)", soak["split"]),
            ("unexpected messages (must be 0)", soak["unexpected"]),
            ("sessions missing (must be 0)", soak["missing_sessions"]),
            ("orphan child keys (must be 0)", soak["orphans"]),
            ("keys without TTL, index aside (must be 0)", soak["keys_without_ttl"]),
            ("index entries of gone sessions (must be 0)", soak["stale_index_entries"]),
            ("anomalies seen by readers (must be 0)", soak["anomalies"]),
            (
                "metadata entries lost by concurrent updates (must be 0)",
                soak["metadata_entries_lost"],
            ),
            ("keys audited", soak["keys_audited"]),
            ("discard tombstones (with TTL, by design)", soak["discard_tombstones"]),
            ("private sessions deleted, nothing left of them", soak["private_sessions_deleted"]),
            (
                "appends whose retry found them stored",
                soak["appends_whose_retry_found_them_stored"],
            ),
            (
                "compactions whose retry found them done",
                soak["compactions_whose_retry_found_them_done"],
            ),
        ]
        for name, value in checks:
            if "must be 0" in name:
                clean &= value == 0
            out.append(f"| {name} | {_n(value)} |")
    if data.get("resources"):
        out += [
            "",
            "## Production conditions (tests/resources/, private servers)",
            "",
            "Memory limits, each eviction policy, a read-only replica, a full client table and "
            "huge sessions, each on a `redis-server` of the test's own. Under an eviction "
            "policy other than `noeviction` keys of a session can go: *damaged* sessions are "
            "reported (`CorruptData` naming the key) and *lost* ones say `SessionNotFound`; "
            "what must never happen is a session read as empty, expired, partial or stored "
            "twice, and every test asserts that.",
            "",
            "| condition | what the callers saw | errors by type | damaged | lost | duplicated |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in sorted(data["resources"], key=lambda r: bool(r.get("topology"))):
            clean &= row["duplicated"] == 0
            errors = ", ".join(f"{k} {v}" for k, v in row.get("errors", {}).items()) or "none"
            out.append(
                f"| {_cell(row['case'])} | {_cell(row['outcome'])} | {_cell(errors)} "
                f"| {row['damaged']} | {row['lost']} | **{row['duplicated']}** |"
            )
    if data.get("attacks"):
        out += [
            "",
            "## Hostile writer (tests/security/): attack -> outcome",
            "",
            "A raw Redis client that can write the store's keys but does not know the "
            "passphrase attacks sealed sessions; each row is one test's assertion, on the "
            "backends it ran on. *Refused* means the read or write raises and returns none of "
            "the session; the rows marked *accepted* are the documented limits of the threat "
            "model (README, Encryption at rest).",
            "",
            "| attack | outcome | backends |",
            "| --- | --- | --- |",
        ]
        for row in data["attacks"]:
            out.append(
                f"| {_cell(row['attack'])} | {_cell(row['outcome'])} "
                f"| {', '.join(row['backends'])} |"
            )
    if data.get("fuzz"):
        total = sum(f["passing"] + f["failing"] + f["invalid"] for f in data["fuzz"])
        out += [
            "",
            f"## Input fuzz (hypothesis): {_n(total)} examples",
            "",
            "| test | passing | failing | invalid (filtered) |",
            "| --- | --- | --- | --- |",
        ]
        for f in data["fuzz"]:
            clean &= f["failing"] == 0
            out.append(
                f"| `{_cell(f['test'])}` | {_n(f['passing'])} | {f['failing']} | {f['invalid']} |"
            )
    out += ["", "## How the faults are made", "", *NOTES]
    if data.get("related_tests"):
        out += ["", "## Related tests", "", "| test | outcome | seconds |", "| --- | --- | --- |"]
        out += [
            f"| `{_cell(t['test'])}` | {t['outcome']} | {t['seconds']} |"
            for t in data["related_tests"]
        ]
    return "\n".join(out) + "\n", clean


def main(argv: list[str] | None = None) -> int:
    """Read the figures, write the page; 1 if anything was lost or duplicated."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("RS_FIGURES") or str(ROOT / "build" / "reliability.json")
    parser.add_argument("figures", nargs="?", default=default)
    parser.add_argument("-o", "--output", default=str(ROOT / "RELIABILITY.md"))
    args = parser.parse_args(argv)
    data = json.loads(Path(args.figures).read_text())
    path = Path(args.figures).resolve()
    data["source"] = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    text, clean = render(data)
    Path(args.output).write_text(text)
    print(f"wrote {args.output}" + ("" if clean else " -- DATA LOST OR DUPLICATED, see the tables"))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
