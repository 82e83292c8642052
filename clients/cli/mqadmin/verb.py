"""How an mqadmin verb is declared (RocketMQ's SubCommand: commandName, commandDesc,
buildCommandlineOptions, execute): `@sub_command(name, description, options...)` on the function
that executes it, in its family's module, so a verb's options sit beside its handler.
`clients.cli.mqadmin.verbs` builds one `namesrv` subcommand per registered verb.

Every verb reaches the cluster one of two ways (`common_options`): `-n "host:port;host:port"` over
RocketMQ's remoting protocol, as mqadmin does, or without -n the actors of a Ray namespace."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors.deployment.spec import DEFAULT_NAMESPACE
from clients.cli.mqadmin.args import namesrv_addr_arg
from clients.cli.support import positive_float

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True, slots=True)
class Option:
    """One `add_argument` call, kept until the verb's parser is built."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]

    def add_to(self, p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup) -> None:
        p.add_argument(*self.flags, **self.kwargs)


@dataclass(frozen=True, slots=True)
class OneOf:
    """Options of which one (exactly one when required) may be given."""

    options: tuple[Option, ...]
    required: bool = True

    def add_to(self, p: argparse.ArgumentParser) -> None:
        group = p.add_mutually_exclusive_group(required=self.required)
        for o in self.options:
            o.add_to(group)


def option(*flags: str, **kwargs: Any) -> Option:
    """An option as `ArgumentParser.add_argument` takes it."""
    return Option(flags, kwargs)


def one_of(*options: Option, required: bool = True) -> OneOf:
    return OneOf(options, required)


@dataclass(frozen=True, slots=True)
class Verb:
    name: str
    description: str
    execute: Handler
    options: tuple[Option | OneOf, ...] = field(default=())
    timeout: float = 3.0
    """seconds to wait for each server, unless --timeout says otherwise"""

    def add_parser(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
        p = sub.add_parser(self.name, help=f"mqadmin: {self.description}",
                           description=f"{self.description} (mqadmin {self.name})")
        common_options(p, self.timeout)
        for o in self.options:
            o.add_to(p)
        p.set_defaults(func=self.execute)
        return p


REGISTERED: dict[str, Verb] = {}
"""Every verb, by name, in the order their modules declared them."""


def sub_command(name: str, description: str, *options: Option | OneOf,
                timeout: float = 3.0) -> Callable[[Handler], Handler]:
    """Registers the decorated function as mqadmin verb `name` with these options."""

    def register(execute: Handler) -> Handler:
        if name in REGISTERED:
            raise ValueError(f"mqadmin verb {name!r} is declared twice")
        REGISTERED[name] = Verb(name, description, execute, options, timeout)
        return execute

    return register


def common_options(p: argparse.ArgumentParser, timeout: float = 3.0) -> None:
    """Where the cluster is (-n over TCP, else a Ray namespace), how long to wait, and --json."""
    p.add_argument("-n", "--namesrvAddr", dest="namesrv_addr", type=namesrv_addr_arg, default=None,
                   help='NameServers over TCP, RocketMQ\'s form: "127.0.0.1:9876;127.0.0.1:9877" '
                        "(default: the actors of --namespace)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="without -n: Ray namespace of the actors")
    p.add_argument("--address", default="auto", help="without -n: Ray cluster address (default: auto)")
    p.add_argument("--timeout", type=positive_float, default=timeout,
                   help=f"seconds to wait for each server (default {timeout:g})")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
