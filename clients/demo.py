"""`namesrv demo`: the whole system on a local Ray in well under two minutes.

2 NameServers and 3 brokers (fast profile) come up; a topic is created on every broker; two
Producer actors send while broker-b is killed; both NameServers drop it through the channel watch
and the producers ride through on the other brokers; broker-b restarts from its store; a consumer
reads everything back and every acknowledged message is checked. Leaves nothing running.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from typing import Any

from clients.render import route_table, table

log = logging.getLogger(__name__)

TOPIC = "TopicTest"


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait_route_change(namesrvs: dict[str, Any], topic: str, predicate: Any, timeout_s: float) -> dict[str, float]:
    """Block on every NameServer's long-poll until `predicate(route)` holds there; returns the seconds
    each took. Raises TimeoutError naming the NameServers that never got there."""
    import ray

    from namesrv.models import TopicRouteData

    start = time.monotonic()
    done: dict[str, float] = {}
    for name, ns in namesrvs.items():
        version = -1
        while True:
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(f"route of {topic} did not converge on {name} within {timeout_s} s")
            changes = ray.get(ns.listen_for_change.remote({topic: version}, left))
            if topic in changes:
                version = changes[topic]["version"]
                wire = changes[topic]["route"]
                if predicate(TopicRouteData.from_wire(wire) if wire else None):
                    done[name] = time.monotonic() - start
                    break
    return done


def run_demo(rate: float, duration_s: float, seed: int, keep_data: bool) -> int:
    import ray

    from actors.launcher import BrokerSpec, ClusterSpec, deploy, ensure_ray
    from actors.producer_actor import ProducerActor
    from clients.admin import AdminClient
    from clients.producer import PullConsumer

    namespace = f"demo-{os.getpid()}"
    data_dir = tempfile.mkdtemp(prefix="namesrv-demo-")
    t_start = time.monotonic()
    _say(f"starting a local Ray (namespace {namespace}, data in {data_dir})")
    ensure_ray(namespace=namespace, num_cpus=2)
    dep = None
    producers: list[Any] = []
    try:
        spec = ClusterSpec(
            namesrv_count=2,
            brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b"), BrokerSpec("broker-c")],
            profile="fast", namespace=namespace, data_dir=data_dir,
        )
        dep = deploy(spec)
        admin = AdminClient(dep)
        _say("deployed namesrv-0, namesrv-1 and brokers broker-a/b/c (fast profile: 0.5 s heartbeat, 2 s expiry)")
        admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        _say(f"created {TOPIC} with 4 queues on every broker")
        for name, route in admin.routes_everywhere(TOPIC).items():
            print(f"-- route on {name} before the fault\n{route_table(TOPIC, route)}")

        actor_cls = ray.remote(ProducerActor).options(num_cpus=0, max_concurrency=4, namespace=namespace)
        producers = [
            actor_cls.remote(f"demo_producer_{i}", namespace, list(dep.namesrvs), poll_name_server_interval_ms=1000)
            for i in range(2)
        ]
        loops = [p.run_send_loop.remote([TOPIC], rate, duration_s, 128, seed + i) for i, p in enumerate(producers)]
        _say(f"2 producers sending {rate:.0f} msg/s each for {duration_s:.0f} s")
        time.sleep(duration_s / 3)  # let traffic flow before the fault: this is the demo's timeline

        t_kill = time.monotonic()
        dep.kill_broker("broker-b-0")
        _say("ray.kill(broker-b-0): no unregister, no goodbye")
        gone = wait_route_change(
            dep.namesrvs, TOPIC, lambda r: r is not None and all(b.broker_name != "broker-b" for b in r.broker_datas),
            timeout_s=10,
        )
        for name, route in admin.routes_everywhere(TOPIC).items():
            print(f"-- route on {name} after the kill\n{route_table(TOPIC, route)}")
        detect = {n: f"{s * 1000:.0f} ms" for n, s in gone.items()}
        _say(f"broker-b dropped by every NameServer (channel watch): {detect}")

        summaries = ray.get(loops)
        _say("producers done; restarting broker-b from its store")
        dep.restart_broker("broker-b-0")
        back = wait_route_change(
            dep.namesrvs, TOPIC, lambda r: r is not None and any(b.broker_name == "broker-b" for b in r.broker_datas),
            timeout_s=10,
        )
        _say(f"broker-b back in every route: { {n: f'{s * 1000:.0f} ms' for n, s in back.items()} }")

        records = [r for p in producers for r in ray.get(p.get_records.remote())]
        acked = {(r["broker_name"], r["queue_id"], r["queue_offset"]): r["msg_id"] for r in records if r["ok"]}
        consumer = PullConsumer(namespace, list(dep.namesrvs))
        consumed = consumer.consume_all(TOPIC)
        stored = {(m.broker_name, m.queue_id, m.queue_offset): m.msg_id for m in consumed}
        lost = [k for k, mid in acked.items() if stored.get(k) != mid]
        ids = [m.msg_id for m in consumed]
        duplicates = len(ids) - len(set(ids))

        print()
        print(table(
            ("producer", "attempted", "acknowledged", "failed", "retried", "p50 ms", "p99 ms"),
            [(s["group"], s["attempted"], s["acknowledged"], s["failed"], s["retried"],
              f"{s['p50_ms']:.1f}", f"{s['p99_ms']:.1f}") for s in summaries],
        ))
        retried = [r for r in records if r["ok"] and r["attempts"] > 1]
        if retried:
            r = retried[0]
            print(f"\nexample retry: tried {r['brokers_tried']} -> acknowledged on {r['broker_name']}")
        print()
        print(table(("check", "result"), [
            ("acknowledged messages", len(acked)),
            ("consumed after restart", len(consumed)),
            ("acknowledged but lost", len(lost)),
            ("duplicates consumed", duplicates),
            ("kill -> dropped by all NameServers", f"{max(gone.values()) * 1000:.0f} ms"),
            ("restart -> back in all routes", f"{max(back.values()) * 1000:.0f} ms"),
            ("kill -> demo end", f"{time.monotonic() - t_kill:.1f} s"),
            ("total demo time", f"{time.monotonic() - t_start:.1f} s"),
        ]))
        if lost:
            _say(f"FAILED: {len(lost)} acknowledged messages missing, e.g. {lost[:3]}")
            return 1
        _say("OK: nothing acknowledged was lost")
        return 0
    finally:
        for p in producers:
            ray.kill(p)
        if dep is not None:
            dep.teardown(graceful=True)
        ray.shutdown()
        if not keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="local Ray: 2 NameServers, 3 brokers, producers, a broker kill, a full check")
    p.add_argument("--rate", type=float, default=100.0, help="messages per second per producer (default 100)")
    p.add_argument("--duration", type=float, default=9.0, help="seconds of sending (default 9)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep-data", action="store_true", help="keep the brokers' store directory")
    p.set_defaults(func=lambda a: run_demo(a.rate, a.duration, a.seed, a.keep_data))
