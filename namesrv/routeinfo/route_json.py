"""A route's JSON body assembled from the JSON of its parts, each written once.

A route names one QueueData and one BrokerData per broker group hosting the topic; across a
NameServer's 10,000s of routes the same few parts recur (the tables keep one QueueData per shape per
group, the route assembler one BrokerData copy per group version). `RouteJson.dumps` writes each
part with `fastjson` the first time it meets it and joins the parts' bytes from then on: the bytes
are exactly `fastjson.dumps(route.to_wire())`'s (fastjson writes a list as its items joined by
commas and an object's fields in alphabetical order; the parts are written by fastjson itself), at
a fraction of the cost. A route spanning 300 groups took ~4 ms to encode whole, and every change
to it (a registration storm changes every route) is one more encoding on the NameServer's loop.
"""

from __future__ import annotations

from namesrv.protocol import fastjson
from namesrv.protocol.models import BrokerData, QueueData, TopicRouteData

PARTS_MAX = 1 << 16
"""Parts remembered at most (per JSON flavour); past it the memory starts again empty. The tables
hold a few QueueData shapes per group and one BrokerData per group version, so a NameServer of 1,000
groups stays far below it; only groups gone long ago are dropped."""


class RouteJson:
    """Route bodies from remembered parts. QueueData is frozen (remembered by value); a BrokerData
    in a route is the assembler's copy for one group version, never changed once built, so it is
    remembered by identity (the entry keeps the object, so its id cannot be reused meanwhile)."""

    def __init__(self) -> None:
        self._queues: tuple[dict[QueueData, bytes], dict[QueueData, bytes]] = ({}, {})
        self._groups: tuple[dict[int, tuple[BrokerData, bytes]], dict[int, tuple[BrokerData, bytes]]] = ({}, {})
        self.parts_written = 0
        """Parts written with fastjson (the rest were remembered)."""

    def dumps(self, route: TopicRouteData, *, standard: bool) -> bytes:
        """`fastjson.dumps(route.to_wire(), standard=standard)`, byte for byte."""
        queues = self._queues[standard]
        groups = self._groups[standard]
        out = [b'{"brokerDatas":[', b",".join([self._group(groups, bd, standard) for bd in route.broker_datas]), b"]"]
        servers = route.filter_server_table
        if servers is not None:
            out.append(b',"filterServerTable":')
            out.append(fastjson.dumps(servers, standard=standard) if servers else b"{}")
        if route.order_topic_conf is not None:
            out.append(b',"orderTopicConf":')
            out.append(fastjson.dumps(route.order_topic_conf, standard=standard))
        out += [b',"queueDatas":[', b",".join([self._queue(queues, qd, standard) for qd in route.queue_datas]), b"]}"]
        return b"".join(out)

    def _queue(self, queues: dict[QueueData, bytes], qd: QueueData, standard: bool) -> bytes:
        part = queues.get(qd)
        if part is None:
            if len(queues) >= PARTS_MAX:
                queues.clear()
            part = queues[qd] = fastjson.dumps(qd.to_wire(), standard=standard)
            self.parts_written += 1
        return part

    def _group(self, groups: dict[int, tuple[BrokerData, bytes]], bd: BrokerData, standard: bool) -> bytes:
        held = groups.get(id(bd))
        if held is None or held[0] is not bd:
            if len(groups) >= PARTS_MAX:
                groups.clear()
            held = groups[id(bd)] = (bd, fastjson.dumps(bd.to_wire(), standard=standard))
            self.parts_written += 1
        return held[1]
