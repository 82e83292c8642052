"""The brokers a NameServer knows, kept across restarts (`known_brokers.json`, a JSON list of
addresses), so a restarted NameServer knows whom to wait for before it answers route queries
(namesrv.routeinfo.ready_gate)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from namesrv.common.persist import FileWriter

log = logging.getLogger(__name__)

FILE_NAME = "known_brokers.json"


def load_known_brokers(path: Path | None) -> set[str]:
    """The addresses stored at `path`; none when there is no file, or an unreadable one (logged)."""
    if path is None or not path.exists():
        return set()
    try:
        return set(json.loads(path.read_text()))
    except (ValueError, TypeError):
        log.warning("ignoring unreadable %s", path)
        return set()


class KnownBrokers:
    """The known set (`addrs`, loaded from `path` at start; `path` None: memory only), written
    through `write` whenever it changes, in the order the sets were taken."""

    def __init__(self, path: Path | None, write: FileWriter) -> None:
        self.path = path
        self._write = write
        self.addrs: set[str] = load_known_brokers(path)

    def update(self, live: set[str], grow_only: bool) -> None:
        """Make `live` the known set; `grow_only` (while the NameServer is not ready yet): the set
        only grows, it must not shrink because a restart happened inside the wait. A write that does
        not land puts the previous set back, so the next update retries."""
        if grow_only:
            live = live | self.addrs
        if live == self.addrs:
            return
        known, self.addrs = self.addrs, live
        if self.path is not None:

            def undo() -> None:
                self.addrs = known
            self._write(self.path, json.dumps(sorted(live)).encode(), undo)
