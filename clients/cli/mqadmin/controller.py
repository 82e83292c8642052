"""mqadmin's controller verbs (RocketMQ 5 controller mode): getSyncStateSet (1006),
getControllerMetaData (1005), electMaster (1002) ask the controller; getBrokerEpoch (1007) asks each
broker of a set for its epoch file. Output in RocketMQ's lines (`--json` for scripts).

The controller is reached with `-a host:port` (mqadmin's -a, its TCP address; `namesrv up` prints
it) or, without -a, as the controller actor of the Ray namespace. Broker names of a cluster (-c) and
the brokers' addresses (getBrokerEpoch) come from the NameServers: `-n` over TCP, else the Ray
namespace, as the other verbs.

Where this differs from RocketMQ 5.3's tools: `-a` is optional (the Ray namespace); the `-i`
(repeat every N seconds) option is not offered; getSyncStateSet and getBrokerEpoch without -b/-c
are a usage error (RocketMQ prints the help); a broker set the controller does not know is an error
for -b (RocketMQ prints nothing). electMaster takes RocketMQ's options (`-bn NAME -b ID`, `-c`
optional here) and the issue's form `-b NAME --broker-id ID`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from clients.admin.brokers import MQAdminError
from clients.admin.client import DefaultMQAdminExt
from clients.admin.controller import ControllerAdmin
from clients.cli.mqadmin.args import broker_name_arg
from clients.cli.mqadmin.common import admin_of, check_cluster_known, emit_json
from clients.cli.mqadmin.verb import one_of, option, sub_command
from clients.cli.support import CLIError, cluster_arg

JAVA_NULL = "null"


def _j(value: Any) -> str:
    """A value as Java's String.format prints it (null for a missing one)."""
    if value is None:
        return JAVA_NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@contextmanager
def controller_of(args: argparse.Namespace) -> Iterator[ControllerAdmin]:
    """Over TCP with -a, else the controller actor of the Ray namespace; failures are CLIErrors."""
    if args.controller_addr:
        try:
            ctl = ControllerAdmin.over_tcp(args.controller_addr, args.timeout)
        except ValueError as e:
            raise CLIError(f"-a {args.controller_addr!r}: {e}") from None
    else:
        if args.namesrv_addr:
            raise CLIError("over TCP the controller verbs need the controller's address: -a host:port")
        from clients.cli.support import connect_ray

        connect_ray(args.address, args.namespace)
        try:
            ctl = ControllerAdmin.over_ray(args.namespace, args.timeout)
        except MQAdminError as e:
            raise CLIError(str(e)) from None
    try:
        yield ctl
    except MQAdminError as e:
        raise CLIError(str(e)) from None
    finally:
        ctl.close()


# ---------------------------------------------------------------------------- RocketMQ's lines
def replica_text(r: dict[str, Any]) -> str:
    """BrokerReplicasInfo.ReplicaIdentity.toString."""
    return (f"ReplicaIdentity{{brokerName='{_j(r.get('brokerName'))}', brokerId={_j(r.get('brokerId'))}, "
            f"brokerAddress='{_j(r.get('brokerAddress'))}', alive={_j(r.get('alive'))}}}")


def sync_state_text(table: dict[str, Any]) -> str:
    """GetSyncStateSetSubCommand's printout of a replicasInfoTable."""
    out = []
    for name, info in table.items():
        in_sync, not_in_sync = info.get("inSyncReplicas", []), info.get("notInSyncReplicas", [])
        out.append(f"\n#brokerName\t{name}\n#MasterBrokerId\t{_j(info.get('masterBrokerId'))}\n"
                   f"#MasterAddr\t{_j(info.get('masterAddress'))}\n#MasterEpoch\t{_j(info.get('masterEpoch'))}\n"
                   f"#SyncStateSetEpoch\t{_j(info.get('syncStateSetEpoch'))}\n#SyncStateSetNums\t{len(in_sync)}\n")
        out += [f"\nInSyncReplica:\t{replica_text(r)}\n" for r in in_sync]
        out += [f"\nNotInSyncReplica:\t{replica_text(r)}\n" for r in not_in_sync]
    return "".join(out)


