"""The console's dead letters (actors.console.dlq) on one deployment, in a real browser (Debian's
chromium, headless) and over plain HTTP:

- a consumer group's listener fails a message until it lands in %DLQ%group (the group's retry
  limit 1, every delay level 1 s); the messages page lists it with its original topic, reconsume
  times and keys; resend stores it in the group's retry topic and the consumer, succeeding now,
  gets it again with its body, keys, tags and user property, as its original topic;
- bad input (a malformed group or id, an unknown group, a message not in the DLQ, a backwards time
  range) is a clear 400 and changes nothing.
"""

from __future__ import annotations

import asyncio
import html
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.push_consumer import ConsumeConcurrentlyStatus, PushConsumer
from clients.producer.producer import Message, Producer
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.common.waiting import wait_until
from namesrv.protocol.message.decoder import MessageExt
from tests.support.console_browser import console_deployment, console_errors, shoot, text_of
from tests.support.ray_cluster import pull_all

GROUP = "DlqGroup"
TOPIC = "DlqTopic"
DLQ = f"%DLQ%{GROUP}"
RETRY = f"%RETRY%{GROUP}"
LIVE_S = 30.0
"""How long a step may take on a loaded machine (two retries 1 s apart, collector ticks of 1 s)."""
SENT: dict[str, str] = {}
"""The offset message ids of the doomed message and of one that stays in its topic."""


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with console_deployment(tmp_path_factory.mktemp("console-dlq"), brokers=[BrokerSpec("broker-a")],
                            namesrv_count=1, broker_port=0,
                            broker_overrides={"message_delay_level": " ".join(["1s"] * 18)}) as d:
        yield d


