"""A broker over the wire whose store lives on a small filesystem (issue 23's "Done when"): a real
broker actor on a local Ray, its data dir on a 12 MiB tmpfs this test mounts, clients on its TCP
port. A send load over TCP of twice the filesystem's size crosses many segment rolls and retention
runs (forced by the real disk's use); then something else fills the disk to the last block, so the
cap is hit while the load goes on. Through all of it the broker never crashes, refuses writes with
RocketMQ's answer (SERVICE_NOT_AVAILABLE, "the broker's disk is full") while the disk is marked full
and acknowledges no write that failed (one that met the full disk before a retention run marked it
is SYSTEM_ERROR, "store write failed", and nothing of it is kept); once the disk has room again it
takes writes; every acknowledged message still inside retention reads back, before and after a
SIGKILL and restart; and the operators' verbs (topicStatus, consumerProgress, queryMsgByKey,
queryMsgById, getBrokerConfig, updateBrokerConfig, statsAll) answer on it over TCP, as mqadmin asks.

Seeded; awaits the broker's answers, never sleeps for luck. Needs root to mount (skipped, saying
so, without it)."""

from __future__ import annotations

import collections
import errno
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.admin.client import AdminClient
from clients.cli.main import main as namesrv_main
from namesrv.common.waiting import wait_until
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.properties import properties_to_string
from namesrv.remoting.client import RemotingClient, parse_namesrv_addr
from tests.support.broker import heartbeat
from tests.support.ray_cluster import DeploymentFactory, broker_info, pull_all, wait_registered_everywhere
from tests.support.store import mounted_tmpfs

pytestmark = pytest.mark.timeout(180)

SIZE_MIB = 12
SEG = 256 * 1024
BODY = 8000
TOPIC = "SmallDiskTopic"
GROUP = "SmallDiskGroup"
QUEUES = 2
SEED = 23
OVERRIDES = {"mapped_file_size_commit_log": SEG, "mapped_file_size_consume_queue": 20 * 1024,
             "clean_resource_interval_ms": 100, "delete_commit_log_files_interval_ms": 0,
             "flush_interval_consume_queue_ms": 200}
"""Small segments and consume-queue files, retention every 100 ms, the default ratios (75/85/90 %)."""
SNA, OK, SE = ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR
PULL_ANSWERS = (OK, ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "small", SIZE_MIB * 1024) as mnt:
        yield mnt


