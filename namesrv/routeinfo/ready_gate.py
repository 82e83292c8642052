"""The 'not ready' window after a NameServer (re)starts (beyond RocketMQ 4.9; #4522, #5322).

An empty NameServer that answers route queries hands out partial routes until every broker has
heartbeated again. The gate refuses route queries until every broker the NameServer knew before
(`expected`, fixed at start: it never shrinks while the gate is shut) has registered again, or at
most `window_ms` (sized from the brokers' registration period, timeout and an actor's restart:
actors.deployment.profiles.not_ready_window_ms).
"""

from __future__ import annotations

from collections.abc import Iterable

from namesrv.common.clock import Clock


class ReadyGate:
    def __init__(self, clock: Clock, window_ms: int, expected_brokers: Iterable[str] = ()) -> None:
        self.clock = clock
        self.started_ms = clock()
        self.window_ms = window_ms
        self.expected = frozenset(expected_brokers)
        self._open = window_ms <= 0

    def begin(self) -> None:
        """Count the window from now: the host calls this when it starts serving (brokers can
        register only from then on; a slow start must not eat into the window)."""
        self.started_ms = self.clock()

    def not_ready_reason(self, registered: Iterable[str]) -> str | None:
        """None when route queries may be answered, else why not (goes into the error remark)."""
        if self._open:
            return None
        waited = self.clock() - self.started_ms
        if waited >= self.window_ms:
            self._open = True
            return None
        if self.expected:
            missing = self.expected.difference(registered)
            if not missing:
                self._open = True
                return None
            return (
                f"name server not ready: started {waited} ms ago, waiting up to {self.window_ms} ms "
                f"for {len(missing)} of {len(self.expected)} known brokers to register again"
            )
        return f"name server not ready: started {waited} ms ago, routes complete after {self.window_ms} ms"

    def remaining_ms(self) -> int:
        """Longest the gate can still stay shut (0 once open)."""
        if self._open:
            return 0
        return max(0, self.window_ms - (self.clock() - self.started_ms))

    @property
    def is_open(self) -> bool:
        return self._open
