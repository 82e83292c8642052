"""What UPDATE_NAMESRV_CONFIG changed, kept across restarts (RocketMQ persists the NameServer's
properties to `configStorePath`).

Only the keys an update has ever set are stored ({snake_case key: value}, JSON), so the rest keep
following the deployment's profile. The host writes the file off its event loop with
`namesrv.persist.atomic_write` after every accepted update, and loads it at start before anything
reads the config. A stored key the config no longer takes, or one on the black list, is ignored with
a warning; a corrupt file is an error (never guessed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError
from pydantic.alias_generators import to_snake

from namesrv.protocol.types import InvalidInput
from namesrv.routeinfo.config import NamesrvConfig

log = logging.getLogger(__name__)


def encode_config_updates(config: NamesrvConfig, keys: Iterable[str]) -> bytes:
    """The current values of the updated `keys`, as the file holds them."""
    return json.dumps({k: getattr(config, k) for k in sorted(keys)}, indent=1).encode()


def load_config_updates(path: Path | None, config: NamesrvConfig) -> set[str]:
    """Apply the stored updates to `config` (all or nothing); returns the keys applied."""
    if path is None or not path.exists():
        return set()
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise InvalidInput(f"{path}: not a JSON config store: {e}") from e
    if not isinstance(stored, dict):
        raise InvalidInput(f"{path}: a config store holds a map of keys to values")
    blacklist = {to_snake(k) for k in config.blacklisted_keys()}
    kept = {k: v for k, v in stored.items() if k in NamesrvConfig.model_fields and k not in blacklist}
    if len(kept) != len(stored):
        log.warning("%s: ignoring keys the config does not take here: %s", path, sorted(set(stored) - set(kept)))
    try:
        merged = NamesrvConfig.model_validate(config.model_dump() | kept)
    except ValidationError as e:
        raise InvalidInput(f"{path}: invalid stored config: {e}") from e
    for key in kept:
        setattr(config, key, getattr(merged, key))
    log.info("loaded namesrv config updates from %s: %s", path, sorted(kept))
    return set(kept)
