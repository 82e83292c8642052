"""The v2 messages the proxy's hot RPCs answer with, built field by field from the protocol's classes
(namesrv.proxy.descriptors): statuses, QueryRoute's and QueryAssignment's queues, SendMessage's and
AckMessage's entries, ReceiveMessage's messages. No json_format on these paths: a ParseDict of an
8-queue QueryRoute answer took ~300 µs, a popped message's ~250 µs (its timestamps parsed back from
strings); built directly, a few µs. The decisions (which queues, which status, which properties)
stay in the pure mapping (namesrv.proxy.route, .consume, .status); this module only spells them as
protobuf.
"""

from __future__ import annotations

import hashlib
from typing import Any

from namesrv.protocol.message.decoder import MessageExt
from namesrv.proxy import consume as cm
from namesrv.proxy.descriptors import Protocol
from namesrv.proxy.route import ALL_MESSAGE_TYPES, RouteQueue, address_scheme, local_endpoint
from namesrv.proxy.status import Status


class Answers:
    """Builders of one proxy's answers. A cluster-mode proxy answers every broker at itself, under
    the host the client dialled (RouteActivity: the request's endpoints, at this proxy's port); a
    local-mode one (`local`) answers each broker at its own proxy (route.local_endpoint)."""

    def __init__(self, p: Protocol, host: str, port: int, local: bool = False) -> None:
        self.p = p
        self._status = p.cls("Status")
        self._codes = p.enum_numbers("Code")
        self._permissions = p.enum_numbers("Permission")
        self._types = p.enum_numbers("MessageType")
        self._digest_md5 = p.enum("DigestType", "MD5")
        self._identity = p.enum("Encoding", "IDENTITY")
        self._all_types = [self._types[t] for t in ALL_MESSAGE_TYPES]
        self._queue, self._broker = p.cls("MessageQueue"), p.cls("Broker")
        self._assignment = p.cls("Assignment")
        self._send_entry, self._ack_entry = p.cls("SendResultEntry"), p.cls("AckMessageResultEntry")
        self._received = p.cls("ReceiveMessageResponse")
        self.port = port
        self.endpoints = self._endpoints_at(host, port)
        self.local = local
        self._local_endpoints: dict[str, Any] = {}
        """A local-mode route's endpoints by broker address."""
        self.ok = self.status("OK", "OK")
        """The OK status (constructors copy it: never changed in place)."""

    def status(self, code: str, message: str) -> Any:
        """A v2 Status of the Code named `code`."""
        return self._status(code=self._codes[code], message=message)

    def of(self, status: Status) -> Any:
        return self.ok if status.code == "OK" and status.message == "OK" else self.status(status.code, status.message)

    # ------------------------------------------------------------------ routes
    def _endpoints_at(self, host: str, port: int) -> Any:
        return self.p.new("Endpoints", scheme=self.p.enum("AddressScheme", address_scheme(host)),
                          addresses=[self.p.new("Address", host=host, port=port)])

    def dialled(self, requested: Any) -> Any:
        """This proxy's endpoints as the client dialled them: the hosts of a route request's
        endpoints (its access point) at this proxy's port, as RouteActivity.convertToAddressList;
        the proxy's own endpoint when the request names none. A client behind another name or
        address for this host (a load balancer, another network) is answered with the one it uses."""
        addresses = requested.addresses if requested is not None else ()
        if not addresses:
            return self.endpoints
        return self.p.new("Endpoints", scheme=requested.scheme,
                          addresses=[self.p.new("Address", host=a.host, port=self.port) for a in addresses])

    def broker_endpoints(self, broker_addr: str, via: Any = None) -> Any:
        """Where a client reaches the broker at `broker_addr`: this proxy (cluster mode: `via`, the
        endpoints `dialled` gives, else its own), or the proxy inside that broker (local mode)."""
        if not self.local:
            return self.endpoints if via is None else via
        found = self._local_endpoints.get(broker_addr)
        if found is None:
            found = self._local_endpoints[broker_addr] = self._endpoints_at(*local_endpoint(broker_addr))
        return found

    def message_queue(self, topic: Any, q: RouteQueue, accept_types: bool = True, via: Any = None) -> Any:
        """A queue of `topic` (a v2 Resource) with its broker's endpoint (see `broker_endpoints`)."""
        broker = self._broker(name=q.broker_name, id=q.broker_id, endpoints=self.broker_endpoints(q.broker_addr, via))
        return self._queue(topic=topic, id=q.queue_id, permission=self._permissions[q.permission], broker=broker,
                           accept_message_types=self._all_types if accept_types else ())

    def message_queues(self, topic: Any, queues: list[RouteQueue], requested: Any = None) -> list[Any]:
        """QueryRoute's queues, answered at the endpoints the request dialled (`requested`)."""
        via = None if self.local else self.dialled(requested)
        return [self.message_queue(topic, q, via=via) for q in queues]

    def assignments(self, topic: Any, queues: list[RouteQueue], requested: Any = None) -> list[Any]:
        """QueryAssignment's queues, answered at the endpoints the request dialled (`requested`)."""
        via = None if self.local else self.dialled(requested)
        return [self._assignment(message_queue=self.message_queue(topic, q, accept_types=False, via=via))
                for q in queues]

    # ------------------------------------------------------------------ send & ack
    def send_entry(self, status: Status, message_id: str = "", offset: int = 0, recall_handle: str = "",
                   transaction_id: str = "") -> Any:
        return self._send_entry(status=self.of(status), message_id=message_id, offset=offset,
                                recall_handle=recall_handle, transaction_id=transaction_id)

    def ack_entry(self, status: Status, message_id: str, receipt_handle: str) -> Any:
        return self._ack_entry(status=self.of(status), message_id=message_id, receipt_handle=receipt_handle)

    # ------------------------------------------------------------------ receive
    def received(self, m: MessageExt, topic: Any, invisible_ms: int) -> Any:
        """A ReceiveMessageResponse carrying the popped `m` as a v2 Message (GrpcConverter.buildMessage);
        ProxyError when the broker gave it no handle."""
        handle = cm.popped_handle(m)
        props = m.properties
        out = self._received()
        msg = out.message
        msg.topic.CopyFrom(topic)
        msg.body = m.body
        msg.user_properties.update(cm.user_properties(props))
        sp = msg.system_properties
        sp.message_id = m.unique_key or m.msg_id
        sp.body_digest.type = self._digest_md5
        sp.body_digest.checksum = hashlib.md5(m.body).hexdigest().upper()
        sp.body_encoding = self._identity  # the decoder has inflated a compressed body already
        sp.message_type = self._types[cm.message_type(props)]
        _set_ms(sp.born_timestamp, m.born_timestamp)
        sp.born_host = props.get("__BORNHOST") or m.born_host
        _set_ms(sp.store_timestamp, m.store_timestamp)
        sp.store_host = m.store_host
        sp.receipt_handle = handle.encode()
        sp.queue_id = m.queue_id
        sp.queue_offset = m.queue_offset
        _set_ms(sp.invisible_duration, invisible_ms)
        sp.delivery_attempt = m.reconsume_times + 1
        tags = m.tags
        if tags:
            sp.tag = tags
        keys = m.keys
        if keys:
            sp.keys.extend(keys)
        deliver = props.get("TIMER_DELIVER_MS")
        if deliver is not None and deliver.isdigit():
            _set_ms(sp.delivery_timestamp, int(deliver))
        if "__SHARDINGKEY" in props:
            sp.message_group = props["__SHARDINGKEY"]
        if "TRACE_CONTEXT" in props:
            sp.trace_context = props["TRACE_CONTEXT"]
        if "DLQ_ORIGIN_TOPIC" in props and "DLQ_ORIGIN_MESSAGE_ID" in props:
            sp.dead_letter_queue.topic = props["DLQ_ORIGIN_TOPIC"]
            sp.dead_letter_queue.message_id = props["DLQ_ORIGIN_MESSAGE_ID"]
        return out


def _set_ms(t: Any, ms: int) -> None:
    """A Timestamp `ms` milliseconds after the epoch (before it: the epoch), or a Duration of `ms`."""
    seconds, rest = divmod(max(ms, 0), 1000)
    t.seconds = seconds
    t.nanos = rest * 1_000_000
