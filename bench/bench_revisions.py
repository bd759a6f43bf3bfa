"""The append and the agent loop of several commits of this repository, interleaved call by
call in one process: each commit's package is copied out of git under a name of its own
(``rs_<n>``, with its ``lua/`` beside it and its C extension built), so that the versions share
the process, the server and the machine's moment, and differ only by their code. A run
measured in one process per version moves by a few µs with the process (its memory layout,
its hash seeds); here the same commit loaded twice (``--twice``) shows what is left of that.

Rows: ``append_message`` of a ~215-character message to a session of ``--messages`` messages
(a pool of 50 such sessions per version), and the agent loop (that append, then ``get`` of the
whole session by the store that holds it). Medians and p90 of wall time in µs, and each
version's median minus the first one's. Keys go under a ``bench:<random>:`` prefix, deleted at
the end.

    .venv/bin/python bench/bench_revisions.py REV [REV ...] [--twice] [--calls 20000]
        [--messages 1000] [--url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from hatch_build import compile_extension  # noqa: E402

POOL = 50


def checkout(rev: str, name: str, into: Path) -> ModuleType:
    """Commit ``rev``'s package, imported as ``name`` from a folder of ``into`` (with its
    ``lua/`` beside it, as in a source checkout, and its C extension built)."""
    folder = into / name
    folder.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "redis_session", "lua"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    package = folder / name
    (folder / "redis_session").rename(package)
    for source in package.rglob("_speedups.c"):
        failed = compile_extension(
            source, source.with_name(f"_speedups{sysconfig.get_config_var('EXT_SUFFIX')}")
        )
        if failed:
            raise SystemExit(f"{rev}: the C extension did not build: {failed}")
    sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def text(i: int) -> str:
    return f"message {i} " + "x" * 200


class Version:
    """One commit's store and its pool of sessions."""

    def __init__(self, label: str, module: Any, url: str, prefix: str, messages: int) -> None:
        self.label, self.module = label, module
        self.store = module.RedisStore.from_url(url, prefix=prefix, max_history_turns=10**6)
        self.keys = [f"{label}:{i}" for i in range(POOL)]
        for key in self.keys:
            history = [module.Message(role="user", content=text(j)) for j in range(messages)]
            self.store.create(module.Session(key=key, history=history[:1000]))
            for at in range(1000, messages, 1000):
                self.store.append_messages(key, history[at : at + 1000])
            self.store.get(key)  # held from now on
        self.n = 0

    def message(self) -> Any:
        self.n += 1
        return self.module.Message(role="user", content=text(self.n))

    def append(self, i: int, msg: Any) -> Callable[[], Any]:
        key, store = self.keys[i % POOL], self.store
        return lambda: store.append_message(key, msg)

    def loop(self, i: int, msg: Any) -> Callable[[], Any]:
        key, store = self.keys[i % POOL], self.store

        def turn() -> Any:
            store.append_message(key, msg)
            return store.get(key)

        return turn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("revs", nargs="+", help="commits to compare (the first is the reference)")
    parser.add_argument("--twice", action="store_true", help="load the first commit twice")
    parser.add_argument("--calls", type=int, default=20000, help="calls of each row and version")
    parser.add_argument("--messages", type=int, default=1000, help="messages a session holds")
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="Redis to measure")
    args = parser.parse_args(argv)
    revs = list(args.revs) + ([args.revs[0]] if args.twice else [])
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    labels = [f"{rev}" if revs.index(rev) == i else f"{rev} (again)" for i, rev in enumerate(revs)]
    with tempfile.TemporaryDirectory() as tmp:
        modules = [checkout(rev, f"rs_{i}", Path(tmp)) for i, rev in enumerate(revs)]
        versions = [
            Version(f"v{i}", m, args.url, prefix, args.messages) for i, m in enumerate(modules)
        ]
        try:
            for row in ("append", "agent loop"):
                times: list[list[int]] = [[] for _ in versions]
                messages = [[v.message() for _ in range(args.calls)] for v in versions]
                gc.collect()
                gc.freeze()
                for i in range(args.calls):
                    shift = i % len(versions)
                    for k in list(range(shift, len(versions))) + list(range(shift)):
                        v = versions[k]
                        call = (
                            v.append(i, messages[k][i])
                            if row == "append"
                            else v.loop(i, messages[k][i])
                        )
                        t = time.perf_counter_ns()
                        call()
                        times[k].append(time.perf_counter_ns() - t)
                gc.unfreeze()
                first = statistics.median(times[0]) / 1000
                print(f"{row} @{args.messages:,} messages, {args.calls:,} calls each")
                for label, samples in zip(labels, times, strict=True):
                    median = statistics.median(samples) / 1000
                    p90 = statistics.quantiles(samples, n=10)[-1] / 1000
                    shown = f"median {median:8.1f} µs  p90 {p90:8.1f}  {median - first:+6.1f}"
                    print(f"  {label:24} {shown}")
        finally:
            for v in versions:
                for key in v.keys:
                    v.store.delete(key)
                v.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
