"""Helpers for tests that run the actors on a real local Ray. The fixtures are in tests/conftest.py:

- `ray_local` (module scope): the run's shared local Ray (`shared_ray`: `address="local"`, 2 CPUs,
  no dashboard, never someone else's cluster), started once and kept across modules; each module
  gets a namespace of its own. A module that needs a Ray of its own (`local_ray`, a multi-node
  Cluster, Spark) stops the shared one first (`release_shared_ray`); the next module restarts it.
- `deployments` (function scope) deploys clusters in a fresh Ray namespace with a `tmp_path` data
  dir, so tests never see each other's actors or stores, and tears every one down afterwards.
- `registered_deployment` is a module's shared deployment; `mend` makes it whole after a test that
  killed or shut down one of its brokers (restarted from its store), so such a test can share it too.

Waiting is event-driven wherever the system offers an event: route changes are awaited with the
NameServer's long-poll (`listen_for_change`); everything else uses `namesrv.common.waiting.wait_until`,
a short bounded poll with a deadline that fails saying what it waited for and what it last saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil
import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec, ClusterSpec
from namesrv.common.waiting import wait_until
from namesrv.remoting.command import RemotingResponse
from namesrv.routeinfo.long_poll import RouteChange

log = logging.getLogger(__name__)

T = TypeVar("T")

RAY_NUM_CPUS = 2


# ---------------------------------------------------------------------------- Ray session
def unique_namespace(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class _Shared:
    """The session's shared local Ray, when this process started it and it still runs."""

    namespace: str | None = None


def _init_local(namespace: str) -> None:
    ray.init(
        address="local",
        num_cpus=RAY_NUM_CPUS,
        include_dashboard=False,
        namespace=namespace,
        log_to_driver=False,
        configure_logging=False,
    )


def release_shared_ray() -> None:
    """Stop the shared Ray (if it runs), for a test that needs a Ray of its own (a multi-node
    Cluster, Spark); the next module that asks for the shared one starts it again."""
    if _Shared.namespace is not None:
        _Shared.namespace = None
        _join_client_threads(5.0)
        ray.shutdown()


def shared_ray(namespace_prefix: str = "tests") -> str:
    """The session's local Ray, started on first use (and again after a module that needed a Ray
    of its own); returns a fresh namespace name for the caller's actors. Modules share the Ray
    processes, never actors: every deployment and controller lives in a namespace of its own and
    is killed by the module that made it."""
    if _Shared.namespace is None or not ray.is_initialized():
        if ray.is_initialized():  # someone else's session: never share it silently
            log.warning("ray was already initialized; shutting it down to start the shared one")
            ray.shutdown()
        _Shared.namespace = unique_namespace("shared")
        _init_local(_Shared.namespace)
    return unique_namespace(namespace_prefix)


@contextlib.contextmanager
def local_ray(namespace_prefix: str = "tests") -> Iterator[str]:
    """A private local Ray for the duration of the block (the shared one is stopped first); yields
    its default namespace."""
    release_shared_ray()
    if ray.is_initialized():  # a module that leaked its session: never share it silently
        log.warning("ray was already initialized; shutting it down to start a private one")
        ray.shutdown()
    namespace = unique_namespace(namespace_prefix)
    _init_local(namespace)
    try:
        yield namespace
    finally:
        _join_client_threads(5.0)
        ray.shutdown()


def _join_client_threads(budget_s: float) -> None:
    """Give the client instances' route threads (stopped, but maybe inside a Ray call) a bounded
    time to leave it: a thread still inside Ray when the session shuts down can crash the driver."""
    deadline = time.monotonic() + budget_s
    for t in threading.enumerate():
        if t is not threading.current_thread() and t.name.endswith(("-route-poll", "-route-push")):
            t.join(max(0.0, deadline - time.monotonic()))


def route_of(namesrv: Any, topic: str) -> RemotingResponse:
    return ray.get(namesrv.get_routeinfo_by_topic.remote(topic=topic), timeout=60)


def route_version(resp: RemotingResponse) -> int:
    """The version to hold for a long-poll; -1 (never a real version) when the query failed, so the
    first long-poll returns the NameServer's current route as soon as it can answer."""
    return int(resp.ext_fields.get("routeVersion", -1)) if resp.ok else -1


