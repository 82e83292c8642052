"""Nemeses made by the kernel: partitions as nftables rules inside the hosts' namespaces (the rules
from `rules`), and latency from a delaying relay in front of a host's ports (`delays`), each
recorded in a timeline of windows (kind, hosts, start, end) that the analysis can lay beside what
the system believed.

    nemesis = Nemesis(hosts)
    w = nemesis.partition([[0, 1], [2]])     # the window, open until heal() or end(w)
    d = nemesis.delay(2, [10911], 50)         # connections to host 2's port 10911: 50 ms each way
    nemesis.heal()                            # every cut and delay gone; every open window closed

Nemeses add up: a one-way cut on top of a partition drops both, a delayed port behind a cut is cut.
`heal()` removes every cut and delay at once.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from clients.chaos.hosts.delay_rules import delay_spec
from clients.chaos.hosts.delays import Delays, RunningRelay
from clients.chaos.hosts.netns import Hosts
from clients.chaos.hosts.rules import (
    Cut,
    bridge_cuts,
    client_cuts,
    heal_script,
    host_script,
    hosts_touched,
    isolate_cuts,
    loss_cuts,
    one_way_cuts,
    partition_cuts,
)
from namesrv.common.clock import system_clock

log = logging.getLogger(__name__)

@dataclass
class NemesisWindow:
    """One nemesis in the fault timeline: `kind` (partition, isolate, clients, one_way, bridge, loss,
    delay), the hosts it names, its cuts (none for a delay, which its detail describes), and when it
    started and ended (ms since the epoch; end None while open)."""

    kind: str
    hosts: tuple[int, ...]
    cuts: frozenset[Cut]
    start_ms: int
    end_ms: int | None = None
    detail: str = ""

    def as_record(self) -> dict[str, object]:
        return {"kind": self.kind, "hosts": list(self.hosts), "start_ms": self.start_ms, "end_ms": self.end_ms,
                "detail": self.detail,
                "cuts": [[c.src, c.dst] if c.percent >= 100 else [c.src, c.dst, c.percent] for c in sorted(self.cuts)]}


@dataclass
class Timeline:
    """The windows opened so far and the cuts in force (pure: the clock is given)."""

    count: int
    clock: Callable[[], int] = system_clock
    windows: list[NemesisWindow] = field(default_factory=list)

    @property
    def open(self) -> list[NemesisWindow]:
        return [w for w in self.windows if w.end_ms is None]

    def cuts(self, but: NemesisWindow | None = None) -> frozenset[Cut]:
        """The cuts in force (without those only `but` holds)."""
        return frozenset(c for w in self.open if w is not but for c in w.cuts)

    def begin(self, kind: str, hosts: Iterable[int], cuts: frozenset[Cut], detail: str = "") -> NemesisWindow:
        w = NemesisWindow(kind, tuple(hosts), cuts, self.clock(), detail=detail)
        self.windows.append(w)
        return w

    def end(self, window: NemesisWindow) -> None:
        if window.end_ms is None:
            window.end_ms = self.clock()

    def end_all(self) -> list[NemesisWindow]:
        ended = self.open
        now = self.clock()
        for w in ended:
            w.end_ms = now
        return ended


class Nemesis:
    """Cuts between the hosts of a `Hosts` test bed, loaded with `nft -f -` inside each host, and
    delays in front of their ports (`delays.Delays`)."""

    def __init__(self, hosts: Hosts, clock: Callable[[], int] = system_clock) -> None:
        self.hosts = hosts
        self.addresses: Sequence[str] = [*hosts.addresses, hosts.driver_address]
        """Every host's address by index, then the clients' node's (`rules.clients_index`)."""
        self.timeline = Timeline(hosts.count, clock)
        self.delays = Delays(hosts, self._apply)
        self._relays: list[tuple[NemesisWindow, RunningRelay]] = []

    def _apply(self, host: int, script: str) -> None:
        try:
            self.hosts.run(host, ["nft", "-f", "-"], input=script, timeout=10)
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"nft in host {host} refused the rules: {e.stderr.strip()}\n{script}") from None

    def _load(self, cuts: frozenset[Cut], touched: Iterable[int]) -> None:
        for h in sorted(set(touched)):
            self._apply(h, host_script(h, cuts, self.addresses))

    def _add(self, kind: str, hosts: Iterable[int], cuts: frozenset[Cut], detail: str) -> NemesisWindow:
        before = self.timeline.cuts()
        self._load(before | cuts, hosts_touched(before | cuts, self.hosts.count))
        w = self.timeline.begin(kind, hosts, cuts, detail)
        log.info("nemesis %s %s: %d cuts", kind, detail, len(cuts))
        return w

    # ------------------------------------------------------------------ the nemeses
    def partition(self, groups: Sequence[Iterable[int]]) -> NemesisWindow:
        """Hosts in different groups cannot talk (both ways); hosts in no group talk to all."""
        sides = [list(g) for g in groups]
        cuts = partition_cuts(sides, self.hosts.count)
        return self._add("partition", [h for s in sides for h in s], cuts, " | ".join(map(str, sides)))

    def isolate(self, host: int) -> NemesisWindow:
        return self._add("isolate", [host], isolate_cuts(host, self.hosts.count), str(host))

    def cut_clients(self, host: int) -> NemesisWindow:
        """The test driver's node (where a chaos run's clients are) and `host` cannot talk."""
        return self._add("clients", [host], client_cuts(host, self.hosts.count), f"clients | {host}")

    def isolate_all(self, host: int) -> NemesisWindow:
        """`host` cut from every other host and from the clients' node."""
        cuts = isolate_cuts(host, self.hosts.count) | client_cuts(host, self.hosts.count)
        return self._add("isolate", [host], cuts, f"{host} from every host and the clients")

    def one_way(self, src: int, dst: int) -> NemesisWindow:
        return self._add("one_way", [src, dst], one_way_cuts(src, dst, self.hosts.count), f"{src} -> {dst}")

    def lossy(self, src: Iterable[int], dst: Iterable[int], percent: int, both_ways: bool = True) -> NemesisWindow:
        """Packets between the two groups (from `src` to `dst` only unless `both_ways`) are dropped
        with probability `percent` %, each drawn by the kernel."""
        src_, dst_ = list(src), list(dst)
        cuts = loss_cuts(src_, dst_, percent, self.hosts.count, both_ways)
        arrow = "<->" if both_ways else "->"
        return self._add("loss", [*src_, *dst_], cuts, f"{src_} {arrow} {dst_} {percent}%")

    def bridge(self, left: Iterable[int], right: Iterable[int], via: int) -> NemesisWindow:
        """`left` and `right` cannot talk; `via` (on neither side) sees both."""
        left_, right_ = list(left), list(right)
        cuts = bridge_cuts(left_, right_, via, self.hosts.count)
        return self._add("bridge", [*left_, via, *right_], cuts, f"{left_} | {via} | {right_}")

    def delay(self, host: int, ports: int | Iterable[int], delay_ms: float, jitter_ms: float = 0, *,
              reply_delay_ms: float | None = None, seed: int = 0) -> NemesisWindow:
        """Connections made from outside `host` to its `ports` from now on go through a relay that
        holds each chunk `delay_ms` towards the host and `reply_delay_ms` (default: the same) back,
        ± `jitter_ms` drawn from `seed`: a round trip takes at least both. Ending it (or `heal()`)
        closes the connections made through the relay; new ones go straight to the port."""
        spec = delay_spec(host, ports, delay_ms, self.hosts.count, jitter_ms=jitter_ms,
                          reply_delay_ms=reply_delay_ms, seed=seed)
        relay = self.delays.start(spec)
        w = self.timeline.begin("delay", [host], frozenset(), spec.describe())
        self._relays.append((w, relay))
        log.info("nemesis delay %s", w.detail)
        return w

    def end(self, window: NemesisWindow) -> None:
        """Remove the cuts only `window` holds (the other open windows' stay in force), or its delay,
        and close it."""
        relays = [r for w, r in self._relays if w is window]
        if relays:
            self._relays = [(w, r) for w, r in self._relays if w is not window]
            self.delays.stop(relays[0])
            self.timeline.end(window)
            return
        rest = self.timeline.cuts(but=window)
        self._load(rest, hosts_touched(window.cuts, self.hosts.count))
        self.timeline.end(window)

    def heal(self) -> list[NemesisWindow]:
        """Remove every cut (the harness's table in every host) and every delay, and close the open
        windows."""
        for h in range(self.hosts.count):
            self._apply(h, heal_script())
        self.delays.stop_all()
        self._relays = []
        return self.timeline.end_all()
