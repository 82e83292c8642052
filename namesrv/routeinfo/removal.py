"""Brokers leaving the route tables (RocketMQ's unregisterBroker, onChannelDestroy and
scanNotActiveBroker): the address leaves its groups, a group left empty leaves its cluster and every
topic, and an address no group lists any more leaves the live table (recorded with its cause in the
tables' changes)."""

from __future__ import annotations

import logging

from namesrv.routeinfo.changes import RemovalCause
from namesrv.routeinfo.tables import RouteTables

# The log lines keep the name they had before the cascade left the manager's module.
log = logging.getLogger("namesrv.routeinfo.route_info_manager")


def unregister_broker(
    tables: RouteTables,
    cluster_name: str,
    broker_addr: str,
    broker_name: str,
    broker_id: int,
    channel: object = None,
) -> bool:
    """Remove one broker address; a request that names another address at that id changes nothing.

    With `channel` given, a live entry registered through another channel (a newer incarnation
    at the same address) is left alone too. Returns whether anything was removed.
    """
    live = tables.broker_live_table.get(broker_addr)
    if channel is not None and live is not None and live.channel != channel:
        log.warning("ignore stale unregister of %s: registered again since", broker_addr)
        return False
    removed = False
    broker_data = tables.broker_addr_table.get(broker_name)
    if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
        del broker_data.broker_addrs[broker_id]
        tables.touch_broker(broker_name)
        removed = True
        log.info("unregister broker %s[%d] %s", broker_name, broker_id, broker_addr)
        if not broker_data.broker_addrs:
            _remove_broker_name(tables, broker_name)
    # An address still listed (at another id or in another group) keeps its liveness, or its
    # route could never expire; an address no group lists any more loses it.
    if not any(broker_addr in bd.broker_addrs.values() for bd in tables.broker_addr_table.values()):
        removed = tables.drop_live(broker_addr, "unregister") or removed
        tables.filter_server_table.pop(broker_addr, None)
    return removed


def on_channel_destroy(
    tables: RouteTables, broker_addr: str, channel: object = None, cause: RemovalCause = "channel"
) -> bool:
    """A broker's connection closed: remove it now. A stale channel (the address has registered
    again through a newer one) is ignored. Returns whether anything was removed."""
    live = tables.broker_live_table.get(broker_addr)
    if channel is not None and live is not None and live.channel != channel:
        log.info("ignore close of a stale channel of %s", broker_addr)
        return False
    removed = tables.drop_live(broker_addr, cause)
    tables.filter_server_table.pop(broker_addr, None)
    for broker_name, broker_data in list(tables.broker_addr_table.items()):
        ids = [i for i, a in broker_data.broker_addrs.items() if a == broker_addr]
        if not ids:
            continue
        for broker_id in ids:
            del broker_data.broker_addrs[broker_id]
        tables.touch_broker(broker_name)
        removed = True
        log.info("broker %s %s removed on channel destroy", broker_name, broker_addr)
        if not broker_data.broker_addrs:
            _remove_broker_name(tables, broker_name)
    return removed


def scan_not_active_broker(tables: RouteTables, now: int) -> int:
    """Remove every broker silent for longer than its timeout at `now`; returns how many were removed."""
    expired = [
        addr
        for addr, live in tables.broker_live_table.items()
        if live.last_update_timestamp + live.heartbeat_timeout_millis < now
    ]
    for addr in expired:
        live = tables.broker_live_table[addr]
        log.warning("the broker channel expired, %s %dms", addr, live.heartbeat_timeout_millis)
        on_channel_destroy(tables, addr, cause="expired")
    return len(expired)


def _remove_broker_name(tables: RouteTables, broker_name: str) -> None:
    """The last address of a group left: the group leaves its cluster and every topic."""
    tables.broker_addr_table.pop(broker_name, None)
    tables.missing_topics.pop(broker_name, None)
    tables.queue_datas.pop(broker_name, None)
    tables.touch_broker(broker_name)
    # Every cluster, not only the one a request named: it may name the wrong cluster, and a group
    # registered under two cluster names is listed in both (few clusters, so this is cheap).
    for cluster in list(tables.cluster_addr_table):
        names = tables.cluster_addr_table.get(cluster)
        if names is not None and broker_name in names:
            names.discard(broker_name)
            if not names:
                del tables.cluster_addr_table[cluster]
                log.info("cluster %s has no broker left, removed", cluster)
    for topic in list(tables.broker_topics.get(broker_name, ())):
        tables.remove_queue_data(topic, broker_name)
