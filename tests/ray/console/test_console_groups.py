"""The console's group and topic edits (actors.console.groups, actions.update_topic) on one
deployment, in a real browser (Debian's chromium, headless) and over plain HTTP:

- a group's retryMaxTimes edited on its page reaches the broker's subscription-group config (read
  back with the admin client), the fields the form does not edit kept;
- skip backlog moves the group's offsets of a topic to the newest message: its lag (consume stats,
  as mqadmin consumerProgress reads them) drops to 0;
- a topic's write queue number updated on its page is in the topic's route, its order flag kept;
- bad input (not a number, out of range, a bad group name, a bad perm) is a clear 400 and changes
  nothing.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Iterator

import aiohttp
import pytest
import ray

from actors.console.collector import CollectorPeriods
from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode
from namesrv.remoting.command import RemotingRequest
from tests.support.console_browser import chromium, console_deployment, console_errors, screenshot_dir, shoot, text_of

GROUP = "EditedGroup"
TOPIC = "EditedTopic"
LIVE_S = 30.0
"""How long a step may take on a loaded machine (collector ticks of 1 s)."""


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with console_deployment(tmp_path_factory.mktemp("console-groups"), brokers=[BrokerSpec("broker-a")],
                            namesrv_count=1, broker_port=0, periods=CollectorPeriods(0.3, 1.0, 1.0)) as d:
        yield d


@pytest.fixture(scope="module")
def addr(dep: Deployment) -> str:
    [addr] = dep.broker_specs
    return addr


def held(dep: Deployment, addr: str) -> SubscriptionGroupConfig:
    with AdminClient(dep) as admin:
        return admin.get_all_subscription_group(addr)[GROUP]


def lag(dep: Deployment, addr: str) -> int:
    with AdminClient(dep) as admin:
        return admin.examine_consume_stats(addr, GROUP, TOPIC).diff_total()


def write_queues(dep: Deployment) -> list[int]:
    with AdminClient(dep) as admin:
        return [q.write_queue_nums for q in admin.examine_topic_route_info(TOPIC).queue_datas]


def test_config_edit_skip_backlog_and_topic_update_from_the_pages(url: str, dep: Deployment, addr: str,
                                                                   tmp_path_factory: pytest.TempPathFactory):
    from selenium.webdriver.common.by import By

    with AdminClient(dep) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2, order=True)
        admin.create_and_update_subscription_group_config(addr, SubscriptionGroupConfig(
            group_name=GROUP, consume_from_min_enable=False, retry_max_times=16))
    for q in (0, 1):
        resp = ray.get(dep.brokers[addr].process.remote(RemotingRequest(
            BrokerRequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q), "commitOffset": "0"})), timeout=30)
        assert resp.ok, resp
    for i in range(6):
        assert ray.get(dep.brokers[addr].send_message.remote(TOPIC, i % 2, f"m{i}".encode(), {}), timeout=30).ok
    assert lag(dep, addr) == 6

    with chromium() as browser:
        browser.get(url + f"groups/{GROUP}")
        wait_until(lambda: text_of(browser, "#group-lag") == "6", LIVE_S, "lag 6 after six sends")
        wait_until(lambda: text_of(browser, ".sub-config-row .retry-max-times") == "16", LIVE_S, "the config shown")
        browser.get(url + f"groups/{GROUP}")  # the form's values are the page's, read at load
        field = browser.find_element(By.ID, "cfg-retryMaxTimes")
        assert field.get_attribute("value") == "16"
        field.clear()
        field.send_keys("7")
        browser.find_element(By.ID, "config-save").click()
        wait_until(lambda: text_of(browser, "#notice") or text_of(browser, "#error"), LIVE_S, "the update's answer")
        assert f"updated the config of {GROUP} on {addr}" in text_of(browser, "#notice"), text_of(browser, "#error")
        config = held(dep, addr)
        assert config.retry_max_times == 7 and not config.consume_from_min_enable, "edited, the rest kept"
        wait_until(lambda: text_of(browser, ".sub-config-row .retry-max-times") == "7", LIVE_S, "the new config shown")

        browser.find_element(By.ID, "skip-topic").clear()
        browser.find_element(By.ID, "skip-topic").send_keys(TOPIC)
        browser.find_element(By.ID, "skip").click()
        wait_until(lambda: "skipped" in text_of(browser, "#notice") or text_of(browser, "#error"), LIVE_S,
                   "the skip's answer")
        assert f"skipped the backlog of {GROUP}: broker-a:0=3, broker-a:1=3" in text_of(browser, "#notice"), \
            text_of(browser, "#error")
        wait_until(lambda: lag(dep, addr) == 0, LIVE_S, "the group's lag 0 on the broker")
        wait_until(lambda: text_of(browser, "#group-lag") == "0", LIVE_S, "lag 0 on the page")
        shoot(browser, screenshot_dir(tmp_path_factory), "group-config")

        browser.get(url + f"topics/{TOPIC}")
        write = browser.find_element(By.ID, "update-write")
        assert write.get_attribute("value") == "2"
        write.clear()
        write.send_keys("1")
        browser.find_element(By.ID, "update").click()
        wait_until(lambda: text_of(browser, "#notice") or text_of(browser, "#error"), LIVE_S, "the update's answer")
        assert f"updated {TOPIC} on {addr}: read 2, write 1, perm 6" in text_of(browser, "#notice"), \
            text_of(browser, "#error")
        wait_until(lambda: write_queues(dep) == [1], LIVE_S, "write queues 1 in the route")
        with AdminClient(dep) as admin:  # UPDATE_AND_CREATE_TOPIC replaces the whole config: the rest kept
            assert admin.examine_topic_config(addr, TOPIC).order, "the order flag cleared by the update"
        assert console_errors(browser) == []


def test_bad_input_is_a_clear_error_and_changes_nothing(url: str, dep: Deployment, addr: str):
    wait_until(lambda: write_queues(dep) == [1], 1, "the topic updated by the test above")
    before, route_before = held(dep, addr), write_queues(dep)
    good = {"consumeEnable": "true", "consumeBroadcastEnable": "false", "consumeMessageOrderly": "false",
            "retryQueueNums": "1", "retryMaxTimes": "9", "brokerId": "0", "whichBrokerWhenConsumeSlowly": "1"}

    async def walk() -> None:
        async with aiohttp.ClientSession() as s:
            for path, form, why in (
                    (f"groups/{GROUP}/config", good | {"retryMaxTimes": "nine"},
                     "retryMaxTimes must be a whole number, got 'nine'"),
                    (f"groups/{GROUP}/config", good | {"retryQueueNums": "5000"},
                     "retryQueueNums must be between 0 and 1024, got 5000"),
                    (f"groups/{GROUP}/config", good | {"consumeEnable": "maybe"},
                     "consumeEnable must be true or false"),
                    ("groups/Bad%3BGroup/config", good, "contains illegal characters"),
                    (f"groups/{GROUP}/skip", {"topic": "NoSuchTopic"}, "has no route on any NameServer"),
                    (f"topics/{TOPIC}/update", {"readQueueNums": "2", "writeQueueNums": "x", "perm": "6"},
                     "write queues must be a whole number"),
                    (f"topics/{TOPIC}/update", {"readQueueNums": "2", "writeQueueNums": "4", "perm": "7"},
                     "perm must be one of 2 (write only), 4 (read only), 6 (read and write), got 7"),
                    ("topics/NoSuchTopic/update", {"readQueueNums": "2", "writeQueueNums": "4", "perm": "6"},
                     "no topic 'NoSuchTopic' on any NameServer")):
                async with s.post(url + path, data=form) as r:
                    text = html.unescape(await r.text())
                    assert r.status == 400 and why in text, (path, form, text[:3000])
    asyncio.run(walk())
    assert held(dep, addr) == before and write_queues(dep) == route_before, "nothing changed"
    assert ray.get(dep.console.stats.remote(), timeout=30)["by_origin"]["view"] == 0
