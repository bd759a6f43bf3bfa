"""Run the frameworks' own session test suites against our adapters.

Usage::

    .venv/bin/python tools/run_framework_suites.py                  # both suites, both backends
    .venv/bin/python tools/run_framework_suites.py --suite adk --backend memory://
    .venv/bin/python tools/run_framework_suites.py --json after.json --compare before.json

What it runs (obtained at run time into a temporary directory, never stored in this repo):

- **openai-agents** (``--agents-version``, default: the installed version): its sdist from the
  package index (``pip download openai-agents==V --no-deps --no-binary :all:``), whose
  ``tests/`` tree holds ``tests/extensions/memory/test_redis_session.py``,
  ``tests/memory/test_session.py``, ``tests/memory/test_session_limit.py`` (older releases
  kept these two directly under ``tests/``; both places are looked for) and
  ``tests/extensions/memory/test_advanced_sqlite_session.py`` (``AdvancedSQLiteSession``'s
  branching and turn methods; ``RedisAgentSession`` has them). With
  ``OPENAI_AGENTS_SRC=<checkout>`` (or ``--agents-src``) a local checkout is used instead.
- **google/adk-python** ``tests/unittests/sessions/test_session_service.py`` with the
  ``_conformance.py`` registry it imports, from ``ADK_PYTHON_SRC=<checkout>`` (or
  ``--adk-src``): a work tree, or a bare git directory read at ``--adk-ref`` (default
  ``HEAD``). Without one it tries ``git clone --depth 1 --branch v<installed version>`` from
  GitHub, which needs network access (the sdist of google-adk ships no tests).

Which ADK tests apply: a copy of the file from another ADK release than the installed one (the
snapshot at ``--adk-ref``; an older one has no ``_conformance.py``, and its tests then build
services through ``get_session_service`` and ``parametrize`` lists only) may expect what the
installed google-adk no longer does. Before our backends, the ADK file runs once against the
installed google-adk's own ``InMemorySessionService`` (the reference run); a test that fails
there does not apply to the installed version and is skipped on our backends, with the
reference failure as its reason (printed as ``n/a: ...``).

How they are patched: only where the service / session under test is constructed, by an
``ast``-located rewrite of the copied files (see :func:`patch_adk_tests`,
:func:`patch_conformance` and :func:`rebind_after_import`). ``test_redis_session.py`` also
chooses between its fakeredis and its real-Redis construction with ``USE_FAKE_REDIS``; that
switch follows the backend (:func:`rebind_after_assignment`), so each backend runs the branch
of the file written for it. ``framework_shims`` (next to this
script) builds our ``RedisSessionService`` / ``RedisAgentSession`` there, on the run's backend,
and is loaded as a pytest plugin that gives each test its own key prefix, skips the tests that
never reach the service under test (each with its reason) and expects failure
(``xfail(strict=True)``) of the documented differences. The frameworks' own pytest settings
(``[tool.pytest.ini_options]`` of their ``pyproject.toml``) are used.

Backends (``--backend``, repeatable): ``memory://`` and a real Redis (``$REDIS_URL``, default
``redis://127.0.0.1:6379/0``; only keys under this run's prefix are written, and deleted at
the end). Every step is bounded: downloads, clones and each pytest run have a timeout, and
each test has pytest-timeout's ``--timeout``.

The output is one table: a row per test, a column per backend (``pass``, ``FAIL``, ``ERROR``,
``skip``, ``xfail``, ``XPASS``), then the totals; with ``--compare`` the previous result of each
cell is shown beside it when it differs (``pass (was FAIL)``). The exit status is 1 when a cell
is ``FAIL``, ``ERROR`` or ``XPASS``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
SHIMS = "framework_shims"
IMPORT_SHIMS = f"import {SHIMS} as _rs_shims"
DEFAULT_REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REFERENCE = "adk-reference"
"""The backend name of the reference run (``framework_shims.REFERENCE``)."""
AGENTS_FILES = (
    ("tests/extensions/memory/test_redis_session.py",),
    ("tests/memory/test_session.py", "tests/test_session.py"),
    ("tests/memory/test_session_limit.py", "tests/test_session_limit.py"),
    ("tests/extensions/memory/test_advanced_sqlite_session.py",),
)
ADK_DIR = "tests/unittests/sessions"
ADK_FILES = ("test_session_service.py", "_conformance.py")
ADK_TEST_NEEDS = ("sqlalchemy", "aiosqlite")
"""Modules ADK's test file needs that google-adk does not install."""
ADK_DEFAULT_INI: dict[str, object] = {
    "asyncio_mode": "auto",
    "asyncio_default_fixture_loop_scope": "function",
}


