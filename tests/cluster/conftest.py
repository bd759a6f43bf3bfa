"""A private Redis Cluster (3 primaries + 3 replicas on loopback) for the modules of this folder
that change its topology or settings; the contract suite's shared cluster is another."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cluster import Cluster, private_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """One private cluster per module."""
    yield from private_cluster()
