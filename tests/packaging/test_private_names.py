"""Every private name of another project the fast path uses (``redis_session._transport.fast``),
taken away in turn before ``import redis_session`` as a release that renames it would: the package
imports, that piece of the fast path is off (one WARNING line names it), the others stay on, and a
whole workload through ``from_url`` (sync and asyncio, on ``memory://`` and a real Redis) reads back
exactly what it reads with nothing taken away.

A name is taken away the way a rename looks from outside: a module that no longer imports, or
an attribute that is no longer the object's own (a property that still serves the project's
own code under the old name stands in its place).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import Server

ROOT = Path(__file__).resolve().parents[2]

RENAMED = '''
def renamed(cls, name):
    """``name`` of ``cls``'s instances moved: a property stands for it (the project's own
    code still works through it), it is no longer the instances' own."""
    own = cls.__dict__.get(name)
    if own is not None and hasattr(own, "__get__") and hasattr(own, "__set__"):
        get, put = own.__get__, own.__set__  # a slot
    else:
        new = "_" + name.lstrip("_") + "_v99"
        get = lambda self, owner=None: self.__dict__[new]
        put = lambda self, value: self.__dict__.__setitem__(new, value)
    setattr(cls, name, property(get, put))
'''

REMOVALS: dict[str, tuple[str, str | tuple[str, ...]]] = {
    "the C module": (
        "import sys; sys.modules['redis_session._transport._speedups'] = None",
        "decoder",
    ),
    "BaseModel.__pydantic_fields_set__": (
        RENAMED + "import pydantic; renamed(pydantic.BaseModel, '__pydantic_fields_set__')",
        "decoder",
    ),
    "BaseModel.__pydantic_private__": (
        RENAMED + "import pydantic; renamed(pydantic.BaseModel, '__pydantic_private__')",
        "decoder",
    ),
    "a model subclass's layout": (
        "import pydantic\n"
        "meta = type(pydantic.BaseModel)\n"
        "new = meta.__new__\n"
        "def grown(mcs, name, bases, ns, *a, **k):\n"
        "    if ns.get('__module__', '').startswith('redis_session'):\n"
        "        ns.setdefault('__slots__', ('_grown_' + name,))\n"
        "    return new(mcs, name, bases, ns, *a, **k)\n"
        "meta.__new__ = grown",
        ("reclass", "decoder"),  # the C decoder's models fail its check as well
    ),
    "ConnectionPool._available_connections": (
        RENAMED
        + "import redis.asyncio; renamed(redis.asyncio.ConnectionPool, '_available_connections')",
        ("idle-order", "loop-close"),  # both use it
    ),
    "ConnectionPool._in_use_connections": (
        RENAMED
        + "import redis.asyncio; renamed(redis.asyncio.ConnectionPool, '_in_use_connections')",
        "loop-close",
    ),
    "AbstractConnection._writer": (
        RENAMED + "import redis.asyncio.connection as c; renamed(c.AbstractConnection, '_writer')",
        "loop-close",
    ),
    "ClusterNode._connections": (
        RENAMED + "import redis.asyncio.cluster as c; renamed(c.ClusterNode, '_connections')",
        "loop-close",
    ),
    "RedisCluster._initialize": (
        RENAMED + "import redis.asyncio.cluster as c; renamed(c.RedisCluster, '_initialize')",
        "loop-close",
    ),
    "AsyncCommandsParser.commands": (
        RENAMED
        + "from redis._parsers.commands import AsyncCommandsParser as p; renamed(p, 'commands')",
        "cluster-seed",
    ),
}


def run(url: str, setup: str = "") -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_SESSION_PURE_PYTHON"}
    args = [sys.executable, "-m", "tests.support.workload", url]
    done = subprocess.run(
        args + ([setup] if setup else []), cwd=ROOT, capture_output=True, text=True,
        timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out, done.stderr


@pytest.fixture(scope="module")
def baselines() -> dict[str, dict[str, Any]]:
    return {}


def _baseline(baselines: dict[str, dict[str, Any]], kind: str, url: str) -> dict[str, Any]:
    if kind not in baselines:
        out, stderr = run(url)
        assert all(out["pieces"].values()), (out["pieces"], stderr)
        baselines[kind] = out
    return baselines[kind]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "redis"])
@pytest.mark.parametrize("removed", list(REMOVALS))
def test_a_private_name_taken_away_turns_its_piece_off_and_nothing_else(
    removed: str, kind: str, baselines: dict[str, dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    if kind == "memory":
        url = "memory://"
    else:
        server: Server = request.getfixturevalue("redis_server")
        url = server.url
    setup, pieces = REMOVALS[removed]
    expected = {pieces} if isinstance(pieces, str) else set(pieces)
    baseline = _baseline(baselines, kind, url)
    out, stderr = run(url, setup)
    off = {name for name, on in out["pieces"].items() if not on}
    assert off == expected, (removed, out["pieces"], stderr)
    lines = [line for line in stderr.splitlines() if "fast path piece" in line]
    assert len(lines) == len(off), stderr  # one line each, naming the piece
    assert all(any(f"{p!r} off" in line for line in lines) for p in off), stderr
    level = "INFO" if removed == "the C module" else "WARNING"  # not built: expected
    assert all(line.startswith(level) for line in lines), stderr
    for flavour in ("sync", "async"):
        assert out[flavour] == baseline[flavour], (removed, flavour)


@pytest.mark.slow
def test_the_pure_python_switch_turns_every_piece_off_quietly() -> None:
    env = {**os.environ, "REDIS_SESSION_PURE_PYTHON": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.workload", "memory://"], cwd=ROOT,
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert not any(out["pieces"].values()) and "fast path piece" not in done.stderr  # asked
    baseline, _ = run("memory://")
    assert out["sync"] == baseline["sync"] and out["async"] == baseline["async"]
