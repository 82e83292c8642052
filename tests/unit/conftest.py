"""Core fixtures: a manual clock and the pure NameServer core wired to it (no Ray, no disk)."""

from __future__ import annotations

import pytest

from namesrv.common.clock import ManualClock
from namesrv.routeinfo.config import NamesrvConfig
from namesrv.routeinfo.kvconfig import KVConfigManager
from namesrv.routeinfo.processor import DefaultRequestProcessor
from namesrv.routeinfo.route_info_manager import RouteInfoManager


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def config() -> NamesrvConfig:
    return NamesrvConfig()


@pytest.fixture
def rim(config: NamesrvConfig, clock: ManualClock) -> RouteInfoManager:
    return RouteInfoManager(config, clock)


@pytest.fixture
def kv() -> KVConfigManager:
    return KVConfigManager(None)


@pytest.fixture
def processor(rim: RouteInfoManager, kv: KVConfigManager) -> DefaultRequestProcessor:
    return DefaultRequestProcessor(rim, kv)
