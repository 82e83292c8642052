"""What a NameServer reports about itself (`NameServerActor.get_status`, `namesrv status`, `top`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.namesrv.lifecycle import NamesrvController


def namesrv_status(c: NamesrvController) -> dict[str, Any]:
    """Its tables' sizes, readiness, snapshots, long-poll waiters and every broker it lists."""
    rim = c.rim
    now = c.clock()
    brokers = []
    for name, bd in sorted(rim.broker_addr_table.items()):
        for broker_id, addr in sorted(bd.broker_addrs.items()):
            live = rim.broker_live_table.get(addr)
            brokers.append({
                "cluster": bd.cluster,
                "broker_name": name,
                "broker_id": broker_id,
                "broker_addr": addr,
                "last_heartbeat_age_ms": None if live is None else now - live.last_update_timestamp,
                "data_version": None if live is None else live.data_version.to_wire(),
                "topics": rim.topic_count_of(name),
                "watched": live is not None and live.channel is not None and c.housekeeping.is_watched(live.channel),
            })
    snapshots = c.snapshots.buffer
    return {
        "name": c.name,
        "started_ms": c.started_ms,
        "ready": c.routes_ready(),
        "route_seq": rim.route_seq,
        "topics": len(rim.topic_queue_table),
        "snapshots_taken": snapshots.taken,
        "snapshots_buffered": len(snapshots),
        "snapshots_dropped": snapshots.dropped,
        "long_poll_waiters": c.long_poll.waiter_count,
        "route_encodings": c.wire.route_encodings,
        "acl_rejections": dict(c.acl.rejections) if c.acl is not None else {},
        "brokers": brokers,
    }
