"""The wheel carries the library, its command line and the Lua scripts, nothing else (not the
benchmark harness, a tool of the repository), and an installed wheel works on its own; wheel and
sdist carry the LICENSE and the metadata a package index shows (classifiers; no project URL
until the project has a public home).
"""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from redis_session.cli.bench import HARNESS_MISSING
from redis_session.scripts import PRELUDE, SCRIPT_NAMES

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SMOKE = textwrap.dedent(
    """
    import pathlib, sys
    import redis  # redis-py >= 8.2 imports OpenTelemetry's metrics API itself when installed

    def otel():
        return {m for m in sys.modules if m.startswith("opentelemetry")}

    theirs = otel()
    import redis_session
    from redis_session import Message, RedisStore, Session
    from redis_session.scripts import lua_dir

    # OpenTelemetry (here from the test environment) is imported by the first store, not before
    assert not otel() - theirs, sorted(otel() - theirs)

    venv = pathlib.Path(sys.prefix).resolve()
    assert venv in pathlib.Path(redis_session.__file__).resolve().parents, redis_session.__file__
    assert venv in lua_dir().resolve().parents, lua_dir()
    from redis_session._transport import fast as _fast

    assert _fast.DECODE is not None, _fast.STATUS.summary()  # the wheel's C decoder imports
    store = RedisStore.from_url("memory://")
    store.create(Session(key="w", history=[Message(role="user", content="a")]))
    store.append_message("w", Message(role="assistant", content="b"))
    store.compact_messages("w", 0, "s")
    print([m.content for m in store.get_history("w")])
    """
)


