"""Latency on the test bed, the pure part (the kernel has no `netem`, so latency comes from the
delaying TCP relay, `relay`): a delay asked of the nemesis checked into a `DelaySpec`, the relay's
command line for it, and the nftables script that sends a host's incoming connections to its ports
through the relays.

Inside the delayed host, a nat rule on prerouting redirects each TCP connection that arrives from
outside the host (any interface but `lo`: other hosts, the test driver on the bridge) for one of the
delayed ports, at its SYN, to the port its relay listens on; the relay connects to the real port at the host's
own address, from inside the host, which prerouting never sees: not redirected. Connections made
inside the host itself are not delayed. The table (`TABLE`, family inet) is the harness's own,
beside the cuts' (`rules.TABLE`), so delays and cuts add up and heal apart; like the cuts' script,
each script replaces the table in one transaction (add, delete, define), and healing deletes it.
A redirect is decided at a connection's first packet: connections open before the delay are not
delayed, and those made through a relay stay with it after its rule is gone (until the relay
closes them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TABLE = "nsrv_delay"
SYN = "tcp flags & (syn | ack) == syn"
"""Only a connection's first packet: the nat hook also sees the next packet of a connection made
before conntrack ran in the host (it starts when the first nat table is loaded) as a new one, and
redirecting that to the relay would reset the connection."""
RELAY_MODULE = "clients.chaos.hosts.relay"


@dataclass(frozen=True)
class DelaySpec:
    """Connections to `ports` of `host` (from outside it) held `delay_ms` towards the host and
    `reply_delay_ms` back, each chunk ± up to `jitter_ms`, drawn from `seed`."""

    host: int
    ports: tuple[int, ...]
    delay_ms: float
    reply_delay_ms: float
    jitter_ms: float = 0.0
    seed: int = 0

    def describe(self) -> str:
        """E.g. `host 1 :9876,10911 50 ms ± 5 (replies 0 ms)`, the window's detail."""
        jitter = f" ± {self.jitter_ms:g}" if self.jitter_ms else ""
        replies = "" if self.reply_delay_ms == self.delay_ms else f" (replies {self.reply_delay_ms:g} ms)"
        return f"host {self.host} :{','.join(map(str, self.ports))} {self.delay_ms:g} ms{jitter}{replies}"


def _ms(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a number of ms, 0 or more, got {value!r}")
    return float(value)


def delay_spec(host: int, ports: int | Iterable[int], delay_ms: float, count: int, *, jitter_ms: float = 0,
               reply_delay_ms: float | None = None, seed: int = 0) -> DelaySpec:
    """A delay checked against a test bed of `count` hosts (ValueError saying what is wrong):
    `ports` one port or several; `reply_delay_ms` None is `delay_ms` (a round trip then takes at
    least twice the delay)."""
    if isinstance(host, bool) or not isinstance(host, int) or not 0 <= host < count:
        raise ValueError(f"no host {host!r}: the test bed has hosts 0..{count - 1}")
    if isinstance(ports, str | bytes):
        raise ValueError(f"ports are ints, got {ports!r}")
    ports_ = (ports,) if isinstance(ports, int) else tuple(ports)
    if not ports_:
        raise ValueError("a delay needs at least one port")
    for p in ports_:
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
            raise ValueError(f"a port is 1..65535, got {p!r}")
    if len(set(ports_)) < len(ports_):
        raise ValueError(f"a port is named twice in {list(ports_)}")
    there = _ms(delay_ms, "the delay")
    back = there if reply_delay_ms is None else _ms(reply_delay_ms, "the replies' delay")
    if there == 0 and back == 0:
        raise ValueError("a delay of 0 ms both ways delays nothing")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"the jitter's seed is an int, got {seed!r}")
    return DelaySpec(host, ports_, there, back, _ms(jitter_ms, "the jitter"), seed)


def check_free(spec: DelaySpec, running: Iterable[DelaySpec]) -> None:
    """ValueError if a port of `spec` is already delayed on its host (one relay per port)."""
    taken = {p for r in running if r.host == spec.host for p in r.ports}
    twice = sorted(taken.intersection(spec.ports))
    if twice:
        raise ValueError(f"port(s) {twice} of host {spec.host} are delayed already: end that delay first")


def relay_argv(spec: DelaySpec, address: str, python: str) -> list[str]:
    """The relay's command line, to run inside the host whose `address` it relays to (and listens
    on), each port on a free port the kernel picks."""
    return [python, "-m", RELAY_MODULE, "--bind", address,
            *(a for p in spec.ports for a in ("--forward", f"0={address}:{p}")),
            "--delay-ms", f"{spec.delay_ms:g}", "--reply-delay-ms", f"{spec.reply_delay_ms:g}",
            "--jitter-ms", f"{spec.jitter_ms:g}", "--seed", str(spec.seed)]


def redirect_script(redirects: Mapping[int, int]) -> str:
    """The nftables script that sends the connections arriving from outside the host for each port
    (a key) to its relay's port (its value); no redirects: a script that leaves no table."""
    lines = [f"add table inet {TABLE}", f"delete table inet {TABLE}"]
    if redirects:
        rules = [f'    iifname != "lo" tcp dport {p} {SYN} redirect to :{to}' for p, to in sorted(redirects.items())]
        lines += [f"table inet {TABLE} {{", "  chain prerouting {",
                  "    type nat hook prerouting priority dstnat; policy accept;", *rules, "  }", "}"]
    return "\n".join(lines) + "\n"


def clear_script() -> str:
    """Remove the delays' table (if there is one) in one transaction."""
    return redirect_script({})
