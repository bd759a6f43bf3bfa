"""A whole run: the set-up, then every phase in order, with the garbage collector tamed."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

from .reads import measure_agent_loop, measure_reads
from .runner import Bench
from .settings import SIZES

GC_MODES = ("freeze", "on", "off")


def run_phases(
    bench: Bench,
    *,
    gc_mode: str = "freeze",
    profile: bool = False,
    on_phase: Callable[[str, float], object] | None = None,
) -> str:
    """Build the inputs, then run every phase; ``on_phase(name, seconds)`` after each one.

    ``gc_mode``: ``freeze`` (``gc.freeze()`` the prebuilt inputs, so collections scan only what
    the timed calls allocate), ``on`` or ``off``; the collector is restored afterwards. Returns
    the cProfile text (empty unless ``profile``). The caller runs :meth:`Bench.cleanup`.
    """
    if gc_mode not in GC_MODES:
        raise ValueError(f"gc_mode: must be one of {', '.join(GC_MODES)}, got {gc_mode!r}")
    report = on_phase or (lambda name, seconds: None)
    profile_text = ""
    try:
        t = time.perf_counter()
        sync_cases = [bench.append_case("sync", s) for s in SIZES]
        async_cases = [bench.append_case("async", s) for s in SIZES]
        gc.collect()
        if gc_mode == "freeze":
            gc.freeze()
        elif gc_mode == "off":
            gc.disable()
        report("setup (messages built, sessions pre-filled)", time.perf_counter() - t)
        phases: list[tuple[str, Callable[[], object]]] = [
            ("bytes/message", bench.memory),
            ("reads", lambda: measure_reads(bench)),
            ("agent loop", lambda: measure_agent_loop(bench)),
            ("sync appends", lambda: bench.sync_appends(sync_cases)),
            ("async appends", lambda: asyncio.run(bench.async_appends(async_cases))),
            ("round trips", bench.round_trips),
            ("append preparation pieces", bench.micro),
        ]
        if profile:

            def do_profile() -> None:
                nonlocal profile_text
                profile_text = bench.profile()

            phases.append(("profile", do_profile))
        for name, phase in phases:
            t = time.perf_counter()
            phase()
            report(name, time.perf_counter() - t)
    finally:
        gc.unfreeze()
        gc.enable()
    return profile_text


PHASE_COUNT = 8
"""How many times :func:`run_phases` calls ``on_phase`` without ``profile`` (setup included)."""
