"""The proxy's plain ACL for RocketMQ 5 clients (namesrv.proxy.auth): the metadata the official
clients sign with, checked against a plain_acl.yml; what each RPC needs; malformed headers refused
with UNAUTHORIZED and nothing else."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from namesrv.acl.plain_acl import ANY, PUB, SUB, PlainAccessValidator
from namesrv.proxy import auth
from namesrv.proxy.descriptors import load
from namesrv.proxy.status import ProxyError

P = load()
ACL = """
globalWhiteRemoteAddresses: ["10.9.*.*"]
accounts:
  - accessKey: app
    secretKey: app-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: reader
    secretKey: reader-secret
    topicPerms: ["Orders=SUB"]
    groupPerms: ["GroupA=SUB"]
  - accessKey: lan
    secretKey: lan-secret
    whiteRemoteAddress: 192.168.1.*
    topicPerms: ["Orders=PUB"]
"""
V = PlainAccessValidator.from_yaml(ACL)
STAMP = "20261129T113000Z"
REMOTE = "127.0.0.1:50000"


def metadata(ak: str, sk: str, date_time: str = STAMP) -> dict[str, str]:
    """What the official Python client sends (its Signature.metadata), computed here by hand."""
    sig = hmac.new(sk.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    return {"x-mq-date-time": date_time, "x-mq-client-id": "c1",
            "authorization": f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"}


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(ProxyError) as e:
        call(*args)
    assert e.value.code == "UNAUTHORIZED"
    return e.value.message


def test_the_official_clients_signature_admits_its_account() -> None:
    assert auth.authorization_header("app", "app-secret", STAMP) == metadata("app", "app-secret")["authorization"]
    assert auth.authenticate(V, metadata("app", "app-secret"), REMOTE) == "app"
    # Java clients send the same hex in upper case now and then: hex is hex
    upper = metadata("app", "app-secret")
    upper["authorization"] = upper["authorization"].rsplit("=", 1)[0] + "=" + \
        upper["authorization"].rsplit("=", 1)[1].upper()
    assert auth.authenticate(V, upper, REMOTE) == "app"


def test_a_credential_scope_after_a_slash_names_the_same_account() -> None:
    md = metadata("app", "app-secret")
    md["authorization"] = md["authorization"].replace("Credential=app,", "Credential=app/20261129/rocketmq,")
    assert auth.authenticate(V, md, REMOTE) == "app"


@pytest.mark.parametrize(("md", "why"), [
    ({}, "No accessKey is configured"),
    (metadata("app", "guessed"), "Check signature failed for accessKey=app"),
    (metadata("nobody", "whatever"), "No acl config for nobody"),
    ({**metadata("app", "app-secret"), "x-mq-date-time": "20261129T113001Z"}, "Check signature failed"),
    ({"authorization": metadata("app", "app-secret")["authorization"]}, "carries no x-mq-date-time"),
    ({**metadata("app", "app-secret"), "authorization": "Basic YXBwOmFwcA=="}, "MQv2-HMAC-SHA1"),
    ({**metadata("app", "app-secret"), "authorization": "MQv2-HMAC-SHA1 Credential"}, "without '='"),
    ({**metadata("app", "app-secret"), "authorization": "MQv2-HMAC-SHA1 Signature=00"}, "names no Credential"),
    ({**metadata("app", "app-secret"), "authorization": "MQv2-HMAC-SHA1 Credential=app, Signature=xyz"}, "not hex"),
    ({**metadata("app", "app-secret"), "authorization": "MQv2-HMAC-SHA1 Credential=" + "a" * 2000}, "longer than"),
])
def test_a_call_without_a_valid_signature_is_unauthorized(md: dict[str, str], why: str) -> None:
    assert why in refused(auth.authenticate, V, md, REMOTE)


def test_white_listed_addresses_need_no_signature() -> None:
    assert auth.authenticate(V, {}, "10.9.3.4:1234") is None  # the global white list: no account at all
    unsigned = {"x-mq-date-time": STAMP,  # what the official clients send without credentials
                "authorization": "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature="}
    assert auth.authenticate(V, unsigned, "10.9.3.4:1234") is None
    assert "names no Credential" in refused(auth.authenticate, V, unsigned, REMOTE)
    assert auth.authenticate(V, {**metadata("lan", "wrong"), "x-mq-date-time": STAMP}, "192.168.1.7:99") == "lan"
    assert "Check signature failed" in refused(auth.authenticate, V, metadata("lan", "wrong"), REMOTE)


@given(st.text(max_size=300), st.text(max_size=40))
def test_any_header_is_a_credential_or_unauthorized(header: str, date_time: str) -> None:
    try:
        cred = auth.parse_credential({"authorization": header, "x-mq-date-time": date_time})
    except ProxyError as e:
        assert e.code == "UNAUTHORIZED"
    else:
        assert cred is not None and cred.access_key and cred.date_time == date_time


def message(topic: str) -> Any:
    msg = P.new("Message")
    json_format.ParseDict({"topic": {"name": topic}, "system_properties": {"message_id": "m1"}}, msg)
    return msg


def request(name: str, **fields: Any) -> Any:
    req = P.new(name)
    json_format.ParseDict(fields, req)
    return req


def test_each_rpc_needs_what_rocketmqs_authorization_builder_asks() -> None:
    g, t = {"name": "GroupA"}, {"name": "Orders"}
    assert auth.needed("SendMessage", P.new("SendMessageRequest", messages=[message("Orders")])) == {"Orders": PUB}
    assert auth.needed("SendMessage", P.new("SendMessageRequest")) == {}
    assert auth.needed("RecallMessage", request("RecallMessageRequest", topic=t)) == {"Orders": PUB}
    assert auth.needed("EndTransaction", request("EndTransactionRequest", topic=t)) == {"Orders": PUB}
    assert auth.needed("QueryRoute", request("QueryRouteRequest", topic=t)) == {"Orders": ANY}
    assert auth.needed("ReceiveMessage", request("ReceiveMessageRequest", group=g, message_queue={"topic": t})) == \
        {"%RETRY%GroupA": SUB, "Orders": SUB}
    for rpc in ("AckMessage", "ForwardMessageToDeadLetterQueue", "QueryAssignment", "ChangeInvisibleDuration"):
        assert auth.needed(rpc, request(f"{rpc}Request", group=g, topic=t)) == {"%RETRY%GroupA": SUB, "Orders": SUB}
    assert auth.needed("NotifyClientTermination", request("NotifyClientTerminationRequest", group=g)) == \
        {"%RETRY%GroupA": SUB}
    assert auth.needed("NotifyClientTermination", request("NotifyClientTerminationRequest")) == {}
    hb = request("HeartbeatRequest", group=g)
    assert auth.needed("Heartbeat", hb, "PRODUCER") == {}
    assert auth.needed("Heartbeat", hb, "SIMPLE_CONSUMER") == {"%RETRY%GroupA": SUB}


def test_telemetry_settings_need_pub_on_published_and_sub_on_subscribed_topics() -> None:
    producer = request("Settings", publishing={"topics": [{"name": "Orders"}, {"name": "Audit"}]})
    assert auth.settings_needs(producer) == {"Orders": PUB, "Audit": PUB}
    consumer = request("Settings", subscription={"group": {"name": "GroupA"},
                                                 "subscriptions": [{"topic": {"name": "Orders"}}]})
    assert auth.settings_needs(consumer) == {"%RETRY%GroupA": SUB, "Orders": SUB}


def test_authorization_follows_the_accounts_permissions() -> None:
    auth.authorize(V, "app", REMOTE, {"Anything": PUB | SUB, "%RETRY%AnyGroup": SUB})
    auth.authorize(V, "reader", REMOTE, {"Orders": SUB, "%RETRY%GroupA": SUB})
    auth.authorize(V, "reader", REMOTE, {"Orders": ANY})  # a route read: PUB or SUB will do
    assert "No permission for topic Orders" in refused(auth.authorize, V, "reader", REMOTE, {"Orders": PUB})
    assert "No permission for group GroupB" in refused(auth.authorize, V, "reader", REMOTE, {"%RETRY%GroupB": SUB})
    assert "No permission for topic Other" in refused(auth.authorize, V, "reader", REMOTE, {"Other": ANY})
    auth.authorize(V, None, "10.9.0.1:5", {"Other": PUB})  # white-listed: anything