def wait_for_route(
    namesrv: Any,
    topic: str,
    predicate: Callable[[dict[str, Any] | None], bool],
    timeout: float,
    what: str = "",
) -> dict[str, Any] | None:
    """Wait on one NameServer's long-poll until `predicate(route)` holds for `topic`'s route (the
    wire dict, or None when the topic has no route); returns that route."""
    deadline = time.monotonic() + timeout
    resp = route_of(namesrv, topic)
    route = resp.wire_body() if resp.ok else None
    if resp.ok and predicate(route):
        return route
    held = route_version(resp)
    seen: list[Any] = [resp.remark if not resp.ok else summarize_route(route)]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(
                f"timed out after {timeout:.1f} s waiting for route of {topic} {what}; routes seen: {seen}"
            )
        changes = ray.get(namesrv.listen_for_change.remote({topic: held}, remaining), timeout=remaining + 10)
        if topic in changes:
            held = changes[topic].version
            route = wire_route(changes[topic])
            seen.append(summarize_route(route))
            if predicate(route):
                return route


def wait_for_route_everywhere(
    dep: Deployment,
    topic: str,
    predicate: Callable[[dict[str, Any] | None], bool],
    timeout: float,
    what: str = "",
) -> dict[str, dict[str, Any] | None]:
    deadline = time.monotonic() + timeout
    return {
        name: wait_for_route(ns, topic, predicate, max(0.0, deadline - time.monotonic()), f"on {name} {what}")
        for name, ns in dep.namesrvs.items()
    }


def time_route_changes(
    dep: Deployment,
    topic: str,
    predicate: Callable[[dict[str, Any] | None], bool],
    action: Callable[[], None],
    timeout: float,
) -> dict[str, float]:
    """Seconds from `action()` until each NameServer's long-poll delivers a route of `topic` that
    satisfies `predicate` (the long-polls are pending before the action runs)."""
    held: dict[str, int] = {}
    for name, ns in dep.namesrvs.items():
        resp = route_of(ns, topic)
        assert resp.ok and not predicate(resp.wire_body()), f"{name}: precondition already met: {resp}"
        held[name] = route_version(resp)
    pending = {ns.listen_for_change.remote({topic: held[n]}, timeout): n for n, ns in dep.namesrvs.items()}
    t0 = time.monotonic()
    action()
    deadline = t0 + timeout
    elapsed: dict[str, float] = {}
    while pending:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no qualifying route change on {sorted(pending.values())} within {timeout} s"
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=remaining)
        if not ready:
            continue
        name = pending.pop(ready[0])
        t = time.monotonic() - t0
        changes = ray.get(ready[0], timeout=60)
        if topic in changes and predicate(wire_route(changes[topic])):
            elapsed[name] = t
            continue
        if topic in changes:  # an unrelated change: hold the new version and listen again
            held[name] = changes[topic].version
        remaining = max(0.01, deadline - time.monotonic())
        pending[dep.namesrvs[name].listen_for_change.remote({topic: held[name]}, remaining)] = name
    return elapsed


def assert_quiet(namesrv: Any, topic: str, seconds: float) -> None:
    """The route of `topic` does not change for `seconds` (long-poll returns empty at its timeout)."""
    version = route_version(route_of(namesrv, topic))
    changes = ray.get(namesrv.listen_for_change.remote({topic: version}, seconds), timeout=60)
    assert changes == {}, f"route of {topic} changed during a quiet period: {changes}"


def assert_quiet_everywhere(dep: Deployment, topic: str, seconds: float) -> None:
    """`assert_quiet` on every NameServer of `dep` over the same `seconds` (the long-polls pend side
    by side, not one after the other)."""
    versions = {name: route_version(route_of(ns, topic)) for name, ns in dep.namesrvs.items()}
    pending = {name: ns.listen_for_change.remote({topic: versions[name]}, seconds) for name, ns in dep.namesrvs.items()}
    for name, ref in pending.items():
        changes = ray.get(ref, timeout=60)
        assert changes == {}, f"route of {topic} changed on {name} during a quiet period: {changes}"


