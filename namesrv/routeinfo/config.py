"""NameServer configuration: every period and switch, RocketMQ's defaults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from namesrv.protocol.constants import MAX_FRAME_SIZE

DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS = 1000 * 60 * 2
"""A broker silent for longer than this is dead (RocketMQ's BROKER_CHANNEL_EXPIRED_TIME)."""

CONFIG_BLACKLIST_DEFAULT = "configBlackList;configStorePath;kvConfigPath"
CONFIG_BLACKLIST_ALWAYS = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome",
                                     "aclEnable", "aclFile"})
"""Keys UPDATE_NAMESRV_CONFIG refuses whatever `config_black_list` says (RocketMQ's processor adds
these to the configured list; the ACL switches are ours: ACL is turned on or off at deployment)."""


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
    max_body_size: int = Field(default=MAX_FRAME_SIZE, gt=0)
    not_ready_window_ms: int = Field(default=46_000, ge=0)
    """After a restart, route queries answer 'not ready' for at most this long, until every broker
    known before it has registered again (beyond RocketMQ 4.9; #5322). The profiles size it from
    the brokers' period, timeout and an actor's restart (actors.deployment.profiles.not_ready_window_ms)."""
    config_black_list: str = CONFIG_BLACKLIST_DEFAULT
    snapshot_interval_ms: int = Field(default=10_000, ge=0)
    """Route snapshots for the Spark analysis: one every interval while a collector holds a lease
    (0 turns snapshots off)."""
    snapshot_reader_lease_ms: int = Field(default=60_000, gt=0)
    """A collector's drain lets the NameServer snapshot for this long (at least 3 intervals): with
    nobody collecting, no snapshot is taken and they cost nothing."""
    snapshot_on_change: bool = True
    """Also snapshot (coalesced, once per event-loop turn) after every route change."""
    snapshot_max_buffered_rows: int = Field(default=1_000_000, gt=0)
    """Undrained snapshots beyond this are dropped oldest first (and counted), bounding memory."""
    acl_enable: bool = False
    """Check every request against `acl_file` (RocketMQ's plain ACL; see namesrv/acl)."""
    acl_file: str = "~/namesrv/plain_acl.yml"
    """The accounts, in RocketMQ's plain_acl.yml shape; reloaded when it changes."""

    def blacklisted_keys(self) -> set[str]:
        """`config_black_list` plus the keys RocketMQ always refuses (CONFIG_BLACKLIST_ALWAYS)."""
        return {k.strip() for k in self.config_black_list.split(";") if k.strip()} | CONFIG_BLACKLIST_ALWAYS
