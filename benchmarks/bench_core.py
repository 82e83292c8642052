"""Per-call cost of the NameServer core's hot paths at a small and a large topic table.

    bash run.sh bench bench_core [--iterations N] [--quick]

Two tables, each built once: 100 and 100,000 topics over 100 broker groups (masters), every topic
on 3 brokers. Measured per call with time.perf_counter_ns, GC paused while timing:

- pickup_topic_route_data (a route lookup, topics taken in a shuffled order);
- register_broker with an UNCHANGED DataVersion (the 30 s heartbeat path);
- REGISTER_TOPIC_IN_NAMESRV of one new topic (what a broker with enableSingleTopicRegister sends
  instead of its whole table when a topic is created).

Both must cost the same at either size (ratio ~1): a lookup touches only the brokers that host the
topic, and an unchanged heartbeat never walks the topic table. For contrast, the one-off costs
that do walk a broker's topics (3 topics per broker at the small size, 3,000 at the large one).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable

from _common import print_machine

from namesrv.common.clock import ManualClock
from namesrv.common.stats import percentile
from namesrv.protocol.codes import RequestCode
from namesrv.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.remoting.command import RemotingRequest
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager

BROKERS = 100
REPLICAS = 3
SIZES = (100, 100_000)
CLUSTER = "BenchCluster"


def broker_name(i: int) -> str:
    return f"broker-{i:03d}"


def broker_addr(i: int) -> str:
    return f"10.0.{i // 250}.{i % 250 + 1}:10911"


def topic_tables(topics: int) -> list[dict[str, TopicConfig]]:
    """Topic j lives on brokers j, j+1, j+2 (mod 100): every broker hosts topics * 3 / 100."""
    tables: list[dict[str, TopicConfig]] = [{} for _ in range(BROKERS)]
    for j in range(topics):
        tc = TopicConfig(topic_name=f"Topic{j:06d}", read_queue_nums=8, write_queue_nums=8)
        for r in range(REPLICAS):
            tables[(j + r) % BROKERS][tc.topic_name] = tc
    return tables


def timed(fn: Callable[[int], object], calls: int) -> list[int]:
    """Per-call nanoseconds of fn(i) for i in range(calls), GC paused."""
    samples = [0] * calls
    clock = time.perf_counter_ns
    gc.collect()
    gc.disable()
    try:
        for i in range(calls):
            start = clock()
            fn(i)
            samples[i] = clock() - start
    finally:
        gc.enable()
    return samples


def summary(samples: list[int]) -> tuple[float, float]:
    """(median, p99) in microseconds."""
    return statistics.median(samples) / 1000, (percentile(samples, 0.99) or 0) / 1000


class Bench:
    def __init__(self, topics: int, iterations: int) -> None:
        self.topics = topics
        self.iterations = iterations
        self.clock = ManualClock()
        self.rim = RouteInfoManager(NamesrvConfig(), self.clock)
        tables = topic_tables(topics)
        self.version = DataVersion(1_700_000_000_000, 1)
        self.wrappers = [
            TopicConfigSerializeWrapper(topic_config_table=table, data_version=self.version) for table in tables
        ]
        self.results: dict[str, tuple[float, float, int]] = {}

        # One-off: each broker's first registration writes all its topics.
        first = timed(lambda i: self._register(i, self.wrappers[i]), BROKERS)
        self.results["first"] = (*summary(first), BROKERS)
        assert len(self.rim.topic_queue_table) == topics
        assert sum(len(m) for m in self.rim.topic_queue_table.values()) == topics * REPLICAS

    def _register(self, i: int, wrapper: TopicConfigSerializeWrapper) -> object:
        return self.rim.register_broker(CLUSTER, broker_addr(i), broker_name(i), 0, "", wrapper, [], None, None)

    def run(self) -> None:
        rng = random.Random(42)
        names = [f"Topic{rng.randrange(self.topics):06d}" for _ in range(self.iterations)]
        pickup = self.rim.pickup_topic_route_data
        for name in names[:2_000]:  # warm up
            pickup(name)
        samples = timed(lambda i: pickup(names[i]), self.iterations)
        assert pickup(names[0]) is not None
        self.results["pickup"] = (*summary(samples), self.iterations)
        # The same 100 topics over and over: what a lookup costs once its data is in the CPU cache.
        hot = names[:100]
        samples = timed(lambda i: pickup(hot[i % 100]), self.iterations)
        self.results["pickup_hot"] = (*summary(samples), self.iterations)

        seq = self.rim.route_seq
        for i in range(2_000):
            self._register(i % BROKERS, self.wrappers[i % BROKERS])
        samples = timed(lambda i: self._register(i % BROKERS, self.wrappers[i % BROKERS]), self.iterations)
        assert self.rim.route_seq == seq, "an unchanged heartbeat must not change any route"
        self.results["heartbeat"] = (*summary(samples), self.iterations)

        # One-off: a changed DataVersion with the same topics walks the broker's table, writes nothing.
        changed = [
            TopicConfigSerializeWrapper(
                topic_config_table=w.topic_config_table, data_version=DataVersion(self.version.timestamp, 2)
            )
            for w in self.wrappers
        ]
        samples = timed(lambda i: self._register(i, changed[i]), BROKERS)
        assert self.rim.route_seq == seq
        self.results["changed"] = (*summary(samples), BROKERS)

        # One-off: the same heartbeat sent through the processor with the full body (msgpack decode +
        # pydantic validation of the broker's whole topic table) -- why brokers send a lite heartbeat.
        processor = DefaultRequestProcessor(self.rim, KVConfigManager(None))
        calls = 20

        def full_requests(counter: int) -> list[RemotingRequest]:
            requests = []
            for i in range(calls):
                body = encode_body({"topicConfigSerializeWrapper": {
                    "topicConfigTable": {k: v.to_wire() for k, v in changed[i].topic_config_table.items()},
                    "dataVersion": DataVersion(self.version.timestamp, counter).to_wire(),
                }})
                ext = {"clusterName": CLUSTER, "brokerAddr": broker_addr(i), "brokerName": broker_name(i),
                       "brokerId": 0}
                requests.append(RemotingRequest(RequestCode.REGISTER_BROKER, ext, body))
            return requests

        requests = full_requests(2)
        samples = timed(lambda i: processor.process_request(requests[i]), calls)
        assert all(processor.process_request(r).ok for r in requests[:1])
        self.results["processor_full"] = (*summary(samples), calls)
        bumped = full_requests(3)  # what a topic creation costs a broker that registers its whole table
        samples = timed(lambda i: processor.process_request(bumped[i]), calls)
        self.results["processor_full_changed"] = (*summary(samples), calls)

        lite = [
            RemotingRequest(RequestCode.REGISTER_BROKER, r.ext_fields, None) for r in requests
        ]  # no body: liveness only
        samples = timed(lambda i: processor.process_request(lite[i % calls]), self.iterations)
        self.results["processor_lite"] = (*summary(samples), self.iterations)

        # A topic created on a broker: REGISTER_TOPIC_IN_NAMESRV carries that topic alone (RocketMQ 5's
        # enableSingleTopicRegister), where a registration carries the whole table (processor_full).
        singles = [
            RemotingRequest(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": f"Single{i:06d}"}, encode_body(
                {"queueDatas": [{"brokerName": broker_name(i % BROKERS), "readQueueNums": 8, "writeQueueNums": 8,
                                 "perm": 6, "topicSysFlag": 0}]}))
            for i in range(self.iterations)
        ]
        samples = timed(lambda i: processor.process_request(singles[i]), self.iterations)
        assert f"Single{self.iterations - 1:06d}" in self.rim.topic_queue_table
        self.results["processor_single"] = (*summary(samples), self.iterations)


ROWS = [
    ("pickup", "pickup_topic_route_data, random topic"),
    ("pickup_hot", "pickup_topic_route_data, 100 hot topics (cached)"),
    ("heartbeat", "register_broker, unchanged DataVersion"),
    (None, "contrast: costs that grow with a broker's topics (3 vs 3,000 per broker)"),
    ("first", "register_broker, first registration"),
    ("changed", "register_broker, changed DataVersion, same topics"),
    ("processor_full", "processor REGISTER_BROKER, full msgpack body, same version"),
    ("processor_full_changed", "processor REGISTER_BROKER, full msgpack body, changed version"),
    ("processor_lite", "processor REGISTER_BROKER, no body (lite)"),
    ("processor_single", "processor REGISTER_TOPIC_IN_NAMESRV, one new topic"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=50_000, help="timed calls per hot-path operation")
    parser.add_argument("--quick", action="store_true", help="5,000 timed calls per operation")
    args = parser.parse_args()
    if args.quick:
        args.iterations = 5_000

    print_machine()
    overhead = summary(timed(lambda i: None, 100_000))[0] * 1000
    print(f"timer + call overhead (empty lambda): median {overhead:.0f} ns, included in every figure below")
    print(
        f"tables: {BROKERS} broker groups (masters), each topic on {REPLICAS} brokers; "
        f"{args.iterations:,} timed calls per hot-path operation; GC paused while timing"
    )
    benches = {}
    for topics in SIZES:
        start = time.perf_counter()
        bench = Bench(topics, args.iterations)
        built = time.perf_counter() - start
        bench.run()
        benches[topics] = bench
        print(f"  built {topics:,} topics ({topics * REPLICAS:,} queue entries) in {built:.2f} s")

    small, big = (benches[s].results for s in SIZES)
    head = f"{'operation':<74}{'100 topics':>22}{'100,000 topics':>22}{'big/small':>11}"
    print()
    print(head)
    print(f"{'':<74}{'median / p99 µs':>22}{'median / p99 µs':>22}{'(median)':>11}")
    print("-" * len(head))
    for key, label in ROWS:
        if key is None:
            print(f"{label}")
            continue
        (m1, p1, n1), (m2, p2, _) = small[key], big[key]
        calls = f" [{n1:,} calls]" if n1 < 1_000 else ""
        print(f"{label + calls:<74}{m1:>11.2f} / {p1:>8.2f}{m2:>11.2f} / {p2:>8.2f}{m2 / m1:>10.2f}x")


if __name__ == "__main__":
    main()
