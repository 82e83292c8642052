"""The Settings a proxy answers on Telemetry and its status codes (namesrv.proxy.settings, .status)."""

from __future__ import annotations

from google.protobuf import json_format

from namesrv.protocol.codes import ResponseCode
from namesrv.proxy.descriptors import load
from namesrv.proxy.settings import ProxyConfig, server_settings
from namesrv.proxy.status import from_remoting, from_send_answer, overall

P = load()


def answer(client: dict[str, object], **config: object) -> object:
    settings = P.new("Settings")
    json_format.ParseDict(server_settings(client, ProxyConfig(**config)), settings)
    return settings


def test_a_producer_gets_body_size_attempts_and_backoff() -> None:
    s = answer({"client_type": "PRODUCER", "publishing": {"topics": [{"name": "T"}], "max_body_size": 99},
                "request_timeout": "3s"}, max_message_size=1024)
    assert s.publishing.max_body_size == 1024 and [t.name for t in s.publishing.topics] == ["T"]
    assert s.backoff_policy.max_attempts == 3
    assert s.backoff_policy.exponential_backoff.max.ToMilliseconds() == 1000
    assert s.backoff_policy.exponential_backoff.multiplier == 2.0
    assert s.request_timeout.seconds == 3 and not s.metric.on


def test_a_consumer_gets_batch_long_polling_fifo_and_retries() -> None:
    s = answer({"client_type": "PUSH_CONSUMER", "subscription": {"group": {"name": "G"}}})
    assert (s.subscription.group.name, s.subscription.receive_batch_size, s.subscription.fifo) == ("G", 32, False)
    assert s.subscription.long_polling_timeout.seconds == 20
    assert s.backoff_policy.max_attempts == 17
    assert [d.seconds for d in s.backoff_policy.customized_backoff.next][:3] == [1, 5, 10]


def test_a_fifo_groups_consumer_gets_fifo_and_its_groups_attempts() -> None:
    settings = P.new("Settings")
    client = {"client_type": "SIMPLE_CONSUMER", "subscription": {"group": {"name": "G"}}}
    json_format.ParseDict(server_settings(client, ProxyConfig(), fifo=True, retry_max_times=2), settings)
    assert settings.subscription.fifo and settings.backoff_policy.max_attempts == 3


def test_status_codes_as_the_java_proxy_maps_them() -> None:
    assert from_remoting(ResponseCode.SUCCESS, None).code == "OK"
    assert from_remoting(ResponseCode.SYSTEM_BUSY, "busy").code == "TOO_MANY_REQUESTS"
    assert from_remoting(ResponseCode.TOPIC_NOT_EXIST, "no").code == "TOPIC_NOT_FOUND"
    assert from_remoting(ResponseCode.NO_PERMISSION, "denied").message == "denied"
    assert from_remoting(ResponseCode.NO_PERMISSION, "denied").code == "INTERNAL_SERVER_ERROR"
    assert from_send_answer(ResponseCode.FLUSH_SLAVE_TIMEOUT, None).code == "SLAVE_PERSISTENCE_TIMEOUT"
    assert overall(["OK", "OK"]).code == "OK"
    assert overall(["OK", "TOO_MANY_REQUESTS"]).code == "MULTIPLE_RESULTS"
    assert overall([]).code == "INTERNAL_SERVER_ERROR"
