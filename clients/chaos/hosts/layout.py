"""Names and addresses of the test bed's hosts (pure): namespace `nsrv-h<i>` at 10.77.0.<i + 2> on
the bridge `nsrvbr0`, whose own address (10.77.0.1, in the root namespace) is where the test driver
sits. Every name the harness makes starts with a prefix of its own, so a leftover of a killed run is
recognised (and removed) by name alone. A second bed on the same machine takes another prefix
(`NAMESRV_TEST_BED_ID`)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

BED_ID_VAR = "NAMESRV_TEST_BED_ID"
"""Another test bed beside the default one on the same machine (1..9): its own names, bridge,
subnet 10.(77 + id).0.0/24 and temp root, so two beds (two test runs) never meet or sweep each
other's leftovers away. Unset or 0: the default bed below."""


def _bed_id() -> int:
    raw = os.environ.get(BED_ID_VAR, "0") or "0"
    if not raw.isdigit() or not 0 <= int(raw) <= 9:
        raise ValueError(f"{BED_ID_VAR} must be 0..9, got {raw!r}")
    return int(raw)


BED_ID = _bed_id()
_TAG = str(BED_ID) if BED_ID else ""
NETNS_PREFIX = f"nsrv{_TAG}-h"
BRIDGE = f"nsrvbr{BED_ID}"
VETH_PREFIX = f"nsrv{_TAG}v"
"""Root-side end of host i's veth pair: `nsrvv<i>`; the end inside the namespace is `eth0`."""
SUBNET = ipaddress.IPv4Network(f"10.{77 + BED_ID}.0.0/24")
MAX_HOSTS = 32
TEMP_ROOT = f"/tmp/nsrvh{_TAG}"
"""Ray's temp dirs of the test bed's nodes (`<TEMP_ROOT>/h<i>`, `<TEMP_ROOT>/driver`): short, as
Ray's Unix socket paths must stay under 108 bytes, and unique to the harness (a leftover Ray process
is recognised by it)."""


@dataclass(frozen=True)
class HostLayout:
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_HOSTS:
            raise ValueError(f"a test bed has 1..{MAX_HOSTS} hosts, not {self.count}")

    @property
    def prefix_len(self) -> int:
        return SUBNET.prefixlen

    @property
    def driver_address(self) -> str:
        """The bridge's address in the root namespace: where the test driver reaches the hosts from."""
        return str(SUBNET.network_address + 1)

    def netns(self, i: int) -> str:
        return f"{NETNS_PREFIX}{self._check(i)}"

    def address(self, i: int) -> str:
        return str(SUBNET.network_address + 2 + self._check(i))

    def veth(self, i: int) -> str:
        return f"{VETH_PREFIX}{self._check(i)}"

    def temp_dir(self, i: int) -> str:
        return f"{TEMP_ROOT}/h{self._check(i)}"

    @property
    def addresses(self) -> list[str]:
        return [self.address(i) for i in range(self.count)]

    def host_of(self, address: str) -> int:
        """The host index of an address of the bed (ValueError for any other)."""
        if address in self.addresses:
            return self.addresses.index(address)
        raise ValueError(f"{address} is not a host of this test bed ({', '.join(self.addresses)})")

    def _check(self, i: int) -> int:
        if not 0 <= i < self.count:
            raise ValueError(f"no host {i}: this test bed has hosts 0..{self.count - 1}")
        return i


def is_leftover_netns(name: str) -> bool:
    """A namespace name the harness makes (`nsrv-h<digits>`)."""
    return name.startswith(NETNS_PREFIX) and name[len(NETNS_PREFIX):].isdigit()