def _build(kind: str, out: Path, env: dict[str, str] | None = None) -> Path:
    subprocess.run(
        [sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "--outdir", str(out),
         str(ROOT)],
        check=True, capture_output=True, timeout=300, env=env,
    )  # fmt: skip
    (built,) = out.glob(
        "redis_agent_sessions-*.whl" if kind == "wheel" else "redis_agent_sessions-*.tar.gz"
    )
    return built


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build("wheel", tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build("sdist", tmp_path_factory.mktemp("sdist"))


LICENSE_TEXT = (ROOT / "LICENSE").read_text(encoding="utf-8")


def _check_metadata(meta: Message) -> None:
    assert meta["Name"] == "redis-agent-sessions"
    assert (meta["License-Expression"] or meta["License"]) == "MIT"
    classifiers = meta.get_all("Classifier") or []
    for expected in (
        "Typing :: Typed",
        "Framework :: AsyncIO",
        "Programming Language :: Python :: 3",
    ):
        assert expected in classifiers, classifiers
    # no project URL until the project has a public home: the github.com/redis-session URLs
    # listed before did not exist (dead links on the index page)
    assert meta.get_all("Project-URL") is None, meta.get_all("Project-URL")


def test_the_license_is_mit_for_the_redis_session_authors() -> None:
    assert LICENSE_TEXT.startswith("MIT License\n\nCopyright (c) 2026 the redis_session authors\n")
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in LICENSE_TEXT


def test_wheel_carries_the_license_and_the_index_metadata(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    info = next(n.split("/")[0] for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    licenses = [n for n in archive.namelist() if n.startswith(info) and "LICENSE" in n]
    assert licenses, archive.namelist()
    assert all(archive.read(n).decode() == LICENSE_TEXT for n in licenses)
    _check_metadata(email.message_from_bytes(archive.read(f"{info}/METADATA")))


def test_sdist_carries_the_license_and_the_index_metadata(sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        top = names[0].split("/")[0]
        license_file = archive.extractfile(f"{top}/LICENSE")
        assert license_file is not None, names
        assert license_file.read().decode() == LICENSE_TEXT
        pkg_info = archive.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        _check_metadata(email.message_from_bytes(pkg_info.read()))


def test_sdist_holds_the_benchmarks_and_their_harness(sdist: Path) -> None:
    """The tests it carries run the benchmark scripts and import their harness."""
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[-1] for n in archive.getnames()}
    harness = {p.relative_to(ROOT).as_posix() for p in (ROOT / "bench").rglob("*.py")}
    assert "bench/harness/runner.py" in harness and harness <= names
    # the C decoder builds from the sdist: its source and the hook, not a module built here
    assert {
        "hatch_build.py",
        "redis_session/_transport/_speedups.c",
        "redis_session/_transport/_speedups.pyi",
    } <= names
    assert not any(n.endswith(".so") for n in names), sorted(n for n in names if ".so" in n)


def test_wheel_holds_every_script_and_the_type_marker(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (*SCRIPT_NAMES, PRELUDE):
        assert f"redis_session/lua/{name}.lua" in names
    assert "redis_session/py.typed" in names
    assert not any(n.startswith("tests/") for n in names)


def test_wheel_holds_the_library_the_cli_and_the_scripts_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert not any(n.startswith(("redis_session/bench/", "bench/")) for n in names)
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "redis_session"
    }
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "redis_session").rglob("*.py")}
    scripts = {f"redis_session/lua/{p.name}" for p in (ROOT / "lua").glob("*.lua")}
    scripts |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "redis_session").rglob("*.lua")}
    assert "redis_session/integrations/adk/adk_append_event.lua" in scripts  # the ADK's own
    assert "redis_session/integrations/langgraph/langgraph_put.lua" in scripts  # LangGraph's
    assert "redis_session/cli/__init__.py" in modules
    package = {n for n in names if n.startswith("redis_session/")}
    # the C decoder: its stub always, the module built by hatch_build.py for this interpreter
    # (a C compiler is at hand wherever the tests run), never its source
    built = {
        n
        for n in package
        if n.startswith("redis_session/_transport/_speedups.") and n.endswith(".so")
    }
    assert len(built) == 1, sorted(package)
    assert "redis_session/_transport/_speedups.c" not in package
    expected = (
        modules | scripts | {"redis_session/py.typed", "redis_session/_transport/_speedups.pyi"}
    )
    assert package == expected | built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh venv holding the wheel (and no checkout on its path)."""
    return _installed(wheel, tmp_path_factory)


def _installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    # The dependencies come from the test environment, read-only, after the venv's own copy.
    venv_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    Path(venv_site, "zz_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_a_wheel_built_without_the_c_module_reads_the_same(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    # As a machine without a C compiler builds it: pure Python, every piece of the fast path
    # but the decoder on (its absence said at INFO), the same reads as the checkout's.
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"REDIS_SESSION_PURE_PYTHON": "1"}
    pure = _build("wheel", tmp_path_factory.mktemp("pure"), env)
    assert pure.name.endswith("-py3-none-any.whl"), pure.name
    with zipfile.ZipFile(pure) as archive:
        assert not [n for n in archive.namelist() if n.endswith(".so")]
    python = _installed(pure, tmp_path_factory)
    workload = ROOT / "tests" / "support" / "workload.py"
    env.pop("REDIS_SESSION_PURE_PYTHON")
    runs = []
    for command in ([str(python), str(workload), "memory://"],
                    [sys.executable, "-m", "tests.support.workload", "memory://"]):  # fmt: skip
        done = subprocess.run(
            command, cwd=tmp_path if command[0] == str(python) else ROOT, capture_output=True,
            text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append((json.loads(done.stdout), done.stderr))
    (pure_out, pure_err), (checkout, _) = runs
    assert {n for n, on in pure_out["pieces"].items() if not on} == {"decoder"}
    assert (
        "INFO redis_session: fast path piece 'decoder' off (the C module is not built" in pure_err
    )
    assert pure_out["sync"] == checkout["sync"] and pure_out["async"] == checkout["async"]


def test_installed_wheel_runs_from_a_fresh_venv(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(installed), "-c", SMOKE], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['[Compacted Summary]\\ns', 'b']"


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_the_wheels_bench_command_says_how_to_run_it(
    installed: Path, tmp_path: Path, as_json: bool
) -> None:
    """The harness is not in the wheel: one line saying to run it from a checkout."""
    argv = ["bench", "--url", "redis://127.0.0.1:1/0", *(["--json"] if as_json else [])]
    done = subprocess.run(
        [str(installed), "-m", "redis_session", *argv],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    if as_json:
        error = {"error": HARNESS_MISSING, "type": "ImportError", "exit_code": 1}
        assert [json.loads(line) for line in done.stderr.splitlines()] == [error]
    else:
        assert done.stderr.splitlines() == [f"Error: {HARNESS_MISSING}"]
    assert "pip install -e" in HARNESS_MISSING


BARE = textwrap.dedent(
    """
    import importlib.util, sys, uuid
    from redis_session import Message, RedisStore, Session

    bare = ("click", "rich", "fakeredis", "opentelemetry")
    assert all(importlib.util.find_spec(m) is None for m in bare)
    prefix = f"bare-{uuid.uuid4().hex[:8]}:"
    with RedisStore.from_url(sys.argv[1], prefix=prefix) as store:
        store.create(Session(key="k", history=[Message(role="user", content="hello")]))
        print(store.get_history("k")[0].content)
        store.delete("k")
    assert not [m for m in sys.modules if m.startswith("opentelemetry")]
    try:
        RedisStore.from_url("memory://")
    except ImportError as exc:
        print(exc)
    """
)


@pytest.mark.redis
def test_the_wheel_without_extras_talks_to_redis_and_names_the_extras(
    wheel: Path, tmp_path: Path, redis_server: Any
) -> None:
    """Installed with its dependencies resolved by pip (the machine's index): no click, rich
    or fakeredis; the store works on a real Redis; memory:// and the command line say which
    extra they need.
    """
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    done = subprocess.run(
        [str(python), "-c", BARE, redis_server.url],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "hello",
        "memory:// needs fakeredis with Lua: pip install 'redis-agent-sessions[memory]'",
    ]
    cli = subprocess.run(
        [str(venv / "bin" / "redis-session"), "ls"], capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 1 and "pip install 'redis-agent-sessions[cli]'" in cli.stderr
