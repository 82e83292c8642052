"""The `namesrv` command. Each subcommand lives in its own module and registers itself here;
modules import Ray, Spark and the like only inside their handlers, so `--help` stays fast."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

SUBCOMMAND_MODULES = (
    "clients.demo",
    "clients.scenario",
    "clients.admin_cli",
    "clients.snapshot_cli",
    "clients.chaos_cli",
    "clients.analysis.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="namesrv",
        description="A RocketMQ-style NameServer on Ray: deploy, inspect, demo, chaos and analysis.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="-v logs INFO, -vv DEBUG")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
