"""What every mqadmin verb shares: reaching the cluster (TCP with -n, else the Ray namespace's
actors) as one `DefaultMQAdminExt`, printing JSON, and the checks against the cluster info."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from clients.admin.brokers import MQAdminError
from clients.admin.client import DefaultMQAdminExt, Outcomes, failures
from clients.cli.support import CLIError, env_credentials
from namesrv.protocol.models import ClusterInfo


@contextmanager
def admin_of(args: argparse.Namespace) -> Iterator[DefaultMQAdminExt]:
    """Over TCP with -n, else over the Ray namespace's actors; an admin failure is a CLIError."""
    if args.namesrv_addr:
        admin = DefaultMQAdminExt.over_tcp(args.namesrv_addr, args.timeout, env_credentials())
    else:
        from clients.cli.support import connect_deployment

        admin = DefaultMQAdminExt.over_ray(connect_deployment(args), args.timeout, env_credentials())
    try:
        yield admin
    except MQAdminError as e:
        raise CLIError(str(e)) from None
    finally:
        admin.close()


def emit_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


def require_all(outcomes: Outcomes, what: str) -> None:
    bad = failures(outcomes)
    if bad is not None:
        raise CLIError(f"{what} failed on {bad}")


def check_broker_known(info: ClusterInfo, broker_addr: str) -> str:
    known = DefaultMQAdminExt.broker_addrs(info)
    if broker_addr not in known:
        raise CLIError(f"no broker at {broker_addr!r} (brokers: {', '.join(sorted(known)) or 'none'})")
    return broker_addr


def check_cluster_known(info: ClusterInfo, cluster: str) -> str:
    if cluster not in info.cluster_addr_table:
        raise CLIError(f"no cluster {cluster!r} (clusters: {', '.join(sorted(info.cluster_addr_table)) or 'none'})")
    return cluster


def target_broker_addrs(admin: DefaultMQAdminExt, args: argparse.Namespace) -> list[str]:
    """The brokers a `-b ADDR | -c CLUSTER` verb acts on: that broker, or every master of that
    cluster (each checked against the cluster info)."""
    info = admin.examine_broker_cluster_info()
    if args.broker_addr is not None:
        return [check_broker_known(info, args.broker_addr)]
    return DefaultMQAdminExt.master_addrs_of_cluster(info, check_cluster_known(info, args.cluster))
