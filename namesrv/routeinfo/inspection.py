"""Plain-data images of the route tables, for tests and operators."""

from __future__ import annotations

from collections.abc import Iterable

from namesrv.routeinfo.tables import RouteTables


def dump_tables(tables: RouteTables) -> dict[str, object]:
    """A deterministic, plain-data image of all five tables (tests compare these byte for byte)."""

    def sorted_map(items: Iterable[tuple[object, object]]) -> dict[str, object]:
        return {str(k): v for k, v in sorted(items, key=lambda kv: str(kv[0]))}

    return {
        "topicQueueTable": sorted_map(
            (t, sorted_map((b, q.to_wire()) for b, q in qm.items()))
            for t, qm in tables.topic_queue_table.items()
        ),
        "brokerAddrTable": sorted_map((n, b.to_wire()) for n, b in tables.broker_addr_table.items()),
        "clusterAddrTable": sorted_map((c, sorted(n)) for c, n in tables.cluster_addr_table.items()),
        "brokerLiveTable": sorted_map(
            (
                a,
                {
                    "lastUpdateTimestamp": li.last_update_timestamp,
                    "heartbeatTimeoutMillis": li.heartbeat_timeout_millis,
                    "dataVersion": li.data_version.to_wire(),
                    "channel": repr(li.channel),
                    "haServerAddr": li.ha_server_addr,
                },
            )
            for a, li in tables.broker_live_table.items()
        ),
        "filterServerTable": sorted_map((a, list(s)) for a, s in tables.filter_server_table.items()),
    }
