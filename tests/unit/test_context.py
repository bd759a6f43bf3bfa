from __future__ import annotations

import asyncio
import threading

from redis_session import (
    RunContext,
    run_context_from_context,
    session_key_from_context,
    turn_id_from_context,
    with_run_context,
    with_session_key,
    with_turn_id,
)


def test_defaults_round_trip_and_restore() -> None:
    assert (session_key_from_context(), turn_id_from_context(), run_context_from_context()) == (
        "", "", None,
    )  # fmt: skip
    rc = RunContext(session_type="chat", workflow_id="w", run_id="r")
    with with_session_key("outer"), with_turn_id("t1"), with_run_context(rc):
        assert session_key_from_context() == "outer"
        with with_session_key("inner"):
            assert session_key_from_context() == "inner"
        assert session_key_from_context() == "outer"
        assert turn_id_from_context() == "t1"
        assert run_context_from_context() == rc
    assert (session_key_from_context(), turn_id_from_context(), run_context_from_context()) == (
        "", "", None,
    )  # fmt: skip


def test_restored_even_after_an_exception() -> None:
    try:
        with with_turn_id("boom"):
            raise RuntimeError
    except RuntimeError:
        pass
    assert turn_id_from_context() == ""


def test_threads_do_not_see_each_others_values() -> None:
    seen: dict[str, str] = {}
    barrier = threading.Barrier(4)

    def work(name: str) -> None:
        with with_session_key(name):
            barrier.wait(timeout=5)
            seen[name] = session_key_from_context()

    threads = [threading.Thread(target=work, args=(f"s{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert seen == {f"s{i}": f"s{i}" for i in range(4)}
    assert session_key_from_context() == ""


async def test_asyncio_tasks_are_isolated() -> None:
    async def work(name: str) -> str:
        with with_turn_id(name):
            await asyncio.sleep(0.01)
            return turn_id_from_context()

    with with_turn_id("parent"):
        results = await asyncio.gather(*(work(f"t{i}") for i in range(5)))
        assert turn_id_from_context() == "parent"
    assert results == [f"t{i}" for i in range(5)]