def metadata_text(meta: dict[str, Any]) -> str:
    """GetControllerMetaDataSubCommand's printout."""
    out = (f"\n#ControllerGroup\t{_j(meta.get('group'))}\n#ControllerLeaderId\t{_j(meta.get('controllerLeaderId'))}"
           f"\n#ControllerLeaderAddress\t{_j(meta.get('controllerLeaderAddress'))}")
    out += "".join(f"\n#Peer:\t{peer}" for peer in str(meta.get("peers") or "").split(";") if peer)
    return out + "\n"


def elect_text(cluster: str, broker_name: str, header: dict[str, Any], body: Any) -> str:
    """ReElectMasterSubCommand's printout."""
    out = (f"\n#ClusterName\t{cluster}\n#BrokerName\t{broker_name}\n#BrokerMasterAddr\t"
           f"{_j(header.get('masterAddress'))}\n#MasterEpoch\t{_j(header.get('masterEpoch'))}\n"
           f"#SyncStateSetEpoch\t{_j(header.get('syncStateSetEpoch'))}\n")
    group = body.get("brokerMemberGroup") if isinstance(body, dict) else None
    addrs = (group or {}).get("brokerAddrs") or {}
    ordered = sorted(addrs.items(), key=lambda kv: int(kv[0]))
    return out + "".join(f"\t#Broker\t{bid}\t{addr}\n" for bid, addr in ordered)


def epoch_text(broker_addr: str, cache: dict[str, Any]) -> str:
    """GetBrokerEpochSubCommand's printout of one broker's EpochEntryCache (the last entry ends at
    the broker's max offset)."""
    out = (f"\n#clusterName\t{_j(cache.get('clusterName'))}\n#brokerName\t{_j(cache.get('brokerName'))}\n"
           f"#brokerAddr\t{broker_addr}\n#brokerId\t{_j(cache.get('brokerId'))}")
    entries = list(cache.get("epochList") or [])
    for i, e in enumerate(entries):
        end = cache.get("maxOffset") if i == len(entries) - 1 else e.get("endOffset")
        out += (f"\n#Epoch: EpochEntry{{epoch={_j(e.get('epoch'))}, startOffset={_j(e.get('startOffset'))}, "
                f"endOffset={_j(end)}}}")
    return out + "\n"


# ---------------------------------------------------------------------------- the verbs
CONTROLLER_ADDRESS = option("-a", "--controllerAddress", dest="controller_addr", default=None,
                            help="the controller's TCP address host:port "
                                 "(default: the controller actor of --namespace)")


def _broker_names_of_cluster(args: argparse.Namespace) -> list[str]:
    """CommandUtil.fetchBrokerNameByClusterName, from the NameServers."""
    with admin_of(args) as admin:
        info = admin.examine_broker_cluster_info()
    return sorted(info.cluster_addr_table[check_cluster_known(info, args.cluster)])


@sub_command("getSyncStateSet", "a broker set's master, epochs and SyncStateSet from the controller "
             "(CONTROLLER_GET_SYNC_STATE_DATA)",
             CONTROLLER_ADDRESS,
             one_of(option("-b", "--brokerName", dest="broker_name", type=broker_name_arg, help="this broker set"),
                    option("-c", "--clusterName", dest="cluster", type=cluster_arg,
                           help="every broker set of this cluster (names from the NameServers)")))
def cmd_get_sync_state_set(args: argparse.Namespace) -> int:
    names = [args.broker_name] if args.broker_name else _broker_names_of_cluster(args)
    with controller_of(args) as ctl:
        table = ctl.get_in_sync_state_data(names)
    if args.broker_name and args.broker_name not in table:
        raise CLIError(f"the controller knows no broker set {args.broker_name!r}")
    if args.json:
        emit_json(table)
    else:
        print(sync_state_text(table), end="")
    return 0


