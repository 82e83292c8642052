"""UPDATE_BROKER_CONFIG's keys, their checks, and the file that keeps them (RocketMQ's
Configuration.update and Configuration.persist, for the settings a running broker can take).

The keys a running broker takes, under RocketMQ's names (`LIVE_KEYS`): `brokerPermission` (re-
registered at once) and the retention settings of MessageStoreConfig — `fileReservedTime`,
`deleteWhen`, `diskMaxUsedSpaceRatio`, `diskSpaceCleanForciblyRatio`, `diskSpaceWarningLevelRatio`,
`deleteCommitLogFilesInterval` — which the clean-up service reads again at each run, as RocketMQ's
CleanCommitLogService reads messageStoreConfig each time it runs.

Each value is checked as the setting's own field is (`BrokerConfig`): a key that is not one of
these, or a value out of range, is refused with the reason and changes nothing, not even the keys
given with it.

The file (`<store dir>/config/broker.properties`) holds every key changed at runtime, written with
write, fsync, rename before the change is acknowledged; a broker starting on the same store dir
applies it over the configuration it was deployed with, so a change outlives a restart.

Where we differ from RocketMQ 5.3: RocketMQ takes any key of its BrokerConfig, NettyServerConfig,
NettyClientConfig and MessageStoreConfig, silently ignoring unknown keys and unparsable values (and
many keys take effect only after a restart); here only the keys the running broker really uses are
taken, the rest refused with INVALID_PARAMETER, a bad value with SYSTEM_ERROR (as for
brokerPermission before). RocketMQ rewrites its whole `-c` config file (keeping a `.bak`); we write
only the changed keys to a file of the store dir, since a deployment's config lives in its spec, not
in a file of the broker's. Its `configBlackList` keys (`configBlackList`, `brokerConfigPath`) are
NO_PERMISSION as in RocketMQ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from namesrv.broker.config import BrokerConfig, rocketmq_name
from namesrv.protocol.bodies import format_properties, parse_properties
from namesrv.protocol.codes import ResponseCode
from namesrv.protocol.types import InvalidInput, describe_errors

CONFIG_FILE = "broker.properties"
"""Under `<store dir>/config/`, next to topics.json."""

LIVE_KEYS: dict[str, str] = {
    rocketmq_name(f): f for f in (
        "broker_permission", "file_reserved_time", "delete_when", "disk_max_used_space_ratio",
        "disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio", "delete_commit_log_files_interval_ms",
    )
}
"""RocketMQ's key -> BrokerConfig field, for the settings a running broker takes."""
BLACK_LIST = frozenset({"configBlackList", "brokerConfigPath"})
"""RocketMQ's default configBlackList: never updatable (NO_PERMISSION)."""
IDENTITY_KEYS = frozenset({"brokerClusterName", "brokerName", "brokerId", "brokerIP1", "listenPort",
                           "storePathRootDir"})


class ConfigUpdateError(ValueError):
    """An update refused: `code` is the answer's response code, the message its remark."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def validate_update(config: BrokerConfig, props: dict[str, str]) -> dict[str, Any]:
    """{field: checked value} for RocketMQ `props` ({key: text}) against `config`; raises
    ConfigUpdateError naming the first bad key or value. `config` is not changed."""
    if not props:
        raise ConfigUpdateError(ResponseCode.INVALID_PARAMETER, "no config key given")
    blocked = sorted(set(props) & BLACK_LIST)
    if blocked:
        raise ConfigUpdateError(ResponseCode.NO_PERMISSION, f"Can not update config in black list: {blocked[0]}")
    known = {rocketmq_name(f) for f in BrokerConfig.model_fields} | IDENTITY_KEYS
    for key in sorted(props):
        if key not in LIVE_KEYS:
            why = "is read only at start" if key in known else "is not a broker config key"
            raise ConfigUpdateError(ResponseCode.INVALID_PARAMETER,
                                    f"config key {key} cannot be updated on this broker: it {why} "
                                    f"(updatable: {', '.join(sorted(LIVE_KEYS))})")
    trial = config.model_copy()
    changes: dict[str, Any] = {}
    for key, text in sorted(props.items()):
        field = LIVE_KEYS[key]
        try:
            setattr(trial, field, text.strip())
        except ValidationError as e:
            raise ConfigUpdateError(ResponseCode.SYSTEM_ERROR,
                                    f"invalid value {text!r} for {key}: {describe_errors(e)}") from None
        changes[field] = getattr(trial, field)
    return changes


def as_properties(changes: dict[str, Any]) -> dict[str, str]:
    """{RocketMQ key: text} of checked `changes` ({field: value})."""
    return {rocketmq_name(f): str(v) for f, v in changes.items()}


class BrokerConfigFile:
    """The keys changed at runtime, on disk (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.values: dict[str, str] = {}
        """{RocketMQ key: text} as on disk (or being written)."""

    def load(self, config: BrokerConfig) -> dict[str, Any]:
        """Apply the file, if any, to `config`; returns what it set. A file that does not parse or
        holds a bad key or value raises ValueError naming the file (the broker does not start on a
        config it cannot read)."""
        if not self.path.exists():
            return {}
        try:
            props = parse_properties(self.path.read_bytes())
            changes = validate_update(config, props) if props else {}
        except (InvalidInput, ConfigUpdateError) as e:
            raise ValueError(f"{self.path}: {e}") from None
        for field, value in changes.items():
            setattr(config, field, value)
        self.values = as_properties(changes)
        return changes

    def image(self) -> bytes:
        return format_properties(self.values)