# ---------------------------------------------------------------------------- route inspection
def wire_route(change: RouteChange) -> dict[str, Any] | None:
    """A long-poll change's route as RocketMQ's wire dict (None: the topic has no route)."""
    return change.route.to_wire() if change.route is not None else None


def broker_names(route: dict[str, Any] | None) -> set[str]:
    return {bd["brokerName"] for bd in route["brokerDatas"]} if route else set()


def broker_addrs(route: dict[str, Any] | None) -> set[str]:
    return {a for bd in route["brokerDatas"] for a in bd["brokerAddrs"].values()} if route else set()


def queue_perms(route: dict[str, Any] | None) -> dict[str, int]:
    return {qd["brokerName"]: qd["perm"] for qd in route["queueDatas"]} if route else {}


def normalize_route(route: dict[str, Any] | None) -> dict[str, Any] | None:
    """Order-independent form: two NameServers that agree compare equal."""
    if route is None:
        return None
    return {
        "queueDatas": sorted(route["queueDatas"], key=lambda q: q["brokerName"]),
        "brokerDatas": sorted(
            ({**b, "brokerAddrs": dict(sorted(b["brokerAddrs"].items()))} for b in route["brokerDatas"]),
            key=lambda b: b["brokerName"],
        ),
        "filterServerTable": dict(sorted(route.get("filterServerTable", {}).items())),
        "orderTopicConf": route.get("orderTopicConf"),
    }


def summarize_route(route: dict[str, Any] | None) -> str:
    if route is None:
        return "<no route>"
    return ",".join(
        f"{q['brokerName']}(perm={q['perm']},w={q['writeQueueNums']})"
        for q in sorted(route["queueDatas"], key=lambda q: q["brokerName"])
    ) + f" addrs={sorted(broker_addrs(route))}"


def stable_tables(namesrv: Any) -> dict[str, Any]:
    """dump_tables without heartbeat timestamps: what must not change under bad requests, and what
    two NameServers that heard the same brokers must agree on."""
    tables = ray.get(namesrv.dump_tables.remote(), timeout=60)
    tables["brokerLiveTable"] = {
        addr: {k: v for k, v in live.items() if k != "lastUpdateTimestamp"}
        for addr, live in tables["brokerLiveTable"].items()
    }
    return tables


def cluster_addrs(namesrv: Any) -> set[str]:
    """Every broker address in a NameServer's brokerAddrTable."""
    info = ray.get(namesrv.get_broker_cluster_info.remote(), timeout=60).wire_body()
    return {a for bd in info["brokerAddrTable"].values() for a in bd["brokerAddrs"].values()}


def live_channel(namesrv: Any, addr: str) -> str | None:
    """The channel token a NameServer holds for `addr` (None when not live there)."""
    live = ray.get(namesrv.dump_tables.remote(), timeout=60)["brokerLiveTable"].get(addr)
    return None if live is None else live["channel"].strip("'\"")


def removals_of(namesrv: Any, addr: str) -> list[Any]:
    return [r for r in ray.get(namesrv.get_removals.remote(), timeout=60) if r.broker_addr == addr]


# ---------------------------------------------------------------------------- processes
@contextlib.contextmanager
def stopped(*pids: int) -> Iterator[None]:
    """SIGSTOP the processes for the block; SIGCONT them afterwards whatever happens."""
    done: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            done.append(pid)
        yield
    finally:
        for pid in done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def namesrv_pid(namesrv: Any) -> int:
    return int(ray.get(namesrv.get_status.remote(), timeout=60)["pid"])


def broker_info(broker: Any) -> dict[str, Any]:
    return ray.get(broker.get_runtime_info.remote(), timeout=60)


