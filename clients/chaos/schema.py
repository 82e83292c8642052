"""The chaos run's vocabulary and its Parquet outputs: fault kinds and the table schemas.

The fault timeline (`faults.parquet`) is the contract with the Spark analysis, which reads it beside
the route snapshots: one row per fault or recovery.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

FAULT_TIMELINE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("fault_id", "int64"),
    ("t_ms", "int64"),
    ("kind", "string"),
    ("target", "string"),
    ("broker_addr", "string"),
    ("detail", "string"),
    ("peer", "string"),
)
"""`kind` is one of TIMELINE_KINDS; `target` is the broker address or the NameServer name; `peer`
the NameServer a partition_broker_namesrv cuts the broker from (null otherwise)."""
OPTIONAL_TIMELINE_COLUMNS: frozenset[str] = frozenset({"peer"})
"""Columns a timeline written before they existed lacks: read as nulls."""

KILL_BROKER = "kill_broker"
SIGKILL_BROKER = "sigkill_broker"
SIGSTOP_BROKER = "sigstop_broker"
SIGCONT_BROKER = "sigcont_broker"
RESTART_BROKER = "restart_broker"
KILL_NAMESRV = "kill_namesrv"
RESTART_NAMESRV = "restart_namesrv"
KILL_MASTER = "kill_master"
"""ray.kill of the broker that is its set's master when the fault is made (issue 21)."""
SIGKILL_MASTER = "sigkill_master"
"""SIGKILL of the worker process of its set's master."""
PAUSE_SLAVE = "pause_slave"
"""SIGSTOP of a slave's worker process (SIGCONT later): its master's SyncStateSet must shrink."""
LOSE_MASTER_NODE = "lose_master_node"
"""The whole Ray node of its set's master is removed (by the run's node-removal hook, e.g. the
multi-node test cluster's `remove_node`): no revival, the node and the old master never return;
the slave on another node must take over (controller mode)."""

PARTITION_BROKER_NAMESRV = "partition_broker_namesrv"
"""The test bed's kernel cuts a broker's host from one NameServer's host, both ways (the fault's
`peer`); the clients still reach both. That NameServer expires the broker; the others keep it, and
so must every producer (issue 36: a client does not lose a broker it reaches itself)."""
PARTITION_CLIENT_BROKER = "partition_client_broker"
"""The clients' node (the test driver's, where producers and readers run) is cut from a broker's
host: the NameServers keep the broker; sends to it fail and the producers route around it."""
ISOLATE_HOST = "isolate_host"
"""A broker's host is cut from every other host and from the clients: to everyone it is hung."""
DELAY_BROKER = "delay_broker"
"""The clients' connections to a broker's TCP port go through a relay on its host that holds each
chunk `ChaosConfig.delay_ms` each way (clients.chaos.hosts.relay); the connections open at the
start are reset, so the clients' next ones are delayed. The NameServers are not (brokers register
over Ray)."""
HEAL = "heal"
"""The cuts of one host fault are removed (the others in force stay)."""

FAULT_KINDS: tuple[str, ...] = (KILL_BROKER, SIGKILL_BROKER, SIGSTOP_BROKER, KILL_NAMESRV)
"""What a fault mix names by default; the HA kinds (SET_FAULTS) are asked for by name, and the
other kinds are the recoveries that follow them."""
SET_FAULTS: frozenset[str] = frozenset({KILL_MASTER, SIGKILL_MASTER, PAUSE_SLAVE, LOSE_MASTER_NODE})
"""Faults planned on a broker set (its name is the plan's target) and made on the broker that holds
the role when they happen (the timeline's target is that broker's address)."""
HOST_FAULTS: frozenset[str] = frozenset({PARTITION_BROKER_NAMESRV, PARTITION_CLIENT_BROKER, ISOLATE_HOST, DELAY_BROKER})
"""Faults the kernel makes on the multi-host test bed (clients.chaos.hosts): they need a run on it
(`ChaosConfig.hosts`); each is planned on a broker and held like a hang, then healed."""
MIX_KINDS: tuple[str, ...] = (*FAULT_KINDS, KILL_MASTER, SIGKILL_MASTER, PAUSE_SLAVE, LOSE_MASTER_NODE,
                              *sorted(HOST_FAULTS))
