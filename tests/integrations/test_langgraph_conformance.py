"""LangGraph's own conformance suite for checkpointers (``langgraph-checkpoint-conformance``)
on RedisSaver and AsyncRedisSaver, every backend (tests/conftest.py): each base capability
and each extended one the savers implement (all of them) must pass; the report is asserted,
never skipped.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from redis_session.integrations.langgraph import AsyncRedisSaver, RedisSaver
from tests.conftest import FLAVOURS, Backend

COUNTER = itertools.count()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_the_conformance_suite_passes_every_capability(
    backend: Backend, flavour: str
) -> None:
    stores: list[Any] = []

    @checkpointer_test(name=f"{'Async' if flavour == 'async' else ''}RedisSaver[{backend.name}]")
    async def saver() -> AsyncIterator[BaseCheckpointSaver[str]]:
        # a prefix per capability suite (under the test's, which the harness purges): the
        # suite lists every thread (list(None)) and expects its own only
        prefix = f"{backend.prefix}{next(COUNTER)}:"
        if flavour == "sync":
            store = backend.sync_store(prefix=prefix)
            stores.append(store)
            yield RedisSaver(store)
        else:
            astore = backend.async_store(prefix=prefix)
            yield AsyncRedisSaver(astore)
            await astore.close()

    report = await validate(saver)
    for store in stores:
        store.close()
    results = report.to_dict()["results"]
    summary = {name: (r["detected"], r["passed"], r["failures"]) for name, r in results.items()}
    assert set(results) == {c.value for c in ALL_CAPABILITIES}, summary
    for name, result in results.items():
        assert result["detected"], f"{name} not detected"
        assert result["passed"] is True, f"{name}: {result['failures']}"
        assert result["tests_failed"] == 0 and result["tests_passed"] > 0, summary
    assert report.conformance_level() == "FULL"
    report.print_report()  # shown with -s: the report the issue asks for
