"""The OpenAI Agents SDK's own tests of ``AdvancedSQLiteSession`` (its branching, turn and usage
methods), run against ``RedisAgentSession`` on ``memory://``, on a real Redis and on a Redis
Cluster.

The installed openai-agents release's sdist on the package index ships its ``tests/`` tree: it
is obtained here at test time (``pip download``, bounded), kept in pytest's cache directory
(``.pytest_cache/d/openai-agents-sdist/<version>``) for the next run, and never stored in this
repository. ``tools/run_framework_suites.py`` patches its
``tests/extensions/memory/test_advanced_sqlite_session.py`` in one place only (where the file
builds an ``AdvancedSQLiteSession``, ``tools/framework_shims.py`` builds ours) and runs it in a
pytest of its own; the tests that do not apply (SQLite's own rows, files and locks, the
session's worker threads, a case that fails on the SDK's own session with the installed openai)
are skipped there, each with its reason.

Without the package index the tests are skipped with the reason, except under ``CI=true``, where
that is a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import IN_CI
from tests.support.cluster import Cluster
from tests.support.servers import Server

ROOT = Path(__file__).resolve().parents[2]
ADVANCED = "tests/extensions/memory/test_advanced_sqlite_session.py"
DOWNLOAD_TIMEOUT = 300.0
"""Seconds the download of the sdist may take in all (pip's own network timeout is 30 s)."""
BRANCHING = frozenset(
    {
        "test_branching_functionality",
        "test_create_branch_rejects_blank_name",
        "test_create_branch_rejects_populated_branch_id",
        "test_generated_branch_ids_do_not_merge_within_the_same_second",
        "test_branch_ids_remain_reserved_after_delete_and_clear",
        "test_create_branch_from_content",
        "test_create_branch_from_content_uses_decoded_match",
        "test_branch_error_handling",
        "test_delete_branch_preserves_exact_branch_id",
        "test_branch_deletion_with_force",
        "test_failed_force_delete_keeps_current_branch",
        "test_get_items_with_parameters",
        "test_external_clear_resets_stale_branch_before_next_write",
        "test_external_clear_resets_stale_branch_before_pop",
        "test_post_clear_switch_synchronizes_generation_before_next_write",
        "test_get_conversation_turns",
        "test_get_conversation_turns_with_list_content",
        "test_find_turns_by_content",
        "test_find_turns_by_content_matches_literal_text",
        "test_find_turns_by_content_with_escaped_text_parts",
        "test_find_turns_by_content_filters_session_and_branch",
        "test_find_turns_by_content_with_list_content",
        "test_message_structure_tracking",
        "test_conversation_structure_with_multiple_turns",
        "test_tool_usage_tracking",
        "test_tool_usage_tracks_shell_and_patch_calls",
        "test_tool_usage_tracks_runner_shell_and_patch_calls_by_branch",
        "test_tool_usage_tracking_preserves_namespaces_and_tool_search",
        "test_tool_usage_tracking_counts_tool_search_output_without_matching_call",
        "test_tool_usage_tracking_uses_bare_name_for_deferred_top_level_calls",
        "test_tool_usage_tracking_collapses_reserved_same_name_namespace_shape",
        "test_advanced_tool_name_extraction",
        "test_tool_name_extraction",
        "test_tool_execution_integration",
    }
)
"""The SDK's tests of the branching and turn methods: each must pass (every case of it)."""
USAGE = frozenset(
    {
        "test_usage_tracking_storage",
        "test_runner_integration_with_usage_tracking",
        "test_empty_session_operations",
        "test_json_serialization_edge_cases",
        "test_error_handling_in_usage_tracking",
        "test_branch_usage_tracking",
        "test_branch_specific_operations",
        "test_output_tokens_details_persisted_when_input_details_missing",
        "test_store_run_usage_after_reopening_cleared_session",
        "test_external_clear_resets_stale_branch_before_default_reads",
    }
)
"""The SDK's tests of the usage methods (``store_run_usage``, ``get_session_usage``,
``get_turn_usage``) that apply: each must pass (every case of it not skipped by name and case
in ``NOT_APPLICABLE``)."""


def _tool(name: str) -> ModuleType:
    """A module of ``tools/`` (not a package), loaded from its file."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses looks its module up while the class is made
    spec.loader.exec_module(module)
    return module


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and the SDK's tests cannot be had: {reason}", pytrace=False)
    pytest.skip(reason)


def _cache_dir(config: pytest.Config) -> Path:
    """``openai-agents-sdist`` in pytest's cache directory (where the cache provider keeps its
    directories; the project's ``addopts`` turn the provider itself off)."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("openai-agents-sdist"))
    return config.rootpath / ".pytest_cache" / "d" / "openai-agents-sdist"


def _download(version: str, into: Path) -> Path:
    """The sdist of openai-agents ``version`` unpacked under ``into``: its root directory."""
    archive_dir = into / "download"
    cmd = [
        sys.executable, "-m", "pip", "download", f"openai-agents=={version}", "--no-deps",
        "--no-binary", ":all:", "--timeout", "30", "--retries", "2", "-d", str(archive_dir),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        _unavailable(f"pip download openai-agents=={version}: over {DOWNLOAD_TIMEOUT:.0f} s")
    archives = list(archive_dir.glob("openai_agents-*.tar.gz"))
    if done.returncode != 0 or not archives:
        said = " | ".join(done.stderr.strip().splitlines()[-2:])[-400:]
        _unavailable(f"pip download openai-agents=={version} failed: {said}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(into / "sdist", filter="data")
    (root,) = (into / "sdist").iterdir()
    if not (root / ADVANCED).is_file():
        _unavailable(f"the sdist of openai-agents {version} has no {ADVANCED}")
    return root


@pytest.fixture(scope="session")
def sdk_source(request: pytest.FixtureRequest) -> Path:
    """The unpacked sdist of the installed openai-agents, from the cache or downloaded into it
    (two workers downloading at once: the first to finish is kept)."""
    version = importlib.metadata.version("openai-agents")
    cache = _cache_dir(request.config)
    kept = cache / version
    if not (kept / ADVANCED).is_file():
        cache.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=cache, prefix=f".{version}-"))
        try:
            root = _download(version, work)
            with contextlib.suppress(OSError):  # another worker stored it first
                root.rename(kept)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return kept


def _run(source: Path, url: str, work: Path) -> dict[str, str]:
    """``{test id: outcome}`` of the patched file on ``url``."""
    suites = _tool("run_framework_suites")
    version = importlib.metadata.version("openai-agents")
    suite = suites.prepare_agents(work, version, str(source))
    suite = dataclasses.replace(suite, files=[ADVANCED])
    results: dict[str, str] = suites.run_suite(suite, url, timeout=600.0, per_test=60.0)
    return {test.split(": ", 1)[-1]: outcome for test, outcome in results.items()}


def _check(outcomes: dict[str, str]) -> None:
    """Every test passed or was skipped as not applicable; every branching test passed."""
    skipped = _not_applicable(_tool("framework_shims"))
    first = {test: outcome.split("\n")[0] for test, outcome in outcomes.items()}

    def applies(test: str) -> bool:
        return _name(test) not in skipped and _case(test) not in skipped

    bad = {
        test: outcome
        for test, outcome in outcomes.items()
        if first[test] != "pass" and not (first[test] == "skip" and not applies(test))
    }
    assert bad == {}, "\n".join(f"{t}: {o}" for t, o in sorted(bad.items()))
    passed = {_name(t) for t, outcome in first.items() if outcome == "pass"}
    assert BRANCHING | USAGE <= passed, sorted((BRANCHING | USAGE) - passed)
    counts = {o: list(first.values()).count(o) for o in set(first.values())}
    print(f"the SDK's AdvancedSQLiteSession tests on RedisAgentSession: {counts}")


def _name(test: str) -> str:
    return _case(test).split("[")[0]


def _case(test: str) -> str:
    """``name[params]`` of a test id."""
    return test.split("::")[-1]


def _not_applicable(shims: ModuleType) -> set[str]:
    return {where.split("::")[-1] for where in shims.NOT_APPLICABLE if shims.ADVANCED in where}


@pytest.mark.slow
@pytest.mark.fake
@pytest.mark.timeout(900)
def test_sdk_advanced_session_tests_pass_on_memory(sdk_source: Path, tmp_path: Path) -> None:
    _check(_run(sdk_source, "memory://", tmp_path))


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(900)
def test_sdk_advanced_session_tests_pass_on_a_real_redis(
    sdk_source: Path, redis_server: Server, tmp_path: Path
) -> None:
    _check(_run(sdk_source, redis_server.url, tmp_path))


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_sdk_advanced_session_tests_pass_on_a_cluster(
    sdk_source: Path, cluster_server: Cluster, tmp_path: Path
) -> None:
    url = f"redis+cluster://127.0.0.1:{cluster_server.ports[0]}/0"
    _check(_run(sdk_source, url, tmp_path))


def test_every_not_applicable_name_is_a_test_of_the_file(sdk_source: Path) -> None:
    """The skip list names tests of the file, so that a renamed test cannot hide behind it."""
    text = (sdk_source / ADVANCED).read_text(encoding="utf-8")
    names = {n.split("[")[0] for n in _not_applicable(_tool("framework_shims"))}
    missing = [n for n in names if f"def {n}(" not in text]
    assert missing == []


def test_the_not_applicable_list_leaves_the_branching_and_usage_tests() -> None:
    assert (BRANCHING | USAGE).isdisjoint(_not_applicable(_tool("framework_shims")))
