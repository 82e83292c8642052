"""The mqadmin verbs' and `namesrv top`'s pure parts, without a cluster: argument checks, the shapes
they print, what `top` calls a disagreement or a new removal, and a closed pipe."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from clients.cli.mqadmin.args import namesrv_addr_arg, new_topic_arg, perm_arg
from clients.cli.mqadmin.cluster import runtime_columns
from clients.cli.mqadmin.group import cmd_reset_offset_by_time
from clients.cli.mqadmin.topic import route_list_table, topic_config_text
from clients.cli.support import CLIError
from clients.cli.top import Frame, NamesrvView, broker_rows, disagreements, recent_removals, render
from namesrv.protocol.models import BrokerData, QueueData, TopicConfig, TopicRouteData


@pytest.mark.parametrize("bad", ["nohost", "host:", ":9876", "host:0", "host:99999", ";", ""])
def test_a_bad_namesrv_addr_is_refused(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        namesrv_addr_arg(bad)


def test_namesrv_addr_and_perm_and_topic() -> None:
    assert namesrv_addr_arg("127.0.0.1:9876;127.0.0.1:9877") == "127.0.0.1:9876;127.0.0.1:9877"
    assert [perm_arg(p) for p in ("2", "4", "6")] == [2, 4, 6]
    for bad in ("0", "1", "3", "7", "RW", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            perm_arg(bad)
    assert new_topic_arg("TopicA") == "TopicA"
    for bad in ("TBW102", "SELF_TEST_TOPIC", "bad topic", "x" * 128):
        with pytest.raises(argparse.ArgumentTypeError):
            new_topic_arg(bad)


def test_printed_shapes_are_rocketmqs() -> None:
    tc = TopicConfig(topic_name="T", read_queue_nums=4, write_queue_nums=2, perm=4)
    assert topic_config_text(tc) == ("TopicConfig [topicName=T, readQueueNums=4, writeQueueNums=2, perm=R--, "
                                      "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={}]")
    route = TopicRouteData([QueueData("b", 4, 2, 6), QueueData("a", 1, 1, 4)],
                           [BrokerData("C", "b", {0: "h:2"}), BrokerData("C", "a", {0: "h:1", 1: "h:3"})])
    lines = route_list_table(route).splitlines()
    assert lines[0].split() == ["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"]
    assert lines[2].split() == ["C", "a", "{0=h:1,", "1=h:3}", "1", "1", "4"]
    assert lines[3].split() == ["C", "b", "{0=h:2}", "4", "2", "6"]
    assert lines[4].split() == ["Total:", "2", "5", "3"]


@dataclass
class Removal:
    broker_addr: str
    cause: str
    t_ms: int


def broker(name: str, addr: str, age: int | None) -> dict[str, object]:
    return {"cluster": "C", "broker_name": name, "broker_id": 0, "broker_addr": addr, "last_heartbeat_age_ms": age}


def status(*brokers: dict[str, object]) -> dict[str, object]:
    return {"ready": True, "brokers": list(brokers), "topics": 1, "route_seq": 3, "remoting_address": None}


def test_top_finds_disagreements_and_new_removals() -> None:
    a, b = broker("a", "h:1", 10), broker("b", "h:2", 2500)
    frame = Frame(10_000, [
        NamesrvView("ns-0", status(a, b), {"T", "U"}, [Removal("h:9", "expired", 9_000)]),
        NamesrvView("ns-1", status(a), {"T"}, [Removal("h:8", "channel", 4_000)]),
        NamesrvView("ns-2", error="GetTimeoutError"),
    ])
    assert broker_rows(frame) == [(("C", "a", 0, "h:1"), {"ns-0": 10, "ns-1": 10}),
                                  (("C", "b", 0, "h:2"), {"ns-0": 2500})]
    assert disagreements(frame) == ["brokers on ns-0, not on ns-1: h:2", "topics on ns-0, not on ns-1: U"]
    assert recent_removals(frame, since_ms=5_000) == [(9_000, "ns-0", "h:9", "expired", True),
                                                       (4_000, "ns-1", "h:8", "channel", False)]

    from rich.console import Console

    console = Console(width=160, record=True, color_system=None)
    console.print(render(frame, "Ray namespace 'x'", started_ms=5_000))
    text = console.export_text()
    assert "UNREACHABLE GetTimeoutError" in text and "missing" in text and "2.50 s" in text and "10 ms" in text
    assert "NEW" in text and "brokers on ns-0, not on ns-1: h:2" in text


def test_a_reader_that_leaves_ends_the_command_quietly() -> None:
    """`namesrv ... | head -1`: exit 141 (SIGPIPE), nothing on stderr."""
    code = ("import sys, dataclasses, clients.cli.mqadmin.topic, clients.cli.main as c\n"
            "import clients.cli.mqadmin.verb as v\n"
            "def many(args):\n    for i in range(200000): print('topic', i)\n    return 0\n"
            "v.REGISTERED['topicList'] = dataclasses.replace(v.REGISTERED['topicList'], execute=many)\n"
            "sys.exit(c.main(['topicList', '-n', '127.0.0.1:1']))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"topic 0\n"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141 and err == b"", err


# ---------------------------------------------------------------------------- --acl and credentials
def test_acl_option_turns_the_acl_on_and_brokers_sign_with_the_broker_account(tmp_path: Path) -> None:
    from clients.cli.support import acl_overrides

    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n"
                   "  - {accessKey: brk, secretKey: brk-secret, broker: true}\n")
    namesrv, broker = acl_overrides(str(acl))
    assert namesrv == {"acl_enable": True, "acl_file": str(acl.resolve())}
    creds = broker.pop("credentials")
    assert broker == namesrv
    assert (creds.access_key, creds.secret_key) == ("brk", "brk-secret")


@pytest.mark.parametrize("text, why", [
    ("accounts:\n  - {accessKey: ops, secretKey: ops-secret, admin: true}\n", "no account with `broker: true`"),
    ("accounts: [", "not YAML"),
    ("accounts:\n  - {accessKey: x, secretKey: short, broker: true}\n", "malformed"),
])
def test_acl_option_refuses_a_file_brokers_cannot_use(tmp_path: Path, text: str, why: str) -> None:
    from clients.cli.support import CLIError, acl_overrides

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(text)
    with pytest.raises(CLIError, match=why):
        acl_overrides(str(acl))
    with pytest.raises(CLIError, match="does not exist"):
        acl_overrides(str(tmp_path / "missing.yml"))


def test_admin_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from clients.cli.support import CLIError, env_credentials

    monkeypatch.delenv("NAMESRV_ACCESS_KEY", raising=False)
    monkeypatch.delenv("NAMESRV_SECRET_KEY", raising=False)
    assert env_credentials() is None
    monkeypatch.setenv("NAMESRV_ACCESS_KEY", "ops")
    with pytest.raises(CLIError, match="both"):
        env_credentials()
    monkeypatch.setenv("NAMESRV_SECRET_KEY", "ops-secret")
    creds = env_credentials()
    assert creds is not None and creds.access_key == "ops"


def test_cluster_list_columns_are_derived_as_rocketmqs() -> None:
    stats = {"brokerVersionDesc": "V5_3_3", "putTps": "12.5 3.0 ", "getTransferredTps": "  ",
             "sendThreadPoolQueueSize": "4", "sendThreadPoolQueueHeadWaitTimeMills": "0",
             "pullThreadPoolQueueSize": "2", "pullThreadPoolQueueHeadWaitTimeMills": "0",
             "timerReadBehind": "0", "timerOffsetBehind": "0", "timerCongestNum": "25000", "timerEnqueueTps": "0.0",
             "timerDequeueTps": "0.0", "pageCacheLockTimeMills": "0", "earliestMessageTimeStamp": "1000",
             "commitLogDiskRatio": "0.69600740", "brokerActive": "true"}
    now = 1000 + 90 * 60 * 1000
    assert runtime_columns(stats, now) == ("V5_3_3", "12.50(4,0ms)", "0.00(2,0ms|N,Nms)", "0-0(2.5w, 0.0, 0.0)", "0",
                                           "1.50", "0.6960", "true")
    # a broker that could not be asked; an empty store (earliest -1) is 0 hours, not 500,000
    assert runtime_columns({}, now) == ("", "0.00(,ms)", "0.00(,ms|N,Nms)", "0-0(0.0w, 0.0, 0.0)", "", "0.00",
                                        "0.0000", "false")
    assert runtime_columns({"earliestMessageTimeStamp": "-1"}, now)[5] == "0.00"


def test_version_desc_is_mqversions() -> None:
    from clients.cli.mqadmin.stats import version_desc

    assert [version_desc(o) for o in (212, 213, 401, 412, 479, 611, 700)] == [
        "V4_0_0_SNAPSHOT", "V4_0_0", "V4_9_4", "V5_0_0_SNAPSHOT", "V5_3_3", "V5_9_9", "HIGHER_VERSION"]


def test_message_verbs_print_mqadmins_fields_and_refuse_bad_input() -> None:
    from clients.cli.main import build_parser
    from clients.cli.mqadmin.message import human_time, java_map, message_json, message_text
    from namesrv.protocol.message.codec import offset_msg_id
    from namesrv.protocol.message.decoder import MessageExt

    m = MessageExt("T", 1, 7, 4096, 1_700_000_000_123, 1_700_000_000_000, "10.0.0.1:5000", "10.0.0.2:10911",
                   b"hello", {"UNIQ_KEY": "C0A8", "KEYS": "k1 k2", "TAGS": "tagA"})
    lines = message_text(m, ("OffsetID:", m.msg_id)).splitlines()
    assert lines[0] == f"{'OffsetID:':<20} {offset_msg_id('10.0.0.2:10911', 4096)}"
    assert [ln[:20].strip() for ln in lines] == [
        "OffsetID:", "Topic:", "Tags:", "Keys:", "Queue ID:", "Queue Offset:", "CommitLog Offset:", "Reconsume Times:",
        "Born Timestamp:", "Store Timestamp:", "Born Host:", "Store Host:", "System Flag:", "Properties:",
        "Message Body:"]
    assert lines[2].endswith("[tagA]") and lines[3].endswith("[k1 k2]") and lines[-1].endswith("hello")
    assert human_time(1_700_000_000_123).endswith(",123") and java_map({"b": "2", "a": "1"}) == "{a=1, b=2}"
    assert message_json(m)["uniqueKey"] == "C0A8" and message_json(m)["keys"] == ["k1", "k2"]
    parser = build_parser()
    args = parser.parse_args(["queryMsgByKey", "-t", "T", "-k", "k1", "-n", "127.0.0.1:9876"])
    assert (args.max_num, args.begin, args.end) == (64, 0, 2**63 - 1)
    for bad in (["queryMsgByKey", "-t", "T", "-k", "k", "-m", "0"], ["queryMsgByKey", "-t", "bad topic", "-k", "k"],
                ["queryMsgById"], ["queryMsgByUniqueKey", "-t", "T"], ["statsAll", "-t", "bad topic"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_consumer_status_checks_and_json_are_rocketmqs() -> None:
    from clients.cli.main import build_parser
    from clients.cli.mqadmin.consumer import queue_warnings, running_info_json, same_subscription
    from namesrv.protocol.models import MessageQueue
    from namesrv.protocol.running_info import ConsumerRunningInfo

    now = 10_000_000
    mq = MessageQueue("T", "broker-a", 1)

    def info(sub: str, pq: dict[str, object], started: int = now - 180_000) -> ConsumerRunningInfo:
        props = {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CONSUMER_START_TIMESTAMP": str(started),
                 "PROP_CONSUMEORDERLY": "flase"}  # sic: rocketmq-client-cpp's spelling
        return ConsumerRunningInfo(props, [{"topic": "T", "subString": sub}], {mq: pq})

    # A queue with cached messages not consumed for over a minute (longs as the C++ client writes them).
    blocked = info("*", {"cachedMsgCount": 3, "lastConsumeTimestamp": str(now - 61_000)})
    assert queue_warnings("c1", blocked, now) == [
        "c1 MessageQueue [topic=T, brokerName=broker-a, queueId=1] can't consume for a while, maybe blocked, 61000ms"]
    assert queue_warnings("c1", info("*", {"cachedMsgCount": 0, "lastConsumeTimestamp": "1"}), now) == []
    assert same_subscription({"a": blocked, "b": info("*", {})}, now)
    assert not same_subscription({"a": blocked, "b": info("TagA", {})}, now)
    assert same_subscription({"a": info("*", {}, started=now - 1000), "b": info("TagA", {})}, now), \
        "consumers started less than two minutes ago are not compared, as RocketMQ"
    assert running_info_json(blocked)["mqTable"] == [
        {"messageQueue": {"brokerName": "broker-a", "queueId": 1, "topic": "T"},
         "processQueueInfo": {"cachedMsgCount": 3, "lastConsumeTimestamp": str(now - 61_000)}}]
    args = build_parser().parse_args(["consumerStatus", "-g", "G", "-i", "c1", "-s", "-n", "127.0.0.1:9876"])
    assert (args.group, args.client_id, args.jstack, args.broker_addr) == ("G", "c1", True, None)
    assert args.timeout == 15.0, "longer than the broker's 10 s wait for the client"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["consumerStatus", "-i", "c1"])


def test_group_verbs_take_mqadmins_options_and_refuse_bad_ones_before_connecting() -> None:
    import datetime

    from clients.cli.main import build_parser
    from clients.cli.mqadmin.args import timestamp_arg

    parser = build_parser()
    args = parser.parse_args(["updateSubGroup", "-c", "DefaultCluster", "-g", "G_1%x", "-n", "127.0.0.1:9876"])
    assert (args.consume_enable, args.consume_broadcast_enable, args.consume_from_min_enable) == (True, False, False)
    assert (args.retry_queue_nums, args.retry_max_times, args.notify_consumer_ids_changed_enable) == (1, 16, True)
    local = datetime.datetime(2024, 5, 6, 7, 8, 9)
    assert timestamp_arg("2024-05-06#07:08:09:123") == int(local.timestamp()) * 1000 + 123
    assert timestamp_arg("1700000000000") == 1_700_000_000_000
    assert abs(timestamp_arg("now") - int(datetime.datetime.now().timestamp() * 1000)) < 5_000
    reset = parser.parse_args(["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now", "-n", "127.0.0.1:9876"])
    assert reset.force is True and (reset.broker_addr, reset.queue, reset.offset) == (None, None, None)
    one = parser.parse_args(["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now", "-b", "127.0.0.1:10911",
                             "-q", "3", "-o", "0", "-n", "127.0.0.1:9876"])
    assert (one.broker_addr, one.queue, one.offset) == ("127.0.0.1:10911", 3, 0)
    for alone in (["-q", "3"], ["-b", "127.0.0.1:10911"], ["-o", "5"], ["-b", "127.0.0.1:10911", "-o", "5"]):
        half = parser.parse_args(["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now", *alone,
                                  "-n", "127.0.0.1:9876"])
        with pytest.raises(CLIError, match="-b and -q name one queue"):  # refused before any connection
            cmd_reset_offset_by_time(half)
    for bad in (["updateSubGroup", "-g", "G"],  # neither -b nor -c
                ["updateSubGroup", "-c", "C", "-g", "bad group"], ["updateSubGroup", "-c", "C", "-g", "g" * 256],
                ["updateSubGroup", "-c", "C", "-g", "G", "-q", "-1"],
                ["updateSubGroup", "-c", "C", "-g", "G", "-s", "y"],
                ["deleteSubGroup", "-c", "C", "-g", "a b"], ["producerConnection", "-g", "P"],
                ["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "yesterday"],
                ["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "2024-05-06#07:08:09"],
                ["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now", "-b", "h:1", "-q", "-1"],
                ["resetOffsetByTime", "-g", "G", "-t", "T", "-s", "now", "-b", "h:1", "-q", "0", "-o", "x"],
                ["cloneGroupOffset", "-s", "A", "-d", "B"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
