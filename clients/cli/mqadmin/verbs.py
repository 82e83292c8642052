"""RocketMQ's mqadmin verbs as `namesrv` subcommands, under mqadmin's names and option letters. Each
verb is declared beside its handler (`@sub_command`, clients.cli.mqadmin.verb) in its family's
module: `cluster`, `topic`, `stats`, `stats_all`, `consumer`, `group`, `message`, `namesrv`, `controller`,
all on the one admin client (`clients.admin.client.DefaultMQAdminExt`). The older `namesrv route` /
`namesrv topic` (clients.cli.deploy) are aliases on that same client.

Each reaches the cluster one of two ways: `-n "127.0.0.1:9876;127.0.0.1:9877"` speaks RocketMQ's
remoting protocol to those NameServers (and, for updateTopic/deleteTopic, to the brokers' TCP
addresses from the cluster info), as mqadmin does; without -n, the actors of a Ray namespace
(`--namespace NS [--address auto]`). Output is mqadmin's shape as tables; `--json` for scripts.

Every argument is checked before anything connects; an unknown topic, cluster or broker is found
before anything changes. A problem is one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib

from clients.cli.mqadmin.verb import REGISTERED

FAMILIES = ("cluster", "stats", "consumer", "group", "stats_all", "message", "topic", "namesrv", "controller")
"""The modules that declare verbs, in the order `namesrv --help` lists them."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for family in FAMILIES:
        importlib.import_module(f"clients.cli.mqadmin.{family}")
    for verb in REGISTERED.values():
        verb.add_parser(sub)
