"""Fixtures of the Ray tests beyond the shared ones in tests/conftest.py (`ray_local`,
`deployments`); helpers are in tests/support/ray_cluster.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.multinode import WORKERS, multinode_cluster
from tests.support.ray_cluster import IsolatedHost, isolation_unavailable


@pytest.fixture
def isolated_host(tmp_path: Path) -> Iterator[IsolatedHost]:
    """A private host (PID, network and mount namespaces) for CLI walks that start and stop Ray."""
    reason = isolation_unavailable()
    if reason is not None:
        pytest.skip(reason)
    host = IsolatedHost(tmp_path / "host")
    try:
        yield host
    finally:
        host.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A module's multi-node Ray cluster (tests.support.multinode): a CPU-less head and WORKERS
    one-CPU nodes, shut down after the module."""
    with multinode_cluster(WORKERS, "multinode") as c:
        yield c
