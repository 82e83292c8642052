"""The proxy's settings (RocketMQ's ProxyConfig, the parts the gRPC protocol uses) and the Settings
it answers a client's Settings with on the Telemetry stream (GrpcClientSettingsManager): a producer
gets the max body size, its attempts and exponential back-off; a consumer the receive batch size,
long-polling timeout, FIFO flag and its group's retry policy. The answer is always sent: RocketMQ 5
clients block (Node.js) or fail start-up (Python push consumers, 10 s) until it comes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from namesrv.acl.plain_acl import SessionCredentials

DEFAULT_GRPC_PORT = 8081
CUSTOMIZED_BACKOFF_MS = (1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
                         420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000)
"""A consumer group's default retry policy (CustomizedRetryPolicy: the delay levels 3..18)."""


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_message_size: int = Field(default=4 * 1024 * 1024, gt=0)
    max_user_property_size: int = Field(default=16 * 1024, gt=0)
    user_property_max_num: int = Field(default=128, gt=0)
    max_message_group_size: int = Field(default=64, gt=0)
    max_delay_time_ms: int = Field(default=24 * 3600 * 1000, gt=0)
    max_transaction_recovery_second: int = Field(default=3600, gt=0)
    producer_max_attempts: int = Field(default=3, gt=0)
    producer_backoff_initial_ms: int = Field(default=10, gt=0)
    producer_backoff_max_ms: int = Field(default=1_000, gt=0)
    producer_backoff_multiplier: float = Field(default=2.0, gt=0)
    enable_topic_message_type_check: bool = True
    consumer_long_polling_batch_size: int = Field(default=32, gt=0)
    consumer_max_long_polling_timeout_ms: int = Field(default=20_000, gt=0)
    consumer_min_long_polling_timeout_ms: int = Field(default=5_000, ge=0)
    min_invisible_time_ms_for_recv: int = Field(default=10_000, gt=0)
    default_invisible_time_ms: int = Field(default=60_000, gt=0)
    """What a receive with auto_renew (a PushConsumer's, which sends no duration) is popped with, and
    what each renewal gives it again."""
    renew_ahead_ms: int = Field(default=10_000, gt=0)
    """An auto_renew message is renewed once less than this is left of its invisible time."""
    renew_max_ms: int = Field(default=30 * 60 * 1000, gt=0)
    """...and no longer once held this long (it comes back: a listener that never returns)."""
    max_invisible_time_ms: int = Field(default=12 * 3600 * 1000, gt=0)
    consumer_retry_max_times: int = Field(default=16, ge=0)
    batch_ack: bool = True
    """AckMessage's entries go to each broker as one BATCH_ACK_MESSAGE (RocketMQ's enableBatchAck);
    off: an ACK_MESSAGE per entry, one after the other."""
    route_cache_ttl_s: float = Field(default=30.0, gt=0)
    """A topic's route is read again from a NameServer after this long, whatever the push said."""
    broker_call_timeout_s: float = Field(default=3.0, gt=0)
    acl_enable: bool = False
    """Check every client call against `acl_file` (a plain_acl.yml, reloaded when it changes)."""
    acl_file: str | None = None
    credentials: SessionCredentials | None = None
    """The proxy's own account: what its route reads and heartbeats sign with (a call acts as its caller's)."""

    @model_validator(mode="after")
    def _consistent(self) -> ProxyConfig:
        if self.acl_enable and not self.acl_file:
            raise ValueError("acl_enable needs acl_file")
        if self.renew_ahead_ms >= self.default_invisible_time_ms:
            raise ValueError("renew_ahead_ms must be below default_invisible_time_ms (or every poll renews)")
        return self


def _duration(ms: int) -> str:
    """A Duration in protobuf's JSON form ("0.010s")."""
    return f"{ms // 1000}.{ms % 1000:03d}s"


def server_settings(client: dict[str, Any], config: ProxyConfig, fifo: bool = False,
                    retry_max_times: int | None = None) -> dict[str, Any]:
    """The Settings answering a client's `client` Settings: the client's own, merged with the
    server's (mergeProducerData / mergeSubscriptionData), metrics off. A consumer's FIFO flag and
    attempts (`retry_max_times` + 1) are its group's (its SubscriptionGroupConfig; the proxy's
    `consumer_retry_max_times` when not given). Both are dicts in protobuf's JSON form with proto
    field names (`MessageToDict(..., preserving_proto_field_name=True)`, and `ParseDict` for the
    answer)."""
    out: dict[str, Any] = {k: v for k, v in client.items() if k not in ("backoff_policy", "metric")}
    if "subscription" in client:
        sub = dict(client["subscription"])
        sub.update(receive_batch_size=config.consumer_long_polling_batch_size,
                   long_polling_timeout=_duration(config.consumer_max_long_polling_timeout_ms), fifo=fifo)
        out["subscription"] = sub
        retries = config.consumer_retry_max_times if retry_max_times is None else retry_max_times
        out["backoff_policy"] = {"max_attempts": retries + 1,
                                 "customized_backoff": {"next": [_duration(ms) for ms in CUSTOMIZED_BACKOFF_MS]}}
    else:  # a producer (RocketMQ merges producer data for any client with publishing; one without gets it too)
        pub = dict(client.get("publishing", {}))
        pub.update(validate_message_type=config.enable_topic_message_type_check,
                   max_body_size=config.max_message_size)
        out["publishing"] = pub
        out["backoff_policy"] = {
            "max_attempts": config.producer_max_attempts,
            "exponential_backoff": {"initial": _duration(config.producer_backoff_initial_ms),
                                    "max": _duration(config.producer_backoff_max_ms),
                                    "multiplier": config.producer_backoff_multiplier}}
    out["metric"] = {"on": False}
    return out
