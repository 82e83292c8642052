"""bench_actors, part 3: heartbeat size and cost at few vs many topics.

The bytes a real broker sends (stats `last_body_bytes` of its full registration vs its lite
heartbeat, which carries no topic table), and the NameServer's time per BROKER_HEARTBEAT and per
full REGISTER_BROKER, both as an actor round trip from the driver and as server-side core time (the
request processor in process). `bench_heartbeats` runs it; `print_heartbeats` prints it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import ray
from _common import latency_ms

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from namesrv.common.clock import ManualClock
from namesrv.protocol.bodies import body_crc32
from namesrv.protocol.codes import RequestCode
from namesrv.protocol.constants import PERM_ALL, Perm
from namesrv.protocol.models import TopicConfig
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.remoting.command import RemotingRequest
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager

Deploy = Callable[[str, int, list[BrokerSpec]], Deployment]
"""(data dir, NameServer count, brokers) -> a started deployment"""


def seed_topics(data_dir: str, broker_addr: str, n: int) -> None:
    """Write a broker's topics.json before it starts (creating 10k topics one by one re-registers the
    whole table each time, which is what we are measuring, not what we want to wait for)."""
    path = Path(data_dir) / broker_addr / "config" / "topics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = {
        f"Topic{i:05d}": TopicConfig(topic_name=f"Topic{i:05d}", read_queue_nums=8, write_queue_nums=8).to_wire()
        for i in range(n)
    }
    path.write_text(json.dumps({"topicConfigTable": table, "dataVersion": {"timestamp": 1, "counter": 1}}))


def register_body(n: int, counter: int) -> bytes:
    table = {
        f"Topic{i:05d}": {"topicName": f"Topic{i:05d}", "readQueueNums": 8, "writeQueueNums": 8,
                          "perm": int(Perm.READ | Perm.WRITE)}
        for i in range(n)
    }
    table["TBW102"] = {"topicName": "TBW102", "readQueueNums": 8, "writeQueueNums": 8, "perm": PERM_ALL}
    return encode_body(
        {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": table,
                "dataVersion": {"timestamp": 1_700_000_000_000, "counter": counter},
            },
            "filterServerList": [],
        }
    )


def ident(n: int) -> dict[str, Any]:
    """A synthetic broker beside the real ones; a 1 h heartbeat timeout keeps it from expiring."""
    return {"clusterName": "BenchCluster", "brokerAddr": f"bench-{n}-0", "brokerName": f"bench-{n}", "brokerId": 0,
            "heartbeatTimeoutMillis": 3_600_000}


def time_calls(fn: Any, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench_heartbeats(deploy: Deploy, data_dir: str, topic_counts: list[int], hb_reps: int,
                     reg_reps: int) -> dict[str, Any]:
    # (a) what real brokers send: seeded with N topics, registered once in full, then lite heartbeats.
    specs = [BrokerSpec(f"broker-t{n}") for n in topic_counts]
    for spec, n in zip(specs, topic_counts, strict=True):
        seed_topics(data_dir, spec.addr, n)
    dep = deploy(data_dir, 1, specs)
    sent: dict[int, dict[str, Any]] = {}
    rtt: dict[int, dict[str, list[float]]] = {}
    try:
        for spec, n in zip(specs, topic_counts, strict=True):
            broker = dep.brokers[spec.addr]
            info = wait_stats(broker, lambda s: s["full_registrations"] >= 1 and s["lite_heartbeats"] >= 1)
            first = info["stats"]
            later = wait_stats(broker, lambda s, f=first: s["lite_heartbeats"] >= f["lite_heartbeats"] + 4)["stats"]
            lite_request = msgpack.packb(
                {"clusterName": info["cluster"], "brokerAddr": spec.addr, "brokerName": spec.broker_name,
                 "brokerId": 0}
            )
            sent[n] = {
                "topics": info["topics"],
                "full_body_bytes": first["last_body_bytes"],
                "full_registrations": (first["full_registrations"], later["full_registrations"]),
                "lite_heartbeats": (first["lite_heartbeats"], later["lite_heartbeats"]),
                "lite_identity_bytes": len(lite_request),
            }

        # (b) NameServer time per request, as an actor round trip from the driver.
        ns = dep.namesrvs["namesrv-0"]
        for n in topic_counts:
            idn = ident(n)
            bodies = [register_body(n, c) for c in range(1, reg_reps + 2)]
            ray.get(ns.register_broker.remote(bodies[0], **idn))
            hb = time_calls(lambda idn=idn: ray.get(ns.broker_heartbeat.remote(**idn)), hb_reps)
            same = time_calls(
                lambda idn=idn, b=bodies[0]: ray.get(ns.register_broker.remote(b, **idn)), reg_reps
            )
            changed_iter = iter(bodies[1:])
            changed = time_calls(
                lambda idn=idn, it=changed_iter: ray.get(ns.register_broker.remote(next(it), **idn)), reg_reps
            )
            assert ray.get(ns.broker_heartbeat.remote(**idn)).ext_fields["known"]
            rtt[n] = {"heartbeat": hb, "register_same_version": same, "register_new_version": changed}
    finally:
        dep.teardown(graceful=False)

    # (c) server-side core time: the same requests through the request processor, in process.
    core: dict[int, dict[str, list[float]]] = {}
    for n in topic_counts:
        rim = RouteInfoManager(NamesrvConfig(), ManualClock())
        proc = DefaultRequestProcessor(rim, KVConfigManager(None))
        idn = ident(n)
        bodies = [register_body(n, c) for c in range(1, reg_reps + 2)]
        crcs = [body_crc32(b) for b in bodies]
        assert proc.process_request(RemotingRequest(RequestCode.REGISTER_BROKER, idn, bodies[0])).ok
        hb_req = RemotingRequest(RequestCode.BROKER_HEARTBEAT, idn)
        hb = time_calls(lambda r=hb_req, p=proc: p.process_request(r), hb_reps * 10)
        same_req = RemotingRequest(RequestCode.REGISTER_BROKER, {**idn, "bodyCrc32": crcs[0]}, bodies[0])
        same = time_calls(lambda r=same_req, p=proc: p.process_request(r), reg_reps)
        reqs = iter(
            RemotingRequest(RequestCode.REGISTER_BROKER, {**idn, "bodyCrc32": c}, b)
            for b, c in zip(bodies[1:], crcs[1:], strict=True)
        )
        changed = time_calls(lambda p=proc, it=reqs: p.process_request(next(it)), reg_reps)
        core[n] = {"heartbeat": hb, "register_same_version": same, "register_new_version": changed}
    return {"sent": sent, "rtt": rtt, "core": core, "body_bytes": {n: len(register_body(n, 1)) for n in topic_counts}}


def wait_stats(broker: Any, predicate: Any, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        info = ray.get(broker.get_runtime_info.remote())
        if predicate(info["stats"]):
            return info
        if time.monotonic() > deadline:
            raise TimeoutError(f"broker stats never satisfied the condition: {info['stats']}")
        time.sleep(0.1)


def print_heartbeats(hb: dict[str, Any]) -> None:
    print("  (a) bytes a real broker sends (1 NameServer, fast profile)")
    for n, s in hb["sent"].items():
        print(f"      {n:>6} topics (+system = {s['topics']}): full registration body "
              f"{s['full_body_bytes']:>9,} B; lite heartbeat 0 topic bytes (identity "
              f"~{s['lite_identity_bytes']} B); full registrations {s['full_registrations'][0]}"
              f"->{s['full_registrations'][1]} while lite {s['lite_heartbeats'][0]}"
              f"->{s['lite_heartbeats'][1]}")
    for label, key in (("(b) actor round trip, driver -> NameServer", "rtt"),
                       ("(c) server side: request processor in process (no Ray)", "core")):
        print(f"  {label}")
        for n, t in hb[key].items():
            print(f"      {n:>6} topics  heartbeat            {latency_ms(t['heartbeat'])}")
            print(f"      {n:>6} topics  register, same ver.  {latency_ms(t['register_same_version'])}")
            print(f"      {n:>6} topics  register, new ver.   {latency_ms(t['register_new_version'])}")
    print(f"  register body bytes (synthetic): {hb['body_bytes']}")
