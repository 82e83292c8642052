"""Run on a `ray up` head by tests/e2e/test_ray_up_hosts.py (`ray submit cluster.yaml THIS TOPIC N`):
N messages sent with the project's Producer (routes from the NameServer actors in Ray namespace
`namesrv`, each send over TCP to the broker it picked), then read back by a LitePullConsumer from
the first offset. Prints one JSON line: each send's status and broker, and the bodies read back.

The producer polls its routes (`route_push=False`, RocketMQ's own way): a script this short needs
no pushed route change. (A pushing producer's shutdown now cancels its held long-polls and waits for
its threads: test_producer_ray's test_shutdown_stops_the_route_threads_while_their_polls_are_held.)"""

from __future__ import annotations

import json
import sys

import ray

from clients.consumer.lite_pull_consumer import LitePullConsumer
from clients.producer.producer import Message, Producer
from namesrv.common.waiting import wait_until

GROUP = "RoundTripOnHead"


def main(topic: str, count: int) -> None:
    ray.init(address="auto", namespace="namesrv", log_to_driver=False)
    sends = []
    with Producer(GROUP, namespace="namesrv", route_push=False) as producer:
        for i in range(count):
            result = producer.send(Message(topic, f"round-trip-{i}".encode()))
            sends.append({"status": result.send_status, "broker": result.message_queue.broker_name})
    read: set[str] = set()
    consumer = LitePullConsumer(GROUP, namespace="namesrv", consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(topic, "*")
    with consumer:

        def all_read() -> bool:
            read.update(m.body.decode() for m in consumer.poll(timeout_s=2))
            return len(read) >= count

        wait_until(all_read, 60, f"{count} messages read back from {topic}", interval_s=0)
    print(json.dumps({"sends": sends, "read": sorted(read)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
