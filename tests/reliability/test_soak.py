"""Soak: four OS processes run a realistic mix (create, append, get, fork, append to the child,
merge, discard, compact, delete) on four sessions they all share and on private ones, against a
redis-server of the test's own, whose client connections this test kills every second (so
redis-py's retries of every operation are exercised under load). Bounded by an op count and
by wall time. Then :mod:`tests.support.consistency` checks the ledgers against Redis.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from redis_session import RedisStore, SessionExpired, SessionNotFound
from tests.support.consistency import Ledger, audit_keys, check_histories
from tests.support.faults import OwnServer
from tests.support.figures import Recorder
from tests.support.soak import Plan, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.redis]

WORKERS = 4
OPS_PER_WORKER = 15000
SECONDS = 30.0
KILL_EVERY = 0.25
TTL = 4.0  # a few TTLs in one run: a tree must live as one while any of it is written
DEDUP_WINDOW = 64  # small: the id window turns over many times during the run


@pytest.mark.timeout(110)
def test_four_processes_soak_then_everything_checks_out(
    own_server: Callable[..., OwnServer], figures: Recorder, tmp_path: Path
) -> None:
    server = own_server()
    prefix = "soak:"
    shared = [f"shared:{i}" for i in range(4)]
    ctx = multiprocessing.get_context("spawn")
    procs = []
    for w in range(WORKERS):
        plan = Plan(
            port=server.port, prefix=prefix, worker=w, shared=shared, max_ops=OPS_PER_WORKER,
            seconds=SECONDS, ttl=TTL, out=str(tmp_path / f"w{w}.json"),
            dedup_window=DEDUP_WINDOW,
        )  # fmt: skip
        proc = ctx.Process(target=run_worker, args=(json.dumps(asdict(plan)),))
        proc.start()
        procs.append(proc)
    admin = server.client(socket_timeout=5)
    kills = killed_connections = 0
    started = time.monotonic()
    try:
        while any(p.is_alive() for p in procs) and time.monotonic() - started < SECONDS + 40:
            time.sleep(KILL_EVERY)
            n = admin.client_kill_filter(_type="normal")  # not this one: SKIPME yes
            kills += 1
            killed_connections += n
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        admin.close()
    elapsed = time.monotonic() - started
    assert [p.exitcode for p in procs] == [0] * WORKERS

    ledger = Ledger()
    ops: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    anomalies: list[str] = []
    winners: Counter[str] = Counter()
    metadata: dict[str, dict[str, str]] = {k: {} for k in shared}
    unsure: set[str] = set()
    finished: dict[str, float] = {}
    for w in range(WORKERS):
        data: dict[str, Any] = json.loads((tmp_path / f"w{w}.json").read_text())
        report = data["report"]
        assert report["crashed"] == "", report["crashed"]
        ledger += Ledger.from_json(data["ledger"])
        finished[f"priv:w{w}:"] = report["finished_at"]
        ops.update(report["ops"])
        errors.update(report["errors"])
        anomalies += report["anomalies"]
        winners.update(report["created_shared"])
        for key, value in report["metadata"].items():
            metadata[key][f"w{w}"] = value
        unsure |= {f"{key} w{w}" for key in report["metadata_unsure"]}

    found_stored = ops.pop("append answered False (retried)", 0)
    compact_zero = ops.pop("compact answered 0 (retried)", 0)
    checker = RedisStore.from_url(server.url, prefix=prefix)
    try:
        sessions = set(ledger.streams) | ledger.live | ledger.deleted
        histories: dict[str, list[str] | None] = {}
        expired: list[str] = []
        checked_at = time.time()
        for key in sorted(sessions):
            try:
                histories[key] = [m.content for m in checker.get_history(key)]
            except SessionExpired:
                histories[key] = None
                expired.append(key)
            except SessionNotFound:
                histories[key] = None
        audit = audit_keys(checker.client, prefix, ttl=True, deleted=ledger.deleted)
        stored_metadata = {k: checker.get(k).metadata for k in shared}
    finally:
        checker.close()

    # A worker that finished early leaves its private session idle: it expires TTL later (the
    # shared ones once every worker finished). Only such a session may be expired, not missing.
    def idle_since(key: str) -> float:
        owner = next((p for p in finished if key.startswith(p)), None)
        return finished[owner] if owner is not None else max(finished.values())

    unexplained = [k for k in expired if checked_at - idle_since(k) < TTL - 0.5]
    assert unexplained == [], f"expired while written within its TTL: {unexplained}"
    ledger.live.difference_update(expired)
    verdict = check_histories(ledger, histories)
    metadata_lost = [
        f"{key} {name}"
        for key, entries in metadata.items()
        for name, value in entries.items()
        if stored_metadata[key].get(name) != value and f"{key} {name}" not in unsure
    ]
    gone_but_deleted = [k for k in ledger.deleted if histories.get(k) is not None]
    summary = verdict.summary()
    figures.record_soak(
        workers=WORKERS,
        seconds=round(elapsed, 1),
        ops=dict(sorted(ops.items())),
        total_ops=sum(ops.values()),
        errors=dict(errors),
        appends_whose_retry_found_them_stored=found_stored,
        compactions_whose_retry_found_them_done=compact_zero,
        connection_kills=kills,
        connections_killed=killed_connections,
        sessions_checked=len(sessions),
        shared_sessions=len(shared),
        private_sessions_deleted=len(ledger.deleted),
        keys_audited=audit.keys,
        discard_tombstones=audit.tombstones,
        **summary,
        orphans=len(audit.orphans),
        keys_without_ttl=len(audit.without_ttl),
        stale_index_entries=len(audit.stale_index),
        anomalies=len(anomalies),
        metadata_entries_lost=len(metadata_lost),
    )
    figures.record(
        f"soak: {WORKERS} processes, CLIENT KILL TYPE normal every {KILL_EVERY} s",
        client="redis-py default retry (10x)",
        injections=kills,
        outcome=f"{sum(ops.values()):,} operations, {sum(errors.values())} raised to the caller; "
        f"{killed_connections} connections killed; {found_stored} appends answered False and "
        f"{compact_zero} compactions 0 (redis-py's retry found the first attempt applied)",
        acknowledged=summary["acknowledged"],
        lost=summary["lost"],
        duplicated=summary["duplicated"],
    )
    assert verdict.ok, verdict
    assert summary["lost"] == 0 and summary["duplicated"] == 0
    assert audit.ok, audit
    assert not anomalies, anomalies
    assert not metadata_lost, (metadata_lost, stored_metadata, metadata)
    assert not gone_but_deleted, gone_but_deleted
    assert sorted(winners) == shared and set(winners.values()) == {1}  # one creator each
    assert sum(ops.values()) >= WORKERS * 200  # the workload really ran
