"""The launcher's placement decisions (actors.deployment.placement), made on a spec without a Ray."""

from __future__ import annotations

import pytest

from actors.deployment.placement import spread_over_nodes
from actors.deployment.spec import BrokerSpec, ClusterSpec

NODES = ["worker-1", "worker-2", "head"]


def test_one_proxy_per_node_placed_softly_in_node_order() -> None:
    spec = spread_over_nodes(ClusterSpec(brokers=[BrokerSpec("broker-a")]), NODES, brokers=False, namesrvs=False,
                             proxies=True)
    assert spec.proxy_count == 3 and [spec.proxy_node_id(i) for i in range(3)] == NODES
    assert spec.brokers[0].node_id is None and spec.namesrv_node_ids == []  # only what was asked


def test_without_proxies_asked_none_are_added() -> None:
    spec = spread_over_nodes(ClusterSpec(proxy_count=1), NODES)
    assert spec.proxy_count == 1 and spec.proxy_node_ids == [] and spec.proxy_node_id(0) is None
    assert spec.namesrv_node_ids == NODES


def test_no_node_is_refused() -> None:
    with pytest.raises(ValueError, match="no node"):
        spread_over_nodes(ClusterSpec(), [], proxies=True)
