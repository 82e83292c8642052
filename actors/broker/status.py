"""What a broker actor reports about itself: `status()` (role and replication at a glance) and
`get_runtime_info()` (store, recovery, registration, remoting, consumers): plain dicts built from
its `BrokerController`, so the actor's methods stay one line each."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import ray

from actors.broker.lifecycle import BrokerController
from namesrv.broker.metadata_log import METADATA_TOPIC, message_count, message_queues


def ha_info(c: BrokerController) -> dict[str, Any]:
    """A master's SyncStateSet and slave lags, or a slave's offsets."""
    return c.ha_client.info() if c.ha_client is not None else c.ha_master.info()


def broker_status(c: BrokerController, actor_name: str) -> dict[str, Any]:
    """Role, masterEpoch, role_log ({atMs, role, epoch}, every role this broker held), registered
    brokerId, replication lag, and in controller mode the controller's view (controller brokerId,
    SyncStateSet, epoch entries, truncations); a master's replication_lag_ms per slave
    (namesrv.store.ha.lag)."""
    ha = ha_info(c)
    lag = ha.get("lag_bytes") if c.ha_client is not None else max(ha["slave_lag_bytes"].values(), default=0)
    return {"broker_name": c.identity.broker_name, "broker_addr": c.identity.broker_addr,
            "broker_role": str(c.config.broker_role), "incarnation": c.incarnation,
            "actor_name": actor_name, "broker_id": c.identity.broker_id,
            "role": str(c.config.broker_role), "masterEpoch": c.role.master_epoch,
            "role_log": list(c.role.role_log), "controller_mode": c.replicas is not None,
            "max_offset": c.store.size_bytes(), "replication_lag_bytes": lag, "fenced_sends": c.role.fenced_sends,
            "replication_lag_ms": c.ha_master.lag.summary() if c.ha_client is None else None,
            "ha": ha, "controller": c.replicas.status() if c.replicas is not None else None}


def runtime_info(c: BrokerController, actor_name: str) -> dict[str, Any]:
    """Identity, process and node, store directory and recovery, config (without credentials),
    topic table version, registration and remoting stats, consumers, held pulls and queues.
    `recovered_messages` and `queues` count the messages the queues hold, not the topic-config records
    the log also carries (`metadata_records`, namesrv.broker.metadata_log)."""
    rec = c.store.recovery
    return {
        "broker_addr": c.identity.broker_addr,
        "actor_name": actor_name,
        "broker_name": c.identity.broker_name,
        "broker_id": c.identity.broker_id,
        "cluster": c.identity.cluster_name,
        "incarnation": c.incarnation,
        "token": c.token,
        "pid": os.getpid(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "store_dir": str(c.store_dir),
        "config": c.config.model_dump(exclude={"credentials"}),
        "signs_as": c.config.credentials.access_key if c.config.credentials else None,
        "data_version": c.topics.data_version.to_wire(),
        "topics": len(c.topics.topic_config_table),
        "master_addr": c.registrar.master_addr,
        "permission": c.config.broker_permission,
        "recovered_messages": message_count(c.store),
        "metadata_records": c.store.max_offset(METADATA_TOPIC, 0),
        "recovery_scanned_records": rec.records,
        "recovery_scanned_from": rec.scanned_from,
        "truncated_bytes": rec.truncated_bytes,
        "consume_queue_entries_dropped": rec.consume_queue_entries_dropped,
        "min_physical_offset": c.store.min_physical_offset(),
        "corrupt_ranges": rec.corrupt_ranges,
        "recovery_ms": c.recovery_ms,
        "store_fsyncs": c.store.commit_log.fsyncs,
        "store_batches": c.store.commit_log.batches,
        "stats": dict(c.registrar.stats),
        "remoting": asdict(c.remoting.stats()),
        "consumer_groups": {g: c.processor.consumers.consumer_ids(g) for g in c.processor.consumers.groups},
        "held_pulls": c.processor.hold.held,
        "pop_in_flight": len(c.processor.pop_state.index),
        "pop_revived": c.processor.revive.revived,
        "pop_dead": c.processor.revive.dead,
        "transactions_dropped": c.processor.context.transactions.discarded,
        "queues": {f"{t}:{q}": n for (t, q), n in message_queues(c.store).items()},
        "broker_role": str(c.config.broker_role),
        "ha": ha_info(c),
    }
