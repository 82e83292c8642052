"""Losing whole nodes in a chaos run (lose_master_node): what the run needs before it may, and the
wait for the NameServers' verdict afterwards.

Only whoever owns the Ray cluster can remove a node (the multi-node test cluster's
`Cluster.remove_node`): the run is given that as a hook (`driver.NodeRemover`); without one the kind
is refused before anything starts. A node is removed for good: its brokers, their stores and their
role logs go with it, and nothing is revived.
"""

from __future__ import annotations

import logging
from typing import Any

from actors.deployment.launcher import Deployment
from actors.deployment.placement import placement_nodes, shared_set_nodes
from clients.chaos.driver import NodeRemover
from clients.chaos.observe import RemovalLog
from clients.chaos.plan import ChaosConfig, Timing
from clients.chaos.schema import NODE_FAULTS
from namesrv.common.clock import system_clock as now_ms
from namesrv.common.waiting import WaitTimeout, wait_until

log = logging.getLogger(__name__)


def node_fault_refusal(cfg: ChaosConfig, dep: Deployment, lose_node: NodeRemover | None) -> str | None:
    """Why the run may not lose nodes as asked (None when it may, or is not asked to): it needs a
    node-removal hook, and each broker set's master and slaves pinned to different nodes."""
    if not any(k in NODE_FAULTS for k in cfg.fault_mix):
        return None
    if lose_node is None:
        return ("lose_master_node removes a whole Ray node, which only whoever owns the cluster can do: it needs "
                "a node-removal hook (run_chaos(lose_node=...), as the multi-node test cluster gives); "
                "`namesrv chaos` has none: choose other --faults")
    shared = shared_set_nodes(dep.spec)
    if shared:
        return (f"lose_master_node needs each broker set's master and slaves on different nodes; these share one "
                f"(or are not pinned): {shared} ({len(placement_nodes())} Ray nodes alive)")
    return None


def await_lost_removals(removals: RemovalLog, lost: set[str], timeline: list[Any], timing: Timing) -> None:
    """Give each NameServer until the node fault's detection bound to drop the brokers of a lost
    node (Ray declares the node dead 12-30 s after its loss, often after sending stopped), so
    invariant 3a measures the drop instead of finding none."""
    faults = [r for r in timeline if r.kind in NODE_FAULTS and r.ok]
    if not faults or not lost:
        return
    due_ms = max(r.t_ms + timing.detect_bound_ms(r.kind) for r in faults)

    def dropped_everywhere() -> bool:
        removals.snapshot()
        return all(any(a == addr for a, _, _ in removals.events(n)) for n in removals.namesrvs for addr in lost)

    try:
        wait_until(dropped_everywhere, max(0.0, (due_ms - now_ms()) / 1000), "lost brokers removed", 0.5)
    except WaitTimeout:
        log.warning("the brokers of a lost node are still in a NameServer's tables at their bound")
