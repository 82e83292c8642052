"""`namesrv scenario`: the pure core, no Ray, on a scripted timeline with a manual clock.

Two independent NameServers see the same brokers; one broker dies. NameServer 0 hears the channel
close at once, NameServer 1 only notices when the 120 s expiry scan runs: the divergence RocketMQ
users meet in production, shown in a few milliseconds.
"""

from __future__ import annotations

import argparse

from clients.cli.render import route_table, table
from namesrv.common.clock import ManualClock
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.route_info_manager import RouteInfoManager


def _wrapper(topics: dict[str, int], version: int) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        topic_config_table={
            t: TopicConfig(topic_name=t, read_queue_nums=n, write_queue_nums=n) for t, n in topics.items()
        },
        data_version=DataVersion(1_000 + version, version),
    )


def run_scenario(out: list[str]) -> list[RouteInfoManager]:
    clock = ManualClock()
    config = NamesrvConfig()
    namesrvs = [RouteInfoManager(config, clock), RouteInfoManager(config, clock)]
    brokers = [
        ("DefaultCluster", "broker-a", 0, "10.0.0.1:10911", {"TopicTest": 4, "OrderTopic": 2}),
        ("DefaultCluster", "broker-a", 1, "10.0.0.2:10911", {"TopicTest": 4, "OrderTopic": 2}),
        ("DefaultCluster", "broker-b", 0, "10.0.0.3:10911", {"TopicTest": 4}),
    ]

    def heartbeat_all() -> None:
        for cluster, name, broker_id, addr, topics in brokers:
            for ns in namesrvs:
                ns.register_broker(cluster, addr, name, broker_id, addr.replace("10911", "10912"),
                                   _wrapper(topics, 1), [])

    def show(title: str) -> None:
        out.append(f"\n== {title} (t = {clock() - start} ms)")
        for i, ns in enumerate(namesrvs):
            out.append(f"-- namesrv-{i}")
            out.append(route_table("TopicTest", ns.pickup_topic_route_data("TopicTest")))

    start = clock()
    heartbeat_all()
    show("three brokers registered with both NameServers")
    brokers.pop()  # broker-b dies
    namesrvs[0].on_channel_destroy("10.0.0.3:10911")
    clock.advance(30_000)
    heartbeat_all()
    show("broker-b died: namesrv-0 saw the channel close, namesrv-1 still advertises it")
    clock.advance(91_000)
    removed = namesrvs[1].scan_not_active_broker()
    show(f"121 s after its last heartbeat namesrv-1's scan expires it (removed {removed})")
    info = namesrvs[0].get_all_cluster_info()
    out.append("\n" + table(("cluster", "broker", "addresses"),
                            [(c, b, info.broker_addr_table[b].broker_addrs)
                             for c, names in info.cluster_addr_table.items() for b in sorted(names)]))
    return namesrvs


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("scenario", help="run the pure core (no Ray) through a scripted broker death")
    p.set_defaults(func=lambda args: _main())


def _main() -> int:
    out: list[str] = []
    run_scenario(out)
    print("\n".join(out))
    return 0
