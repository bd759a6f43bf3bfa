"""The repository's benchmarks: scripts (``bench/bench_*.py``, run from the repository's root)
and :mod:`bench.harness`, the measuring core they and ``redis-session bench`` share. Not part of
the library: the wheel holds ``redis_session`` only.
"""