@sub_command("getControllerMetaData", "the controller's group, leader and peers (CONTROLLER_GET_METADATA_INFO)",
             CONTROLLER_ADDRESS)
def cmd_get_controller_meta_data(args: argparse.Namespace) -> int:
    with controller_of(args) as ctl:
        meta = ctl.get_controller_meta_data()
    if args.json:
        emit_json(meta)
    else:
        print(metadata_text(meta), end="")
    return 0


@sub_command("electMaster", "make a broker of a set its master (CONTROLLER_ELECT_MASTER, designated)",
             CONTROLLER_ADDRESS,
             option("-bn", "--brokerName", dest="broker_name", default=None,
                    help="the broker set (RocketMQ's form, with -b ID)"),
             option("-b", "--brokerId", dest="b", default=None,
                    help="the id of the broker to make master (RocketMQ's form); with --broker-id, the broker set"),
             option("--broker-id", dest="broker_id", default=None, help="the id of the broker to make master"),
             option("-c", "--clusterName", dest="cluster", type=cluster_arg, default=None,
                    help="the broker set's cluster (printed; optional here)"))
def cmd_elect_master(args: argparse.Namespace) -> int:
    broker_name, raw_id = (args.b, args.broker_id) if args.broker_id is not None else (args.broker_name, args.b)
    if not broker_name:
        raise CLIError("name the broker set: -bn NAME -b ID (RocketMQ's form) or -b NAME --broker-id ID")
    try:
        broker_name = broker_name_arg(broker_name)
        broker_id = int(raw_id)
    except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
        raise CLIError(f"bad broker name or id: {e}") from None
    if broker_id < 0:
        raise CLIError(f"bad broker id {broker_id}: ids are >= 0")
    with controller_of(args) as ctl:
        answer = ctl.elect_master(args.cluster or "", broker_name, broker_id)
    group = answer.body.get("brokerMemberGroup") if isinstance(answer.body, dict) else None
    cluster = args.cluster or (group or {}).get("cluster") or ""
    if args.json:
        emit_json({"clusterName": cluster, "brokerName": broker_name, **answer.header,
                   "syncStateSet": (answer.body or {}).get("syncStateSet"), "brokerMemberGroup": group})
    else:
        print(elect_text(cluster, broker_name, answer.header, answer.body), end="")
    return 0


def _set_addrs(admin: DefaultMQAdminExt, args: argparse.Namespace) -> list[str]:
    """CommandUtil.fetchMasterAndSlaveAddrByBrokerName / ...ByClusterName."""
    info = admin.examine_broker_cluster_info()
    if args.broker_name:
        bd = info.broker_addr_table.get(args.broker_name)
        if bd is None:
            known = ", ".join(sorted(info.broker_addr_table)) or "none"
            raise CLIError(f"no broker set {args.broker_name!r} on the NameServers (broker sets: {known})")
        return [addr for _, addr in sorted(bd.broker_addrs.items())]
    names = sorted(info.cluster_addr_table[check_cluster_known(info, args.cluster)])
    return [addr for n in names if (bd := info.broker_addr_table.get(n)) for _, addr in sorted(bd.broker_addrs.items())]


@sub_command("getBrokerEpoch", "each broker of a set's epoch entries (GET_BROKER_EPOCH_CACHE, from the brokers)",
             one_of(option("-b", "--brokerName", dest="broker_name", type=broker_name_arg,
                           help="the master and slaves of this broker set"),
                    option("-c", "--clusterName", dest="cluster", type=cluster_arg,
                           help="every broker of this cluster")))
def cmd_get_broker_epoch(args: argparse.Namespace) -> int:
    caches: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    with admin_of(args) as admin:
        for addr in _set_addrs(admin, args):
            try:
                caches[addr] = admin.get_broker_epoch_cache(addr)
            except MQAdminError as e:
                problems.append(str(e))
    if args.json:
        emit_json(caches)
    else:
        print("".join(epoch_text(addr, cache) for addr, cache in caches.items()), end="")
    if problems:
        raise CLIError("; ".join(problems))
    return 0