class Load:
    """The sender over TCP and what it was told: {(queue, offset): message number} of every
    acknowledged send, the offset message id of each, and the count of each answer code."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.rng = random.Random(SEED)
        self.acked: dict[tuple[int, int], int] = {}
        self.msg_ids: dict[int, str] = {}
        self.codes: collections.Counter[int] = collections.Counter()
        self.remarks: dict[int, str] = {}
        self.sent = 0
        self.client = RemotingClient(*parse_namesrv_addr(addr)[0], timeout_s=10)

    def body(self, i: int) -> bytes:
        return (f"{i:08d}{random.Random(SEED * 1_000_003 + i).choice('abcdefgh')}" * (BODY // 9 + 1))[:BODY].encode()

    def send(self) -> int:
        i, self.sent = self.sent, self.sent + 1
        ext = {"producerGroup": "SmallDiskProducer", "topic": TOPIC, "queueId": self.rng.randrange(QUEUES),
               "sysFlag": 0, "bornTimestamp": 0, "flag": 0,
               "properties": properties_to_string({"UNIQ_KEY": f"U{i:08d}", "KEYS": f"key-{i}"})}
        answer = self.client.invoke(BrokerRequestCode.SEND_MESSAGE, ext, self.body(i))
        self.codes[answer.code] += 1
        if answer.code == OK:
            fields = answer.ext_fields or {}
            key = (int(fields["queueId"]), int(fields["queueOffset"]))
            assert key not in self.acked, f"{key} acknowledged twice"
            self.acked[key] = i
            self.msg_ids[i] = str(fields["msgId"])
        else:
            self.remarks[answer.code] = answer.remark or ""
        return answer.code


def fill_to_the_last_block(path: Path) -> None:
    """Append to `path` until the filesystem has no block left (a real ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            try:
                os.write(fd, b"\0" * 65536)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        while True:  # the last partial chunk
            try:
                if os.write(fd, b"\0" * 4096) == 0:
                    break
            except OSError:
                break
    finally:
        os.close(fd)


def runtime(admin: AdminClient, addr: str) -> tuple[int, int]:
    """(commitLogMinOffset, commitLogMaxOffset), as GET_BROKER_RUNTIME_INFO tells mqadmin."""
    info = admin.fetch_broker_runtime_stats(addr)
    return int(info["commitLogMinOffset"]), int(info["commitLogMaxOffset"])


def kept_messages(broker: Any, queue: int) -> tuple[int, dict[int, bytes]]:
    """(the queue's min offset, {offset: body} from it on), read between two agreeing pulls of the
    minimum (retention may still be deleting: the minimum only rises)."""
    while True:
        first = ray.get(broker.pull_message.remote(TOPIC, queue, 0, 1), timeout=30)
        page = pull_all(broker, TOPIC, queue, timeout=30)
        again = ray.get(broker.pull_message.remote(TOPIC, queue, 0, 1), timeout=30)
        for answer in (first, again):  # a refusal is not an empty queue
            assert answer["code"] in PULL_ANSWERS, {k: v for k, v in answer.items() if k != "messages"}
        if (first["code"], first["next_begin_offset"]) == (again["code"], again["next_begin_offset"]):
            stored = {m["queue_offset"]: m["body"] for m in page["messages"]}
            low = first["next_begin_offset"] if first["code"] == ResponseCode.PULL_OFFSET_MOVED else 0
            return low, stored


def assert_kept(load: Load, broker: Any) -> int:
    """Every acknowledged message at or above its queue's minimum reads back as sent; returns how
    many were checked."""
    checked = 0
    for q in range(QUEUES):
        low, stored = kept_messages(broker, q)
        ours = {o: load.body(i) for (qq, o), i in load.acked.items() if qq == q and o >= low}
        lost = sorted(o for o, b in ours.items() if stored.get(o) != b)
        assert not lost, f"queue {q}: {len(lost)} acknowledged messages from min {low} lost or changed: {lost[:5]}"
        checked += len(ours)
    return checked


def mqadmin(capsys: pytest.CaptureFixture[str], namesrv_addr: str, *argv: str) -> Any:
    """One mqadmin verb over TCP (`-n`), run in this process; its --json output."""
    capsys.readouterr()
    code = namesrv_main([*argv, "-n", namesrv_addr, "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err, (argv, out, err)
    return json.loads(out)


def test_a_broker_on_a_small_disk_under_load_past_the_cap(small_fs: Path, ray_local: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    deployments = DeploymentFactory(small_fs / "data", prefix="sfs")
    try:
        run(deployments, small_fs, capsys)
    finally:
        deployments.close()


def run(deployments: DeploymentFactory, small_fs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dep: Deployment = deployments.deploy(brokers=[BrokerSpec("broker-a")], namesrv_count=1, broker_port=0,
                                         broker_overrides=OVERRIDES)
    wait_registered_everywhere(dep)
    addr, ns = next(iter(dep.brokers)), dep.namesrv_addr()
    admin = AdminClient(dep)
    admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    load = Load(addr)
    disk_bytes = SIZE_MIB << 20

    # 1. twice the disk's size: many segment rolls, retention (forced above 85 %) mostly keeping
    # ahead; a write that meets the full disk before a run marks it full is SYSTEM_ERROR, unacknowledged
    while load.sent * BODY < 2 * disk_bytes:
        assert load.send() in (OK, SNA, SE), load.remarks
    low, high = runtime(admin, addr)
    assert high > 3 * disk_bytes // 2 and high // SEG > 40, "the log rolled over many segments"
    assert low >= 8 * SEG, f"retention deleted segments (min offset {low})"
    # more acknowledged than the disk holds at once: retention freed room (how often a send met a full
    # disk before the next clean-up depends on how much CPU the clean-up thread got: not asserted)
    assert load.codes[OK] * BODY > disk_bytes, load.codes

    # 2. something else fills the disk to its last block while the load goes on: the cap is hit
    ballast = small_fs / "ballast"
    refused_before, sent_before = load.codes[SNA], load.sent
    while load.codes[SNA] < refused_before + 20:
        fill_to_the_last_block(ballast)
        assert load.send() in (OK, SNA, SE), load.remarks
        assert load.sent < sent_before + 2000, f"the cap never refused a send: {load.codes}"
    assert "the broker's disk is full" in load.remarks[SNA], load.remarks[SNA]
    if SE in load.remarks:  # a write that met the full disk before retention marked it: not acknowledged
        why = load.remarks[SE]
        assert why.startswith("store write failed") and ("No space left" in why or "short write" in why), why
    assert broker_info(dep.brokers[addr])["pid"] > 0, "the broker is alive"
    checked = assert_kept(load, dep.brokers[addr])

    # 3. room again: writes are taken once retention sees it
    ballast.unlink()
    wait_until(lambda: load.send() == OK, 20, "a send taken after the disk has room")
    for _ in range(50):
        assert load.send() == OK, load.remarks
    assert assert_kept(load, dep.brokers[addr]) >= 50

    # 4. the operators' verbs over TCP, on this broker
    offsets = {q: max(o for (qq, o) in load.acked if qq == q) for q in range(QUEUES)}
    with RemotingClient(*parse_namesrv_addr(addr)[0], timeout_s=10) as c:
        # a consumer of the group says hello (its retry topic is made and registered), then commits
        assert c.invoke(BrokerRequestCode.HEART_BEAT, {}, heartbeat("small-disk-consumer", GROUP, TOPIC)).code == OK
        wait_until(lambda: admin.route(f"%RETRY%{GROUP}") is not None, 40, "the group's retry topic route")
        for q, o in offsets.items():
            ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q), "commitOffset": str(o - 4)}
            assert c.invoke(BrokerRequestCode.UPDATE_CONSUMER_OFFSET, ext).code == OK
    offsets_file = Path(broker_info(dep.brokers[addr])["store_dir"]) / "config" / "consumerOffset.json"
    wait_until(lambda: offsets_file.exists() and GROUP in offsets_file.read_text(), 20, "the offsets persisted")
    verbs(load, ns, addr, capsys, offsets)
    taken = mqadmin(capsys, ns, "updateBrokerConfig", "-b", addr, "-k", "diskMaxUsedSpaceRatio", "-v", "70")
    assert taken == {addr: {"diskMaxUsedSpaceRatio": "70"}}
    [row] = mqadmin(capsys, ns, "statsAll", "-t", TOPIC)
    assert (row["topic"], row["inMsg24Hour"]) == (TOPIC, load.codes[OK])

    # 5. SIGKILL and restart on the same small disk: what was acknowledged and kept is still there
    dep.kill_broker(addr)
    restarted = dep.restart_broker(addr)
    wait_registered_everywhere(dep)
    assert broker_info(restarted)["recovery_scanned_from"] > 0, "recovery started from the store's checkpoint"
    assert assert_kept(load, restarted) >= min(checked, 50)
    load.client.close()
    load.client = RemotingClient(*parse_namesrv_addr(addr)[0], timeout_s=10)
    assert load.send() == OK, load.remarks
    config = verbs(load, ns, addr, capsys, offsets)
    assert config["diskMaxUsedSpaceRatio"] == "70", "the change outlived the restart"
    load.client.close()
    print(f"sent {load.sent}, answers {dict(load.codes)}, checked {checked}")


def verbs(load: Load, ns: str, addr: str, capsys: pytest.CaptureFixture[str],
          offsets: dict[int, int]) -> dict[str, str]:
    """topicStatus, consumerProgress, queryMsgByKey, queryMsgById and getBrokerConfig answer on the
    broker, and agree with what the load was told; returns the broker's config."""
    status = {r["queueId"]: r for r in mqadmin(capsys, ns, "topicStatus", "-t", TOPIC)}
    assert set(status) == set(range(QUEUES))
    assert all(status[q]["maxOffset"] >= offsets[q] + 1 for q in offsets), status
    assert any(status[q]["minOffset"] > 0 for q in offsets), f"retention moved a queue's minimum: {status}"
    progress = mqadmin(capsys, ns, "consumerProgress", "-g", GROUP)
    assert {q["queueId"]: q["consumerOffset"] for q in progress["queues"]} == {q: o - 4 for q, o in offsets.items()}
    assert progress["diffTotal"] == sum(status[q]["maxOffset"] - (o - 4) for q, o in offsets.items())
    newest = max(load.acked.values())
    [by_key] = mqadmin(capsys, ns, "queryMsgByKey", "-t", TOPIC, "-k", f"key-{newest}")["messages"]
    assert by_key["body"] == load.body(newest).decode() and by_key["offsetMsgId"] == load.msg_ids[newest]
    [by_id] = mqadmin(capsys, ns, "queryMsgById", "-i", load.msg_ids[newest])
    assert (by_id["body"], by_id["uniqueKey"], by_id["storeHost"]) == (load.body(newest).decode(), f"U{newest:08d}",
                                                                       addr)
    config: dict[str, str] = mqadmin(capsys, ns, "getBrokerConfig", "-b", addr)[addr]
    assert config["mappedFileSizeCommitLog"] == str(SEG) and config["diskSpaceWarningLevelRatio"] == "90"
    return config