class Unavailable(RuntimeError):
    """A suite's files could not be obtained."""


# -- patching (pure text -> text) ------------------------------------------------------------


def _lines(source: str) -> list[str]:
    return source.splitlines(keepends=True)


def _offset(lines: list[str], lineno: int, col: int) -> int:
    return sum(len(line) for line in lines[: lineno - 1]) + len(
        lines[lineno - 1].encode()[:col].decode(errors="ignore")
    )


def _replace_nodes(source: str, edits: Iterable[tuple[ast.AST, str]]) -> str:
    """``source`` with each node's text replaced, from the last to the first."""
    lines = _lines(source)
    spans = []
    for node, text in edits:
        start = _offset(lines, node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = _offset(lines, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        spans.append((start, end, text))
    for start, end, text in sorted(spans, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def _insert_after_imports(source: str, text: str) -> str:
    """``text`` as a line of its own after the module's last top-level import."""
    tree = ast.parse(source)
    last = max(
        (n.end_lineno or n.lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)),
        default=0,
    )
    lines = _lines(source)
    return "".join([*lines[:last], f"{text}\n", *lines[last:]])


def rebind_after_import(source: str, bindings: dict[str, str]) -> str:
    """Rebind each imported name to ``_rs_shims.<attr>`` right after the import binding it.

    ``bindings`` maps a name the module imports to the attribute of ``framework_shims`` that
    builds ours. Raises :class:`ValueError` when a name is imported nowhere at the top level.
    """
    tree = ast.parse(source)
    lines = _lines(source)
    inserts: dict[int, list[str]] = {}
    missing = set(bindings)
    for node in tree.body:
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            if bound in bindings:
                missing.discard(bound)
                line = f"{bound} = _rs_shims.{bindings[bound]}  # redis_session harness\n"
                inserts.setdefault(node.end_lineno or node.lineno, []).append(line)
    if missing:
        raise ValueError(f"not imported at the top level: {', '.join(sorted(missing))}")
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        out.append(line)
        if number in inserts:
            out.extend([f"{IMPORT_SHIMS}\n", *inserts[number]])
    return "".join(out)


def rebind_after_assignment(source: str, name: str, attr: str) -> str:
    """Rebind ``name`` to ``_rs_shims.<attr>`` after the top-level statement (an assignment,
    or a ``try`` holding one) that sets it first.
    """
    tree = ast.parse(source)
    for node in tree.body:
        targets = [t for n in ast.walk(node) if isinstance(n, ast.Assign) for t in n.targets]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            lines = _lines(source)
            end = node.end_lineno or node.lineno
            line = f"{name} = _rs_shims.{attr}  # redis_session harness\n"
            return "".join([*lines[:end], f"{IMPORT_SHIMS}\n", line, *lines[end:]])
    raise ValueError(f"{name} is assigned nowhere at the top level")


def patch_adk_tests(source: str) -> str:
    """ADK's test file: ``get_session_service`` and services built in a ``parametrize`` list of
    ``session_service`` give ours; the ``session_service`` fixture comes from the patched
    ``_conformance``. Nothing else changes.
    """
    tree = ast.parse(source)
    edits: list[tuple[ast.AST, str]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_session_service":
            edits.append((node, "get_session_service = _rs_shims.get_session_service"))
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "parametrize"
                and deco.args
                and isinstance(deco.args[0], ast.Constant)
                and deco.args[0].value == "session_service"
                and len(deco.args) > 1
                and isinstance(deco.args[1], ast.List | ast.Tuple)
            ):
                values = ", ".join(
                    "_rs_shims.adk_parametrized_service()" for _ in deco.args[1].elts
                )
                edits.append((deco.args[1], f"[{values}]"))
    if not any(text.startswith("get_session_service") for _, text in edits):
        raise ValueError("test_session_service.py defines no get_session_service")
    return _insert_after_imports(_replace_nodes(source, edits), IMPORT_SHIMS)


def patch_conformance(source: str) -> str:
    """ADK's ``_conformance.py``: ``BACKENDS`` holds our service only; the relative imports
    (fakes other backends are built from) are dropped. The fixture is theirs.
    """
    tree = ast.parse(source)
    edits: list[tuple[ast.AST, str]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            edits.append((node, "pass  # redis_session harness: import for other backends"))
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "BACKENDS" for t in targets):
            edits.append((node, "BACKENDS = [_Backend(*b) for b in _rs_shims.adk_backends()]"))
    if not any(text.startswith("BACKENDS") for _, text in edits):
        raise ValueError("_conformance.py assigns no BACKENDS")
    return _insert_after_imports(_replace_nodes(source, edits), IMPORT_SHIMS)


def applies_to_service(source: str) -> list[str]:
    """Names of the ADK file's tests that reach the service under test: they take the
    ``session_service`` fixture (or a parametrized one) or call ``get_session_service``.
    """
    names = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not node.name.startswith("test"):
            continue
        params = {a.arg for a in node.args.args}
        calls = {
            n.func.id
            for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        if "session_service" in params or "get_session_service" in calls:
            names.append(node.name)
    return names


# -- obtaining -------------------------------------------------------------------------------


def _run(
    cmd: list[str], timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env
    )


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError as exc:
        raise Unavailable(f"{dist} is not installed (pip install -e '.[test]')") from exc


def obtain_agents(work: Path, version: str, src: str | None) -> tuple[Path, list[str]]:
    """The openai-agents source tree holding its tests, and the test files' paths in it."""
    if src:
        root = Path(src)
    else:
        download = work / "download"
        done = _run(
            [sys.executable, "-m", "pip", "download", f"openai-agents=={version}", "--no-deps",
             "--no-binary", ":all:", "-d", str(download)],
            timeout=300,
        )  # fmt: skip
        archives = list(download.glob("openai_agents-*.tar.gz"))
        if done.returncode != 0 or not archives:
            raise Unavailable(f"pip download openai-agents=={version}: {done.stderr[-500:]}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(work / "sdist", filter="data")
        root = next((work / "sdist").iterdir())
    files = []
    for choices in AGENTS_FILES:
        found = next((c for c in choices if (root / c).is_file()), None)
        if found is None:
            raise Unavailable(
                f"{' / '.join(choices)} not in {root}: the sdist has no tests; set "
                "OPENAI_AGENTS_SRC to a checkout of openai/openai-agents-python"
            )
        files.append(found)
    return root, files


def obtain_adk(work: Path, src: str | None, ref: str) -> Path:
    """A directory holding ``tests/unittests/sessions/`` of google/adk-python."""
    if src is None:
        target = work / "adk-python"
        tag = f"v{_version('google-adk')}"
        done = _run(
            ["git", "clone", "--depth", "1", "--branch", tag,
             "https://github.com/google/adk-python", str(target)],
            timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise Unavailable(
                f"git clone google/adk-python {tag} failed ({done.stderr.strip()[-300:]}); "
                "set ADK_PYTHON_SRC to a checkout (a work tree or a bare git directory)"
            )
        return target
    root = Path(src)
    if (root / ADK_DIR).is_dir():
        return root
    target = work / "adk-python"  # a bare git directory: read the files at ``ref``
    for name in (*ADK_FILES, "__init__.py", "conftest.py"):
        path = f"{ADK_DIR}/{name}"
        shown = _run(["git", f"--git-dir={root}", "show", f"{ref}:{path}"], timeout=60)
        if shown.returncode == 0:
            (target / ADK_DIR).mkdir(parents=True, exist_ok=True)
            (target / path).write_text(shown.stdout)
    for extra in ("pyproject.toml", "tests/unittests/conftest.py"):
        shown = _run(["git", f"--git-dir={root}", "show", f"{ref}:{extra}"], timeout=60)
        if shown.returncode == 0:
            (target / extra).parent.mkdir(parents=True, exist_ok=True)
            (target / extra).write_text(shown.stdout)
    if not (target / ADK_DIR / "test_session_service.py").is_file():
        raise Unavailable(f"{root} has no {ADK_DIR}/test_session_service.py at {ref}")
    return target


# -- running ---------------------------------------------------------------------------------


@dataclass
class Suite:
    """One framework's patched test files, ready to run."""

    name: str
    root: Path
    files: list[str]
    ini: dict[str, object]
    not_applicable: dict[str, str] = field(default_factory=dict)


def _ini_of(pyproject: Path, default: dict[str, object]) -> dict[str, object]:
    if not pyproject.is_file():
        return dict(default)
    options = tomllib.loads(pyproject.read_text()).get("tool", {}).get("pytest", {})
    found = dict(options.get("ini_options", {})) or dict(default)
    found.pop("testpaths", None)
    return found


def _write_ini(path: Path, options: dict[str, object]) -> None:
    lines = ["[pytest]"]
    for key, value in options.items():
        if isinstance(value, list):
            lines.append(f"{key} =")
            lines.extend(f"    {v}" for v in value)
        else:
            lines.append(f"{key} = {value}")
    path.write_text("\n".join(lines) + "\n")


def prepare_agents(work: Path, version: str, src: str | None) -> Suite:
    """Copy the SDK's ``tests/`` tree and patch the four session test files."""
    source, files = obtain_agents(work, version, src)
    root = work / "openai-agents"
    shutil.copytree(source / "tests", root / "tests")
    patches: dict[str, Callable[[str], str]] = {
        files[0]: lambda s: rebind_after_assignment(
            rebind_after_import(s, {"RedisSession": "RedisSession"}),
            "USE_FAKE_REDIS",
            "USE_FAKE_REDIS",
        ),
        files[1]: lambda s: rebind_after_import(s, {"SQLiteSession": "SQLiteSession"}),
        files[2]: lambda s: rebind_after_import(s, {"SQLiteSession": "SQLiteSession"}),
        files[3]: lambda s: rebind_after_import(
            s, {"AdvancedSQLiteSession": "AdvancedSQLiteSession"}
        ),
    }
    for path, patch in patches.items():
        (root / path).write_text(patch((root / path).read_text()))
    return Suite("openai-agents", root, files, _ini_of(source / "pyproject.toml", {}))


def prepare_adk(work: Path, src: str | None, ref: str) -> Suite:
    """Copy ADK's session tests (and the conftest files above them) and patch them."""
    missing = [m for m in ADK_TEST_NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise Unavailable(
            f"ADK's test file imports {', '.join(missing)}: pip install {' '.join(missing)}"
        )
    source = obtain_adk(work, src, ref)
    root = work / "adk"
    target = root / ADK_DIR
    target.mkdir(parents=True)
    for part in ("tests", "tests/unittests"):
        for name in ("__init__.py", "conftest.py"):
            if (source / part / name).is_file():
                shutil.copy(source / part / name, root / part / name)
            elif name == "__init__.py":
                (root / part / name).touch()
    for name in (*ADK_FILES, "__init__.py", "conftest.py"):
        if (source / ADK_DIR / name).is_file():
            shutil.copy(source / ADK_DIR / name, target / name)
    tests = (target / "test_session_service.py").read_text()
    (target / "test_session_service.py").write_text(patch_adk_tests(tests))
    if (target / "_conformance.py").is_file():
        conformance = (target / "_conformance.py").read_text()
        (target / "_conformance.py").write_text(patch_conformance(conformance))
    reached = set(applies_to_service(tests))
    own = "constructs one of ADK's own services, never the service under test"
    skipped = {
        f"test_session_service::{node.name}": own
        for node in ast.parse(tests).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test")
        and node.name not in reached
    }
    ini = _ini_of(source / "pyproject.toml", ADK_DEFAULT_INI)
    return Suite("adk", root, [f"{ADK_DIR}/test_session_service.py"], ini, skipped)


def run_suite(suite: Suite, url: str, timeout: float, per_test: float) -> dict[str, str]:
    """Run ``suite`` on ``url``; test id -> outcome."""
    _write_ini(suite.root / "pytest.ini", suite.ini)
    report = suite.root / f"junit-{uuid.uuid4().hex[:6]}.xml"
    env = {
        **os.environ,
        "RS_SUITE_URL": url,
        "RS_SUITE_RUN": f"fws{uuid.uuid4().hex[:8]}",
        "RS_SUITE_NOT_APPLICABLE": json.dumps(suite.not_applicable),
        # this checkout's redis_session (after the suite's root: both have a ``tests`` package)
        "PYTHONPATH": os.pathsep.join([str(TOOLS), str(suite.root), str(TOOLS.parent)]),
    }
    cmd = [
        sys.executable, "-m", "pytest", *suite.files, "-c", str(suite.root / "pytest.ini"),
        "--rootdir", str(suite.root), "-p", SHIMS, "-p", "no:cacheprovider",
        f"--junitxml={report}", f"--timeout={per_test}", "-q", "-rN",
    ]  # fmt: skip
    try:
        done = _run(cmd, timeout=timeout, cwd=suite.root, env=env)
    except subprocess.TimeoutExpired:
        return {f"{suite.name}: (the whole run)": "TIMEOUT"}
    if not report.is_file():
        tail = (done.stdout + done.stderr)[-2000:]
        return {f"{suite.name}: (collection)": f"ERROR\n{tail}"}
    return {f"{suite.name}: {k}": v for k, v in parse_junit(report).items()}


def not_for_installed_adk(suite: Suite, timeout: float, per_test: float) -> dict[str, str]:
    """The tests of ``suite`` that fail on the installed google-adk's own
    ``InMemorySessionService`` (a reference run): written for another ADK release (an older
    copy of the file expects what the installed ADK no longer does), so they do not apply.
    Test ``module::name`` (parameters dropped) -> the reason.
    """
    version = _version("google-adk")
    found: dict[str, str] = {}
    for test, outcome in run_suite(suite, REFERENCE, timeout, per_test).items():
        if outcome.split("\n")[0] in BAD:
            name = test.split(": ", 1)[-1].split("[")[0]
            found[name] = (
                f"fails on google-adk {version}'s own InMemorySessionService too "
                f"({_first_line(outcome.partition(chr(10))[2])}): written for another ADK release"
            )
    return found


def parse_junit(path: Path) -> dict[str, str]:
    """Test id (``file::name[params]``) -> ``pass`` / ``FAIL`` / ``ERROR`` / ``skip`` /
    ``xfail`` / ``XPASS``, from a pytest JUnit XML report.
    """
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).iter("testcase"):
        module = (case.get("classname") or "").split(".")[-1]
        test_id = f"{module}::{case.get('name')}"
        kinds = {child.tag: child for child in case}
        if "error" in kinds:
            outcome = f"ERROR\n{_first_line(kinds['error'].get('message'))}"
        elif "failure" in kinds:
            message = kinds["failure"].get("message") or ""
            outcome = "XPASS" if "XPASS(strict)" in message else f"FAIL\n{_first_line(message)}"
        elif "skipped" in kinds:
            outcome = "xfail" if kinds["skipped"].get("type") == "pytest.xfail" else "skip"
        else:
            outcome = "pass"
        outcomes.setdefault(test_id, outcome)
    return outcomes


def _first_line(message: str | None) -> str:
    return (message or "").strip().split("\n")[0][:240]


# -- reporting -------------------------------------------------------------------------------

BAD = ("FAIL", "ERROR", "XPASS", "TIMEOUT")


def table(results: dict[str, dict[str, str]], previous: dict[str, dict[str, str]]) -> str:
    """A plain-text table: a row per test, a column per backend."""
    backends = list(results)
    tests = sorted({t for r in results.values() for t in r})

    def cell(backend: str, test: str) -> str:
        now = results[backend].get(test, "-").split("\n")[0]
        was = previous.get(backend, {}).get(test)
        was = None if was is None else was.split("\n")[0]
        return now if was is None or was == now else f"{now} (was {was})"

    rows = [[t, *(cell(b, t) for b in backends)] for t in tests]
    head = ["test", *backends]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    lines.append("")
    for backend in backends:
        counts: dict[str, int] = {}
        for outcome in results[backend].values():
            key = outcome.split("\n")[0]
            counts[key] = counts.get(key, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        lines.append(f"{backend}: {summary}")
    for backend in backends:
        bad = [(t, o) for t, o in sorted(results[backend].items()) if o.split("\n")[0] in BAD]
        if bad:
            lines.extend(["", f"why, on {backend}:"])
            lines.extend(f"  {t}: {o.replace(chr(10), ' - ')}" for t, o in bad)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Obtain, patch and run the suites; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=("adk", "openai-agents", "all"), default="all")
    parser.add_argument("--backend", action="append", help="memory:// or a Redis URL")
    parser.add_argument("--agents-version", default=None)
    parser.add_argument("--agents-src", default=os.environ.get("OPENAI_AGENTS_SRC"))
    parser.add_argument("--adk-src", default=os.environ.get("ADK_PYTHON_SRC"))
    parser.add_argument("--adk-ref", default=os.environ.get("ADK_PYTHON_REF", "HEAD"))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per pytest run")
    parser.add_argument("--per-test-timeout", type=float, default=60)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--compare", type=Path, help="results of an earlier --json run")
    args = parser.parse_args(argv)
    backends = args.backend or ["memory://", DEFAULT_REDIS]
    work = Path(tempfile.mkdtemp(prefix="rs-framework-suites-"))
    suites: list[Suite] = []
    problems: list[str] = []
    try:
        if args.suite in ("openai-agents", "all"):
            try:
                version = args.agents_version or _version("openai-agents")
                suites.append(prepare_agents(work, version, args.agents_src))
            except Unavailable as exc:
                problems.append(f"openai-agents: {exc}")
        if args.suite in ("adk", "all"):
            try:
                suites.append(prepare_adk(work, args.adk_src, args.adk_ref))
            except Unavailable as exc:
                problems.append(f"adk: {exc}")
        results: dict[str, dict[str, str]] = {b: {} for b in backends}
        for suite in suites:
            if suite.name == "adk":
                apart = not_for_installed_adk(suite, args.timeout, args.per_test_timeout)
                suite.not_applicable.update(apart)
                for name in sorted(apart):
                    print(f"n/a: {name}: {apart[name]}", file=sys.stderr)
            for backend in backends:
                results[backend].update(
                    run_suite(suite, backend, args.timeout, args.per_test_timeout)
                )
        previous = json.loads(args.compare.read_text()) if args.compare else {}
        print(table(results, previous))
        for problem in problems:
            print(f"not run: {problem}", file=sys.stderr)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        bad = any(o.split("\n")[0] in BAD for r in results.values() for o in r.values())
        return 1 if bad or problems else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
