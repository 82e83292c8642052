"""A topic's route as RocketMQ's gRPC proxy answers it (RouteActivity): every queue of every broker
group, and the queues a producer writes to. In cluster mode every broker is at the proxy's own
endpoint; in local mode (a proxy inside each broker, ProxyTopicRouteData with the gRPC port) each
broker is at its own proxy: its remoting host, its remoting port + GRPC_PORT_OFFSET.

Plain values: namesrv.proxy.answers spells them as v2 messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from namesrv.protocol.constants import MASTER_ID
from namesrv.protocol.models import TopicRouteData
from namesrv.remoting.config import host_port

PERM_READ, PERM_WRITE = 4, 2
ALL_MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
"""The types a queue accepts: this system's topics carry no message type, so every topic is what
RocketMQ 5 calls MIXED (a topic created with `message.type=NORMAL` would accept only NORMAL)."""


@dataclass(frozen=True, slots=True)
class RouteQueue:
    """A queue as QueryRoute and QueryAssignment name it."""

    broker_name: str
    broker_id: int
    queue_id: int
    permission: str
    """A v2 Permission name."""
    broker_addr: str = ""
    """The broker's remoting address (where a local-mode proxy's endpoint is found)."""


GRPC_PORT_OFFSET = 2
"""A local-mode proxy serves gRPC on its broker's remoting port + 2 (HA's address is + 1): one rule
every proxy applies to every broker of a route, as RocketMQ's local mode uses one grpcServerPort on
every broker host."""


def local_endpoint(broker_addr: str) -> tuple[str, int]:
    """The gRPC endpoint of the local-mode proxy inside the broker at `broker_addr` (host:port);
    ValueError for an address with no TCP port (a Ray-only broker serves no proxy)."""
    split = host_port(broker_addr)
    if split is None:
        raise ValueError(f"broker {broker_addr!r} has no TCP port: it serves no local-mode proxy")
    return split[0], split[1] + GRPC_PORT_OFFSET


def address_scheme(host: str) -> str:
    """The v2 AddressScheme of the proxy's own endpoint."""
    return "IPv4" if host.replace(".", "").isdigit() else "DOMAIN_NAME"


def permission(perm: int) -> str:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return "READ_WRITE"
    return "READ" if readable else "WRITE" if writable else "NONE"


def message_queues(route: TopicRouteData) -> list[RouteQueue]:
    """QueryRoute's queues (genMessageQueueFromQueueData): per group and broker, its read-only, then
    write-only, then read-write queues (a group with no access: at least one NONE queue); every
    queue accepts every message type (ALL_MESSAGE_TYPES)."""
    brokers = {b.broker_name: b for b in route.broker_datas}
    out: list[RouteQueue] = []
    for qd in route.queue_datas:
        group = brokers.get(qd.broker_name)
        if group is None:
            break  # as RouteActivity: a queue data without its broker ends the list
        readable, writable = bool(qd.perm & PERM_READ), bool(qd.perm & PERM_WRITE)
        r = w = rw = n = 0
        if readable and writable:
            rw = min(qd.write_queue_nums, qd.read_queue_nums)
            r, w = qd.read_queue_nums - rw, qd.write_queue_nums - rw
        elif writable:
            w = qd.write_queue_nums
        elif readable:
            r = qd.read_queue_nums
        else:
            n = max(1, qd.write_queue_nums, qd.read_queue_nums)
        perms = ["READ"] * r + ["WRITE"] * w + ["READ_WRITE"] * rw + ["NONE"] * n
        for broker_id in sorted(group.broker_addrs):
            addr = group.broker_addrs[broker_id]
            out.extend(RouteQueue(qd.broker_name, broker_id, i, p, addr) for i, p in enumerate(perms))
    return out


def assignments(route: TopicRouteData, fifo: bool) -> list[RouteQueue]:
    """QueryAssignment's queues: per readable group with a master, one queue -1 (or, for a FIFO
    group, each read queue). Empty means FORBIDDEN "no readable queue"."""
    brokers = {b.broker_name: b for b in route.broker_datas}
    out: list[RouteQueue] = []
    for qd in route.queue_datas:
        group = brokers.get(qd.broker_name)
        if not qd.perm & PERM_READ or qd.read_queue_nums <= 0 or group is None or MASTER_ID not in group.broker_addrs:
            continue
        ids = range(qd.read_queue_nums) if fifo else [-1]
        addr = group.broker_addrs[MASTER_ID]
        out.extend(RouteQueue(qd.broker_name, MASTER_ID, i, permission(qd.perm), addr) for i in ids)
    return out


@dataclass(frozen=True)
class WriteQueue:
    broker_name: str
    broker_addr: str
    queue_id: int


def write_queues(route: TopicRouteData) -> list[WriteQueue]:
    """The queues a send may go to: each writable group's master, queues 0..writeQueueNums-1."""
    masters = {b.broker_name: b.broker_addrs.get(MASTER_ID) for b in route.broker_datas}
    out: list[WriteQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(qd.broker_name)
        if addr and qd.perm & PERM_WRITE:
            out.extend(WriteQueue(qd.broker_name, addr, i) for i in range(qd.write_queue_nums))
    return out


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash(long, int): how RocketMQ's proxy picks a message group's queue."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive, got {buckets}")
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def local_first(queues: list[WriteQueue], broker_name: str | None) -> list[WriteQueue]:
    """A local-mode proxy's write queues: its own broker's (LocalTopicRouteService), so a send is
    stored in process; all of them when its broker has none for the topic (a slave's proxy, a topic
    not on this broker), sent on over TCP as in cluster mode."""
    if broker_name is None:
        return queues
    own = [q for q in queues if q.broker_name == broker_name]
    return own or queues


def select_queue(queues: list[WriteQueue], sharding_key: str | None, counter: int) -> WriteQueue:
    """A message group's queue by consistent hash of the group, else round robin by `counter`."""
    if not queues:
        raise ValueError("no writable queue")
    if sharding_key:
        return queues[consistent_hash(java_string_hash(sharding_key), len(queues))]
    return queues[counter % len(queues)]


def master_addr(route: TopicRouteData, broker_name: str) -> str | None:
    """The address of `broker_name`'s master in `route`, None when the route has no master of it."""
    for b in route.broker_datas:
        if b.broker_name == broker_name and MASTER_ID in b.broker_addrs:
            return b.broker_addrs[MASTER_ID]
    return None


def readable_masters(route: TopicRouteData) -> list[tuple[str, str]]:
    """(broker name, master address) of each group a pop may read (readable queues, a master),
    sorted by name: ReceiveMessage's choice when the request names no broker."""
    masters = {b.broker_name: b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs}
    return sorted({(qd.broker_name, masters[qd.broker_name]) for qd in route.queue_datas
                   if qd.perm & PERM_READ and qd.read_queue_nums > 0 and qd.broker_name in masters})


def select_reader(readers: list[tuple[str, str]], broker_name: str, counter: int) -> tuple[str, str]:
    """The named broker when it is readable (ReceiveMessageQueueSelector), else round robin."""
    for r in readers:
        if broker_name and r[0] == broker_name:
            return r
    return readers[counter % len(readers)]
