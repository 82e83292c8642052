"""NameServer configuration: every period and switch, RocketMQ's defaults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from namesrv.constants import DEFAULT_MAX_BODY_SIZE

DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS = 1000 * 60 * 2
"""A broker silent for longer than this is dead (RocketMQ's BROKER_CHANNEL_EXPIRED_TIME)."""

CONFIG_BLACKLIST_DEFAULT = "configBlackList;configStorePath;kvConfigPath"


class NamesrvConfig(BaseModel):
    """Field names are snake_case; UPDATE_NAMESRV_CONFIG also accepts RocketMQ's camelCase keys."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid")

    kv_config_path: str = Field(default="~/namesrv/kvConfig.json")
    config_store_path: str = Field(default="~/namesrv/namesrv.properties")
    order_message_enable: bool = False
    scan_not_active_broker_initial_delay_ms: int = Field(default=5_000, ge=0)
    scan_not_active_broker_interval_ms: int = Field(default=10_000, gt=0)
    broker_channel_expired_time_ms: int = Field(default=DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS, gt=0)
    delete_topic_with_broker_registration: bool = False
    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    max_body_size: int = Field(default=DEFAULT_MAX_BODY_SIZE, gt=0)
    not_ready_window_ms: int = Field(default=30_000, ge=0)
    """After a (re)start, route queries answer 'not ready' for this long (beyond RocketMQ; #5322)."""
    config_black_list: str = CONFIG_BLACKLIST_DEFAULT
    snapshot_interval_ms: int = Field(default=10_000, ge=0)
    """Route snapshots for the Spark analysis: one every interval (0 turns snapshots off)."""
    snapshot_on_change: bool = True
    """Also snapshot (coalesced, once per event-loop turn) after every route change."""
    snapshot_max_buffered_rows: int = Field(default=1_000_000, gt=0)
    """Undrained snapshots beyond this are dropped oldest first (and counted), bounding memory."""

    def blacklisted_keys(self) -> set[str]:
        return {k.strip() for k in self.config_black_list.split(";") if k.strip()}