# ---------------------------------------------------------------------------- a fake channel
@ray.remote(num_cpus=0)
class ChannelStub:
    """Stands in for a broker's channel: `wait_closed` pends until the actor dies or `close()`;
    `fail_pending()` makes the pending calls fail as a flapping connection fails them."""

    def __init__(self) -> None:
        self._closed = asyncio.Event()
        self._fail = asyncio.Event()
        self.calls = 0

    async def wait_closed(self, token: str | None = None) -> str:
        self.calls += 1
        closed = asyncio.ensure_future(self._closed.wait())
        failed = asyncio.ensure_future(self._fail.wait())  # this call's event: fail_pending swaps it
        await asyncio.wait([closed, failed], return_when=asyncio.FIRST_COMPLETED)
        closed.cancel()
        failed.cancel()
        if self._closed.is_set():
            return "closed"
        raise ActorUnavailableError("connection to the actor flapped", None)

    async def fail_pending(self) -> None:
        """Fail every pending `wait_closed` once (transient: later calls pend again)."""
        self._fail.set()
        self._fail = asyncio.Event()

    async def watch_calls(self) -> int:
        return self.calls

    async def close(self) -> None:
        self._closed.set()

    async def ping(self) -> str:
        return "pong"


# ---------------------------------------------------------------------------- deployments
@dataclass
class DeploymentFactory:
    """Deploys clusters into fresh namespaces under one data dir and tears them all down."""

    data_dir: Path
    prefix: str = "t"
    deployed: list[Deployment] = field(default_factory=list)

    def deploy(
        self,
        brokers: list[BrokerSpec] | None = None,
        namesrv_count: int = 2,
        profile: str = "fast",
        **spec: Any,
    ) -> Deployment:
        cluster = ClusterSpec(
            namesrv_count=namesrv_count,
            brokers=brokers if brokers is not None else [BrokerSpec("broker-a"), BrokerSpec("broker-b")],
            profile=profile,
            namespace=unique_namespace(self.prefix),
            data_dir=str(self.data_dir / f"cluster{len(self.deployed)}"),
            # Free NameServer ports (deployments run side by side); Ray-only brokers unless a test asks
            # for TCP ones (broker_port=0 takes free ports).
            **({"namesrv_port": 0, "broker_port": None} | spec),
        )
        dep = Deployment(cluster)
        self.deployed.append(dep)  # before start, so a half-started cluster is torn down too
        return dep.start()

    def close(self) -> None:
        """Kill every actor of every deployment (no graceful shutdown: nothing is left to test)."""
        for dep in self.deployed:
            try:
                dep.teardown(graceful=False)
            except Exception:  # one failed kill must not leave the rest running
                log.exception("teardown of %s failed; killing what is left", dep.spec.namespace)
                for handle in [*dep.brokers.values(), *dep.namesrvs.values()]:
                    with contextlib.suppress(Exception):
                        ray.kill(handle, no_restart=True)
        self.deployed.clear()


def wait_registered_everywhere(dep: Deployment, timeout: float = 15.0) -> None:
    """Every broker of `dep` is in every NameServer's brokerAddrTable and the NameServer is ready."""
    want = set(dep.brokers)
    for name, ns in dep.namesrvs.items():
        wait_until(
            lambda ns=ns: ray.get(ns.get_status.remote(), timeout=60)["ready"] and want <= cluster_addrs(ns),
            timeout,
            f"{sorted(want)} registered on {name}",
        )


@contextlib.contextmanager
def registered_deployment(data_dir: Path, prefix: str = "t", **deploy: Any) -> Iterator[Deployment]:
    """One deployment (`DeploymentFactory.deploy`'s arguments) whose brokers every NameServer has
    registered, torn down after the block: a test module's shared deployment."""
    factory = DeploymentFactory(data_dir, prefix=prefix)
    try:
        dep = factory.deploy(**deploy)
        wait_registered_everywhere(dep)
        yield dep
    finally:
        factory.close()


def actor_alive(handle: Any, timeout: float = 60) -> bool:
    """Whether an actor (a NameServer, a broker, a test's stand-in) answers its ping (False once it
    died: killed, or shut down)."""
    try:
        ray.get(handle.ping.remote(), timeout=timeout)
    except RayActorError:
        return False
    return True


def mend(dep: Deployment, timeout: float = 30.0) -> None:
    """Make a shared deployment whole again after a test: restart from its store every broker that
    test killed or shut down, then wait until every NameServer is ready (a restarted one lets routes
    out once its known brokers are back) with every broker registered. A test on a module's
    deployment may then fault a broker without the next test seeing it (one actor start instead of
    a new deployment)."""
    for addr, handle in list(dep.brokers.items()):
        if not actor_alive(handle):
            dep.restart_broker(addr)
    wait_registered_everywhere(dep, timeout)


