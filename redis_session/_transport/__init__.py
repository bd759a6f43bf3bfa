"""The transport: clients from URLs (:mod:`.url`), their endpoints and retries, connection
pools, event loops, telemetry, and the fast path (:mod:`.fast`, with the optional C decoder
``_speedups``). This module imports nothing.
"""
