"""mqadmin's NameServer verbs: updateKvConfig, deleteKvConfig, getNamesrvConfig,
updateNamesrvConfig, wipeWritePerm, addWritePerm. Each change goes to every NameServer and prints
each one's outcome."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from clients.cli.mqadmin.args import broker_name_arg
from clients.cli.mqadmin.common import admin_of, emit_json, require_all
from clients.cli.mqadmin.verb import option, sub_command
from clients.cli.support import CLIError
from namesrv.protocol.headers import KVConfigHeader
from namesrv.protocol.types import describe_errors


def _kv_header(namespace: str, key: str, value: str | None = None) -> KVConfigHeader:
    try:
        return KVConfigHeader(namespace=namespace, key=key, value=value)
    except ValidationError as e:
        raise CLIError(f"invalid KV config: {describe_errors(e)}") from None


@sub_command("updateKvConfig", "create or update a KV config on every NameServer",
             option("-s", "--kvNamespace", dest="kv_namespace", required=True, help="the KV namespace (mqadmin's -s)"),
             option("-k", "--key", required=True),
             option("-v", "--value", required=True))
def cmd_update_kv_config(args: argparse.Namespace) -> int:
    h = _kv_header(args.kv_namespace, args.key, args.value)
    with admin_of(args) as admin:
        replies = admin.create_and_update_kv_config(h.namespace, h.key, args.value)
    require_all(replies, "updating the KV config")
    if args.json:
        emit_json({"namespace": h.namespace, "key": h.key, "value": args.value, "namesrvs": sorted(replies)})
    else:
        print("create or update kv config to namespace success.")
    return 0


@sub_command("deleteKvConfig", "delete a KV config from every NameServer",
             option("-s", "--kvNamespace", dest="kv_namespace", required=True, help="the KV namespace (mqadmin's -s)"),
             option("-k", "--key", required=True))
def cmd_delete_kv_config(args: argparse.Namespace) -> int:
    h = _kv_header(args.kv_namespace, args.key)
    with admin_of(args) as admin:
        held = admin.kv_config_everywhere(h.namespace, h.key)
        if not any(r.ok for r in held.values()):
            raise CLIError(f"no KV config {h.namespace}/{h.key} on any NameServer of {admin.transport.where}")
        replies = admin.delete_kv_config(h.namespace, h.key)
    require_all(replies, "deleting the KV config")
    if args.json:
        emit_json({"namespace": h.namespace, "key": h.key, "namesrvs": sorted(replies)})
    else:
        print("delete kv config from namespace success.")
    return 0


@sub_command("getNamesrvConfig", "every NameServer's config")
def cmd_get_namesrv_config(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        configs = admin.get_namesrv_config()
    good = {ns: c for ns, c in configs.items() if isinstance(c, dict)}
    if args.json:
        emit_json(good)
    else:
        for ns, config in good.items():
            print(f"============{ns}============")
            for key, value in sorted(config.items()):
                print(f"{key:<50}=  {value}")
    bad = {ns: c for ns, c in configs.items() if not isinstance(c, dict)}
    if bad:
        raise CLIError("no config from " + "; ".join(f"{ns}: {why}" for ns, why in bad.items()))
    return 0


@sub_command("updateNamesrvConfig", "change one config key on every NameServer",
             option("-k", "--key", required=True),
             option("-v", "--value", required=True))
def cmd_update_namesrv_config(args: argparse.Namespace) -> int:
    with admin_of(args) as admin:
        configs = admin.get_namesrv_config()
        known = next((c for c in configs.values() if isinstance(c, dict)), None)
        if known is None:
            raise CLIError("no NameServer gave its config: " + "; ".join(f"{ns}: {c}" for ns, c in configs.items()))
        if args.key not in known:
            raise CLIError(f"unknown NameServer config key {args.key!r} (see `namesrv getNamesrvConfig`)")
        replies = admin.update_namesrv_config({args.key: args.value})
    require_all(replies, f"updating {args.key}")
    if args.json:
        emit_json({"key": args.key, "value": args.value, "namesrvs": sorted(replies)})
    else:
        print(f"update name server config success![{', '.join(sorted(replies))}]\n{args.key} : {args.value}")
    return 0


def write_perm(args: argparse.Namespace, wipe: bool) -> int:
    verb, field = ("wipe", "wipeTopicCount") if wipe else ("add", "addTopicCount")
    with admin_of(args) as admin:
        info = admin.examine_broker_cluster_info()
        if args.broker_name not in info.broker_addr_table:
            known = ", ".join(sorted(info.broker_addr_table)) or "none"
            raise CLIError(f"no broker named {args.broker_name!r} (brokers: {known})")
        replies = admin.write_perm_outcomes(args.broker_name, wipe)
    counts = {ns: int(r.ext_fields.get(field, 0)) for ns, r in replies.items() if r.ok}
    if args.json:
        emit_json({"brokerName": args.broker_name, field: counts})
    else:
        for ns, r in replies.items():
            outcome = f"OK, {counts[ns]}" if r.ok else "Failed"
            print(f"{verb} write perm of broker[{args.broker_name}] in name server[{ns}] {outcome}")
    require_all(replies, f"{verb} write perm of broker {args.broker_name}")
    return 0


_BROKER_NAME = option("-b", "--brokerName", dest="broker_name", required=True, type=broker_name_arg)


@sub_command("wipeWritePerm", "take write permission from a broker on every NameServer", _BROKER_NAME)
def cmd_wipe_write_perm(args: argparse.Namespace) -> int:
    return write_perm(args, wipe=True)


@sub_command("addWritePerm", "give write permission back to a broker on every NameServer", _BROKER_NAME)
def cmd_add_write_perm(args: argparse.Namespace) -> int:
    return write_perm(args, wipe=False)
