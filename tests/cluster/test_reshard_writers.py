"""A slot full of sessions moved by ``redis-cli --cluster reshard`` under 4 writers appending
and reading sessions of that slot (issue #27): no caller sees an error, every acknowledged
append is stored once. The bounded form of ``bench/bench_reshard.py`` (whose ``measure`` this
runs, on a private cluster of its own: the move changes the topology).

The slot holds ~100 MB: a move of a few MB ends in ~0.1 s here, within redis-py's own 16 tries
of ``TRYAGAIN`` (~0.4 s), so only a longer move reaches the store's wait for a migrating slot
(with ``failover_window=0`` a 72 MB move gave each of the 4 writers ``SlotMigrating``).
"""

from __future__ import annotations

import pytest

from bench.bench_reshard import measure, primaries
from tests.support.cluster import Cluster
from tests.support.figures import Recorder

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]


def test_four_writers_see_no_error_while_redis_cli_reshards_their_slot(
    cluster: Cluster, figures: Recorder
) -> None:
    (_, source, _), (_, target, _) = primaries(cluster)[:2]
    result = measure(
        cluster, 100.0, source=source, target=target, writers=4, bystanders=1, settle=0.5
    )
    during = result["during"]
    figures.record(
        f"a slot of {result['mb_moved']:.0f} MB ({result['keys_moved']} keys) moved by "
        "redis-cli --cluster reshard while 4 writers append to and read sessions of that slot "
        "(tests/cluster/test_reshard_writers.py)",
        client="RedisStore, failover_window=15; 1 bystander on another slot of the node",
        topology="cluster",
        injections=1,
        outcome=f"{len(result['errors'])} errors raised to the callers; the move took "
        f"{result['move_s']:.2f} s, {result['waited']} calls met the open slot and waited it "
        f"out (during the move: {during['calls']} calls, p50 {during['p50_ms']:.1f} ms, "
        f"longest {during['max_ms']:.0f} ms); {result['keys_left_on_source']} keys left on "
        f"the source, {result['keys_on_target']} on the target",
        acknowledged=result["appends_acked"],
        lost=result["appends_lost"],
        duplicated=result["appends_twice"],
        errors=len(result["errors"]),
    )
    assert result["errors"] == []
    assert result["appends_lost"] == 0 and result["appends_twice"] == 0
    assert result["appends_acked"] > 0
    assert result["mb_moved"] >= 100 and result["keys_moved"] >= 300
    assert result["keys_left_on_source"] == 0
    assert result["keys_on_target"] == result["keys_moved"]
    assert result["waited"] >= 1  # a writer met the open slot and waited it out
    # longer than redis-py's own tries: the store's wait carried the writers
    assert result["move_s"] > 0.45 and result["during"]["max_ms"] > 450
    # a call waits for the move, not for failover_window (15 s): the move, then its backoff
    assert result["during"]["max_ms"] < result["move_s"] * 1000 + 1500
