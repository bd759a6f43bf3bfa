"""The wheel carries the Lua scripts, and an installed wheel works on its own."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from redis_session.scripts import PRELUDE, SCRIPT_NAMES

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SMOKE = textwrap.dedent(
    """
    import pathlib, sys
    import redis_session
    from redis_session import Message, RedisStore, Session
    from redis_session.scripts import lua_dir

    venv = pathlib.Path(sys.prefix).resolve()
    assert venv in pathlib.Path(redis_session.__file__).resolve().parents, redis_session.__file__
    assert venv in lua_dir().resolve().parents, lua_dir()
    store = RedisStore.from_url("memory://")
    store.create(Session(key="w", history=[Message(role="user", content="a")]))
    store.append_message("w", Message(role="assistant", content="b"))
    store.compact_messages("w", 0, "s")
    print([m.content for m in store.get_history("w")])
    """
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("redis_session-*.whl")
    return built


def test_wheel_holds_every_script_and_the_type_marker(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in (*SCRIPT_NAMES, PRELUDE):
        assert f"redis_session/lua/{name}.lua" in names
    assert "redis_session/py.typed" in names
    assert not any(n.startswith("tests/") for n in names)


def test_installed_wheel_runs_from_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
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
    done = subprocess.run(
        [str(python), "-c", SMOKE], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['[Compacted Summary]\\ns', 'b']"
