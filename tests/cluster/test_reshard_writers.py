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

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]


def test_four_writers_see_no_error_while_redis_cli_reshards_their_slot(cluster: Cluster) -> None:
    (_, source, _), (_, target, _) = primaries(cluster)[:2]
    result = measure(
        cluster, 100.0, source=source, target=target, writers=4, bystanders=1, settle=0.5
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
