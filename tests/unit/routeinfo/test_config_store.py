"""The NameServer config store: what UPDATE_NAMESRV_CONFIG changed, written and read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from namesrv.common.clock import ManualClock
from namesrv.common.persist import atomic_write
from namesrv.protocol.codes import RequestCode
from namesrv.protocol.msgpack_codec import encode_body
from namesrv.protocol.types import InvalidInput
from namesrv.remoting.command import RemotingRequest
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.config_store import encode_config_updates, load_config_updates
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager


def test_updated_keys_round_trip_and_only_they_are_stored(tmp_path: Path, clock: ManualClock) -> None:
    config = NamesrvConfig()
    processor = DefaultRequestProcessor(RouteInfoManager(config, clock), KVConfigManager(None))
    body = encode_body({"orderMessageEnable": "true", "broker_channel_expired_time_ms": "5000"})
    assert processor.process_request(RemotingRequest(RequestCode.UPDATE_NAMESRV_CONFIG, {}, body)).ok
    path = tmp_path / "namesrv.json"
    atomic_write(path, encode_config_updates(config, processor.updated_config_keys))
    assert json.loads(path.read_text()) == {"broker_channel_expired_time_ms": 5000, "order_message_enable": True}

    fresh = NamesrvConfig()
    assert load_config_updates(path, fresh) == {"order_message_enable", "broker_channel_expired_time_ms"}
    assert fresh.order_message_enable and fresh.broker_channel_expired_time_ms == 5000
    assert fresh.scan_not_active_broker_interval_ms == NamesrvConfig().scan_not_active_broker_interval_ms


def test_missing_store_changes_nothing_and_blacklisted_or_unknown_keys_are_ignored(tmp_path: Path) -> None:
    config = NamesrvConfig()
    assert load_config_updates(tmp_path / "absent.json", config) == set()
    assert load_config_updates(None, config) == set()
    path = tmp_path / "namesrv.json"
    path.write_text(json.dumps({"kv_config_path": "/tmp/evil", "no_such_key": 1, "enable_topic_list": False}))
    assert load_config_updates(path, config) == {"enable_topic_list"}
    assert config.kv_config_path == NamesrvConfig().kv_config_path and not config.enable_topic_list


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", json.dumps({"scan_not_active_broker_interval_ms": -1})])
def test_a_corrupt_store_is_an_error_and_changes_nothing(tmp_path: Path, text: str) -> None:
    path = tmp_path / "namesrv.json"
    path.write_text(text)
    config = NamesrvConfig()
    with pytest.raises(InvalidInput):
        load_config_updates(path, config)
    assert config == NamesrvConfig()
