"""`namesrv console`: the web console of an existing deployment (actors.console): the running one's
URL, or a new one started against the deployment (detached when the deployment is); `--open`
also opens it in this machine's browser."""

from __future__ import annotations

import argparse

from actors.deployment.spec import DEFAULT_NAMESPACE
from clients.cli.support import connect_deployment, int_in


def cmd_console(args: argparse.Namespace) -> int:
    dep = connect_deployment(args)
    if dep.console is not None and dep.console_url:
        url, how = dep.console_url, "running"
    else:
        url, how = dep.start_console(args.port), "started"
    print(f"console ({how}): {url}")
    if args.open:
        import webbrowser

        webbrowser.open(url)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "console", help="the web console of a deployment: its URL (starting one if none runs)",
        description="Print the URL of the deployment's web console, starting one (on 127.0.0.1) when none runs. "
                    "With ACL on it asks for an account and acts with it.")
    p.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="Ray namespace of the deployment")
    p.add_argument("--port", type=int_in(0, 65535), default=0, help="port for a new console (default 0: a free one)")
    p.add_argument("--open", action="store_true", help="also open it in this machine's web browser")
    p.set_defaults(func=cmd_console)
