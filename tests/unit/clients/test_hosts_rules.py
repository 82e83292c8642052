"""The multi-host test bed's pure parts (clients.chaos.hosts): the layout's names and addresses,
partition specs as directed cuts, the nftables script each host loads, and the nemesis timeline
with an injected clock. No root, no namespace, no Ray."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator

import pytest

from clients.chaos.hosts import layout
from clients.chaos.hosts.nemesis import Timeline
from clients.chaos.hosts.rules import (
    TABLE,
    Cut,
    bridge_cuts,
    client_cuts,
    clients_index,
    heal_script,
    host_script,
    hosts_touched,
    isolate_cuts,
    loss_cuts,
    one_way_cuts,
    partition_cuts,
)

ADDRS = ["10.77.0.2", "10.77.0.3", "10.77.0.4", "10.77.0.5"]


@pytest.fixture
def bed_id(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], None]]:
    """Re-read the layout's names for a NAMESRV_TEST_BED_ID (None: unset, the default bed); the
    environment's own is back afterwards."""
    def use(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(layout.BED_ID_VAR, raising=False)
        else:
            monkeypatch.setenv(layout.BED_ID_VAR, value)
        importlib.reload(layout)

    yield use
    monkeypatch.undo()
    importlib.reload(layout)


def test_layout_names_and_addresses(bed_id: Callable[[str | None], None]) -> None:
    bed_id(None)
    lay = layout.HostLayout(3)
    assert lay.addresses == ["10.77.0.2", "10.77.0.3", "10.77.0.4"]
    assert lay.driver_address == "10.77.0.1"
    assert [lay.netns(i) for i in range(3)] == ["nsrv-h0", "nsrv-h1", "nsrv-h2"]
    assert lay.veth(2) == "nsrvv2" and lay.temp_dir(1) == "/tmp/nsrvh/h1"
    assert lay.host_of("10.77.0.4") == 2
    with pytest.raises(ValueError, match="no host 3"):
        lay.address(3)
    with pytest.raises(ValueError, match="not a host of this test bed"):
        lay.host_of("10.77.0.1")
    with pytest.raises(ValueError, match=r"1\.\.32 hosts"):
        layout.HostLayout(0)


def test_leftover_names_are_only_the_beds(bed_id: Callable[[str | None], None]) -> None:
    bed_id(None)
    assert layout.is_leftover_netns("nsrv-h0") and layout.is_leftover_netns("nsrv-h12")
    assert not layout.is_leftover_netns("nsrv-hx") and not layout.is_leftover_netns("other")
    assert not layout.is_leftover_netns("nsrv-h") and not layout.is_leftover_netns("nsrv1-h0")


def test_a_second_bed_has_names_of_its_own(bed_id: Callable[[str | None], None]) -> None:
    bed_id("1")
    lay = layout.HostLayout(2)
    assert (lay.netns(1), lay.address(1), lay.veth(1), layout.BRIDGE, lay.temp_dir(0)) == (
        "nsrv1-h1", "10.78.0.3", "nsrv1v1", "nsrvbr1", "/tmp/nsrvh1/h0")
    assert layout.is_leftover_netns("nsrv1-h0") and not layout.is_leftover_netns("nsrv-h0")
    with pytest.raises(ValueError, match=r"must be 0\.\.9"):
        bed_id("x")



def test_partition_cuts_every_pair_across_groups_both_ways() -> None:
    cuts = partition_cuts([[0, 1], [2]], 4)
    assert cuts == {Cut(0, 2), Cut(2, 0), Cut(1, 2), Cut(2, 1)}
    assert hosts_touched(cuts, 4) == [0, 1, 2]  # host 3, in no group, talks to everyone


def test_isolate_one_way_and_bridge() -> None:
    assert isolate_cuts(1, 3) == {Cut(1, 0), Cut(0, 1), Cut(1, 2), Cut(2, 1)}
    assert one_way_cuts(2, 0, 3) == {Cut(2, 0)}
    bridged = bridge_cuts([0], [2, 3], via=1, count=4)
    assert bridged == {Cut(0, 2), Cut(2, 0), Cut(0, 3), Cut(3, 0)}
    assert 1 not in hosts_touched(bridged, 4)


@pytest.mark.parametrize(("make", "error"), [
    (lambda: partition_cuts([[0, 1]], 3), "at least two groups"),
    (lambda: partition_cuts([[0], []], 3), "must not be empty"),
    (lambda: partition_cuts([[0, 1], [1, 2]], 3), r"host\(s\) \[1\] in more than one group"),
    (lambda: partition_cuts([[0], [5]], 3), "no host 5"),
    (lambda: one_way_cuts(1, 1, 3), "two different hosts"),
    (lambda: isolate_cuts(0, 1), "cuts nothing"),
    (lambda: bridge_cuts([0], [2], via=0, count=3), "on neither side"),
    (lambda: loss_cuts([0], [1], 100, 3), r"1\.\.99 percent"),
    (lambda: loss_cuts([0], [1], 0, 3), r"1\.\.99 percent"),
    (lambda: loss_cuts([0], [1], True, 3), r"1\.\.99 percent"),
    (lambda: loss_cuts([0, 1], [1], 30, 3), "disjoint"),
    (lambda: loss_cuts([], [1], 30, 3), "non-empty"),
    (lambda: loss_cuts([0], [7], 30, 3), "no host 7"),
])
def test_bad_specs_are_refused(make: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        make()  # type: ignore[operator]


def test_host_script_drops_its_part_by_peer_address() -> None:
    cuts = partition_cuts([[2], [1]], 4) | one_way_cuts(0, 2, 4)
    script = host_script(2, cuts, ADDRS)
    assert script.startswith(f"add table inet {TABLE}\ndelete table inet {TABLE}\n")
    assert "ip saddr { 10.77.0.2, 10.77.0.3 } drop" in script  # from 0 (one-way) and from 1
    assert "ip daddr { 10.77.0.3 } drop" in script  # to 1 only: 2 -> 0 still passes
    assert "hook input priority -10" in script and "hook output priority -10" in script
    host0 = host_script(0, cuts, ADDRS)
    assert "ip daddr { 10.77.0.4 } drop" in host0 and "saddr" not in host0
    untouched = host_script(3, cuts, ADDRS)
    assert untouched == heal_script() and "chain" not in untouched


def test_timeline_records_windows_and_heal_closes_them() -> None:
    now = [1_000]
    tl = Timeline(3, clock=lambda: now[0])
    a = tl.begin("partition", [2, 1], partition_cuts([[2], [1]], 3), "[2] | [1]")
    now[0] = 1_500
    b = tl.begin("one_way", [0, 2], one_way_cuts(0, 2, 3))
    assert tl.cuts() == a.cuts | b.cuts and tl.open == [a, b]
    now[0] = 4_000
    assert tl.end_all() == [a, b]
    assert (a.start_ms, a.end_ms, b.start_ms, b.end_ms) == (1_000, 4_000, 1_500, 4_000)
    assert tl.open == [] and tl.cuts() == frozenset()
    assert a.as_record() == {"kind": "partition", "hosts": [2, 1], "start_ms": 1_000, "end_ms": 4_000,
                             "detail": "[2] | [1]", "cuts": [[1, 2], [2, 1]]}


def test_a_loss_drops_a_share_where_packets_arrive_only() -> None:
    """A lossy link's rule is on the receiver's input alone (on both ends the loss would compound, and
    on the way out the sender's call would fail); a full cut beside it still drops on both ends."""
    cuts = loss_cuts([0], [1, 2], 30, 4) | one_way_cuts(3, 0, 4)
    assert Cut(0, 1, 30) in cuts and Cut(2, 0, 30) in cuts and len(cuts) == 5
    host0 = host_script(0, cuts, ADDRS)
    assert "ip saddr 10.77.0.3 numgen random mod 100 < 30 drop" in host0
    assert "ip saddr 10.77.0.4 numgen random mod 100 < 30 drop" in host0
    assert "ip saddr { 10.77.0.5 } drop" in host0 and "daddr" not in host0
    host1 = host_script(1, cuts, ADDRS)
    assert host1.count("numgen") == 1 and "ip saddr 10.77.0.2 numgen random mod 100 < 30 drop" in host1
    assert "daddr" not in host1
    assert loss_cuts([0], [1], 10, 2, both_ways=False) == frozenset({Cut(0, 1, 10)})


def test_client_cuts_name_the_drivers_node_past_the_hosts() -> None:
    """The clients' node (the driver's end of the bridge) is index `count`: only the host makes rules
    (input from it, output to it); no other host is touched."""
    cuts = client_cuts(2, 4)
    assert cuts == {Cut(2, clients_index(4)), Cut(clients_index(4), 2)} and clients_index(4) == 4
    assert hosts_touched(cuts, 4) == [2]
    script = host_script(2, cuts, [*ADDRS, "10.77.0.1"])
    assert "ip saddr { 10.77.0.1 } drop" in script and "ip daddr { 10.77.0.1 } drop" in script
    with pytest.raises(ValueError, match="no host 4"):
        client_cuts(4, 4)


def test_ending_one_window_keeps_the_others_cuts() -> None:
    now = [1_000]
    tl = Timeline(4, clock=lambda: now[0])
    a = tl.begin("partition", [3, 1], partition_cuts([[3], [1]], 4))
    b = tl.begin("clients", [2], client_cuts(2, 4))
    shared = tl.begin("partition", [3, 0], partition_cuts([[3], [0, 1]], 4))
    assert tl.cuts(but=a) == b.cuts | shared.cuts  # a's cuts that `shared` also holds stay in force
    now[0] = 2_000
    tl.end(a)
    assert tl.open == [b, shared] and a.end_ms == 2_000 and tl.cuts() == b.cuts | shared.cuts