class Listener:
    """Fails every message while `failing` is set; records each delivery."""

    def __init__(self) -> None:
        self.failing = threading.Event()
        self.failing.set()
        self.cv = threading.Condition()
        self.got: list[tuple[MessageExt, bool]] = []
        """(message, whether it was failed)."""

    def __call__(self, msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        failed = self.failing.is_set()
        with self.cv:
            self.got.extend((m, failed) for m in msgs)
            self.cv.notify_all()
        return ConsumeConcurrentlyStatus.RECONSUME_LATER if failed else ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def wait(self, test: Any, what: str) -> None:
        with self.cv:
            assert self.cv.wait_for(lambda: test(self.got), LIVE_S), what


def dead_letters(dep: Deployment) -> list[dict[str, Any]]:
    return [m for h in dep.brokers.values() for m in pull_all(h, DLQ, 0)["messages"]]


def max_offset(dep: Deployment, topic: str) -> int:
    return sum(pull_all(h, topic, 0)["max_offset"] for h in dep.brokers.values())


def test_a_dead_letter_is_listed_and_resent_to_its_group(browser: Any, url: str, dep: Deployment, shots: Path):
    from selenium.webdriver.common.by import By

    [addr] = dep.broker_specs
    with AdminClient(dep) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        admin.create_and_update_subscription_group_config(addr, SubscriptionGroupConfig(
            group_name=GROUP, retry_max_times=1))
    listener = Listener()
    # A push consumer sends maxReconsumeTimes (16 unless set) with every send-back, and the broker
    # takes it over the group's retryMaxTimes, as RocketMQ's does: the consumer says 1 as well.
    consumer = PushConsumer(GROUP, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace, max_reconsume_times=1,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET", rebalance_interval_ms=600_000,
                            broker_suspend_max_time_ms=2_000, persist_consumer_offset_interval_ms=500)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        with Producer("DlqProducer", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace) as producer:
            doomed = producer.send(Message(TOPIC, b"doomed", tags="TagD", keys="dlq-key",
                                           properties={"origin": "console-test"}))
        SENT["kept"] = doomed.offset_msg_id  # the original stays in its topic: not a dead letter
        listener.wait(lambda got: len(got) >= 2, "delivered, failed, retried once and failed again")
        found = wait_until(lambda: dead_letters(dep), LIVE_S, f"the message in {DLQ}")
        assert [m["body"] for m in found] == [b"doomed"] and found[0]["properties"]["RETRY_TOPIC"] == TOPIC

        browser.get(url + "groups")
        wait_until(lambda: GROUP in text_of(browser, "#groups"), LIVE_S, "the group known to the console")
        browser.get(url + "messages")
        browser.find_element(By.ID, "dlq-group").send_keys(GROUP)
        browser.find_element(By.ID, "dlq-list").click()
        wait_until(lambda: text_of(browser, "#dead-letters"), LIVE_S, "the DLQ form answered")

        def listed() -> bool:  # the console lists a DLQ once its route reached the console (pushed)
            if not text_of(browser, "tr.dead-letter"):
                browser.get(url + f"messages?dlq={GROUP}")
            return bool(text_of(browser, "tr.dead-letter"))
        wait_until(listed, LIVE_S, "the dead letter listed")
        row = text_of(browser, "tr.dead-letter")
        assert TOPIC in row and "dlq-key" in row and "TagD" in row and "doomed" in row, row
        msg_id = browser.find_element(By.CSS_SELECTOR, "tr.dead-letter").get_attribute("data-msg-id")
        SENT["dead"] = msg_id
        shoot(browser, shots, "dlq")
        delivered = len(listener.got)

        listener.failing.clear()
        browser.find_element(By.CSS_SELECTOR, "tr.dead-letter button.resend").click()
        wait_until(lambda: text_of(browser, "#notice") or text_of(browser, "#error"), LIVE_S, "the resend's answer")
        assert f"resent {msg_id} to {GROUP}" in text_of(browser, "#notice"), text_of(browser, "#error")
        listener.wait(lambda got: len(got) > delivered and not got[-1][1], "the resent message consumed")
        again = listener.got[-1][0]
        assert again.body == b"doomed" and again.topic == TOPIC and again.properties.get("origin") == "console-test"
        assert again.keys == ["dlq-key"] and again.properties.get("TAGS") == "TagD"
        assert again.reconsume_times == 0, "the group's full retry budget again"
        assert len(dead_letters(dep)) == 1, "consumed: not a dead letter again"
        assert text_of(browser, "tr.dead-letter"), "the DLQ listed again after the resend"
        assert console_errors(browser) == []
    finally:
        consumer.shutdown()


def test_bad_input_is_a_clear_error_and_changes_nothing(url: str, dep: Deployment):
    wait_until(lambda: "dead" in SENT, 1, "the dead letter of the test above")
    before = max_offset(dep, RETRY)

    async def walk() -> None:
        async with aiohttp.ClientSession() as s:
            for form, why in (({"group": "two words", "msgId": SENT["dead"]}, "consumer group"),
                              ({"group": "NoSuchGroup", "msgId": SENT["dead"]}, "no consumer group 'NoSuchGroup'"),
                              ({"group": GROUP, "msgId": "not-an-id"}, "message id"),
                              ({"group": GROUP, "msgId": SENT["kept"]}, f"is in {TOPIC}, not in {DLQ}")):
                async with s.post(url + "messages/dlq/resend", data=form) as r:
                    text = html.unescape(await r.text())
                    assert r.status == 400 and why in text, (form, text[:2000])
            async with s.get(url + "messages", params={"dlq": GROUP, "begin": "5", "end": "1"}) as r:
                assert r.status == 400 and "the start 5 is after the end 1" in await r.text()
            async with s.get(url + "messages", params={"dlq": GROUP, "begin": "yesterday"}) as r:
                assert r.status == 400 and "ms since the epoch" in await r.text()
            async with s.get(url + "messages", params={"dlq": GROUP, "begin": "0", "end": "1"}) as r:
                assert r.status == 200 and "no dead letters of DlqGroup in that time" in await r.text()
    asyncio.run(walk())
    assert max_offset(dep, RETRY) == before, "nothing was resent"
    assert ray.get(dep.console.stats.remote(), timeout=30)["by_origin"]["view"] == 0