# ---------------------------------------------------------------------------- an isolated host
_REAPER = (
    "import os, time\n"
    "while True:\n"
    "    try:\n        os.wait()\n"
    "    except ChildProcessError:\n        time.sleep(0.2)\n"
)
"""PID 1 of the isolated host: reaps orphans (Ray's daemons), so `ray stop` sees them exit."""

RAY_CORE_LOG_LINE = r"^\[\d{4}-\d\d-\d\d [\d:,]+ [A-Z] \d+ \d+\] \S+\.cc:\d+: "
"""A line of Ray's C++ log on stderr (with no network, Ray warns it cannot find an external IP)."""


class IsolatedHost:
    """Private PID, network (loopback only) and mount namespaces, as root with `unshare`: commands
    run inside see no other process and no other Ray, so `namesrv up` starts its own `ray start
    --head`, `ray stop` can stop only what runs here, and "no Ray running" really holds. Closing it
    kills PID 1, and with it every process inside."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.tmp = short_tmp_dir()
        """TMPDIR and RAY_TMPDIR inside: short, as Ray's socket paths must fit in 107 bytes."""
        self._unshare = subprocess.Popen(
            ["unshare", "--pid", "--net", "--mount", "--fork", "--mount-proc", "--kill-child",
             sys.executable, "-c", _REAPER],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self.pid1 = wait_until(self._child, 10, "PID 1 of the isolated host")
        subprocess.run(self._enter("ip", "link", "set", "lo", "up"), check=True, capture_output=True)

    def _child(self) -> int | None:
        if self._unshare.poll() is not None:
            err = self._unshare.stderr.read().decode() if self._unshare.stderr else ""
            raise RuntimeError(f"unshare exited {self._unshare.returncode}: {err.strip()}")
        children = Path(f"/proc/{self._unshare.pid}/task/{self._unshare.pid}/children")
        text = children.read_text().split() if children.exists() else []
        return int(text[0]) if text else None

    def _enter(self, *argv: str) -> list[str]:
        return ["nsenter", "-t", str(self.pid1), "-p", "-n", "-m", "--", *argv]

    def _newcomer(self, argv: list[str]) -> list[str]:
        """`argv` inside with a newcomer's environment: PATH without the venv, a fresh HOME."""
        env = ["env", "-i", "PATH=/usr/bin:/bin", f"HOME={self.home}", f"TMPDIR={self.tmp}",
               f"RAY_TMPDIR={self.tmp}", "LANG=C.UTF-8"]
        return self._enter(*env, *argv)

    def run(self, argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside as a newcomer would, to its end."""
        return subprocess.run(self._newcomer(argv), capture_output=True, text=True, timeout=timeout)

    def start(self, argv: list[str]) -> tuple[subprocess.Popen[str], psutil.Process]:
        """Start `argv` inside as a newcomer would: the `nsenter` outside (which ends with the
        command's exit status) and the command's own process, to signal from outside."""
        proc = subprocess.Popen(self._newcomer(argv), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        parent = psutil.Process(proc.pid)
        return proc, wait_until(lambda: next(iter(parent.children()), None), 10, f"{argv[0]} inside the host")

    def processes(self) -> list[str]:
        """Command lines of every process inside but PID 1 (and the `ps` asking)."""
        out = subprocess.run(self._enter("ps", "-ww", "-eo", "pid=,args="), capture_output=True, text=True, check=True)
        rows = [line.strip().split(None, 1) for line in out.stdout.splitlines() if line.strip()]
        return [args for pid, *rest in rows if pid != "1" for args in rest if not args.startswith("ps ")]

    def close(self) -> None:
        self._unshare.kill()
        self._unshare.wait(10)
        if self._unshare.stderr:
            self._unshare.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def short_tmp_dir() -> Path:
    """A fresh directory with a short path, for a TMPDIR Ray puts its sockets under (pytest's
    tmp_path is too long for AF_UNIX's 107-byte limit). The caller removes it."""
    return Path(tempfile.mkdtemp(prefix="nsr-", dir="/tmp"))


def isolation_unavailable() -> str | None:
    """Why an IsolatedHost cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root for unshare/nsenter"
    for tool in ("unshare", "nsenter", "ip", "ps"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    probe = subprocess.run(["unshare", "--pid", "--net", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"unshare is not permitted here: {probe.stderr.decode().strip()}"
    return None


def pull_all(broker: Any, topic: str, queue_id: int, timeout: float = 60) -> dict[str, Any]:
    """Every message of one queue through the broker's Ray pull, page by page (a pull answers at
    most the broker's transfer caps): {"messages": [...], "max_offset": n} as one page would."""
    messages: list[dict[str, Any]] = []
    offset, max_offset = 0, 0
    while True:
        page = ray.get(broker.pull_message.remote(topic, queue_id, offset, 1000), timeout=timeout)
        messages += page["messages"]
        max_offset = page["max_offset"]
        if page["next_begin_offset"] <= offset or page["next_begin_offset"] >= max_offset:
            return {"messages": messages, "max_offset": max_offset}
        offset = page["next_begin_offset"]


# ---------------------------------------------------------------------------- failover (controller mode)
FAILOVER_HA: dict[str, Any] = {
    "slave_sync_interval_ms": 200, "slave_read_enable": True, "ha_poll_wait_ms": 300, "broker_role": "SYNC_MASTER",
    "slave_timeout_ms": 1_000, "ha_max_time_slave_not_catchup_ms": 2_000, "controller_first_elect_delay_ms": 500,
}
"""Broker overrides of a SYNC_MASTER set in controller mode with quick HA timing (tests of issue 21)."""


def broker_status(dep: Deployment, broker: str) -> dict[str, Any]:
    """A broker's `status()` (role, role_log, controller view, max_offset), by address or actor name."""
    return ray.get(dep.brokers[dep.addr_of(broker)].status.remote(), timeout=30)


def await_master_and_slave_in_sync(dep: Deployment, master: str, slave: str, topic: str) -> None:
    """Wait until `master` is SYNC_MASTER with `slave` (a SLAVE) in the controller's SyncStateSet,
    then create `topic` (4 queues) on the master and wait until the slave has it too."""
    wait_until(lambda: broker_status(dep, master)["role"] == "SYNC_MASTER"
               and broker_status(dep, slave)["role"] == "SLAVE", 30, f"{master} master and {slave} slave")
    assert ray.get(dep.brokers[dep.addr_of(master)].create_topic.remote(topic, 4, 4), timeout=30).ok
    wait_until(lambda: len(broker_status(dep, master)["controller"]["sync_state_set"]) == 2, 30,
               "the slave in the controller's SyncStateSet")
    wait_until(lambda: topic in ray.get(dep.brokers[dep.addr_of(slave)].get_topic_config_table.remote(), timeout=30),
               30, f"the topic on {slave}")


def send_numbered(dep: Deployment, broker: str, topic: str, n: int, start: int = 0) -> list[RemotingResponse]:
    """Send messages start..start+n-1 (body `m<i>` x10, queue i % 4) straight to a broker actor."""
    handle = dep.brokers[dep.addr_of(broker)]
    return ray.get([handle.send_message.remote(topic, i % 4, f"m{i}".encode() * 10) for i in range(start, start + n)],
                   timeout=60)


def read_all(dep: Deployment, broker: str, topic: str, queues: int = 4) -> dict[tuple[int, int], bytes]:
    """Every message a broker holds of `topic`: {(queueId, queueOffset): body}."""
    out: dict[tuple[int, int], bytes] = {}
    for q in range(queues):
        page = pull_all(dep.brokers[dep.addr_of(broker)], topic, q, timeout=30)
        out |= {(q, m["queue_offset"]): m["body"] for m in page["messages"]}
    return out


def routes_master_to(addr: str, broker_name: str = "broker-a") -> Callable[[dict[str, Any] | None], bool]:
    """A route predicate: brokerId 0 of `broker_name` is `addr`."""
    def check(route: dict[str, Any] | None) -> bool:
        return route is not None and any(bd["brokerName"] == broker_name and
                                         {str(k): v for k, v in bd["brokerAddrs"].items()}.get("0") == addr
                                         for bd in route["brokerDatas"])
    return check
