"""What every benchmark shares: the machine it ran on, latency figures, a side-by-side ratio table, a
broker in this process.

Percentiles come from `namesrv.common.stats` (the project's one percentile); tables are rendered with
`clients.cli.render.table`. Benchmarks import this module as `_common` (run as scripts, their own
directory is on sys.path).
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from clients.cli.render import table
from namesrv.broker.client.consumer_offsets import ConsumerOffsetManager
from namesrv.broker.config import BrokerConfig
from namesrv.broker.processor.dispatcher import BrokerProcessor
from namesrv.broker.processor.types import BrokerIdentity
from namesrv.broker.topic_config_manager import TopicConfigManager
from namesrv.common.clock import system_clock
from namesrv.common.stats import percentile
from namesrv.protocol.models import TopicConfig
from namesrv.store.message_store import MessageStore
from namesrv.store.types import FlushDiskType

if TYPE_CHECKING:
    from actors.deployment.launcher import Deployment


# ---------------------------------------------------------------------------- the machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _disk(path: str) -> str:
    """The filesystem holding `path`: device, type, size, free space, and the kernel's rotational
flag (1 = spinning disk, or a virtual disk that does not say)."""
    path = os.path.realpath(path)
    best = None
    for part in psutil.disk_partitions(all=False):
        if path.startswith(part.mountpoint) and (best is None or len(part.mountpoint) > len(best.mountpoint)):
            best = part
    usage = psutil.disk_usage(path)
    kind = ""
    if best is not None:
        dev = os.path.basename(best.device)
        for candidate in (dev, dev.rstrip("0123456789"), dev.split("p")[0] if dev.startswith("nvme") else dev):
            flag = Path(f"/sys/block/{candidate}/queue/rotational")
            if flag.exists():
                kind = f" rotational={flag.read_text().strip()}"
                break
    where = f"{best.device} ({best.fstype}) at {best.mountpoint}" if best else path
    return f"{where}{kind}, {usage.total / 2**30:.0f} GiB, {usage.free / 2**30:.0f} GiB free"


def fsync_p50_ms(path: str, writes: int = 50) -> float:
    """Median latency of a 160-byte append + fsync in `path` (what one SYNC_FLUSH message costs the disk)."""
    probe = Path(path) / ".fsync-probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        lat = []
        for _ in range(writes):
            t0 = time.perf_counter()
            os.write(fd, b"x" * 160)
            os.fsync(fd)
            lat.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        probe.unlink()
    return pct_ms(lat, 0.5)


def machine_info(data_dir: str | None = None, fsync: bool = False) -> dict[str, Any]:
    """Cores, RAM, CPU model, the disk under `data_dir` (default: the temp dir; with `fsync`, its
    fsync latency too), versions, load."""
    info: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cores": f"{psutil.cpu_count(logical=False)} physical / {os.cpu_count()} logical",
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB total, "
                  f"{psutil.virtual_memory().available / 2**30:.1f} GiB available",
        "disk": _disk(data_dir or tempfile.gettempdir()),
    }
    if fsync:
        info["fsync"] = f"160-byte append + fsync p50 {fsync_p50_ms(data_dir or tempfile.gettempdir()):.2f} ms"
    info |= {
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        import ray

        info["ray"] = ray.__version__
    except ImportError:
        pass
    info["load_avg"] = " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min)"
    return info


def print_machine(data_dir: str | None = None, fsync: bool = False) -> dict[str, Any]:
    """Print the machine description (one field a line) and return it."""
    info = machine_info(data_dir, fsync)
    print("== machine")
    for key, value in info.items():
        print(f"  {key:10s} {value}")
    return info


# ---------------------------------------------------------------------------- figures
def pct_ms(seconds: Iterable[float], p: float) -> float:
    """The p-th percentile (p in [0, 1]) of durations in seconds, in milliseconds (nan for none)."""
    value = percentile(seconds, p)
    return float("nan") if value is None else value * 1000


def latency_ms(seconds: Sequence[float]) -> str:
    """`p50 x ms  p99 y ms  max z ms  (n=...)` of durations given in seconds."""
    if not seconds:
        return "no samples"
    return (f"p50 {pct_ms(seconds, 0.5):8.3f} ms  p99 {pct_ms(seconds, 0.99):8.3f} ms  "
            f"max {max(seconds) * 1000:8.3f} ms  (n={len(seconds)})")


def ratio(value: float | None, base: float | None) -> str:
    """`value / base` as `1.23x`, or `-` when either is missing or the base is zero."""
    if value is None or base is None or base == 0 or value != value or base != base:
        return "-"
    return f"{value / base:.2f}x"


def fmt(value: object, digits: int = 2) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.{digits}f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def ratio_table(
    rows: Iterable[tuple[str, float | None, float | None]], baseline: str, measured: str,
    label: str = "figure", digits: int = 2,
) -> str:
    """Side by side: one row per figure (name, baseline value, measured value) and their ratio,
    measured / baseline."""
    return table(
        (label, baseline, measured, f"{measured} / {baseline}"),
        [(name, fmt(base, digits), fmt(value, digits), ratio(value, base)) for name, base, value in rows],
    )


# ---------------------------------------------------------------------------- a broker in this process
def pure_broker(root: Path, topic: str, queues: int, pop_journal: Path | None = None) -> BrokerProcessor:
    """A broker's processor and store in this process, as a broker actor runs them but without Ray or
    sockets: a SYNC_FLUSH store with group commit (the broker's default) under `root`, on the real
    disk, and `topic` with `queues` queues."""
    topics = TopicConfigManager(root / "topics.json", system_clock)
    topics.update_topic_config(TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues))
    store = MessageStore(root / "store", FlushDiskType.SYNC_FLUSH, system_clock, group_commit=True)
    return BrokerProcessor(BrokerIdentity("DefaultCluster", "broker-a", 0, "127.0.0.1:10911"),
                           BrokerConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH), topics, store,
                           ConsumerOffsetManager(root / "offsets.json"), system_clock, pop_journal=pop_journal)


# ---------------------------------------------------------------------------- a run on a local Ray
@dataclass
class LocalRun:
    """A benchmark's private local Ray: its namespace, a scratch data dir, and the deployments to
    tear down at the end."""

    namespace: str
    data_dir: str
    deployments: list[Deployment] = field(default_factory=list)

    def retire(self, dep: Deployment) -> None:
        """Tear down a deployment measured already, so its idle actors do not load the next measurement."""
        self.deployments.remove(dep)
        dep.teardown(graceful=False)


def ray_init(namespace: str | None = None, num_cpus: int = 2) -> None:
    """Start this benchmark's Ray: a local one of its own (`num_cpus` CPUs, no dashboard), or, when
    RAY_ADDRESS names a running Ray, join that one instead (as `ray.init()` would; the smoke test
    runs every benchmark on its shared Ray so as not to start one per benchmark). Joined, the
    figures share that Ray's machine with whatever else runs there, and the machine lines say so."""
    import ray

    address = os.environ.get("RAY_ADDRESS")
    if address:
        print(f"  ray        joined the running Ray at {address} (RAY_ADDRESS): shared, not this run's own")
        ray.init(address=address, namespace=namespace, log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, namespace=namespace,
                 log_to_driver=False)


@contextmanager
def local_ray_run(prefix: str, fsync: bool = False) -> Iterator[LocalRun]:
    """Print the machine, start a local Ray (`ray_init`) in a fresh namespace with a scratch dir; at
    the end print the load average, tear down every deployment, stop Ray, remove the dir."""
    import ray

    data_dir = tempfile.mkdtemp(prefix=f"{prefix}-")
    print_machine(data_dir, fsync)
    run = LocalRun(f"{prefix}-{uuid.uuid4().hex[:8]}", data_dir)
    ray_init(run.namespace)
    try:
        yield run
        print(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    finally:
        for dep in run.deployments:
            dep.teardown(graceful=False)
        ray.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
