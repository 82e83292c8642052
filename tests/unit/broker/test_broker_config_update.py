"""UPDATE_BROKER_CONFIG of the retention settings on a running broker (RocketMQ's
AdminBrokerProcessor.updateBrokerConfig): checked keys and values (a bad one changes nothing, not
even the good keys given with it), written to the broker's config file before the answer, shown by
GET_BROKER_CONFIG, read by the very next clean-up run, and applied again by a restarted broker.

A real BrokerController (no Ray, no TCP) on the injected clock; the disk's fullness is an injected
probe, as in test_store_retention."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from actors.broker.lifecycle import BrokerController
from actors.namesrv.housekeeping import BrokerChannel
from namesrv.broker.config import BrokerConfig
from namesrv.broker.config_update import CONFIG_FILE, BrokerConfigFile, ConfigUpdateError, validate_update
from namesrv.common.clock import ManualClock
from namesrv.protocol.bodies import format_properties, parse_properties
from namesrv.protocol.codes import BrokerRequestCode, ResponseCode
from namesrv.protocol.message.types import MessageInner
from namesrv.remoting.command import RemotingRequest, RemotingResponse
from namesrv.remoting.pipeline import RequestContext, resolve
from namesrv.store.mapped_file_queue import segment_paths
from tests.support.store import HOUR_MS, at_local_hour


def broker(store_dir: Path, clock: ManualClock, **config: Any) -> BrokerController:
    cfg = BrokerConfig(**{"mapped_file_size_commit_log": 4096, "delete_commit_log_files_interval_ms": 0} | config)
    b = BrokerController("c", "b", 0, store_dir, cfg, [], "", None, str, lambda token: BrokerChannel(None, token),
                         "broker-b", clock=clock)
    b.cleaner.disk_usage = lambda path: 0.5  # an injected probe: only the settings decide here
    b.cleaner.sleep = lambda s: None
    return b


def update(b: BrokerController, props: dict[str, str]) -> RemotingResponse:
    request = RemotingRequest(BrokerRequestCode.UPDATE_BROKER_CONFIG, {}, format_properties(props))
    return asyncio.run(resolve(b.pipeline.handle(request, RequestContext())))


def shown(b: BrokerController) -> dict[str, str]:
    request = RemotingRequest(BrokerRequestCode.GET_BROKER_CONFIG, {})
    answer = asyncio.run(resolve(b.pipeline.handle(request, RequestContext())))
    assert answer.code == ResponseCode.SUCCESS and answer.body is not None
    return parse_properties(answer.body)


def age_all_segments(b: BrokerController, hours: float) -> None:
    when = (b.store.clock() - hours * HOUR_MS) / 1000
    for p in segment_paths(b.store.dir / "commitlog"):
        os.utime(p, (when, when))


@pytest.mark.parametrize(("props", "code", "says"), [
    ({"fileReservedTime": "0"}, ResponseCode.SYSTEM_ERROR, "fileReservedTime"),
    ({"fileReservedTime": "two days"}, ResponseCode.SYSTEM_ERROR, "two days"),
    ({"deleteWhen": "25"}, ResponseCode.SYSTEM_ERROR, "0..23"),
    ({"deleteWhen": "04;x"}, ResponseCode.SYSTEM_ERROR, "deleteWhen"),
    ({"diskMaxUsedSpaceRatio": "96"}, ResponseCode.SYSTEM_ERROR, "diskMaxUsedSpaceRatio"),
    ({"diskSpaceWarningLevelRatio": "100"}, ResponseCode.SYSTEM_ERROR, "diskSpaceWarningLevelRatio"),
    ({"diskSpaceCleanForciblyRatio": "-1"}, ResponseCode.SYSTEM_ERROR, "diskSpaceCleanForciblyRatio"),
    ({"brokerPermission": "8"}, ResponseCode.SYSTEM_ERROR, "brokerPermission"),
    ({"flushDiskType": "ASYNC_FLUSH"}, ResponseCode.INVALID_PARAMETER, "read only at start"),
    ({"noSuchKey": "1"}, ResponseCode.INVALID_PARAMETER, "not a broker config key"),
    ({"brokerName": "x"}, ResponseCode.INVALID_PARAMETER, "brokerName"),
    ({"configBlackList": "x"}, ResponseCode.NO_PERMISSION, "black list"),
    ({}, ResponseCode.INVALID_PARAMETER, "no config key"),
    ({"fileReservedTime": "1", "deleteWhen": "24"}, ResponseCode.SYSTEM_ERROR, "deleteWhen"),
])
def test_a_bad_key_or_value_is_refused_and_changes_nothing(tmp_path: Path, props: dict[str, str], code: int,
                                                          says: str) -> None:
    b = broker(tmp_path, ManualClock(at_local_hour(12)))
    before = (b.config.model_dump(), shown(b))
    with pytest.raises(ConfigUpdateError) as refused:
        validate_update(b.config, props)
    assert refused.value.code == code and says in str(refused.value)
    answer = update(b, props)
    assert answer.code == code and says in (answer.remark or "")
    assert (b.config.model_dump(), shown(b)) == before
    assert not (tmp_path / "config" / CONFIG_FILE).exists()
    b.store.close()


def test_retention_keys_change_live_are_shown_used_by_the_next_run_and_kept_across_a_restart(tmp_path: Path) -> None:
    clock = ManualClock(at_local_hour(12))
    b = broker(tmp_path, clock)
    for i in range(60):
        b.store.append(MessageInner("T", 0, b"m" * 200, {"i": str(i)}))
    segments = len(segment_paths(b.store.dir / "commitlog"))
    assert segments >= 4
    age_all_segments(b, 2)
    report = b.cleaner.run()
    assert not report.deleted_segments, "04 is not now, and 2 h is inside the 72 h kept"

    answer = update(b, {"deleteWhen": "3;12", "fileReservedTime": "1", "diskMaxUsedSpaceRatio": "80"})
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert (b.config.delete_when, b.config.file_reserved_time, b.config.disk_max_used_space_ratio) == ("3;12", 1, 80)
    on_disk = parse_properties((tmp_path / "config" / CONFIG_FILE).read_bytes())
    assert on_disk == {"deleteWhen": "3;12", "fileReservedTime": "1", "diskMaxUsedSpaceRatio": "80"}
    config = shown(b)
    assert (config["deleteWhen"], config["fileReservedTime"], config["diskMaxUsedSpaceRatio"]) == ("3;12", "1", "80")

    report = b.cleaner.run()  # the very next run: now is one of the hours, 2 h is past the 1 h kept
    assert report.policy is not None and report.policy.file_reserved_time_h == 1
    assert report.time_up and len(report.deleted_segments) == segments - 1
    assert update(b, {"diskSpaceWarningLevelRatio": "40", "diskSpaceCleanForciblyRatio": "35"}).ok
    b.cleaner.disk_usage = lambda path: 0.45
    report = b.cleaner.run()
    assert report.disk_full and b.store.disk_full, "45 % is above the new warning level: writes refused"
    assert update(b, {"diskSpaceWarningLevelRatio": "90"}).ok
    assert not b.cleaner.run().disk_full and not b.store.disk_full
    b.store.close()

    again = broker(tmp_path, clock)  # deployed with the defaults: the file's values win
    assert (again.config.delete_when, again.config.file_reserved_time, again.config.disk_max_used_space_ratio,
            again.config.disk_space_warning_level_ratio, again.config.disk_space_clean_forcibly_ratio) == \
        ("3;12", 1, 80, 90, 35)
    assert shown(again)["diskSpaceCleanForciblyRatio"] == "35"
    again.store.close()


def test_a_change_that_could_not_be_written_is_refused_and_rolled_back(tmp_path: Path) -> None:
    b = broker(tmp_path, ManualClock(at_local_hour(12)))
    assert update(b, {"fileReservedTime": "48"}).ok
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    b.config_file.path = blocker / CONFIG_FILE  # its directory cannot exist: the write fails
    answer = update(b, {"fileReservedTime": "12", "brokerPermission": "4"})
    assert answer.code == ResponseCode.SYSTEM_ERROR and "could not write" in (answer.remark or "")
    assert (b.config.file_reserved_time, b.config.broker_permission) == (48, 6)
    assert b.config_file.values == {"fileReservedTime": "48"}
    assert shown(b)["fileReservedTime"] == "48"
    b.store.close()


def test_the_permission_is_kept_with_the_retention_keys(tmp_path: Path) -> None:
    clock = ManualClock(at_local_hour(12))
    b = broker(tmp_path, clock)
    version = b.topics.data_version
    assert update(b, {"brokerPermission": "4"}).ok
    assert b.config.broker_permission == 4 and b.topics.data_version != version
    b.store.close()
    again = broker(tmp_path, clock)
    assert again.config.broker_permission == 4 and shown(again)["brokerPermission"] == "4"
    again.store.close()


def test_a_config_file_a_broker_cannot_read_stops_its_start_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "config" / CONFIG_FILE
    path.parent.mkdir()
    path.write_text("deleteWhen=99\n")
    with pytest.raises(ValueError, match="deleteWhen"):
        BrokerConfigFile(path).load(BrokerConfig())
