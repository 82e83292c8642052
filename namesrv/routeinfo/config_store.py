"""What UPDATE_NAMESRV_CONFIG changed, kept across restarts (RocketMQ persists the NameServer's
properties to `configStorePath`).

Only the keys an update has ever set are stored ({snake_case key: value}, JSON), so the rest keep
following the deployment's profile. The host writes the file off its event loop with
`namesrv.common.persist.atomic_write` after every accepted update, and loads it at start before anything
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

from namesrv.common.persist import FileWriter, Undo
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


class ConfigStore:
    """Where a NameServer keeps what UPDATE_NAMESRV_CONFIG changed: `keys` (the processor's updated
    keys, shared) of `config`, written to `path` (None: memory only) through `write`, with an undo
    that puts config and keys back as they were before the update when the image does not land."""

    def __init__(self, path: Path | None, config: NamesrvConfig, keys: set[str], write: FileWriter) -> None:
        self.path = path
        self.config = config
        self.keys = keys
        self._write = write
        self._before: tuple[NamesrvConfig, set[str]] | None = None

    def before_update(self) -> None:
        """Remember config and keys as they are now: what a failed write of the update puts back."""
        self._before = (self.config.model_copy(), set(self.keys))

    def persist(self) -> None:
        """Store the updated keys' current values (atomically, in order, through the writer); the
        update remembered by `before_update` is undone if the image does not land."""
        undo = self._undo()
        if self.path is not None:
            self._write(self.path, encode_config_updates(self.config, self.keys), undo)

    def _undo(self) -> Undo | None:
        if self._before is None:
            return None
        prior, keys = self._before
        self._before = None

        def undo() -> None:
            for name in type(prior).model_fields:
                if getattr(self.config, name) != getattr(prior, name):
                    setattr(self.config, name, getattr(prior, name))
            self.keys.clear()
            self.keys.update(keys)
            log.warning("namesrv config update rolled back: not written")
        return undo
