"""The `namesrv` command as a newcomer meets it: every verb, right and wrong, through the installed
entry point in a subprocess.

Verbs that start, find or stop Ray run on an `isolated_host` (private PID and network namespaces),
so `namesrv up` starts its own Ray, "no Ray running" really holds and `down --stop-ray` can stop
nothing but what runs there. One walk does it all, as starting Ray and a deployment is most of each
walk's cost; the demo runs to its end in the README's test (tests/e2e/test_readme.py).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from namesrv.common.waiting import wait_until
from tests.support.ray_cluster import RAY_CORE_LOG_LINE, IsolatedHost

pytestmark = pytest.mark.timeout(600)

NAMESRV = str(Path(sys.executable).parent / "namesrv")


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The command's stderr, which must be exactly one line (Ray's own C++ log lines aside)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip() and not re.match(RAY_CORE_LOG_LINE, ln)]
    assert len(lines) == 1, result.stderr
    return lines[0]


def fails(result: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    line = error_line(result)
    for word in words:
        assert word in line, line
    return line


def succeeds(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_without_ray_every_verb_says_so_in_one_line(isolated_host: IsolatedHost) -> None:
    host = isolated_host
    for verb in (["status"], ["route", "TopicA"], ["topic", "TopicA"], ["down"], ["snapshot", str(host.tmp / "s")]):
        result = host.run([NAMESRV, *verb])
        assert result.returncode != 0, (verb, result.stdout)
        assert "Traceback" not in result.stderr, (verb, result.stderr)
        if verb[0] != "snapshot":  # another team's verb: no traceback is all this test asks of it
            fails(result, 1, "no Ray cluster running", "namesrv up")

    # Asked to stop Ray, `down` runs the venv's own `ray stop` (PATH has no `ray`) and still reports
    # the empty machine.
    result = host.run([NAMESRV, "down", "--stop-ray"])
    fails(result, 1, "no Ray cluster running")
    assert "ray stopped" in result.stdout


def test_cli_walk_up_topic_route_status_slaves_demo_down(isolated_host: IsolatedHost, tmp_path: Path) -> None:
    """One `namesrv up --slaves 1 --proxies 1 --proxy-mode local` walked through every verb (a proxy
    actor, and a local-mode proxy in each broker on its port + 2): broker-a gets a slave that
    replicates (it joins its SYNC_MASTER's SyncStateSet, which only a slave asking for the master's log
    does), shown by `namesrv status`; the controller runs and the brokers are in controller mode
    (controller brokerIds 1 and 2, epoch 1); `namesrv status --json` gives each broker's role,
    masterEpoch and replication lag. A demo stopped from outside beside it says so and leaves it be."""
    host = isolated_host
    data = str(tmp_path / "data")
    out = succeeds(host.run([NAMESRV, "up", "--profile", "fast", "--namesrvs", "1", "--brokers", "broker-a",
                             "--slaves", "1", "--data-dir", data, "--proxies", "1", "--proxy-mode", "local"],
                            timeout=300))
    assert "deployed 1 NameServers and 2 brokers" in out
    assert "proxy-0: RocketMQ 5 gRPC endpoint 127.0.0.1:8081" in out  # docs/proxy.md
    assert "broker-a-0: RocketMQ 5 gRPC endpoint 127.0.0.1:10913" in out  # local mode: port 10911 + 2
    assert "broker-a-1: RocketMQ 5 gRPC endpoint 127.0.0.1:10923" in out
    assert any("gcs_server" in p for p in host.processes()), "`namesrv up` started a Ray of its own"
    console = re.search(r"^console: (http://127\.0\.0\.1:\d+/)$", out, re.M)
    assert console, out  # `namesrv up` starts the web console by default and prints its URL
    fails(host.run([NAMESRV, "up", "--data-dir", data]), 1, "already deployed", "namesrv down")

    fails(host.run([NAMESRV, "route", "TopicA"]), 1, "no route on any NameServer", "namesrv topic TopicA")
    fails(host.run([NAMESRV, "topic", "TopicA", "--queues", "0"]), 2, "--queues", "0 queues")
    fails(host.run([NAMESRV, "topic", "TopicA", "--cluster", "NoSuchCluster"]), 1, "no master broker")
    # on the set's master: broker-a-0 as deployed, or broker-a-1 if a loaded machine stalled the
    # master's controller heartbeats past the fast profile's timeout and the controller failed over
    assert re.search(r"created TopicA on broker-a-[01] \(127\.0\.0\.1:\d+\) with 2 queues each", succeeds(
        host.run([NAMESRV, "topic", "TopicA", "--queues", "2"])))
    route = succeeds(host.run([NAMESRV, "route", "TopicA"]))
    assert re.search(r"TopicA\s+broker-a\s+0\s+127\.0\.0\.1:\d+\s+2\s+2\s+RW-", route), route

    def in_sync() -> str | None:
        text = succeeds(host.run([NAMESRV, "status"]))
        return text if "in sync [1, 2]" in text else None

    status = wait_until(in_sync, 60, "the slave in the SyncStateSet")
    assert re.search(r"^namesrv-0\s+ready\s", status, re.M), status
    assert re.search(r"^namesrv-0\s+DefaultCluster\s+broker-a\s+0\s+127\.0\.0\.1:\d+\s.*\syes$", status, re.M), status
    assert re.search(r"^127\.0\.0\.1:\d+\s.*\sSYNC_MASTER\s+1\s+in sync \[1, 2\], lag [12]: 0 B$", status, re.M), status
    assert re.search(r"^127\.0\.0\.1:\d+\s.*\sSLAVE\s+1\s+lag 0 B$", status, re.M), status
    assert re.search(r"^proxy-0\s+127\.0\.0\.1:8081\s+pid \d+", status, re.M), status
    assert re.search(r"^broker-a-1-proxy\s+127\.0\.0\.1:10923\s+pid \d+", status, re.M), status
    assert f"console: {console.group(1)}" in status, status
    brokers = json.loads(succeeds(host.run([NAMESRV, "status", "--json"])))["brokers"]
    replicas = sorted((b["replica"]["role"], b["replica"]["masterEpoch"], b["replica"]["replication_lag_bytes"])
                      for b in brokers.values())
    assert replicas == [("SLAVE", 1, 0), ("SYNC_MASTER", 1, 0)], replicas
    assert succeeds(host.run([NAMESRV, "console"])).strip() == f"console (running): {console.group(1)}"
    for verb in ("status", "route", "topic", "down"):
        argv = [NAMESRV, verb, "--namespace", "nothing-here"] + (["TopicA"] if verb in ("route", "topic") else [])
        fails(host.run(argv), 1, "no NameServer in Ray namespace 'nothing-here'")

    # The demo runs on a private Ray of its own even with `namesrv up`'s Ray running. SIGTERM mid-run:
    # one line saying so, exit 128 + 15, its Ray shut down and its data removed; `up`'s deployment stays.
    demo, inside = host.start([NAMESRV, "demo", "--duration", "60", "--rate", "20"])
    try:
        wait_until(lambda: list(host.tmp.glob("namesrv-demo-*/*")), 120, "the demo's brokers writing their data")
        time.sleep(1)  # mid-run, not mid-start
        inside.send_signal(signal.SIGTERM)
        stdout, stderr = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 128 + signal.SIGTERM, (stdout, stderr)
    assert "namesrv demo: terminated (SIGTERM)" in stderr
    assert "Traceback" not in stderr, stderr
    assert "demo stopped early: its Ray is shut down and its data removed" in stdout
    assert not list(host.tmp.glob("namesrv-demo-*"))
    assert "TopicA" in succeeds(host.run([NAMESRV, "route", "TopicA"]))

    # Ray's own `ray` is found next to the venv's Python (PATH has none), and every Ray process goes.
    down = succeeds(host.run([NAMESRV, "down", "--stop-ray"], timeout=300))
    assert "stopped 2 brokers and 1 NameServers" in down and "ray stopped" in down
    assert host.processes() == []
    fails(host.run([NAMESRV, "status"]), 1, "no Ray cluster running")