"""Every kind a fault mix may name."""
TIMELINE_KINDS: tuple[str, ...] = (*MIX_KINDS, SIGCONT_BROKER, RESTART_BROKER, RESTART_NAMESRV, HEAL)
MASTER_FAULTS: frozenset[str] = frozenset({KILL_MASTER, SIGKILL_MASTER, LOSE_MASTER_NODE})
NODE_FAULTS: frozenset[str] = frozenset({LOSE_MASTER_NODE})
"""Faults that take a whole node: never revived (REVIVAL_OF has no entry), detected by NameServers
only once Ray declares the node dead (`Timing.node_death_ms`)."""
HANG_FAULTS: frozenset[str] = frozenset({SIGSTOP_BROKER, PAUSE_SLAVE})
"""Faults only heartbeats tell (the process lives on, stopped)."""
HELD_FAULTS: frozenset[str] = HANG_FAULTS | HOST_FAULTS
"""Faults held until the NameServers' expiry has caught them (the process lives on; heartbeats stop
arriving, where the fault cuts them), then revived."""
BROKER_FAULTS: frozenset[str] = frozenset({KILL_BROKER, SIGKILL_BROKER, SIGSTOP_BROKER, *SET_FAULTS, *HOST_FAULTS})
BROKER_REVIVALS: frozenset[str] = frozenset({RESTART_BROKER, SIGCONT_BROKER, HEAL})
NAMESRV_KINDS: frozenset[str] = frozenset({KILL_NAMESRV, RESTART_NAMESRV})
REVIVAL_OF: dict[str, str] = {
    KILL_BROKER: RESTART_BROKER, SIGKILL_BROKER: RESTART_BROKER, SIGSTOP_BROKER: SIGCONT_BROKER,
    KILL_MASTER: RESTART_BROKER, SIGKILL_MASTER: RESTART_BROKER, PAUSE_SLAVE: SIGCONT_BROKER,
    **{k: HEAL for k in HOST_FAULTS},
}

ROLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker_set", "string"),
    ("broker", "string"),
    ("incarnation", "string"),
    ("role", "string"),
    ("epoch", "int64"),
    ("start_ms", "int64"),
    ("end_ms", "int64"),
)
"""roles.parquet: one row per role a broker incarnation held, [start_ms, end_ms), from the brokers'
own role logs (`clients.chaos.roles.role_spans`); the failover analysis reads it."""

# The output directory of a run (`namesrv chaos --out DIR`); `namesrv analyze DIR` reads it as it is.
FAULTS_FILE = "faults.parquet"
SENDS_FILE = "sends.parquet"
DETECTIONS_FILE = "detections.parquet"
SUMMARY_FILE = "summary.json"
ROLES_FILE = "roles.parquet"
SNAPSHOTS_DIR = "snapshots"
"""Every NameServer's route snapshots of the run: the dataset `namesrv snapshot` writes."""


def _schema(columns: Iterable[tuple[str, str]]) -> pa.Schema:
    return pa.schema([(name, pa.type_for_alias(t)) for name, t in columns])


TIMELINE_SCHEMA = _schema(FAULT_TIMELINE_COLUMNS)
ROLE_SCHEMA = _schema(ROLE_COLUMNS)
SEND_SCHEMA = _schema((
    ("producer", "string"), ("t_ms", "int64"), ("topic", "string"), ("ok", "bool"), ("broker_name", "string"),
    ("queue_id", "int64"), ("queue_offset", "int64"), ("msg_id", "string"), ("latency_ms", "double"),
    ("attempts", "int64"), ("brokers_tried", "string"), ("error", "string"), ("explained", "string"),
    ("lost", "bool"),
))
"""One row per send; `lost` is set on acknowledged sends (not read back afterwards), null on failed ones."""
DETECTION_SCHEMA = _schema((
    ("fault_id", "int64"), ("kind", "string"), ("broker_addr", "string"), ("observer", "string"),
    ("observer_kind", "string"), ("fault_t_ms", "int64"), ("seen_t_ms", "int64"), ("elapsed_ms", "int64"),
    ("cause", "string"), ("bound_ms", "int64"), ("ok", "bool"),
))
"""One row per (broker fault or revival, NameServer or producer): when it saw the change."""
REMOVAL_SCHEMA = _schema((("namesrv", "string"), ("broker_addr", "string"), ("cause", "string"), ("t_ms", "int64")))
PRODUCER_ROUTE_SCHEMA = _schema((("producer", "string"), ("topic", "string"), ("t_ms", "int64"), ("source", "string"),
                                 ("brokers", "string")))
"""Each route change a producer applied: `brokers` is the comma-joined broker names it then wrote to."""
NAMESRV_ROUTE_SCHEMA = _schema((("t_ms", "int64"), ("namesrv", "string"), ("topic", "string"), ("addrs", "string")))
"""Each route change the observer saw on a NameServer; `addrs` null while it could not be reached."""
