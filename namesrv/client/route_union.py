"""One topic route out of several NameServers' views of it (beyond RocketMQ, issue 36).

NameServers never talk to each other, so they disagree while a broker reaches some of them and not
others: the one that stopped hearing from broker X expires it (brokerChannelExpiredTime) while the
others keep it. A RocketMQ client asks one NameServer at a time, so a client that happens to ask the
one that lost X stops writing to X (and a consumer group whose members ask different NameServers
allocates from different queue lists: some queues owned twice, some by nobody) although the client
itself reaches X. The union of the views keeps every broker that any answering NameServer lists.

The merge is deterministic: `views` come in the client's NameServer order (sorted names, the same for
every client), and each broker's queues and addresses are taken whole from the first view that lists
it. So members of one group that reach the same NameServers compute one queue list, whichever
NameServer each of them happens to prefer, and a broker the views agree on is exactly as every view
has it.

Why it is safe:
- A stale broker (listed by one NameServer after it died, until that NameServer expires it) costs a
  failed attempt that the send engine retries on another broker, as a RocketMQ client whose own
  NameServer is the stale one pays today; a consumer owning its queues reads nothing from them,
  and no queue a live broker serves goes unowned, since allocation covers the whole list.
- A view is only as old as its NameServer's last answer: the caller drops the view of a NameServer
  that stops answering (a client cut off from a NameServer does not keep what it said before).
- Split brain after a failover (one NameServer still naming the old master of a set, another the new
  one): the first view wins, as the one NameServer a RocketMQ client asks would; what decides a
  write is the broker, which refuses sends once it is no longer master (actors.broker.ha) and, cut
  off from the controller, once its lease ran out, before another master can be elected
  (namesrv.broker.lease).
"""

from __future__ import annotations

from collections.abc import Sequence

from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData


def union_of_routes(views: Sequence[TopicRouteData | None]) -> TopicRouteData | None:
    """The union of `views` (None: that NameServer has no route for the topic), or None when no view
    has one. Filter servers and the orderly topic config come from the first view that has a route."""
    routes = [r for r in views if r is not None]
    if not routes:
        return None
    if len(routes) == 1:
        return routes[0]
    queues: dict[str, QueueData] = {}
    brokers: dict[str, BrokerData] = {}
    for route in routes:
        listed = {qd.broker_name for qd in route.queue_datas} | {bd.broker_name for bd in route.broker_datas}
        fresh = listed - queues.keys() - brokers.keys()
        queues.update((qd.broker_name, qd) for qd in route.queue_datas if qd.broker_name in fresh)
        brokers.update((bd.broker_name, bd) for bd in route.broker_datas if bd.broker_name in fresh)
    first = routes[0]
    return TopicRouteData(
        queue_datas=tuple(queues[name] for name in sorted(queues)),
        broker_datas=tuple(brokers[name] for name in sorted(brokers)),
        filter_server_table=first.filter_server_table,
        order_topic_conf=first.order_topic_conf,
    )
