"""What the consumer tests read back from the brokers: a group's committed offsets."""

from __future__ import annotations

from actors.deployment.launcher import Deployment
from clients.consumer.broker_api import ConsumerBrokerApi
from clients.consumer.routes import ConsumerRoutes
from clients.impl.namesrv_client import NameServerClient
from namesrv.client.offsets import OffsetNotFound


def committed(dep: Deployment, group: str, topic: str) -> int:
    """The group's offsets on the brokers summed over the topic's queues (QUERY_CONSUMER_OFFSET
    over TCP, as a consumer reads them); a queue without one counts 0."""
    routes = ConsumerRoutes(NameServerClient(list(dep.namesrvs), dep.spec.namespace))
    routes.refresh(topic)
    api = ConsumerBrokerApi("offset-reader@tests", lambda conn, req: None)
    total = 0
    try:
        for mq in routes.queues(topic):
            addr = routes.broker_addr(mq.broker_name)
            assert addr is not None, f"no broker for {mq}"
            try:
                total += api.query_consumer_offset(addr, group, mq)
            except OffsetNotFound:
                pass
    finally:
        api.close()
    return total
