"""Partitions as the kernel makes them (pure): a partition spec becomes a set of directed cuts
(`Cut(src, dst)`: every packet from host src to host dst is dropped, or with `percent` a random
share of them: a lossy link), and the cuts become, per
host, one nftables script for the harness's own table (`TABLE`, family inet) that drops by peer
address on input and output. A drop, not a reject: to both ends a cut looks like a real partition,
a silent TCP time-out.

A script replaces the host's table in one transaction (add, delete, define), so moving from one
partition to another never passes through a moment with no rules, and healing deletes the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TABLE = "nsrv_nemesis"
PRIORITY = -10
"""Before any filter chain at priority 0 that the host might have: the cut wins."""


@dataclass(frozen=True, order=True)
class Cut:
    """Packets from host `src` to host `dst` are dropped (both where they leave and where they arrive),
    or, with `percent` below 100, that share of them at random (where they arrive only: the loss is
    what was asked, not compounded, and the sender sees nothing, as on a lossy network; a drop on
    the way out would fail the sender's send call): a lossy link, which TCP rides out by retransmitting."""

    src: int
    dst: int
    percent: int = 100


def _hosts(group: Iterable[int], count: int) -> list[int]:
    out = list(group)
    for h in out:
        if not isinstance(h, int) or not 0 <= h < count:
            raise ValueError(f"no host {h!r}: the test bed has hosts 0..{count - 1}")
    return out


def partition_cuts(groups: Sequence[Iterable[int]], count: int) -> frozenset[Cut]:
    """Every pair of hosts in different groups cannot talk, both ways. Hosts in no group keep
    talking to everyone (a 'bridge' host is one such)."""
    sides = [_hosts(g, count) for g in groups]
    if len(sides) < 2:
        raise ValueError(f"a partition needs at least two groups, got {len(sides)}")
    if any(not s for s in sides):
        raise ValueError("a partition's groups must not be empty")
    seen: set[int] = set()
    for s in sides:
        twice = seen.intersection(s) | {h for h in s if s.count(h) > 1}
        if twice:
            raise ValueError(f"host(s) {sorted(twice)} in more than one group of the partition")
        seen.update(s)
    cuts = set()
    for i, a in enumerate(sides):
        for b in sides[i + 1:]:
            for x in a:
                for y in b:
                    cuts.add(Cut(x, y))
                    cuts.add(Cut(y, x))
    return frozenset(cuts)


def isolate_cuts(host: int, count: int) -> frozenset[Cut]:
    """One host cut off from every other (both ways)."""
    (h,) = _hosts([host], count)
    others = [o for o in range(count) if o != h]
    if not others:
        raise ValueError("isolating the only host of the test bed cuts nothing")
    return partition_cuts([[h], others], count)


def clients_index(count: int) -> int:
    """The index that names the test driver's node in cuts (the root namespace's end of the bridge,
    where a chaos run's clients run): one past the hosts. Its rules are made by the hosts it is cut
    from, on their side; the root namespace is never touched."""
    return count


def client_cuts(host: int, count: int) -> frozenset[Cut]:
    """Host `host` and the clients' node cannot talk (both ways); the hosts still talk to each other."""
    (h,) = _hosts([host], count)
    c = clients_index(count)
    return frozenset({Cut(h, c), Cut(c, h)})


def one_way_cuts(src: int, dst: int, count: int) -> frozenset[Cut]:
    """Packets from src to dst are dropped; dst to src still pass (a TCP connection either way
    stalls, but datagrams and the half that arrives tell the two ends apart)."""
    s, d = _hosts([src, dst], count)
    if s == d:
        raise ValueError(f"a one-way cut needs two different hosts, got {s} twice")
    return frozenset({Cut(s, d)})


def loss_cuts(src: Iterable[int], dst: Iterable[int], percent: int, count: int,
              both_ways: bool = True) -> frozenset[Cut]:
    """Each packet from a host of `src` to a host of `dst` (and back, `both_ways`) is dropped with
    probability `percent` %, drawn by the kernel for each packet (nftables' numgen random)."""
    if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 99:
        raise ValueError(f"a loss is 1..99 percent (100 is a cut), got {percent!r}")
    a, b = _hosts(src, count), _hosts(dst, count)
    if not a or not b or set(a) & set(b):
        raise ValueError(f"a loss needs two disjoint, non-empty groups of hosts, got {a} and {b}")
    pairs = {(x, y) for x in a for y in b} | ({(y, x) for x in a for y in b} if both_ways else set())
    return frozenset(Cut(x, y, percent) for x, y in pairs)


def bridge_cuts(left: Iterable[int], right: Iterable[int], via: int, count: int) -> frozenset[Cut]:
    """Two sides that cannot talk to each other, and one host (`via`) that sees both."""
    left_, right_ = _hosts(left, count), _hosts(right, count)
    (v,) = _hosts([via], count)
    if v in left_ or v in right_:
        raise ValueError(f"the bridge host {v} must be on neither side")
    return partition_cuts([left_, right_], count)


def host_script(host: int, cuts: Iterable[Cut], addresses: Sequence[str]) -> str:
    """The nftables script that makes host `host` drop its part of `cuts` (given every host's
    address, by index): input from the sources that may not reach it, output to the destinations
    it may not reach. No cut touching the host: a script that leaves no table."""
    cuts = list(cuts)
    drop_from = sorted({c.src for c in cuts if c.dst == host and c.percent >= 100})
    drop_to = sorted({c.dst for c in cuts if c.src == host and c.percent >= 100})
    lossy_from = sorted({(c.src, c.percent) for c in cuts if c.dst == host and c.percent < 100})
    lines = [f"add table inet {TABLE}", f"delete table inet {TABLE}"]
    if not drop_from and not drop_to and not lossy_from:
        return "\n".join(lines) + "\n"
    lines.append(f"table inet {TABLE} {{")
    for chain, hook, field, peers in (("input", "input", "saddr", drop_from), ("output", "output", "daddr", drop_to)):
        lines.append(f"  chain {chain} {{")
        lines.append(f"    type filter hook {hook} priority {PRIORITY}; policy accept;")
        if peers:
            lines.append(f"    ip {field} {{ {', '.join(addresses[p] for p in peers)} }} drop")
        if chain == "input":
            lines.extend(f"    ip saddr {addresses[h]} numgen random mod 100 < {p} drop" for h, p in lossy_from)
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def heal_script() -> str:
    """Remove the harness's table (if there is one) in one transaction."""
    return f"add table inet {TABLE}\ndelete table inet {TABLE}\n"


def hosts_touched(cuts: Iterable[Cut], count: int) -> list[int]:
    """The hosts whose rules `cuts` change (the clients' node, index `count`, has none of its own)."""
    return sorted({h for c in cuts for h in (c.src, c.dst) if h < count})
