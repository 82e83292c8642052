"""mqadmin's controller verbs as a user runs them, against one deployment (a NameServer and a TCP
broker on free ports) and a controller actor in its namespace serving TCP too:

- over TCP: the installed `namesrv` entry point in a subprocess, `-a` the controller's address,
  `-n` the NameServer (for -c and for the brokers of getBrokerEpoch);
- over the Ray namespace: `clients.cli.main.main` in this driver.

The controller's broker set is made through the actor's own methods (ids 1 and 2, heartbeating from
this test); what electMaster changed is checked through the actor, not through the verb.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.controller.start import start_controller
from actors.deployment.launcher import Deployment
from actors.deployment.spec import BrokerSpec
from clients.cli.main import main as namesrv_main
from namesrv.controller.config import ControllerConfig
from namesrv.remoting.config import RemotingServerConfig
from tests.support.ray_cluster import registered_deployment

pytestmark = pytest.mark.timeout(600)

NAMESRV = str(Path(sys.executable).parent / "namesrv")
CLUSTER, SET = "DefaultCluster", "broker-a"
REPLICAS = {1: "127.0.0.1:30911", 2: "127.0.0.1:30921"}


def call(handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    return ray.get(getattr(handle, method).remote(*args, **kwargs), timeout=60)


@pytest.fixture(scope="module")
def dep(ray_local: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with registered_deployment(tmp_path_factory.mktemp("mqadmin-ctl"), brokers=[BrokerSpec(SET)], namesrv_count=1,
                               broker_port=0) as d:
        yield d


@pytest.fixture(scope="module")
def ctl(dep: Deployment) -> Iterator[Any]:
    handle = start_controller(dep.spec.namespace, ControllerConfig(), detached=False,
                              remoting=RemotingServerConfig(listen_port=0))
    for bid, addr in REPLICAS.items():
        assert call(handle, "get_next_broker_id", CLUSTER, SET).header["nextBrokerId"] == bid
        assert call(handle, "apply_broker_id", CLUSTER, SET, bid, f"{addr};1").ok
        assert call(handle, "register_broker", CLUSTER, SET, bid, addr).ok
    beat(handle)
    assert call(handle, "elect_master", SET, 1).header["masterEpoch"] == 1
    assert call(handle, "alter_sync_state_set", SET, 1, 1, [1, 2], 1).ok
    yield handle
    ray.kill(handle, no_restart=True)


def beat(handle: Any) -> None:
    """Both replicas heartbeat (10 s timeout: alive for the rest of a test)."""
    for bid, addr in REPLICAS.items():
        assert call(handle, "heartbeat", CLUSTER, SET, addr, bid, epoch=1, max_offset=0).ok


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NAMESRV, *argv], capture_output=True, text=True, timeout=120)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def test_controller_verbs_over_tcp(dep: Deployment, ctl: Any) -> None:
    address = call(ctl, "stats")["remoting_address"]
    out = ok(run("getSyncStateSet", "-a", address, "-b", SET))
    assert f"#brokerName\t{SET}\n#MasterBrokerId\t1\n#MasterAddr\t{REPLICAS[1]}\n#MasterEpoch\t1\n" in out
    assert "#SyncStateSetNums\t2\n" in out and out.count("InSyncReplica:\tReplicaIdentity{") == 2
    by_cluster = json.loads(ok(run("getSyncStateSet", "-a", address, "-c", CLUSTER, "-n", dep.namesrv_addr(),
                                   "--json")))
    assert list(by_cluster) == [SET] and by_cluster[SET]["masterEpoch"] == 1

    meta = ok(run("getControllerMetaData", "-a", address))
    assert f"#ControllerLeaderAddress\t{address}" in meta and "#Peer:\t" in meta

    beat(ctl)
    out = ok(run("electMaster", "-a", address, "-c", CLUSTER, "-bn", SET, "-b", "2"))
    assert f"#BrokerMasterAddr\t{REPLICAS[2]}\n#MasterEpoch\t2\n" in out
    assert f"\t#Broker\t1\t{REPLICAS[1]}\n\t#Broker\t2\t{REPLICAS[2]}\n" in out
    info = call(ctl, "get_replica_info", SET).header
    assert info["masterBrokerId"] == 2 and info["masterEpoch"] == 2

    again = run("electMaster", "-a", address, "-b", SET, "--broker-id", "2")  # already master: refused
    assert again.returncode == 1 and "CONTROLLER_MASTER_STILL_EXIST" in again.stderr
    assert call(ctl, "get_replica_info", SET).header["masterEpoch"] == 2, "a refusal changes nothing"

    epoch = run("getBrokerEpoch", "-n", dep.namesrv_addr(), "-b", SET)
    assert epoch.returncode == 1 and "this request only for controllerMode" in epoch.stderr, \
        "the deployment's broker is not wired to the controller yet: RocketMQ's answer outside controller mode"


def test_controller_verbs_over_the_ray_namespace(dep: Deployment, ctl: Any, capsys: pytest.CaptureFixture[str]
                                                 ) -> None:
    ns = ["--namespace", dep.spec.namespace]
    assert namesrv_main(["getSyncStateSet", "-b", SET, "--json", *ns]) == 0
    table = json.loads(capsys.readouterr().out)
    before = table[SET]["masterEpoch"]
    assert {r["brokerId"] for r in table[SET]["inSyncReplicas"]} | \
        {r["brokerId"] for r in table[SET]["notInSyncReplicas"]} == {1, 2}

    assert namesrv_main(["getControllerMetaData", "--json", *ns]) == 0
    assert json.loads(capsys.readouterr().out)["isLeader"] is True

    beat(ctl)
    master, target = table[SET]["masterBrokerId"], 1 if table[SET]["masterBrokerId"] == 2 else 2
    # an election leaves the new master alone in the set: the master takes the other back in first
    assert call(ctl, "alter_sync_state_set", SET, master, before, [1, 2], table[SET]["syncStateSetEpoch"]).ok
    assert namesrv_main(["electMaster", "-b", SET, "--broker-id", str(target), "--json", *ns]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["masterBrokerId"] == target and answer["masterEpoch"] == before + 1
    assert call(ctl, "get_replica_info", SET).header["masterBrokerId"] == target

    assert namesrv_main(["getSyncStateSet", "-b", "no-such-set", *ns]) == 1
    assert "knows no broker set 'no-such-set'" in capsys.readouterr().err
    assert namesrv_main(["getBrokerEpoch", "-b", SET, *ns]) == 1
    assert "this request only for controllerMode" in capsys.readouterr().err
