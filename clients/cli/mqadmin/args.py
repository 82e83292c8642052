"""The argument types of the mqadmin verbs: each refuses a bad value with one line before anything
connects (argparse's ArgumentTypeError)."""

from __future__ import annotations

import argparse

from clients.cli.support import topic_arg
from namesrv.protocol.constants import SYSTEM_TOPICS
from namesrv.protocol.types import InvalidInput, check_name

PERMS = {"2": 2, "4": 4, "6": 6}


def namesrv_addr_arg(value: str) -> str:
    """argparse type: RocketMQ's namesrvAddr, `host:port;host:port`."""
    from namesrv.remoting.client import parse_namesrv_addr

    try:
        parse_namesrv_addr(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def perm_arg(value: str) -> int:
    """argparse type: a topic's permission as mqadmin takes it, 2 (W), 4 (R) or 6 (RW)."""
    if value.strip() not in PERMS:
        raise argparse.ArgumentTypeError(f"{value!r} is not a topic permission: 2 (W), 4 (R) or 6 (RW)")
    return PERMS[value.strip()]


def bool_arg(value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{value!r} is not true or false")
    return value.strip().lower() == "true"


def group_arg(value: str) -> str:
    try:
        return check_name(value, "consumer group")
    except InvalidInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def broker_name_arg(value: str) -> str:
    try:
        return check_name(value, "broker name")
    except InvalidInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def new_topic_arg(value: str) -> str:
    """A topic name one may create or delete: valid, and not one of RocketMQ's system topics."""
    topic = topic_arg(value)
    if topic in SYSTEM_TOPICS:
        raise argparse.ArgumentTypeError(f"{topic!r} is a system topic (the brokers refuse to change it)")
    return topic


def subscription_group_arg(value: str) -> str:
    """argparse type: a consumer group as a broker accepts it (RocketMQ's validateGroup rule)."""
    from namesrv.broker.subscription.config import group_problem

    problem = group_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def timestamp_arg(value: str) -> int:
    """argparse type: resetOffsetByTime's -s: 'now', milliseconds since the epoch, or
    yyyy-MM-dd#HH:mm:ss:SSS (local time); the milliseconds."""
    import datetime
    import time

    text = value.strip()
    if text == "now":
        return int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        ms = int(text)
        if ms < 0:
            raise argparse.ArgumentTypeError(f"{value!r} is before 1970")
        return ms
    head, _, millis = text.rpartition(":")
    try:
        if len(millis) != 3 or not millis.isdigit():
            raise ValueError
        moment = datetime.datetime.strptime(head, "%Y-%m-%d#%H:%M:%S")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS") from None
    return int(moment.timestamp()) * 1000 + int(millis)
