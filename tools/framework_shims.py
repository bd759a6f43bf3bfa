"""What ``tools/run_framework_suites.py`` puts in place of the frameworks' own stores.

The frameworks' test files are patched in one way only: where they construct the session
service / session under test, they call into this module instead, which builds
:class:`~redis_session.integrations.adk.RedisSessionService` or
:class:`~redis_session.integrations.openai_agents.RedisAgentSession` over an
:class:`~redis_session.AsyncRedisStore` on the backend of the run (``RS_SUITE_URL``:
``memory://`` or a real Redis URL). Everything else in their files runs as written.

It is also a pytest plugin (``-p framework_shims``): each test gets its own key prefix (a fresh
``memory://`` server, or a fresh prefix on the shared real Redis, whose keys are deleted at
the end of the run, never with FLUSHALL), tests that do not exercise the service under test
are skipped with the reason recorded in :data:`NOT_APPLICABLE`, and the documented
differences of :data:`DOCUMENTED` are expected failures (``xfail(strict=True)``).

Shapes mirrored from the frameworks' constructors:

- ADK: ``get_session_service(service_type, tmp_path)`` and the ``_conformance`` registry both
  give a ``RedisSessionService`` (``from_url`` when the adapter has it, so that
  ``async with service`` and ``close()`` behave as the database service's do).
- OpenAI Agents ``RedisSession(session_id, *, redis_client, key_prefix, ttl,
  session_settings)`` / ``RedisSession.from_url(session_id, *, url, ...)``: a
  ``RedisAgentSession`` with key prefix ``key_prefix + ":"``; the store gets ``ttl``, and a
  client made with ``decode_responses=True`` gives a store over such a client (which the store
  refuses: a documented difference). The given client itself is not used.
- OpenAI Agents ``SQLiteSession(session_id, db_path, sessions_table, messages_table,
  session_settings)``: a ``RedisAgentSession`` whose key prefix is private to the instance for
  ``":memory:"`` and shared by every instance on the same file and tables otherwise, as the
  SQLite database would be; ``close()`` is synchronous there, as SQLite's is.
- OpenAI Agents ``AdvancedSQLiteSession(*, session_id, db_path, create_tables, logger,
  session_settings, **kwargs)``: the same, its branching and turn methods being
  ``RedisAgentSession``'s own; the tests' ``session._current_branch_id`` reads
  ``current_branch_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_session import AsyncRedisStore

URL = os.environ.get("RS_SUITE_URL", "memory://")
RUN = os.environ.get("RS_SUITE_RUN") or f"fws{uuid.uuid4().hex[:8]}"
"""Begins every key prefix (and ``memory://`` server name) of this run."""

DOCUMENTED: dict[str, str] = {
    "test_append_different_events_not_deduplicated": (
        "documented difference: an event whose id the session already holds is skipped "
        "(the store's retry safety: redis-py re-sends a script after a lost reply)"
    ),
    "test_decode_responses_client_compatibility": (
        "documented difference: clients with decode_responses=True are refused"
    ),
    "test_real_redis_decode_responses_compatibility": (
        "documented difference: clients with decode_responses=True are refused"
    ),
}
"""Test name (without parameters) -> the documented difference it shows."""

_REDIS_INTERNALS = (
    "drives the SDK RedisSession's own client, WATCH/MULTI pipeline, connection pool or key "
    "layout (agents:session:<id>:messages, a counter key), which RedisAgentSession has not: "
    "each of its writes is one store script"
)
_REDIS_CLUSTER = "RedisSession's refusal of RedisCluster transactions (the store runs on clusters)"
_REDIS_CORRUPT = (
    "writes junk into RedisSession's key layout; the store raises CorruptData for corrupt "
    "messages instead of skipping them (tests/contract/test_bad_data.py)"
)
_REDIS_COMPACTION = (
    "watches RedisSession's private atomic-replacement hook through its pipeline; "
    "RedisAgentSession has no such hook (compaction falls back to clear_session + add_items)"
)
_SQLITE = "SQLiteSession's own connections, file locks, rows or transactions"
_SQLITE_CLOSE = (
    "SQLiteSession.close() is synchronous and ends its database; RedisAgentSession.close() is "
    "the RedisSession coroutine (test_redis_session's close tests)"
)
_INTERNALS_TESTS = (
    "test_colliding_session_clear_preserves_existing_session",
    "test_colliding_counter_rejects_ttl_write_before_side_effects",
    "test_clear_rechecks_key_types_after_concurrent_replacement",
    "test_released_redis_layout_remains_usable",
    "test_mutation_cancellation_waits_for_authoritative_outcome",
    "test_get_next_id_method",
    "test_add_items_preserves_created_at_metadata",
    "test_ping_connection_failure",
    "test_close_method_coverage",
    "test_redis_session_failed_cleanup_is_terminal_and_retried",
    "test_redis_session_cancelled_cleanup_is_terminal_and_retried",
    "test_add_items_applies_ttl_in_the_write_transaction",
    "test_add_items_rejects_unrepresentable_ttl_before_writing",
    "test_add_items_rejects_wrong_metadata_key_type_before_writing",
    "test_add_items_uses_server_absolute_expiration_after_serialization",
    "test_add_items_refreshes_server_timestamps_after_watch_retry",
    "test_ambiguous_exec_watch_error_is_not_retried",
    "test_redis81_standard_pool_checkout_records_native_observability",
    "test_redis8_blocking_pool_checkout_preserves_native_timing",
    "test_cancelled_watch_releases_single_connection_pool",
    "test_cancelled_in_flight_watch_command_reconnects_before_pool_reuse",
    "test_cancelled_connection_acquisition_is_discarded_before_release",
    "test_post_commit_cancellation_propagates_after_cleanup",
    "test_post_commit_response_callback_failure_does_not_retry",
    "test_successful_batch_response_with_sibling_error_does_not_retry",
    "test_post_commit_reset_self_cancellation_does_not_cancel_caller",
    "test_post_commit_reset_failure_detaches_without_release_listener",
    "test_reconnect_required_release_detaches_without_listener_reborrow",
    "test_reconnect_marked_inside_release_failure_is_detached",
    "test_post_commit_release_listener_failure_does_not_retry",
    "test_pre_exec_close_failure_is_quarantined",
    "test_pre_exec_cancellation_skips_pipeline_reset",
    "test_blocking_pool_cancellation_completion_owns_release",
    "test_ordinary_pool_cancellation_completion_owns_release",
    "test_transparent_overridden_pool_release_is_supported",
    "test_release_failure_after_reborrow_preserves_new_borrower",
    "test_post_commit_disconnect_failure_is_not_retryable",
    "test_post_commit_detached_close_failure_is_quarantined",
    "test_blocking_pool_listener_failure_notifies_waiter",
    "test_blocking_pool_detached_disconnect_notifies_waiter",
    "test_post_commit_internal_reset_failure_does_not_report_write_failure",
    "test_redis_session_operation_waiting_behind_close_raises",
)
_SQLITE_TESTS = (
    "test_sqlite_session_close_closes_worker_thread_connections",
    "test_sqlite_session_reaps_connections_from_exited_worker_threads",
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation",
    "test_sqlite_session_keeps_connections_of_live_worker_threads",
    "test_sqlite_session_pop_item_skips_corrupt_most_recent",
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows",
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows",
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows",
    "test_sqlite_session_file_lock_is_shared_across_instances",
    "test_sqlite_session_failed_add_items_releases_write_lock",
    "test_sqlite_session_failed_clear_session_rolls_back",
    "test_sqlite_session_failed_pop_item_releases_write_lock",
    "test_sqlite_session_rollback_failure_evicts_connection",
    "test_sqlite_session_close_retries_quarantined_connection",
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome",
)
_ADVANCED_SQLITE = (
    "AdvancedSQLiteSession's own SQLite rows, tables, connections, transactions or files "
    "(shared by processes); RedisAgentSession keeps each branch as a store session"
)
_ADVANCED_USAGE_LOGGER = (
    "patches AdvancedSQLiteSession's private _update_turn_usage_internal and reads the SDK's "
    "diagnostic log record; RedisAgentSession logs the same message through its own logger"
)
_ADVANCED_THREADS = (
    "pauses AdvancedSQLiteSession's worker threads or private ordering hooks (asyncio.to_thread, "
    "_run_ordered_turn_operation, _commit_branch_pointer, _branch_state) to force an "
    "interleaving; RedisAgentSession runs no worker thread"
)
_ADVANCED_LOGGER = (
    "AdvancedSQLiteSession's own logger calls (the logger= argument); RedisAgentSession logs "
    "nothing: the store's branch event records a branch"
)
_ADVANCED_SQLITE_TESTS = (
    "test_advanced_session_respects_custom_table_names",
    "test_add_items_rolls_back_messages_when_structure_metadata_fails",
    "test_add_items_can_retry_after_structure_metadata_failure",
    "test_add_items_failure_preserves_existing_history",
    "test_add_items_rolls_back_partial_structure_metadata_write",
    "test_add_items_rollback_failure_invalidates_connection",
    "test_structure_initialization_failure_invalidates_connection",
    "test_post_commit_cancellation_propagates_after_known_mutation_outcome",
    "test_auxiliary_mutation_cancellation_waits_for_commit",
    "test_tool_usage_reads_legacy_shell_and_patch_names",
    "test_failed_branch_reservation_rolls_back_and_allows_retry",
    "test_branch_reservations_migrate_existing_populated_branches",
    "test_legacy_branch_ids_are_backfilled_before_destructive_operations",
    "test_legacy_destructive_noops_leave_database_unlocked",
    "test_branch_allocation_is_serialized_across_processes",
    "test_delete_branch_removes_branch_only_messages",
    "test_delete_branch_keeps_messages_still_referenced_by_another_branch",
    "test_orphan_cleanup_uses_set_based_delete_for_many_messages",
    "test_get_items_limit_skips_corrupt_newest_rows",
    "test_concurrent_add_items_preserves_message_structure_for_file_db",
    "test_pop_item_removes_its_structure_row",
    "test_pop_item_respects_current_branch_and_keeps_shared_messages",
    "test_pop_item_deletes_shared_copied_message_only_when_unreferenced",
    "test_pop_item_claim_is_unique_across_processes",
    "test_clear_before_branch_transaction_prevents_stale_reservation",
    "test_clear_session_resets_current_branch_to_main",
    "test_default_read_does_not_initialize_clear_generation_table",
    "test_switch_validation_cancellation_waits_for_generation_commit",
    "test_pop_item_rolls_back_on_failure_after_earlier_delete",
    "test_clear_session_rolls_back_on_failure_after_earlier_delete",
    "test_structure_tables_reject_a_second_base_table_pair",
    "test_structure_tables_reject_changed_sessions_with_shared_messages",
    "test_structure_tables_reject_changed_messages_with_shared_sessions",
    "test_structure_tables_accept_equivalent_identifier_casing",
    "test_structure_tables_accept_quoted_custom_session_table",
    "test_identifier_resolution_leaves_connection_authorized",
    "test_structure_tables_reject_distinct_non_ascii_identifiers",
    "test_no_create_session_rejects_a_database_without_an_owner",
    "test_no_create_session_rejects_owner_metadata_without_base_tables",
    "test_structure_tables_reject_an_ownerless_layout",
    "test_structure_tables_reject_malformed_owner_layouts",
    "test_structure_tables_accept_equivalent_child_column_casing",
    "test_concurrent_structure_table_claims_leave_one_coherent_owner",
    # usage: counts turn_usage rows, or holds SQLite's lock or a trigger on the table
    "test_failed_usage_write_rolls_back_cached_connection",
    "test_clear_session_removes_structure_and_usage_metadata",
    "test_pop_item_removes_turn_usage_only_when_turn_emptied",
    "test_store_run_usage_waits_for_database_lock_off_event_loop",
    "test_store_run_usage_skips_when_current_branch_has_no_turn",
)
_ADVANCED_THREAD_TESTS = (
    "test_pop_item_uses_branch_snapshot_when_branch_switches_concurrently",
    "test_stale_switch_after_clear_does_not_repoint_to_deleted_branch",
    "test_stale_create_branch_after_clear_does_not_repoint",
    "test_add_captures_coherent_branch_after_clear_publication",
    # usage: parks store_run_usage's capture or write in a worker thread (_gate_worker)
    "test_store_run_usage_cancellation_during_capture_waits_for_commit",
    "test_store_run_usage_keeps_target_while_capture_is_waiting",
    "test_store_run_usage_keeps_turn_when_history_changes_during_capture",
    "test_queued_add_keeps_selected_branch",
    "test_queued_append_cannot_resurrect_deleted_branch",
    "test_queued_turn_mutation_releases_later_usage_capture",
    "test_turn_ordering_survives_reuse_on_another_event_loop",
    "test_stale_store_run_usage_skipped_when_turn_removed_by_pop",
    "test_stale_store_run_usage_not_recorded_against_reused_turn_number",
    "test_store_run_usage_survives_unrelated_branch_deletion",
)
ADVANCED = "test_advanced_sqlite_session"
"""The module name of the SDK's ``AdvancedSQLiteSession`` tests."""
_STATIC_NOT_APPLICABLE: dict[str, str] = {
    **dict.fromkeys(
        [
            "test_redis_session::test_redis_session_rejects_cluster_transactions_before_pipeline",
            "test_redis_session::test_redis_cluster_reads_and_subclass_writes",
        ],
        _REDIS_CLUSTER,
    ),
    **dict.fromkeys(
        [
            "test_redis_session::test_get_items_limit_skips_corrupt_newest_messages",
            "test_redis_session::test_corrupted_data_handling",
        ],
        _REDIS_CORRUPT,
    ),
    **dict.fromkeys(
        [
            "test_redis_session::test_compaction_replaces_redis_history_atomically",
            "test_redis_session::test_atomic_replacement_preserves_clear_add_metadata",
            "test_redis_session::test_atomic_replacement_serializes_before_deleting_history",
            "test_redis_session::test_compaction_subclass_retains_overridden_storage_methods",
            "test_redis_session::test_compaction_cancel_after_redis_commit_invalidates_cached_history",
            "test_redis_session::test_atomic_replacement_rejects_colliding_counter_key",
            "test_redis_session::test_cancelled_redis_compaction_handoff_remains_resumable",
        ],
        _REDIS_COMPACTION,
    ),
    **{f"test_redis_session::{name}": _REDIS_INTERNALS for name in _INTERNALS_TESTS},
    **{f"test_session::{name}": _SQLITE for name in _SQLITE_TESTS},
    "test_session::test_sqlite_session_closed_rejects_empty_add_items": _SQLITE_CLOSE,
    **{f"{ADVANCED}::{name}": _ADVANCED_SQLITE for name in _ADVANCED_SQLITE_TESTS},
    **{f"{ADVANCED}::{name}": _ADVANCED_THREADS for name in _ADVANCED_THREAD_TESTS},
    f"{ADVANCED}::test_create_branch_logging_respects_model_data_policy": _ADVANCED_LOGGER,
    f"{ADVANCED}::test_usage_tracking_failure_identity_follows_model_data_policy": (
        _ADVANCED_USAGE_LOGGER
    ),
    f"{ADVANCED}::test_advanced_sqlite_session_closed_rejects_empty_add_items": _SQLITE_CLOSE,
}


def _details_outgrew_the_sdks_tests() -> bool:
    """Whether the installed openai's ``InputTokensDetails`` has fields that the SDK's tests
    do not expect (openai 3.x added ``cache_write_tokens_details``): ``AdvancedSQLiteSession``
    stores the details' ``__dict__``, so its own test then fails the same way.
    """
    try:
        from openai.types.responses.response_usage import InputTokensDetails
    except ImportError:
        return False
    return "cache_write_tokens_details" in InputTokensDetails.model_fields


_INSTALLED_NOT_APPLICABLE: dict[str, str] = (
    {
        f"{ADVANCED}::test_external_clear_resets_stale_branch_before_default_reads[usage]": (
            "expects input_tokens_details without the installed openai's "
            "cache_write_tokens_details: fails on the SDK's own AdvancedSQLiteSession too "
            "(both store json.dumps(details.__dict__))"
        )
    }
    if _details_outgrew_the_sdks_tests()
    else {}
)
"""Cases (``module::name[params]``) that fail on the SDK's own session with the installed
packages."""


NOT_APPLICABLE: dict[str, str] = {
    **_STATIC_NOT_APPLICABLE,
    **_INSTALLED_NOT_APPLICABLE,
    **json.loads(os.environ.get("RS_SUITE_NOT_APPLICABLE") or "{}"),
}
"""Test (``module::name``, without parameters; or one case, ``module::name[params]``) -> why it
does not exercise the service under test. The OpenAI Agents ones are listed here, by reading
each test; the ADK ones the runner finds by reading the file (a test that neither takes
``session_service`` nor calls ``get_session_service`` constructs one of ADK's own
services)."""


_counter = itertools.count()
_current = f"{RUN}-setup"
_stores: list[AsyncRedisStore] = []


def _memory() -> bool:
    return URL.startswith("memory:")


USE_FAKE_REDIS = _memory()
"""What ``test_redis_session.py``'s own switch between its two constructions becomes."""


def new_store(**options: Any) -> AsyncRedisStore:
    """A store on the run's backend under the current test's prefix."""
    store = AsyncRedisStore.from_url(_url(), prefix=f"{_current}:", **options)
    _stores.append(store)
    return store


def _url() -> str:
    return f"memory://{_current}" if _memory() else URL


def _decoding_store(**options: Any) -> AsyncRedisStore:
    """A store over a client that decodes replies, as a caller with such a client would make."""
    import fakeredis
    import redis.asyncio

    client: Any
    if _memory():
        client = fakeredis.FakeAsyncRedis(decode_responses=True)
    else:
        client = redis.asyncio.Redis.from_url(URL, decode_responses=True)
    return AsyncRedisStore(client, prefix=f"{_current}:", **options)


# -- Google ADK ------------------------------------------------------------------------------


REFERENCE = "adk-reference"
"""The run's backend when the runner checks which tests apply to the installed google-adk: the
tests get ADK's own ``InMemorySessionService`` instead of ours."""


def adk_service(**options: Any) -> Any:
    """A ``RedisSessionService`` on a new store of the current test; it owns the store (on the
    reference run: ADK's own ``InMemorySessionService``).
    """
    if URL == REFERENCE:
        from google.adk.sessions.in_memory_session_service import InMemorySessionService

        return InMemorySessionService()
    from redis_session.integrations.adk import RedisSessionService

    from_url: Callable[..., Any] | None = getattr(RedisSessionService, "from_url", None)
    if from_url is not None:
        service = from_url(_url(), prefix=f"{_current}:", **options)
        _stores.append(service.store)
        return service
    return RedisSessionService(new_store(**options))


def get_session_service(service_type: Any = None, tmp_path: Any = None) -> Any:
    """Stands for the test file's ``get_session_service``: every type gives ours."""
    del service_type, tmp_path
    return adk_service()


@contextlib.asynccontextmanager
async def _adk_make(tmp_path: Path) -> AsyncIterator[Any]:
    del tmp_path
    service = adk_service()
    try:
        yield service
    finally:
        close = getattr(service, "close", None)
        if close is not None:
            await close()
        elif hasattr(service, "store"):
            await service.store.close()


def adk_backends() -> list[tuple[str, Callable[[Path], Any], dict[str, str]]]:
    """``(name, make, divergences)`` of the ``_conformance`` registry: ours only."""
    return [("redis_session", _adk_make, {})]


def adk_parametrized_service() -> Any:
    """Stands for a service a test file builds in a ``parametrize`` list (at import time)."""
    global _current
    saved, _current = _current, f"{RUN}-p{next(_counter)}"
    try:
        return adk_service()
    finally:
        _current = saved


# -- OpenAI Agents ---------------------------------------------------------------------------


def _decodes(client: Any) -> bool:
    try:
        return bool(client.get_encoder().decode_responses)
    except Exception:  # a Mock or a client without an encoder
        return False


def _agent_session_class() -> type[Any]:
    from redis_session.integrations.openai_agents import RedisAgentSession

    return RedisAgentSession


def _make_redis_session_shim() -> type[Any]:
    base = _agent_session_class()

    class RedisSessionShim(base):  # type: ignore[misc, valid-type]
        """Built where the test file builds the SDK's ``RedisSession``."""

        def __init__(
            self,
            session_id: str,
            *,
            redis_client: Any = None,
            key_prefix: str = "agents:session",
            ttl: int | None = None,
            session_settings: Any = None,
        ) -> None:
            options: dict[str, Any] = {} if ttl is None else {"ttl": ttl}
            store = _decoding_store(**options) if _decodes(redis_client) else new_store(**options)
            super().__init__(
                session_id, store, key_prefix=f"{key_prefix}:", session_settings=session_settings
            )

        @classmethod
        def from_url(
            cls,
            session_id: str,
            *,
            url: str,
            redis_kwargs: dict[str, Any] | None = None,
            session_settings: Any = None,
            key_prefix: str = "agents:session",
            ttl: int | None = None,
        ) -> Any:
            del url
            if redis_kwargs and redis_kwargs.get("decode_responses"):
                return cls(session_id, key_prefix=key_prefix, ttl=ttl, redis_client=_Decoding())
            owned: Callable[..., Any] | None = getattr(base, "from_url", None)
            if owned is None:  # an adapter without from_url: the store is the harness's
                return cls(
                    session_id, key_prefix=key_prefix, ttl=ttl, session_settings=session_settings
                )
            options: dict[str, Any] = {"prefix": f"{_current}:"}
            if ttl is not None:
                options["ttl"] = ttl
            session = owned(
                session_id,
                url=_url(),
                key_prefix=f"{key_prefix}:",
                session_settings=session_settings,
                **options,
            )
            _stores.append(session.store)
            session.__class__ = cls  # built by our from_url; named as the class it stands for
            return session

    RedisSessionShim.__name__ = RedisSessionShim.__qualname__ = "RedisSession"
    return RedisSessionShim


class _Decoding:
    """Looks like a client made with ``decode_responses=True``."""

    def get_encoder(self) -> Any:
        return redis.Redis(decode_responses=True).get_encoder()


def _make_sqlite_session_shim() -> type[Any]:
    base = _agent_session_class()

    class SQLiteSessionShim(base):  # type: ignore[misc, valid-type]
        """Built where the test file builds the SDK's ``SQLiteSession``."""

        def __init__(
            self,
            session_id: str,
            db_path: str | Path = ":memory:",
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
            session_settings: Any = None,
        ) -> None:
            partition = _partition(db_path, sessions_table, messages_table)
            super().__init__(
                session_id,
                new_store(),
                key_prefix=f"sqlite:{partition}:",
                session_settings=session_settings,
            )

        def close(self) -> None:
            """SQLite's ``close()`` is synchronous; the harness closes the store."""

    SQLiteSessionShim.__name__ = SQLiteSessionShim.__qualname__ = "SQLiteSession"
    return SQLiteSessionShim


def _partition(db_path: str | Path, sessions_table: str, messages_table: str) -> str:
    """A key prefix part: private to the instance for ``":memory:"``, else shared by every
    instance on the same file and tables, as the SQLite database would be.
    """
    if str(db_path) == ":memory:":
        return uuid.uuid4().hex[:12]
    where = f"{Path(db_path).resolve()}\0{sessions_table}\0{messages_table}"
    return hashlib.sha256(where.encode()).hexdigest()[:12]


def _make_advanced_session_shim() -> type[Any]:
    base = _agent_session_class()

    class AdvancedSQLiteSessionShim(base):  # type: ignore[misc, valid-type]
        """Built where the test file builds the SDK's ``AdvancedSQLiteSession``."""

        def __init__(
            self,
            *,
            session_id: str,
            db_path: str | Path = ":memory:",
            create_tables: bool = False,
            logger: Any = None,
            session_settings: Any = None,
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
        ) -> None:
            del create_tables, logger  # no tables; RedisAgentSession logs nothing
            partition = _partition(db_path, sessions_table, messages_table)
            super().__init__(
                session_id,
                new_store(),
                key_prefix=f"advanced:{partition}:",
                session_settings=session_settings,
            )

        @property
        def _current_branch_id(self) -> str:
            """What the tests read: ``AdvancedSQLiteSession``'s private current branch."""
            return str(self.current_branch_id)

        def close(self) -> None:
            """SQLite's ``close()`` is synchronous; the harness closes the store."""

    AdvancedSQLiteSessionShim.__name__ = "AdvancedSQLiteSession"
    AdvancedSQLiteSessionShim.__qualname__ = "AdvancedSQLiteSession"
    return AdvancedSQLiteSessionShim


def __getattr__(name: str) -> Any:
    # built on first use, so that importing this plugin does not import the SDK
    if name == "RedisSession":
        return _make_redis_session_shim()
    if name == "SQLiteSession":
        return _make_sqlite_session_shim()
    if name == "AdvancedSQLiteSession":
        return _make_advanced_session_shim()
    raise AttributeError(name)


# -- pytest plugin ---------------------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark not-applicable tests skipped and documented differences as expected failures."""
    for item in items:
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        where = f"{item.path.stem}::{name}"
        case = f"{item.path.stem}::{item.name}"
        reason = NOT_APPLICABLE.get(case) or NOT_APPLICABLE.get(where) or NOT_APPLICABLE.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"not applicable: {reason}"))
        elif name in DOCUMENTED:
            item.add_marker(pytest.mark.xfail(strict=True, reason=DOCUMENTED[name]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Give the test its own prefix (and ``memory://`` server)."""
    global _current
    _current = f"{RUN}-{next(_counter)}"


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Close the stores the test made (those bound to a loop that is gone are dropped)."""
    while _stores:
        _close(_stores.pop())


def _close(store: AsyncRedisStore) -> None:
    with contextlib.suppress(Exception):
        asyncio.run(asyncio.wait_for(store.close(), timeout=5))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Delete every key this run wrote on the real Redis (by prefix; never FLUSHALL)."""
    if _memory() or URL == REFERENCE:
        return
    client: Any
    if URL.startswith(("redis+cluster://", "rediss+cluster://")):
        from redis.cluster import RedisCluster

        plain = URL.replace("+cluster://", "://", 1)
        client = RedisCluster.from_url(plain, socket_timeout=5)
        scan = client.scan_iter(match=f"{RUN}-*", count=1000, target_nodes=RedisCluster.PRIMARIES)
    else:
        client = redis.Redis.from_url(URL, socket_timeout=5)
        scan = client.scan_iter(match=f"{RUN}-*", count=1000)
    try:
        batch: list[Any] = []
        for key in scan:
            batch.append(key)
            if len(batch) >= 500:
                client.delete(*batch)  # a cluster client splits the keys by slot
                batch.clear()
        if batch:
            client.delete(*batch)
    finally:
        client.close()
