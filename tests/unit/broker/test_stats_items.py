"""Per-topic puts and per-group gets (namesrv.broker.stats_items) over a minute, an hour and a day
on the injected clock, and VIEW_BROKER_STATS_DATA (315) answering them through a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from namesrv.broker.stats_items import GROUP_GET_NUMS, TOPIC_PUT_NUMS, BrokerStatsManager
from namesrv.common.clock import ManualClock
from namesrv.protocol import fastjson
from namesrv.protocol.codes import BrokerRequestCode as Code
from namesrv.protocol.codes import ResponseCode
from tests.support.broker import Broker


def test_windows_sum_and_tps_on_the_clock() -> None:
    clock = ManualClock(1_000_000)
    stats = BrokerStatsManager(clock)
    for _ in range(12):  # two minutes: 60 puts a minute, one sample a second
        for _ in range(10):
            clock.advance(1000)
            stats.inc_topic_put_nums("T", 6)
            stats.sample()
    data = stats.data(TOPIC_PUT_NUMS, "T")
    assert data is not None
    minute, day = data["statsMinute"], data["statsDay"]
    assert minute["sum"] == 360 and minute["tps"] == pytest.approx(6.0)  # the last minute: 6 a second
    assert day["sum"] == 720 and minute["avgpt"] == pytest.approx(6.0)
    assert stats.data(TOPIC_PUT_NUMS, "Other") is None and stats.data("NO_SUCH_SET", "T") is None
    stats.inc_group_get_nums("G", "T", 0)
    assert stats.data(GROUP_GET_NUMS, "T@G") is None  # nothing handed over: not counted
    stats.inc_group_get_nums("G", "T", 3)
    assert stats.data(GROUP_GET_NUMS, "T@G")["statsDay"]["sum"] == 3  # type: ignore[index]


def test_minute_window_forgets_older_traffic() -> None:
    clock = ManualClock(0)
    stats = BrokerStatsManager(clock)
    stats.inc_topic_put_nums("T", 100)
    for _ in range(180):  # three quiet minutes
        clock.advance(1000)
        stats.sample()
    data = stats.data(TOPIC_PUT_NUMS, "T")
    assert data is not None
    assert data["statsMinute"]["sum"] == 0 and data["statsMinute"]["tps"] == 0
    assert data["statsDay"]["sum"] == 100


def test_view_broker_stats_data_through_a_broker(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    for body in (b"a", b"b", b"c"):
        assert broker.send(body).code == ResponseCode.SUCCESS
    assert broker.pull(0).code == ResponseCode.SUCCESS
    put = broker.call(Code.VIEW_BROKER_STATS_DATA, {"statsName": TOPIC_PUT_NUMS, "statsKey": "T"})
    assert put.code == ResponseCode.SUCCESS
    assert fastjson.loads(put.body or b"")["statsDay"]["sum"] == 3
    got = broker.call(Code.VIEW_BROKER_STATS_DATA, {"statsName": GROUP_GET_NUMS, "statsKey": "T@CG"})
    assert fastjson.loads(got.body or b"")["statsDay"]["sum"] == 3
    missing = broker.call(Code.VIEW_BROKER_STATS_DATA, {"statsName": TOPIC_PUT_NUMS, "statsKey": "Nope"})
    assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, "The stats <TOPIC_PUT_NUMS> <Nope> not exist")
    bad = broker.call(Code.VIEW_BROKER_STATS_DATA, {"statsName": TOPIC_PUT_NUMS})
    assert bad.code != ResponseCode.SUCCESS and "statsKey" in (bad.remark or "")
