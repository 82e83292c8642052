"""The console's group and topic forms without a server: a subscription-group config form read and
checked (actors.console.groups), the config each broker gets (what it holds, the form's settings
over it), a topic update's values refused before anything is sent, and what the group and topic
pages offer the forms (from the collector's state alone)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from actors.console import views
from actors.console.actions import ActionError, Actions
from actors.console.groups import GroupConfigs, form_settings, group_config
from actors.console.model import BrokerView, ConsoleState, GroupView, NamesrvView, QueueRoute, RouteView
from namesrv.broker.subscription.config import SubscriptionGroupConfig

ADDR = "127.0.0.1:10911"
FORM = {"consumeEnable": "true", "consumeBroadcastEnable": "False", "consumeMessageOrderly": " true ",
        "retryQueueNums": "2", "retryMaxTimes": " 3 ", "brokerId": "0", "whichBrokerWhenConsumeSlowly": "1"}


def test_a_config_form_gives_its_settings():
    assert form_settings(FORM) == {"consumeEnable": True, "consumeBroadcastEnable": False,
                                   "consumeMessageOrderly": True, "retryQueueNums": 2, "retryMaxTimes": 3,
                                   "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1}


@pytest.mark.parametrize(("change", "why"), [
    ({"consumeEnable": "yes"}, "consumeEnable must be true or false, got 'yes'"),
    ({"consumeMessageOrderly": ""}, "consumeMessageOrderly must be true or false"),
    ({"retryMaxTimes": "many"}, "retryMaxTimes must be a whole number, got 'many'"),
    ({"retryMaxTimes": "-1"}, "retryMaxTimes must be between 0 and 2147483647, got -1"),
    ({"retryQueueNums": "1025"}, "retryQueueNums must be between 0 and 1024, got 1025"),
    ({"brokerId": "1.5"}, "brokerId must be a whole number"),
    ({"whichBrokerWhenConsumeSlowly": str(2**31)}, "whichBrokerWhenConsumeSlowly must be between 0 and"),
])
def test_a_bad_setting_is_refused_with_a_sentence(change: dict[str, str], why: str):
    with pytest.raises(ActionError, match=why.replace("(", r"\(").replace(")", r"\)")):
        form_settings(FORM | change)


def test_a_missing_setting_is_refused():
    with pytest.raises(ActionError, match="retryQueueNums must be a whole number"):
        form_settings({k: v for k, v in FORM.items() if k != "retryQueueNums"})


def test_each_broker_keeps_what_the_form_does_not_edit():
    held = SubscriptionGroupConfig(group_name="G", consume_from_min_enable=False, consume_timeout_minute=30,
                                   notify_consumer_ids_changed_enable=False, retry_max_times=16)
    config = group_config(" G ", form_settings(FORM), held)
    assert config.group_name == "G" and config.retry_max_times == 3 and config.consume_message_orderly
    assert not config.consume_from_min_enable and config.consume_timeout_minute == 30
    assert not config.notify_consumer_ids_changed_enable
    fresh = group_config("New_G", form_settings(FORM), None)
    assert fresh.consume_from_min_enable and fresh.consume_timeout_minute == 15, "RocketMQ's defaults"


@pytest.mark.parametrize("bad", ["", "two words", "semi;colon", "x" * 300])
def test_a_bad_group_name_is_refused_by_the_brokers_rule(bad: str):
    with pytest.raises(ActionError, match="The specified group"):
        group_config(bad, form_settings(FORM), None)


class NoServer:
    """A server that must not be asked (the input is refused first)."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a request was built for a refused input")

    async def call_broker(self, *args: Any) -> None:
        raise AssertionError("a broker was asked for a refused input")


def state() -> ConsoleState:
    route = RouteView(4, (QueueRoute("broker-a", 4, 2, 6),), (("broker-a", ((0, ADDR),)),))
    s = ConsoleState(namesrvs={"ns-0": NamesrvView("ns-0", ready=True, topics={"T"}, routes={"T": route})})
    s.brokers = {ADDR: BrokerView(ADDR, "broker-a-0", "C", "broker-a", 0, role="ASYNC_MASTER")}
    s.groups = {"G": GroupView("G", configs={ADDR: SubscriptionGroupConfig(group_name="G", retry_max_times=5)})}
    return s


def actions() -> Actions:
    return Actions(SimpleNamespace(state=state(), servers=NoServer(), namesrv_names=[]))  # type: ignore[arg-type]


@pytest.mark.parametrize(("read", "write", "perm", "why"), [
    ("x", "8", "6", "read queues must be a whole number"),
    ("8", "0", "6", "write queues must be between 1 and 1024, got 0"),
    ("8", "2000", "6", "write queues must be between 1 and 1024"),
    ("8", "8", "7", "perm must be one of 2 .write only., 4 .read only., 6 .read and write., got 7"),
    ("8", "8", "", "perm must be a whole number"),
])
def test_a_topic_update_refuses_bad_values_before_asking_anything(read: str, write: str, perm: str, why: str):
    with pytest.raises(ActionError, match=why):
        asyncio.run(actions().update_topic("T", read, write, perm, None))


def test_a_topic_update_needs_an_existing_topic_and_a_valid_name():
    with pytest.raises(ActionError, match="no topic 'Nope' on any NameServer"):
        asyncio.run(actions().update_topic("Nope", "8", "8", "6", None))
    with pytest.raises(ActionError, match="topic"):
        asyncio.run(actions().update_topic("bad topic", "8", "8", "6", None))


def test_a_group_config_update_refuses_bad_input_before_asking_anything():
    with pytest.raises(ActionError, match="retryMaxTimes must be a whole number"):
        asyncio.run(GroupConfigs(actions()).update("G", FORM | {"retryMaxTimes": "lots"}, None))
    with pytest.raises(ActionError, match="contains illegal characters"):
        asyncio.run(GroupConfigs(actions()).update("G;drop", FORM, None))


def test_the_pages_offer_the_current_values_from_the_state():
    s = state()
    group = views.group_detail(s, "G")
    assert group["configs"] == [("broker-a-0", s.groups["G"].configs[ADDR])]
    assert group["config"].retry_max_times == 5
    assert views.group_detail(s, "Unknown")["config"] == SubscriptionGroupConfig(group_name="Unknown")
    topic = views.topic_detail(s, "T")
    assert topic["current"] == QueueRoute("broker-a", 4, 2, 6) and set(topic["perms"]) == {2, 4, 6}
