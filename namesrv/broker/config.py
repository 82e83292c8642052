"""Broker settings with RocketMQ's defaults (BrokerConfig / MessageStoreConfig, the parts we model)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from namesrv.acl.plain_acl import SessionCredentials
from namesrv.protocol.constants import MAX_MESSAGE_SIZE, Perm
from namesrv.store.retention import RetentionPolicy
from namesrv.store.transfer_caps import TransferCaps
from namesrv.store.types import (
    MAPPED_FILE_SIZE_COMMIT_LOG,
    MAPPED_FILE_SIZE_CONSUME_QUEUE,
    MIN_SEGMENT_SIZE,
    BrokerRole,
    FlushDiskType,
)

REGISTER_PERIOD_MIN_MS = 10_000
REGISTER_PERIOD_MAX_MS = 60_000

ROCKETMQ_CONFIG_NAMES = {
    "register_name_server_period_ms": "registerNameServerPeriod",
    "register_broker_timeout_ms": "registerBrokerTimeoutMills",
    "heartbeat_timeout_ms": "brokerNotActiveTimeoutMillis",
    "flush_interval_ms": "flushIntervalCommitLog",
    "flush_interval_consume_queue_ms": "flushIntervalConsumeQueue",
    "clean_resource_interval_ms": "cleanResourceInterval",
    "delete_commit_log_files_interval_ms": "deleteCommitLogFilesInterval",
}
"""BrokerConfig fields whose RocketMQ name is not their camelCase; the rest are."""


def rocketmq_name(field_name: str) -> str:
    """A BrokerConfig field's name in RocketMQ's BrokerConfig / MessageStoreConfig (and on the wire)."""
    if field_name in ROCKETMQ_CONFIG_NAMES:
        return ROCKETMQ_CONFIG_NAMES[field_name]
    head, *rest = field_name.split("_")
    return head + "".join(w.capitalize() for w in rest)


class BrokerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    register_name_server_period_ms: int = Field(default=30_000, gt=0)
    register_initial_delay_ms: int = Field(default=10_000, ge=0)
    register_broker_timeout_ms: int = Field(default=6_000, gt=0)
    allow_short_register_period: bool = False
    """RocketMQ clamps the period to [10 s, 60 s]; test and demo profiles lift the clamp explicitly."""
    force_register: bool = True
    enable_single_topic_register: bool = False
    """RocketMQ 5: a created or updated topic is registered alone (REGISTER_TOPIC_IN_NAMESRV, ~100
    bytes) rather than with the whole table; the next periodic registration still sends the table."""
    lite_heartbeat: bool = True
    """Beyond RocketMQ: with an unchanged DataVersion send a heartbeat without the topic table."""
    heartbeat_timeout_ms: int | None = Field(default=None, gt=0)
    """Expiry the NameServer applies to this broker; None keeps the NameServer's default (120 s)."""
    broker_permission: int = Field(default=int(Perm.READ | Perm.WRITE), ge=0, le=7)
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    """RocketMQ's autoCreateSubscriptionGroup: a consumer group gets a default config on its first use."""
    default_topic_queue_nums: int = Field(default=8, gt=0, le=1024)
    flush_disk_type: FlushDiskType = FlushDiskType.SYNC_FLUSH
    flush_interval_ms: int = Field(default=500, gt=0)
    mapped_file_size_commit_log: int = Field(default=MAPPED_FILE_SIZE_COMMIT_LOG, ge=MIN_SEGMENT_SIZE)
    """RocketMQ's mappedFileSizeCommitLog: the commit log's segment files (1 GiB); a message's record
    must fit in one, so a small value also caps the message size."""
    mapped_file_size_consume_queue: int = Field(default=MAPPED_FILE_SIZE_CONSUME_QUEUE, ge=20)
    """RocketMQ's mappedFileSizeConsumeQueue: 300,000 entries of 20 bytes per consume-queue file."""
    flush_interval_consume_queue_ms: int = Field(default=1_000, gt=0)
    """RocketMQ's flushIntervalConsumeQueue: how often the consume queues are fsynced and the store's
    checkpoint written (a restart re-reads at most the log written since)."""
    file_reserved_time: int = Field(default=72, gt=0)
    """RocketMQ's fileReservedTime, in hours: a commit-log segment last written longer ago is deleted
    at `delete_when` (or at once while the disk is fuller than `disk_max_used_space_ratio`)."""
    delete_when: str = Field(default="04", pattern=r"^\d{1,2}(;\d{1,2})*$")
    """RocketMQ's deleteWhen: the hours of the day (local time, ';'-separated) expired segments go."""

    @field_validator("delete_when")
    @classmethod
    def _hours_of_a_day(cls, value: str) -> str:
        bad = [h for h in value.split(";") if int(h) > 23]
        if bad:
            raise ValueError(f"deleteWhen hours are 0..23, not {', '.join(bad)}")
        return value

    disk_max_used_space_ratio: int = Field(default=75, ge=10, le=95)
    """RocketMQ's diskMaxUsedSpaceRatio (%): above it expired segments go whatever the hour."""
    disk_space_warning_level_ratio: int = Field(default=90, ge=35, le=99)
    """RocketMQ's diskSpaceWarningLevelRatio (%): above it the store refuses writes (a send is
    answered SERVICE_NOT_AVAILABLE, as RocketMQ's disk-full store) until clean-up frees space."""
    disk_space_clean_forcibly_ratio: int = Field(default=85, ge=30, le=99)
    """RocketMQ's diskSpaceCleanForciblyRatio (%): above it segments go even before they expire."""
    clean_resource_interval_ms: int = Field(default=10_000, gt=0)
    """RocketMQ's cleanResourceInterval: how often the retention check runs."""
    delete_commit_log_files_interval_ms: int = Field(default=100, ge=0)
    """RocketMQ's deleteCommitLogFilesInterval: the pause between two deleted segments."""
    group_commit: bool = True
    """SYNC_FLUSH: one fsync covers every message written together (RocketMQ's GroupCommitService);
    False fsyncs once per message, the baseline benchmarks/bench_producer.py compares against."""
    max_message_size: int = Field(default=MAX_MESSAGE_SIZE, gt=0)
    enable_property_filter: bool = False
    """RocketMQ's enablePropertyFilter: serve SQL92 subscriptions (filters over message properties).
    Off, as in RocketMQ: such consumers are refused at CHECK_CLIENT_CONFIG and at every pull."""
    long_polling_enable: bool = True
    """A pull finding nothing is held for its suspend timeout (else for short_polling_time_mills)."""
    short_polling_time_mills: int = Field(default=1000, gt=0)
    max_transfer_count_on_message_in_memory: int = Field(default=32, gt=0)
    max_transfer_bytes_on_message_in_memory: int = Field(default=256 * 1024, gt=0)
    max_transfer_count_on_message_in_disk: int = Field(default=8, gt=0)
    max_transfer_bytes_on_message_in_disk: int = Field(default=64 * 1024, gt=0)
    access_message_in_memory_max_ratio: int = Field(default=40, ge=0, le=100)
    """RocketMQ's MessageStoreConfig caps on one pull: a message within this percentage of physical
    memory from the log's end counts as in memory, others as on disk (see transfer_caps)."""
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    """RocketMQ's messageDelayLevel: how long each delay level (1, 2, ...) waits."""
    timer_wheel_enable: bool = True
    timer_precision_ms: int = Field(default=1000, gt=0)
    timer_max_delay_sec: int = Field(default=3 * 86_400, gt=0)
    """5.x timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): on, to a second,
    up to three days ahead (RocketMQ's timerWheelEnable, timerPrecisionMs, timerMaxDelaySec)."""
    recall_message_enable: bool = False
    """RECALL_MESSAGE cancels a timed message before it is due (RocketMQ 5.3's recallMessageEnable,
    off by default as there); a timed send is answered with its recall handle either way."""
    transaction_timeout_ms: int = Field(default=6_000, gt=0)
    transaction_check_max: int = Field(default=15, gt=0)
    transaction_check_interval_ms: int = Field(default=60_000, gt=0)
    """RocketMQ's transactionTimeOut, transactionCheckMax and transactionCheckInterval: a half message
    unresolved this long is checked back with its producer group, at most so many times, then dropped."""
    reject_transaction_message: bool = False
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    """RocketMQ's brokerRole (see namesrv.broker.role); a broker with brokerId > 0 is a SLAVE whatever
    this says (the launcher sets it)."""
    slave_read_enable: bool = False
    """A slave serves pulls (else it refuses them, as RocketMQ's rejectRequest); a master with it
    suggests the slave to a consumer that lags by more than the in-memory window."""
    which_broker_when_consume_slowly: int = Field(default=1, ge=0)
    """The brokerId a lagging consumer is pointed to (subscription group config's default)."""
    all_ack_in_sync_state_set: bool = True
    """SYNC_MASTER: a send is acknowledged once every SyncStateSet member holds it."""
    min_in_sync_replicas: int = Field(default=1, ge=1)
    """SYNC_MASTER refuses sends ("in-sync replicas not enough") while its SyncStateSet is smaller."""
    ha_max_time_slave_not_catchup_ms: int = Field(default=15_000, gt=0)
    """A slave not caught up with the master for this long leaves the SyncStateSet."""
    slave_timeout_ms: int = Field(default=3_000, gt=0)
    """SYNC_MASTER: how long a send waits for the SyncStateSet before FLUSH_SLAVE_TIMEOUT (RocketMQ
    5's slaveTimeout; 4.x waited syncFlushTimeout, 5 s)."""
    ha_transfer_batch_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    """Most commit-log bytes one replication call carries (one record more if a record is bigger)."""
    ha_poll_wait_ms: int = Field(default=1_000, gt=0)
    """A slave's replication call waits this long at the master for new records before answering."""
    ha_pipeline_depth: int = Field(default=1, ge=1, le=8)
    """Replication requests a slave keeps in flight. 1: one at a time, each asking from the slave's
    log end. More: while one answer travels to the slave another request already waits at the
    master, which sends each new record at once to a waiting request (a per-slave cursor, as
    RocketMQ's master streams to its slave); the slave appends answers in offset order. Off by
    default: on 2 shared cores, 2 cost more CPU (smaller batches, more calls) than the waits they
    save (bench_replication --compare-depth-1: 577 vs 645 msg/s, lag p99 44 vs 35 ms)."""
    ha_transport: Literal["tcp", "ray"] = "tcp"
    """Not in RocketMQ (its slave always streams over the master's haListenPort). "tcp": a slave
    replicates over one remoting connection to its master's client port (HA_TRANSFER,
    namesrv.store.ha.wire) when the master has one, else over Ray calls; "ray": always over Ray
    calls to the master's actor (the fallback; a master without TCP is always asked over Ray).
    bench_replication: a transfer's round trip 2.0-2.4 ms over TCP vs 8.1-8.7 ms over Ray calls; SYNC_MASTER
    0.68-0.74x an unreplicated master over TCP, 0.58-0.60x over Ray calls (load avg 3-9 on 2 cores)."""
    slave_ack_on_write: bool = True
    """A slave acknowledges (asks for more) once a batch is written, as RocketMQ's slave does, and
    fsyncs it right after, off the acknowledgement's path (it survives the slave's process dying; a
    SYNC_MASTER's acknowledged send is then lost only if both machines crash before the fsyncs).
    False: only after its fsync (per its flush policy), which puts a second fsync on every
    SYNC_MASTER send's path."""
    channel_expired_timeout_ms: int = Field(default=120_000, gt=0)
    """RocketMQ's channelExpiredTimeout: a producer or consumer silent this long (no heartbeat) is
    forgotten (ClientHousekeepingService, which looks every 10 s)."""
    slave_sync_interval_ms: int = Field(default=10_000, gt=0)
    """A slave copies its master's topic config and consumer offsets this often (SlaveSynchronize)."""
    enable_controller_mode: bool = False
    """RocketMQ 5's enableControllerMode: the controller (actors.controller.start) decides the role, not
    brokerId/brokerRole (actors.broker.ha.replicas_manager). Also on when a controller runs in the namespace."""
    controller_heartbeat_interval_ms: int = Field(default=1_000, gt=0)
    """BROKER_HEARTBEAT to the controller (RocketMQ's controllerHeartBeatTimeoutMills is the
    controller's side; brokers beat every second)."""
    controller_master_lease_ms: int | None = Field(default=8_000, gt=0)
    """Not in RocketMQ: a controller-mode master takes sends only within this long of sending the last
    heartbeat the controller answered (namesrv.broker.lease); it must be shorter than the controller's
    brokerHeartbeatTimeout (10 s; the fast profile: 2.5 s of 3 s), so a master cut off from the
    controller has stopped taking writes before the controller may elect another. None: no lease."""
    controller_first_elect_delay_ms: int = Field(default=2_000, ge=0)
    """Not in RocketMQ: a broker deployed as a slave (brokerId > 0) asks to be the first master of a
    new set only after this long, so the broker deployed as master normally wins the first election."""
    credentials: SessionCredentials | None = None
    """The broker account this broker signs its NameServer requests with (NameServers with ACL on),
    and as a slave its HA_TRANSFER requests to its master (a master with ACL on)."""
    acl_enable: bool = False
    """Check client requests against `acl_file` (RocketMQ's broker-side plain ACL)."""
    acl_file: str = "~/namesrv/plain_acl.yml"

    def transfer_caps(self) -> TransferCaps:
        return TransferCaps(self.max_transfer_count_on_message_in_memory, self.max_transfer_bytes_on_message_in_memory,
                            self.max_transfer_count_on_message_in_disk, self.max_transfer_bytes_on_message_in_disk,
                            self.access_message_in_memory_max_ratio)

    def retention_policy(self) -> RetentionPolicy:
        """The retention settings this config holds now (the cleaner reads them at every run)."""
        return RetentionPolicy(self.file_reserved_time, self.delete_when, self.disk_max_used_space_ratio,
                               self.disk_space_warning_level_ratio, self.disk_space_clean_forcibly_ratio,
                               self.delete_commit_log_files_interval_ms)

    def effective_register_period_ms(self) -> int:
        if self.allow_short_register_period:
            return self.register_name_server_period_ms
        return max(REGISTER_PERIOD_MIN_MS, min(self.register_name_server_period_ms, REGISTER_PERIOD_MAX_MS))
