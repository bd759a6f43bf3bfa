"""The benchmark's sizes, warm-ups, TTLs, targets and the floor script."""

from __future__ import annotations

from datetime import timedelta

TTL = timedelta(hours=1)
GRACE = timedelta(days=1)
MAX_TURNS = 1_000_000  # > any size here: the store's script runs LTRIM but never trims
SIZES = (0, 1_000, 10_000)
PREFILL_BATCH = 500
WARMUP = 200
GET_WARMUP = 20

# Targets: the store's median over the floor's median must be at most this.
APPEND_TARGET = 1.25
# ... or at most this much above the floor (µs), whichever is looser: the store's own cost per
# call is roughly constant (~40 µs here), so on a fast loopback its ratio grows.
APPEND_ALLOWANCE_US = 50.0
ASYNC_APPEND_ALLOWANCE_US = 70.0
HISTORY_ALLOWANCE_US = 60.0
GET_TARGET = 2.2  # a cold get (a store that never read the session: no cache)
HISTORY_TARGET = 1.3
BYTES_TARGET = 1.1
LOOP_TARGET = 2.0  # append + get of the whole session vs RPUSH + LRANGE -1 -1 + orjson
LOOP_FLATNESS = 1.25  # the agent loop at 10,000 messages over the loop at 1,000
LOOP_ROUNDS = 500
FLEET_TARGET = 1.25  # issue #32: the fleet loop vs RPUSH + LRANGE 0 -1 + orjson
FLEET_GET_TARGET = 1.5  # issue #32: a cold get of 1,000 mixed messages vs LRANGE + orjson

FLOOR_LUA = """
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], ARGV[2], -1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('HSET', KEYS[2], 'updated_at', ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[6], ARGV[7])
return 1
"""
