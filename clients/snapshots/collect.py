"""`namesrv snapshot`: collect route snapshots from every NameServer into a Parquet dataset.

Each NameServer buffers its own snapshots (on an interval and after every route change) while a
collector holds a lease on it; this drains them all, in parallel, and appends them under OUT
(partitioned by date and NameServer). Every drain takes a snapshot of that instant and renews the
lease, so with `--every` the snapshots between rounds are collected too; a NameServer nobody
collects from takes none. Append-only, so it can run again and again against a running system.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from namesrv.routeinfo.snapshot import DEFAULT_READER

log = logging.getLogger(__name__)


def collect_once(namesrvs: dict[str, Any], out: str | Path, timeout_s: float = 30.0,
                 reader: str = DEFAULT_READER, every_s: float | None = None) -> dict[str, int]:
    """Drain every NameServer once (as `reader`: collectors with different names each get every
    snapshot) and append what they held; returns rows written per NameServer. `every_s`: the next
    drain comes within that, so the lease is made to outlast it. A NameServer that does not answer
    is skipped (and logged): the others' snapshots still land."""
    import ray

    from clients.snapshots.dataset import append_snapshots

    lease_ms = None if every_s is None else int(every_s * 3000)
    refs = {name: ns.drain_snapshots.remote(True, reader, lease_ms) for name, ns in namesrvs.items()}
    rows: dict[str, int] = {}
    for name, ref in refs.items():
        try:
            batches = ray.get(ref, timeout=timeout_s)
        except Exception as e:
            log.warning("snapshots of %s not collected: %s", name, type(e).__name__)
            rows[name] = 0
            continue
        append_snapshots(out, batches)
        rows[name] = sum(b.num_rows for b in batches)
    return rows


def cmd_snapshot(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from actors.deployment.launcher import connect, ensure_ray

    ensure_ray(address=args.address, namespace=args.namespace)
    dep = connect(args.namespace)
    if not dep.namesrvs:
        print(f"no NameServer found in Ray namespace {args.namespace!r}")
        return 1
    total: dict[str, int] = dict.fromkeys(dep.namesrvs, 0)
    rounds = 1 if args.every is None else max(1, int(args.duration / args.every))
    with tqdm(total=rounds, desc="collecting snapshots", unit="round", disable=rounds == 1) as bar:
        for i in range(rounds):
            started = time.monotonic()
            for name, n in collect_once(dep.namesrvs, args.out, every_s=args.every).items():
                total[name] += n
            bar.update(1)
            if args.every is not None and i + 1 < rounds:
                time.sleep(max(0.0, args.every - (time.monotonic() - started)))
    for name, n in sorted(total.items()):
        print(f"{name}: {n} rows")
    print(f"appended to {args.out}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("snapshot", help="collect route snapshots from every NameServer into Parquet")
    p.add_argument("out", help="dataset root (created if missing; files are only ever added)")
    p.add_argument("--address", default="auto", help="Ray cluster address (default auto)")
    p.add_argument("--namespace", default="namesrv", help="Ray namespace of the actors")
    p.add_argument("--every", type=float, default=None, help="collect every N seconds (default: once)")
    p.add_argument("--duration", type=float, default=60.0, help="with --every: for this many seconds")
    p.set_defaults(func=cmd_snapshot)
