"""The `namesrv` command. Each subcommand lives in its own module and registers itself here;
modules import Ray, Spark and the like only inside their handlers, so `--help` stays fast.

Whatever goes wrong is said in one line on stderr with a non-zero exit: a bad argument (exit 2), a
problem the user can fix (`CLIError`, no Ray, an empty namespace, a refused request), an interrupt
(130 / 143). A reader that closed the pipe (`| head`) ends the command quietly (141). An unexpected
error is one line too; `-v` adds its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from typing import NoReturn

from clients.cli.support import CLIError, Terminated, install_sigterm_handler

SUBCOMMAND_MODULES = (
    "clients.cli.demo",
    "clients.cli.scenario",
    "clients.cli.deploy",
    "clients.cli.mqadmin.verbs",
    "clients.cli.top",
    "clients.cli.console",
    "clients.snapshots.collect",
    "clients.chaos.cli",
    "clients.analysis.cli",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that points at --help (not the usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
    install_sigterm_handler()
    prog = f"namesrv {args.command}"
    try:
        return int(args.func(args) or 0)
    except CLIError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # `namesrv topicList | head`: the reader left, nothing more to say
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush is quiet too
        return 128 + signal.SIGPIPE
    except (KeyboardInterrupt, Terminated) as e:
        return _interrupted(prog, e)
    except Exception as e:  # a bug or an environment problem: one line, the traceback with -v
        interrupt = _interrupt_behind(e)
        if interrupt is not None:  # the signal's exception surfaced inside C code (Ray's get) as its cause
            return _interrupted(prog, interrupt)
        hint = "" if args.verbose else " (run with -v for the traceback)"
        what = " ".join(f"{type(e).__name__}: {e}".split())[:500]
        print(f"{prog}: error: {what}{hint}", file=sys.stderr)
        if args.verbose:
            import traceback

            traceback.print_exc()
        return 1


def _interrupted(prog: str, interrupt: BaseException) -> int:
    """One line for the signal behind `interrupt` (Terminated or KeyboardInterrupt); 128 + it."""
    if isinstance(interrupt, Terminated):
        print(f"{prog}: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    print(f"{prog}: interrupted (SIGINT)", file=sys.stderr)
    return 128 + signal.SIGINT


def _interrupt_behind(e: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or Terminated among the causes of `e`: a signal handler that raises
    while an extension's C function runs makes CPython report a SystemError caused by it."""
    seen: set[int] = set()
    cause = e.__cause__ or e.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, Terminated)):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
