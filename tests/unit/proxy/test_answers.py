"""The v2 answers built field by field (namesrv.proxy.answers): what json_format made of the same
decisions before, now spelt directly; each checked through its JSON form, as a client reads it."""

from __future__ import annotations

import hashlib

import pytest
from google.protobuf import json_format

from namesrv.protocol.message.decoder import MessageExt
from namesrv.proxy.answers import Answers
from namesrv.proxy.descriptors import load
from namesrv.proxy.route import RouteQueue
from namesrv.proxy.status import ProxyError, Status

P = load()
A = Answers(P, "127.0.0.1", 8081)
TOPIC = P.cls("Resource")(name="T", resource_namespace="ns")


def as_json(msg: object) -> dict[str, object]:
    out: dict[str, object] = json_format.MessageToDict(msg, preserving_proto_field_name=True)  # type: ignore[arg-type]
    return out


def test_route_queues_name_the_proxy_as_their_broker() -> None:
    queues = [RouteQueue("a", 0, 1, "READ_WRITE"), RouteQueue("a", 1, 0, "NONE")]
    answer = as_json(P.new("QueryRouteResponse", status=A.ok, message_queues=A.message_queues(TOPIC, queues)))
    proxy = {"scheme": "IPv4", "addresses": [{"host": "127.0.0.1", "port": 8081}]}
    every_type = ["NORMAL", "FIFO", "DELAY", "TRANSACTION"]
    assert answer == {"status": {"code": "OK", "message": "OK"}, "message_queues": [
        {"topic": {"name": "T", "resource_namespace": "ns"}, "id": 1, "permission": "READ_WRITE",
         "broker": {"name": "a", "endpoints": proxy}, "accept_message_types": every_type},
        {"topic": {"name": "T", "resource_namespace": "ns"}, "permission": "NONE",
         "broker": {"name": "a", "id": 1, "endpoints": proxy}, "accept_message_types": every_type}]}
    (assignment,) = A.assignments(TOPIC, [RouteQueue("b", 0, -1, "READ")])
    assert as_json(assignment) == {"message_queue": {"topic": {"name": "T", "resource_namespace": "ns"}, "id": -1,
                                                     "permission": "READ", "broker": {"name": "b", "endpoints": proxy}}}
    assert as_json(Answers(P, "proxy.local", 1).endpoints)["scheme"] == "DOMAIN_NAME"


def test_a_local_mode_proxy_names_each_broker_at_its_own_endpoint() -> None:
    local = Answers(P, "127.0.0.1", 10913, local=True)
    queues = [RouteQueue("a", 0, 0, "READ_WRITE", "127.0.0.1:10911"), RouteQueue("b", 0, 0, "READ_WRITE", "h.b:20911")]
    at = [as_json(q)["broker"]["endpoints"] for q in local.message_queues(TOPIC, queues)]  # type: ignore[index]
    assert at == [{"scheme": "IPv4", "addresses": [{"host": "127.0.0.1", "port": 10913}]},
                  {"scheme": "DOMAIN_NAME", "addresses": [{"host": "h.b", "port": 20913}]}]
    assert local.broker_endpoints("h.b:20911") is local.broker_endpoints("h.b:20911"), "built once per broker"


def test_a_cluster_mode_route_names_the_proxy_as_the_client_dialled_it() -> None:
    """RouteActivity: the hosts of the request's endpoints (the client's access point), at this
    proxy's port; the proxy's own endpoint when the request names none; local mode ignores them."""
    dialled = P.new("Endpoints", scheme=P.enum("AddressScheme", "DOMAIN_NAME"),
                    addresses=[P.new("Address", host="mq.example.com", port=443)])
    queues = [RouteQueue("a", 0, 0, "READ_WRITE", "127.0.0.1:10911")]
    [queue] = A.message_queues(TOPIC, queues, dialled)
    assert as_json(queue)["broker"]["endpoints"] == {  # type: ignore[index]
        "scheme": "DOMAIN_NAME", "addresses": [{"host": "mq.example.com", "port": 8081}]}
    [assignment] = A.assignments(TOPIC, queues, dialled)
    assert as_json(assignment)["message_queue"]["broker"]["endpoints"]["addresses"] == [  # type: ignore[index]
        {"host": "mq.example.com", "port": 8081}]
    [unnamed] = A.message_queues(TOPIC, queues, P.new("Endpoints"))
    assert as_json(unnamed)["broker"]["endpoints"]["addresses"] == [{"host": "127.0.0.1", "port": 8081}]  # type: ignore[index]
    local = Answers(P, "127.0.0.1", 10913, local=True)
    [own] = local.message_queues(TOPIC, queues, dialled)
    assert as_json(own)["broker"]["endpoints"]["addresses"] == [{"host": "127.0.0.1", "port": 10913}]  # type: ignore[index]


def test_send_and_ack_entries() -> None:
    ok = A.send_entry(Status("OK", "OK"), "ID1", 42, "", "txn")
    assert as_json(ok) == {"status": {"code": "OK", "message": "OK"}, "message_id": "ID1", "offset": "42",
                           "transaction_id": "txn"}
    refused = A.send_entry(Status("TOO_MANY_REQUESTS", "busy"))
    assert as_json(refused) == {"status": {"code": "TOO_MANY_REQUESTS", "message": "busy"}}
    assert as_json(A.ack_entry(Status("INVALID_RECEIPT_HANDLE", "expired"), "ID1", "h")) == {
        "message_id": "ID1", "receipt_handle": "h", "status": {"code": "INVALID_RECEIPT_HANDLE", "message": "expired"}}


def test_a_popped_message_becomes_a_v2_message() -> None:
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ID1", "color": "red", "__SHARDINGKEY": "g7",
             "POP_CK": "5 1000 2000 0 1 broker-a 3 7", "TIMER_DELIVER_MS": "1700000005500",
             "DLQ_ORIGIN_TOPIC": "O", "DLQ_ORIGIN_MESSAGE_ID": "OID"}
    m = MessageExt("T", 3, 7, 4242, 1_700_000_000_123, 1_700_000_000_000, "10.0.0.1:1", "10.0.0.2:10911", b"body",
                   props, reconsume_times=2)
    answer = A.received(m, TOPIC, 30_000)
    assert answer.message.body == b"body"
    v2 = as_json(answer)["message"]
    assert isinstance(v2, dict)
    assert v2["topic"] == {"name": "T", "resource_namespace": "ns"}
    assert v2["user_properties"] == {"color": "red"}
    assert v2["system_properties"] == {
        "tag": "TagA", "keys": ["k1", "k2"], "message_id": "ID1",
        "body_digest": {"type": "MD5", "checksum": hashlib.md5(b"body").hexdigest().upper()},
        "body_encoding": "IDENTITY", "message_type": "DELAY",
        "born_timestamp": "2023-11-14T22:13:20Z", "born_host": "10.0.0.1:1",
        "store_timestamp": "2023-11-14T22:13:20.123Z", "store_host": "10.0.0.2:10911",
        "delivery_timestamp": "2023-11-14T22:13:25.500Z",
        "receipt_handle": "5 1000 2000 0 1 broker-a 3 7 4242", "queue_id": 3, "queue_offset": "7",
        "invisible_duration": "30s", "delivery_attempt": 3, "message_group": "g7",
        "dead_letter_queue": {"topic": "O", "message_id": "OID"}}
    del props["POP_CK"]
    with pytest.raises(ProxyError):
        A.received(m, TOPIC, 30_000)
