"""What every `namesrv` subcommand shares: the one-line user error, argument types that refuse bad
values before anything connects, finding the venv's own `ray`, and connecting to Ray.

A subcommand raises :class:`CLIError` for anything the user can fix (a bad name, no Ray running, an
empty namespace); `clients.cli.main.main` prints it as one line on stderr and exits non-zero.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from namesrv.acl.plain_acl import SessionCredentials
from namesrv.protocol.constants import MAX_QUEUE_NUMS
from namesrv.protocol.types import InvalidInput, check_name, check_topic


class CLIError(Exception):
    """A problem the user can fix, said in one line; `exit_code` is what the command returns."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(Exception):
    """SIGTERM arrived: unwind (running every `finally`) as an interrupt does."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated


def install_sigterm_handler() -> None:
    """Make SIGTERM raise `Terminated`. `ray.init` installs its own handler (a bare exit), so a
    command calls this again after connecting."""
    signal.signal(signal.SIGTERM, _on_sigterm)


# ---------------------------------------------------------------------------- argument types
def topic_arg(value: str) -> str:
    """argparse type: a RocketMQ topic name (^[%|a-zA-Z0-9_-]+$, at most 127 characters)."""
    try:
        return check_topic(value)
    except InvalidInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _name(value: str, what: str) -> str:
    try:
        return check_name(value, what)
    except InvalidInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cluster_arg(value: str) -> str:
    """argparse type: a cluster name."""
    return _name(value, "cluster name")


def broker_names_arg(value: str) -> list[str]:
    """argparse type: comma-separated broker names, at least one, no duplicates."""
    names = [_name(n.strip(), "broker name") for n in value.split(",")]
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{value!r} names a broker twice")
    return names


def int_in(low: int, high: int | None = None, why: str = "") -> type[int]:
    """argparse type: an integer within [low, high] (high None: no upper bound)."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
        if n < low or (high is not None and n > high):
            allowed = f"at least {low}" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"{n} is out of range: allowed {allowed}{why}")
        return n

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse  # type: ignore[return-value]


def positive_float(value: str) -> float:
    """argparse type: a number above zero."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number above 0")
    return x


queue_count_arg = int_in(1, MAX_QUEUE_NUMS, " (a topic with 0 queues takes no messages)")


# ---------------------------------------------------------------------------- Ray
def ray_executable() -> str:
    """The `ray` of the Python running this command (the venv's own, so its version matches), else
    the one on PATH."""
    own = Path(sys.executable).parent / "ray"
    if own.exists():
        return str(own)
    found = shutil.which("ray")
    if found is None:
        raise CLIError(f"cannot find the `ray` command next to {sys.executable} or on PATH")
    return found


def ray_logging_level() -> int:
    """Ray's own log level for a command: errors only, unless -v asked for more."""
    root = logging.getLogger().getEffectiveLevel()
    return logging.ERROR if root >= logging.WARNING else root


def connect_ray(address: str | None, namespace: str) -> None:
    """Connect this driver to the Ray cluster at `address` ("auto": the one on this machine)."""
    from actors.deployment.launcher import ensure_ray

    try:
        ensure_ray(address=address, namespace=namespace, logging_level=ray_logging_level())
    except ConnectionError:
        where = "on this machine" if address in (None, "auto") else f"at {address}"
        raise CLIError(f"no Ray cluster running {where}: start one with `namesrv up`, or pass --address") from None
    install_sigterm_handler()


ACCESS_KEY_ENV = "NAMESRV_ACCESS_KEY"
SECRET_KEY_ENV = "NAMESRV_SECRET_KEY"


def connect_deployment(args: argparse.Namespace) -> Any:
    """The deployment in `--namespace` of the Ray cluster at `--address`; a CLIError when it has no NameServer."""
    from actors.deployment.launcher import connect

    connect_ray(args.address, args.namespace)
    dep = connect(args.namespace)
    if not dep.namesrvs:
        raise CLIError(f"no NameServer in Ray namespace {args.namespace!r}: deploy one with `namesrv up`, "
                       "or pass the --namespace it was deployed in")
    return dep


def env_credentials() -> SessionCredentials | None:
    """The account admin commands sign with when ACL is on: NAMESRV_ACCESS_KEY / NAMESRV_SECRET_KEY
    (both or neither), as RocketMQ's tools take theirs from tools.yml."""
    import os

    access, secret = os.environ.get(ACCESS_KEY_ENV), os.environ.get(SECRET_KEY_ENV)
    if not access and not secret:
        return None
    if not (access and secret):
        raise CLIError(f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither")
    try:
        return SessionCredentials(access_key=access, secret_key=secret)
    except ValueError as e:
        raise CLIError(f"invalid credentials in {ACCESS_KEY_ENV}/{SECRET_KEY_ENV}: {e}") from None


def acl_overrides(path: str) -> tuple[dict[str, object], dict[str, object]]:
    """(NameServer, broker) config overrides that turn RocketMQ's plain ACL on with `path`; the
    brokers sign their registrations with the file's first `broker: true` account (and the gRPC
    proxies, which take the brokers' overrides, their own route reads and heartbeats)."""
    from namesrv.acl.plain_acl import AclError, AclManager

    resolved = Path(path).expanduser().resolve()
    try:
        validator = AclManager(resolved).validator
    except AclError as e:
        raise CLIError(str(e)) from None
    account = next((a for a in validator.accounts.values() if a.broker), None)
    if account is None:
        raise CLIError(f"{resolved}: no account with `broker: true` for the brokers to register with")
    acl = {"acl_enable": True, "acl_file": str(resolved)}
    creds = SessionCredentials(access_key=account.access_key, secret_key=account.secret_key)
    return dict(acl), {**acl, "credentials": creds}

