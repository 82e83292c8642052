"""`namesrv demo`: the whole system on a local Ray in well under two minutes.

2 NameServers and 3 brokers (fast profile) come up on a private local Ray (even when `namesrv up`
started one on this machine); a topic is created on every broker; two Producer actors send while
broker-b is killed; both NameServers drop it through the channel watch and the producers ride
through on the other brokers; broker-b restarts from its store; a consumer reads everything back and
every acknowledged message is checked. With --real-client an unmodified RocketMQ client (PyPI
`rocketmq`, clients/interop/real_client.py in a process of its own) sends over TCP beside them, and its
acknowledged messages are checked too. Leaves nothing running and no data behind, also when it fails
or is interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections import defaultdict
from typing import Any

from clients.cli.render import route_table, table
from clients.cli.support import CLIError, install_sigterm_handler, positive_float, ray_logging_level
from clients.interop.real_client import command, parse_lines

log = logging.getLogger(__name__)

TOPIC = "TopicTest"


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait_route_change(namesrvs: dict[str, Any], topic: str, predicate: Any, timeout_s: float) -> dict[str, float]:
    """Block on every NameServer's long-poll until `predicate(route)` holds there; returns the seconds
    each took. Raises TimeoutError naming the NameServers that never got there."""
    import ray

    start = time.monotonic()
    done: dict[str, float] = {}
    for name, ns in namesrvs.items():
        version = -1
        while True:
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(f"route of {topic} did not converge on {name} within {timeout_s} s")
            changes = ray.get(ns.listen_for_change.remote({topic: version}, left))
            if topic in changes:
                version = changes[topic].version
                if predicate(changes[topic].route):
                    done[name] = time.monotonic() - start
                    break
    return done


def run_demo(rate: float, duration_s: float, seed: int, keep_data: bool, real_client: bool = False) -> int:
    """Run the demo on a private local Ray (never a cluster `namesrv up` started) and always clean up:
    the Ray goes with it, and its data directory unless `keep_data`, also after a failure or a
    SIGINT/SIGTERM (which `clients.cli.main` then reports in one line)."""
    import ray

    if real_client and importlib.util.find_spec("rocketmq") is None:
        raise CLIError("--real-client needs the RocketMQ client library: pip install rocketmq==0.4.4 "
                       "(it comes with the dev extras: pip install -e '.[dev]')")
    namespace = f"demo-{os.getpid()}"
    data_dir = tempfile.mkdtemp(prefix="namesrv-demo-")
    state: dict[str, Any] = {"dep": None, "producers": [], "real_client": None}
    finished = False
    try:
        _say(f"starting a private local Ray (namespace {namespace}, data in {data_dir})")
        ray.init(address="local", namespace=namespace, num_cpus=2, include_dashboard=False,
                 log_to_driver=False, logging_level=ray_logging_level())
        install_sigterm_handler()  # ray.init replaced it with a bare exit
        code = _run(namespace, data_dir, rate, duration_s, seed, state, real_client)
        finished = True
        return code
    finally:
        proc = state["real_client"]
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if ray.is_initialized():
            for p in state["producers"]:
                ray.kill(p)
            if state["dep"] is not None and finished:
                state["dep"].teardown(graceful=True)
            ray.shutdown()  # a private Ray: every actor still running goes with it
        if keep_data:
            _say(f"kept the brokers' data in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
        if not finished:
            _say("demo stopped early: its Ray is shut down" + ("" if keep_data else " and its data removed"))


def _run(namespace: str, data_dir: str, rate: float, duration_s: float, seed: int, state: dict[str, Any],
         real_client: bool) -> int:
    import ray

    from actors.deployment.launcher import deploy
    from actors.deployment.spec import BrokerSpec, ClusterSpec
    from clients.admin.client import AdminClient
    from clients.consumer.pull_consumer import PullConsumer
    from clients.producer.actor import ProducerActor

    t_start = time.monotonic()
    spec = ClusterSpec(
        namesrv_count=2,
        brokers=[BrokerSpec("broker-a"), BrokerSpec("broker-b"), BrokerSpec("broker-c")],
        profile="fast", namespace=namespace, data_dir=data_dir,
        namesrv_port=0, broker_port=0,  # free ports: a `namesrv up` on this machine holds 9876/10911
    )
    dep = state["dep"] = deploy(spec)
    admin = AdminClient(dep)
    _say("deployed namesrv-0, namesrv-1 and brokers broker-a/b/c (fast profile: 0.5 s heartbeat, 2 s expiry); "
         f"namesrvAddr {dep.namesrv_addr()}")
    admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    _say(f"created {TOPIC} with 4 queues on every broker")
    for name, route in admin.routes_everywhere(TOPIC).items():
        print(f"-- route on {name} before the fault\n{route_table(TOPIC, route)}")

    actor_cls = ray.remote(ProducerActor).options(num_cpus=0, max_concurrency=4, namespace=namespace)
    producers = state["producers"] = [
        actor_cls.remote(f"demo_producer_{i}", namespace, list(dep.namesrvs), poll_name_server_interval_ms=1000)
        for i in range(2)
    ]
    first_real: list[dict[str, Any]] = []
    if real_client:  # started first and waited for: its first send is acknowledged before the fault
        state["real_client"] = proc = subprocess.Popen(
            command("produce", dep.namesrv_addr(), TOPIC, str(max(2, round(rate * duration_s))), "--rate", str(rate),
                    "--group", "PID_demo_real_client", "--prefix", f"real-{namespace}"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first_real = first_record(proc, timeout_s=60)
        _say(f"a real RocketMQ client (rocketmq-client-cpp, own process) sending {rate:.0f} msg/s over TCP "
             f"to namesrvAddr {dep.namesrv_addr()}")
    loops = [p.run_send_loop.remote([TOPIC], rate, duration_s, 128, seed + i) for i, p in enumerate(producers)]
    _say(f"2 producers sending {rate:.0f} msg/s each for {duration_s:.0f} s")
    time.sleep(duration_s / 3)  # let traffic flow before the fault: this is the demo's timeline

    t_kill = time.monotonic()
    dep.kill_broker("broker-b-0")
    _say("ray.kill(broker-b-0): no unregister, no goodbye")
    gone = wait_route_change(
        dep.namesrvs, TOPIC, lambda r: r is not None and all(b.broker_name != "broker-b" for b in r.broker_datas),
        timeout_s=10,
    )
    for name, route in admin.routes_everywhere(TOPIC).items():
        print(f"-- route on {name} after the kill\n{route_table(TOPIC, route)}")
    detect = {n: f"{s * 1000:.0f} ms" for n, s in gone.items()}
    _say(f"broker-b dropped by every NameServer (channel watch): {detect}")

    summaries = ray.get(loops)
    real_sends = first_real + finish_real_client(state["real_client"], duration_s + 60) if real_client else []
    _say("producers done; restarting broker-b from its store")
    dep.restart_broker("broker-b-0")
    back = wait_route_change(
        dep.namesrvs, TOPIC, lambda r: r is not None and any(b.broker_name == "broker-b" for b in r.broker_datas),
        timeout_s=10,
    )
    _say(f"broker-b back in every route: { {n: f'{s * 1000:.0f} ms' for n, s in back.items()} }")

    records = [r for p in producers for r in ray.get(p.get_records.remote())]
    acked = {(r["broker_name"], r["queue_id"], r["queue_offset"]): r["msg_id"] for r in records if r["ok"]}
    consumed = PullConsumer(namespace, list(dep.namesrvs)).consume_all(TOPIC)
    stored = {(m.broker_name, m.queue_id, m.queue_offset): m.msg_id for m in consumed}
    lost: list[Any] = [k for k, mid in acked.items() if stored.get(k) != mid]
    real_acked = [s for s in real_sends if "error" not in s]
    lost += real_client_lost(real_acked, consumed)
    copies: dict[str, list[Any]] = defaultdict(list)
    for m in consumed:
        copies[m.msg_id].append(m)
    duplicated = {mid: ms for mid, ms in copies.items() if len(ms) > 1}

    print()
    print(table(
        ("producer", "attempted", "acknowledged", "failed", "retried", "p50 ms", "p99 ms"),
        [(s["group"], s["attempted"], s["acknowledged"], s["failed"], s["retried"],
          f"{s['p50_ms']:.1f}", f"{s['p99_ms']:.1f}") for s in summaries],
    ))
    if real_client:
        after_kill = sum(1 for s in real_sends if s["t"] >= t_kill)  # CLOCK_MONOTONIC: one clock for both
        print(f"\nreal RocketMQ client (TCP): sent {len(real_acked)}, failed {len(real_sends) - len(real_acked)}"
              f" of {len(real_sends)} attempted ({after_kill} after the kill)")
    retried = [r for r in records if r["ok"] and r["attempts"] > 1]
    if retried:
        r = retried[0]
        print(f"\nexample retry: tried {r['brokers_tried']} -> acknowledged on {r['broker_name']}")
    print()
    print(table(("check", "result"), [
        ("acknowledged messages", len(acked) + len(real_acked)),
        ("consumed after restart", len(consumed)),
        ("acknowledged but lost", len(lost)),
        ("duplicates consumed (see below)" if duplicated else "duplicates consumed",
         sum(len(ms) - 1 for ms in duplicated.values())),
        ("kill -> dropped by all NameServers", f"{max(gone.values()) * 1000:.0f} ms"),
        ("restart -> back in all routes", f"{max(back.values()) * 1000:.0f} ms"),
        ("kill -> demo end", f"{time.monotonic() - t_kill:.1f} s"),
        ("total demo time", f"{time.monotonic() - t_start:.1f} s"),
    ]))
    if duplicated:
        print(explain_duplicates(duplicated, records))
    if lost:
        _say(f"FAILED: {len(lost)} acknowledged messages missing, e.g. {lost[:3]}")
        return 1
    _say("OK: nothing acknowledged was lost")
    return 0


def first_record(proc: subprocess.Popen[str], timeout_s: float) -> list[dict[str, Any]]:
    """Block until the real client printed its first record (its first send's outcome); that record.
    Raises RuntimeError when the process ends or stays silent for `timeout_s`."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("{"):
        proc.kill()
        _, stderr = proc.communicate()
        raise RuntimeError(f"the real client's producer did not start (exit {proc.returncode}): {stderr[-500:]}")
    return [json.loads(line)]


def finish_real_client(proc: subprocess.Popen[str], timeout_s: float) -> list[dict[str, Any]]:
    """Wait for the real client's producer process; what it sent, one record per message. Raises
    RuntimeError with its output's tail when it did not get to its final line."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    sends, done = parse_lines(stdout)
    if done is None:
        raise RuntimeError(f"the real client's producer stopped early (exit {proc.returncode}): "
                           f"{(stderr or stdout)[-500:]}")
    return sends


def real_client_lost(acked: list[dict[str, Any]], consumed: list[Any]) -> list[str]:
    """The real client's acknowledged messages not read back: each must be stored with its body under
    the id the broker gave it (the client's unique id, or the broker's offset id)."""
    ids_by_body: dict[bytes, set[str]] = defaultdict(set)
    for m in consumed:
        ids_by_body[m.body].update({m.msg_id, m.properties.get("UNIQ_KEY", "")})
    return [f"real-client {s['msg_id']} ({s['body']})" for s in acked
            if s["msg_id"] not in ids_by_body.get(s["body"].encode(), set())]


def explain_duplicates(duplicated: dict[str, list[Any]], records: list[dict[str, Any]], show: int = 3) -> str:
    """What a duplicate is, and where each of the first `show` was stored and how it was sent."""
    by_id = {r["msg_id"]: r for r in records if r["ok"]}
    lines = [
        "",
        "A duplicate is one message stored twice: its send timed out (or its answer was lost), the",
        "producer retried it on another broker, and the first attempt had been stored after all.",
        "Delivery is at-least-once, as RocketMQ promises; consumers de-duplicate by message id.",
    ]
    for msg_id, copies in list(duplicated.items())[:show]:
        where = ", ".join(f"{m.broker_name} queue {m.queue_id} offset {m.queue_offset}" for m in copies)
        lines.append(f"  message {msg_id}: stored at {where}")
        rec = by_id.get(msg_id)
        if rec is not None:
            lines.append(f"    its send tried {rec['brokers_tried']} and was acknowledged on {rec['broker_name']}"
                         f" after {rec['attempts']} attempts, {rec['latency_ms']:.0f} ms")
    if len(duplicated) > show:
        lines.append(f"  ... and {len(duplicated) - show} more")
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo", help="a private local Ray: 2 NameServers, 3 brokers, producers, a broker kill, a full check",
        description="Runs on a private local Ray of its own (also when `namesrv up` started one) and leaves "
                    "nothing running and no data behind, also when it fails or is interrupted.",
    )
    p.add_argument("--rate", type=positive_float, default=100.0, help="messages per second per producer (default 100)")
    p.add_argument("--duration", type=positive_float, default=9.0, help="seconds of sending (default 9)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep-data", action="store_true", help="keep the brokers' store directory")
    p.add_argument("--real-client", action="store_true",
                   help="also send from an unmodified RocketMQ client (PyPI rocketmq, over TCP) during the kill, "
                        "and check its acknowledged messages too")
    p.set_defaults(func=lambda a: run_demo(a.rate, a.duration, a.seed, a.keep_data, a.real_client))
