"""The web console (actors.console) on one deployment, in a real browser (Debian's chromium,
headless, through chromium-driver and selenium) and over plain HTTP:

- the cluster page lists both brokers; no page logs a browser console error;
- a broker registered on one NameServer only shows as a divergence on the NameServers page, and
  the divergence clears live (server-sent events) when it is unregistered, without a reload;
- a topic created from the topics page gets a route on every NameServer (on the page and on the
  NameServers themselves); an invalid name gets a clear error and changes nothing;
- a consumer group's lag appears after sends, and a reset by time moves it, live;
- HTTP: statuses and headers (the event stream, a refused form's 400);
- cheapness: page loads make no server call (the collector's calls are counted by origin);
- with ACL on, nothing works without an account;
- a broker killed with ray.kill leaves the open cluster page and every NameServer column, live.
Screenshots of the pages go to $CONSOLE_SCREENSHOTS (else a temporary directory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray

from actors.console.actor import start_console
from actors.console.collector import CollectorPeriods
from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from namesrv.broker.subscription.config import SubscriptionGroupConfig
from namesrv.common.waiting import wait_until
from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode, RequestCode
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.remoting.command import RemotingRequest
from tests.support.console_browser import LIVE_PERIODS, console_deployment, console_errors, html_of, shoot, text_of
from tests.support.ray_cluster import FAILOVER_HA, broker_status

GROUP = "ConsoleGroup"
TOPIC = "ConsoleTopic"
LIVE_S = 20.0
"""How long a live change may take to reach an open page (collector period 0.3 s, stats 1 s; it
takes well under 1 s here, the rest is room for a loaded machine)."""
SENT: dict[str, str] = {}
"""The offset message id of a message the lag test sends (the HTTP test looks it up)."""
GHOST = {"clusterName": "DefaultCluster", "brokerAddr": "127.0.0.1:1", "brokerName": "ghost", "brokerId": 0}


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with console_deployment(tmp_path_factory.mktemp("console"), brokers=[BrokerSpec("broker-a"),
                            BrokerSpec("broker-b")], broker_port=0) as d:
        yield d


def stats(dep: Deployment) -> dict[str, Any]:
    return ray.get(dep.console.stats.remote(), timeout=30)


def broker_call(dep: Deployment, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None) -> Any:
    resp = ray.get(dep.brokers[addr].process.remote(RemotingRequest(code, ext, body)), timeout=30)
    assert resp.ok, resp
    return resp


def topics_on(dep: Deployment) -> dict[str, set[str]]:
    out = {}
    for name, ns in dep.namesrvs.items():
        resp = ray.get(ns.process.remote(RemotingRequest(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})),
                       timeout=30)
        out[name] = set(resp.payload.topic_list) if resp.payload is not None else set(
            fastjson.loads(resp.body)["topicList"])
    return out


def test_every_page_loads_and_the_cluster_page_lists_both_brokers(browser: Any, url: str, dep: Deployment,
                                                                   shots: Path):
    for page in ("namesrvs", "topics", "groups", "producers", "ha", "messages", "topics/TBW102", "groups/none"):
        browser.get(url + page)
        assert text_of(browser, "nav"), page
    browser.get(url + "cluster")
    wait_until(lambda: "broker-a-0" in text_of(browser, "#live") and "broker-b-0" in text_of(browser, "#live"),
               LIVE_S, "both brokers on the cluster page")
    rows = text_of(browser, "#live")
    assert "ASYNC_MASTER" in rows and "namesrv-0, namesrv-1" in rows
    assert "broker-a-0 ASYNC_MASTER 0" in text_of(browser, "#roles")  # its first role, on the timeline
    shoot(browser, shots, "cluster")
    assert console_errors(browser) == []


def test_a_divergence_shows_and_clears_live(browser: Any, url: str, dep: Deployment, shots: Path):
    browser.get(url + "namesrvs")
    wait_until(lambda: text_of(browser, "#divergence") == "the NameServers agree", LIVE_S, "agreement at first")
    browser.execute_script("window.notReloaded = true;")
    body = encode_body({"topicConfigSerializeWrapper": {
        "topicConfigTable": {"GhostTopic": {"topicName": "GhostTopic", "readQueueNums": 1, "writeQueueNums": 1}},
        "dataVersion": {"timestamp": 1, "counter": 1}}})
    ns0 = dep.namesrvs["namesrv-0"]
    assert ray.get(ns0.register_broker.remote(body, heartbeatTimeoutMillis=600_000, **GHOST), timeout=30).ok
    wait_until(lambda: "broker(s) not on every NameServer" in text_of(browser, "#divergence"), LIVE_S,
               "the ghost broker shown as a divergence")
    table = text_of(browser, "#broker-divergence")
    assert "DefaultCluster/ghost/0@127.0.0.1:1" in table and "namesrv-1" in table  # missing on namesrv-1
    wait_until(lambda: "GhostTopic" in text_of(browser, "#topic-divergence"), LIVE_S,
               "its topic shown on namesrv-0 only")  # a registration's topics may land a tick after the broker
    shoot(browser, shots, "namesrvs-divergence")

    assert ray.get(ns0.unregister_broker.remote(**GHOST), timeout=30).ok
    wait_until(lambda: text_of(browser, "#divergence") == "the NameServers agree", LIVE_S, "the divergence cleared")
    assert browser.execute_script("return window.notReloaded === true;")  # updated in place, not reloaded
    assert "ghost" in text_of(browser, "#events")
    assert console_errors(browser) == []


def test_create_a_topic_from_the_page_and_see_its_route(browser: Any, url: str, dep: Deployment, shots: Path):
    from selenium.webdriver.common.by import By

    browser.get(url + "topics")
    browser.find_element(By.ID, "new-topic").send_keys(TOPIC)
    browser.find_element(By.ID, "new-queues").clear()
    browser.find_element(By.ID, "new-queues").send_keys("4")
    browser.find_element(By.ID, "create").click()
    wait_until(lambda: f"created {TOPIC}" in text_of(browser, "#notice"), LIVE_S, "the creation notice")

    def routed() -> bool:
        rows = text_of(browser, "#routes")
        return rows.count("broker-a r4/w4") == 2 and rows.count("broker-b r4/w4") == 2
    wait_until(routed, LIVE_S, "the route on both NameServers, on the page")
    shoot(browser, shots, "topic")
    assert all(TOPIC in topics for topics in topics_on(dep).values())
    assert console_errors(browser) == []


def test_an_invalid_topic_name_is_a_clear_error_and_changes_nothing(browser: Any, url: str, dep: Deployment):
    from selenium.webdriver.common.by import By

    before = topics_on(dep)
    browser.get(url + "topics")
    browser.find_element(By.ID, "new-topic").send_keys("bad topic!")
    browser.find_element(By.ID, "create").click()
    wait_until(lambda: "topic" in text_of(browser, "#error"), LIVE_S, "the error on the page")
    assert "bad topic!" in text_of(browser, "#error") or "pattern" in text_of(browser, "#error")
    assert topics_on(dep) == before
    # the refused form's answer is a 400, which the browser logs; nothing else went wrong
    assert all("status of 400 (Bad Request)" in e for e in console_errors(browser))


def test_a_groups_lag_appears_after_sends_and_a_reset_moves_it(browser: Any, url: str, dep: Deployment,
                                                                shots: Path):
    from selenium.webdriver.common.by import By

    wait_until(lambda: all(TOPIC in t for t in topics_on(dep).values()), LIVE_S, f"{TOPIC} created by the test above")
    addr = next(a for a, s in dep.broker_specs.items() if s.broker_name == "broker-a")
    config = SubscriptionGroupConfig(group_name=GROUP)
    broker_call(dep, addr, BrokerRequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                fastjson.dumps(config.to_wire()))
    broker_call(dep, addr, BrokerRequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": "0"})
    for i in range(5):
        sent = ray.get(dep.brokers[addr].send_message.remote(TOPIC, 0, f"m{i}".encode(), {"KEYS": f"key-{i}"}),
                       timeout=30)
        assert sent.ok
        SENT.setdefault("offset_msg_id", sent.ext_fields["offsetMsgId"])

    browser.get(url + f"groups/{GROUP}")
    wait_until(lambda: text_of(browser, "#group-lag") == "5", LIVE_S, "lag 5 after five sends")
    shoot(browser, shots, "group")
    browser.find_element(By.ID, "reset-topic").clear()
    browser.find_element(By.ID, "reset-topic").send_keys(TOPIC)
    browser.find_element(By.ID, "reset-time").clear()
    browser.find_element(By.ID, "reset-time").send_keys("now")
    browser.find_element(By.ID, "reset").click()
    wait_until(lambda: text_of(browser, "#notice") or text_of(browser, "#error"), LIVE_S, "the reset's answer")
    assert f"reset {GROUP}: broker-a:0=5" in text_of(browser, "#notice"), text_of(browser, "#error")
    wait_until(lambda: text_of(browser, "#group-lag") == "0", LIVE_S, "lag 0 after the reset to now")
    browser.get(url + "groups")
    wait_until(lambda: GROUP in text_of(browser, "#groups"), LIVE_S, "the group in the list")
    shoot(browser, shots, "groups")
    assert console_errors(browser) == []


def test_http_statuses_headers_and_a_refused_form(url: str, dep: Deployment):
    async def walk() -> None:
        async with aiohttp.ClientSession() as s:
            async with s.get(url, allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/cluster"
            async with s.get(url + "cluster") as r:
                assert r.status == 200 and r.content_type == "text/html"
            async with s.get(url + "events?page=namesrvs") as r:
                assert r.status == 200 and r.content_type == "text/event-stream"
                first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), 10)
                assert first.startswith(b"event: live\ndata: ")
            async with s.get(url + "events?page=nothing") as r:
                assert r.status == 400
            async with s.post(url + "topics", data={"topic": "", "queues": "8"}) as r:
                assert r.status == 400 and "topic" in await r.text()
            async with s.post(url + "topics", data={"topic": "Fine", "queues": "0"}) as r:
                assert r.status == 400 and "queues must be between 1 and 1024" in await r.text()
            async with s.post(url + "groups/g/reset", data={"topic": TOPIC, "timestamp": "yesterday"}) as r:
                assert r.status == 400 and "timestamp (ms) must be a whole number" in await r.text()
            async with s.get(url + "messages", params={"id": "not-a-message-id"}) as r:
                assert r.status == 400
            async with s.get(url + "messages", params={"id": SENT["offset_msg_id"]}) as r:
                assert r.status == 200 and "<pre>m0</pre>" in await r.text()
            async with s.get(url + "messages", params={"topic": TOPIC, "key": "key-3"}) as r:
                text = await r.text()
                assert r.status == 200 and "<pre>m3</pre>" in text and "<pre>m0</pre>" not in text
            async with s.post(url + "producers", data={"group": "two words"}) as r:
                assert r.status == 400 and "invalid producer group" in await r.text()
            async with s.post(url + "producers", data={"group": "ConsoleProducers"}) as r:
                assert r.status == 200 and "<h3>ConsoleProducers</h3>" in await r.text()  # after the redirect
    asyncio.run(walk())
    assert "Fine" not in set().union(*topics_on(dep).values())


def test_page_views_ask_no_server(url: str, dep: Deployment):
    pages = ["cluster", "namesrvs", "topics", f"topics/{TOPIC}", "groups", f"groups/{GROUP}", "producers"]

    async def load(n: int) -> None:
        async with aiohttp.ClientSession() as s:
            for i in range(n):
                async with s.get(url + pages[i % len(pages)]) as r:
                    assert r.status == 200
    before, started = stats(dep), time.monotonic()
    asyncio.run(load(140))
    after, took = stats(dep), time.monotonic() - started
    assert after["renders"] - before["renders"] >= 140
    assert after["by_origin"]["view"] == 0, after
    assert sum(after["by_origin"].values()) == sum(after["calls"].values()) and after["by_origin"]["collector"] > 0
    ticks = after["ticks"]["stats"] - before["ticks"]["stats"]
    # The brokers were asked only by the collector's periodic refreshes in that time (the ticks
    # completed, plus one under way at each end).
    assert after["calls"]["broker"] - before["calls"]["broker"] <= (ticks + 2) * after["max_broker_calls_per_tick"]
    print(f"140 page loads in {took:.2f} s: {after['calls']['broker'] - before['calls']['broker']} broker calls "
          f"over {ticks} collector ticks (at most {after['max_broker_calls_per_tick']} per tick)")


def test_with_acl_on_nothing_works_without_an_account(dep: Deployment):
    """A console started for an ACL deployment gates every page, stream and form behind a login.
    (This deployment's NameServers run without ACL, so any account passes the NameServer's check
    here; tests/ray/test_acl.py covers the servers' own refusals.)"""
    from actors.console.actor import ConsoleActor

    handle = ray.remote(ConsoleActor).options(name="console-acl", namespace=dep.spec.namespace, num_cpus=0).remote(
        dep.spec.namespace, dep.spec.namesrv_names, True, "127.0.0.1", 0, LIVE_PERIODS)
    try:
        acl_url = ray.get(handle.start.remote(), timeout=60)

        async def walk() -> None:
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:  # 127.0.0.1's cookies
                for page in ("cluster", "namesrvs", f"topics/{TOPIC}", "groups", "messages?id=x"):
                    async with s.get(acl_url + page, allow_redirects=False) as r:
                        assert r.status == 303 and r.headers["Location"].startswith("/login?next="), page
                async with s.get(acl_url + "events?page=cluster") as r:
                    assert r.status == 401
                async with s.post(acl_url + "topics", data={"topic": "Unauthorised"}) as r:
                    assert r.status == 401
                async with s.post(acl_url + "login", data={"access_key": "ops", "secret_key": ""}) as r:
                    assert r.status == 400 and "enter an access key and a secret key" in await r.text()
                async with s.post(acl_url + "login", data={"access_key": "ops", "secret_key": "ops-secret",
                                                           "next": "/namesrvs"}, allow_redirects=False) as r:
                    assert r.status == 303 and r.headers["Location"] == "/namesrvs"
                async with s.get(acl_url + "namesrvs") as r:
                    assert r.status == 200 and "NameServers side by side" in await r.text()
                async with s.post(acl_url + "logout", allow_redirects=False) as r:
                    assert r.status == 303
                async with s.get(acl_url + "cluster", allow_redirects=False) as r:
                    assert r.status == 303
        asyncio.run(walk())
        assert "Unauthorised" not in set().union(*topics_on(dep).values())
    finally:
        ray.kill(handle, no_restart=True)


def test_the_ha_page_shows_a_failover_live(browser: Any, deployments: Any, shots: Path):
    """Controller mode (a master and its slave): the HA page shows the controller's set beside each
    member; a killed master's failover reaches the open page without a reload (the new master and
    epoch, the death as the controller saw it, both roles on the timeline)."""
    a0, a1 = "broker-a-0", "broker-a-1"
    dep = deployments.deploy([BrokerSpec("broker-a", 0), BrokerSpec("broker-a", 1)], namesrv_count=1,
                             controller=True, broker_overrides=FAILOVER_HA, broker_port=0)
    wait_until(lambda: broker_status(dep, a0)["role"] == "SYNC_MASTER"
               and len(broker_status(dep, a0)["controller"]["sync_state_set"]) == 2, LIVE_S, "a master with its slave")
    id0 = broker_status(dep, a0)["controller"]["controller_broker_id"]
    id1 = broker_status(dep, a1)["controller"]["controller_broker_id"]
    console, ha_url = start_console(dep.spec.namespace, dep.spec.namesrv_names,
                                    periods=CollectorPeriods(0.3, 0.5, 2.0))
    try:
        browser.get(ha_url + "ha")
        wait_until(lambda: f"master {id0} " in (held := text_of(browser, ".ha-set")) and "epoch 1," in held,
                   LIVE_S, "the controller's set on the HA page")
        assert "★" in text_of(browser, f"tr.ha-row[data-broker='{a0}']")
        assert "lease" in text_of(browser, "table.ha-members") and "valid" in text_of(browser, "table.ha-members")
        browser.execute_script("window.notReloaded = true;")
        ray.kill(dep.brokers[dep.addr_of(a0)], no_restart=True)
        wait_until(lambda: f"master {id1} " in (held := text_of(browser, ".ha-set")) and "epoch 2," in held,
                   LIVE_S, "the failover on the open HA page")
        wait_until(lambda: f"broker-a/{id0}" in text_of(browser, "#ha-deaths"), LIVE_S, "the death the controller saw")
        assert "channel" in text_of(browser, "#ha-deaths")
        assert "★" in text_of(browser, f"tr.ha-row[data-broker='{a1}']")
        assert browser.execute_script("return window.notReloaded === true;")
        # the new master's bar grows with each update (its "e2" label only once it is wide enough;
        # every bar carries its epoch in its title): wait for it rather than read one frame
        wait_until(lambda: a0 in (svg := html_of(browser, "#ha-timeline svg")) and a1 in svg
                   and "epoch 2</title>" in svg, LIVE_S, "both members and the epoch-2 bar on the timeline")
        shoot(browser, shots, "ha")
        assert console_errors(browser) == []
    finally:
        # leave the page before its console goes: a killed server cuts the open event stream mid-chunk,
        # which the browser logs (ERR_INCOMPLETE_CHUNKED_ENCODING) into the next test's console errors
        browser.get("about:blank")
        ray.kill(console, no_restart=True)


def test_a_killed_broker_leaves_the_cluster_and_namesrv_pages_live(browser: Any, url: str, dep: Deployment):
    """Last in the module: it kills broker-b."""
    row = "tr.broker-row[data-broker='broker-b-0']"  # the timeline below keeps its past roles
    browser.get(url + "cluster")
    wait_until(lambda: text_of(browser, row), LIVE_S, "broker-b on the cluster page")
    browser.execute_script("window.notReloaded = true;")
    addr = next(a for a, s in dep.broker_specs.items() if s.broker_name == "broker-b")
    started = time.monotonic()
    dep.kill_broker(addr)
    wait_until(lambda: not text_of(browser, row), LIVE_S, "broker-b gone from the cluster page")
    gone_s = time.monotonic() - started
    assert text_of(browser, "tr.broker-row[data-broker='broker-a-0']")
    assert browser.execute_script("return window.notReloaded === true;")

    browser.get(url + "namesrvs")
    # ray.kill is asynchronous: a heartbeat the dying broker sent may land after its channel's removal
    # and list it again until it expires (the fast profile's 2 s), which the page shows as it happens.
    for column in ("#ns-namesrv-0", "#ns-namesrv-1"):
        wait_until(lambda column=column: "broker-a" in text_of(browser, column)
                   and "broker-b" not in text_of(browser, column), LIVE_S, f"broker-b gone from {column}")
    assert "broker-b" in text_of(browser, "#events")  # the removal, as each NameServer saw it
    assert console_errors(browser) == []
    print(f"a killed broker left the open cluster page {gone_s:.2f} s after ray.kill")
