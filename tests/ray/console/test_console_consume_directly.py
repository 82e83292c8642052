"""The console's "consume directly" (CONSUME_MESSAGE_DIRECTLY, 309) on one deployment, in a real
browser (Debian's chromium, headless) and over plain HTTP:

- a message looked up by id on the messages page is handed to a live member of a group (no client
  named: the first live member); its listener runs once more on it, the notice shows the member and
  CR_SUCCESS, and the group's committed offset stays where it was;
- bad input (a malformed or unknown group, a client that is not a member, a malformed id) is a clear
  400 and runs nothing.
"""

from __future__ import annotations

import asyncio
import html
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.consumer.push_consumer import ConsumeConcurrentlyStatus, PushConsumer
from clients.producer.producer import Message, Producer
from namesrv.common.waiting import wait_until
from namesrv.protocol.message.decoder import MessageExt
from tests.support.console_browser import chromium, console_deployment, console_errors, screenshot_dir, shoot, text_of
from tests.support.consumer import committed

GROUP = "DirectGroup"
TOPIC = "DirectTopic"
LIVE_S = 30.0
"""How long a step may take on a loaded machine (collector ticks of 1 s)."""


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with console_deployment(tmp_path_factory.mktemp("console-direct"), brokers=[BrokerSpec("broker-a")],
                            namesrv_count=1, broker_port=0) as d:
        yield d


class Listener:
    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.got: list[MessageExt] = []

    def __call__(self, msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        with self.cv:
            self.got.extend(msgs)
            self.cv.notify_all()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def count(self) -> int:
        with self.cv:
            return len(self.got)

    def wait(self, n: int, what: str) -> None:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.got) >= n, LIVE_S), what


@pytest.fixture(scope="module")
def member(dep: Deployment) -> Iterator[tuple[PushConsumer, Listener, str]]:
    """A live member of GROUP that consumed one message of TOPIC; with that message's offset id."""
    AdminClient(dep).create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    listener = Listener()
    consumer = PushConsumer(GROUP, namesrv=list(dep.namesrvs), namespace=dep.spec.namespace,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET", rebalance_interval_ms=600_000,
                            broker_suspend_max_time_ms=2_000, persist_consumer_offset_interval_ms=500)
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        with Producer("DirectProducer", namesrv=list(dep.namesrvs), namespace=dep.spec.namespace) as producer:
            sent = producer.send(Message(TOPIC, b"console-direct", keys="direct-key"))
        listener.wait(1, "consumed as usual")
        wait_until(lambda: committed(dep, GROUP, TOPIC) == 1, LIVE_S, "its offset committed")
        yield consumer, listener, sent.offset_msg_id
    finally:
        consumer.shutdown()


def test_a_message_is_consumed_directly_by_a_live_member_from_the_messages_page(
        url: str, dep: Deployment, member: tuple[PushConsumer, Listener, str],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    from selenium.webdriver.common.by import By

    consumer, listener, msg_id = member
    with chromium() as browser:
        def known() -> bool:  # the collector learns the group's members on its stats tick
            browser.get(url + f"groups/{GROUP}")
            return consumer.client_id in text_of(browser, "#members")
        wait_until(known, LIVE_S, "the member known to the console")
        browser.get(url + f"messages?id={msg_id}")
        row = text_of(browser, "tr.message")
        assert "console-direct" in row and "direct-key" in row, row
        browser.find_element(By.CSS_SELECTOR, "tr.message input[name=group]").send_keys(GROUP)
        browser.find_element(By.CSS_SELECTOR, "tr.message button.consume").click()
        wait_until(lambda: text_of(browser, "#notice") or text_of(browser, "#error"), LIVE_S, "the answer")
        notice = text_of(browser, "#notice")
        assert f"{consumer.client_id} of {GROUP} consumed {msg_id} directly: CR_SUCCESS" in notice, \
            text_of(browser, "#error")
        assert "console-direct" in text_of(browser, "tr.message"), "the message shown again"
        shoot(browser, screenshot_dir(tmp_path_factory), "consume-directly")
        assert console_errors(browser) == []
    assert listener.count() == 2 and listener.got[-1].body == b"console-direct"
    assert committed(dep, GROUP, TOPIC) == 1, "nothing committed"


def test_bad_input_is_a_clear_error_and_runs_nothing(url: str, dep: Deployment,
                                                     member: tuple[PushConsumer, Listener, str]) -> None:
    _consumer, listener, msg_id = member
    before = listener.count()

    async def walk() -> None:
        async with aiohttp.ClientSession() as s:
            for form, why in (({"group": "two words", "msgId": msg_id}, "consumer group"),
                              ({"group": "NoSuchGroup", "msgId": msg_id}, "has no live member"),
                              ({"group": GROUP, "clientId": "nobody@x", "msgId": msg_id}, "not a live member"),
                              ({"group": GROUP, "msgId": "not-an-id"}, "32 hex")):
                async with s.post(url + "messages/consume-directly", data=form) as r:
                    text = html.unescape(await r.text())
                    assert r.status == 400 and why in text, (form, text[:2000])
    asyncio.run(walk())
    assert listener.count() == before, "nobody was asked"
    assert ray.get(dep.console.stats.remote(), timeout=30)["by_origin"]["view"] == 0

