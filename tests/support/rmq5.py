"""Reaching a deployment's RocketMQ 5 gRPC proxy from a test: raw calls of one RPC (`stub`), and the
official 5.x Python client run from its own venv (`run_client`, driving tests/support/rmq5_client.py).
Shared by the proxy's tests and the ACL tests."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from actors.deployment.launcher import Deployment
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.common.waiting import wait_until
from namesrv.proxy.descriptors import SERVICE, load

ROOT = Path(__file__).resolve().parents[2]
RMQ5_PYTHON = ROOT / os.environ.get("NAMESRV_RMQ5_VENV", ".venv-rmq5") / "bin" / "python"  # run.sh's venv
DRIVER = ROOT / "tests" / "support" / "rmq5_client.py"
P = load()


def require_client() -> None:
    if not RMQ5_PYTHON.exists():
        pytest.fail(f"{RMQ5_PYTHON} is missing: `bash run.sh test` makes the RocketMQ 5 client's venv")


def endpoint(dep: Deployment) -> str:
    """The first proxy actor's endpoint (a local-mode broker's when the deployment has no proxy actor)."""
    return next((e for name, e in dep.proxy_endpoints.items() if name in dep.proxies),
                next(iter(dep.proxy_endpoints.values())))


def stub(dep: Deployment, method: str, kind: str = "unary_unary", at: str | None = None) -> Any:
    """A callable for one RPC of the deployment's (first) proxy, or of the one at `at`, taking and
    giving v2 messages."""
    req, resp, _, _ = P.methods()[method]
    channel = grpc.insecure_channel(at or endpoint(dep))
    return getattr(channel, kind)(f"/{SERVICE}/{method}", request_serializer=req.SerializeToString,
                                  response_deserializer=resp.FromString)


def code_name(status: Any) -> str:
    return P.enum_name("Code", status.code)


def run_client(dep: Deployment, topic: str, actions: list[dict[str, Any]], tmp_path: Path, timeout: float = 120,
               credentials: SessionCredentials | None = None, **spec: Any) -> list[dict[str, Any]]:
    """The driver's JSON line for each of `actions` (its docstring lists them), run by the official
    client against the deployment's proxy, signing with `credentials` when given."""
    body: dict[str, Any] = {"endpoint": endpoint(dep), "topic": topic, "actions": actions, **spec}
    if credentials is not None:
        body["credentials"] = {"access_key": credentials.access_key, "secret_key": credentials.secret_key}
    path = tmp_path / f"spec-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(body))
    out = subprocess.run([str(RMQ5_PYTHON), str(DRIVER), str(path)], capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(actions), out.stdout + out.stderr[-3000:]
    return results


def sends_through_a_kill(endpoint: str, topic: str, count: int, tmp_path: Path, under_way: Callable[[], bool],
                         kill: Callable[[], None]) -> list[dict[str, Any]]:
    """The driver's line for each of `count` paced sends (10 ms apart) the official client streams to
    `endpoint`, with `kill` run once `under_way()` holds (waited for up to 60 s): what a fault in
    mid-stream leaves the client with (each send ok or not, its body and message id)."""
    actions = [{"op": "send", "body": f"k{i}", "sleep_ms": 10} for i in range(count)]
    spec = tmp_path / f"kill-{uuid.uuid4().hex[:6]}.json"
    spec.write_text(json.dumps({"endpoint": endpoint, "topic": topic, "actions": actions}))
    proc = subprocess.Popen([str(RMQ5_PYTHON), str(DRIVER), str(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(under_way, 60, "the stream under way")
        kill()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(results) == len(actions), out[-2000:] + err[-2000:]
    return results


def transactions_with_an_orphan(endpoint: str, topic: str, tmp_path: Path, delivered: Callable[[], bool]) -> None:
    """The official client commits one half, rolls one back and leaves a third open, resolved
    (COMMIT) by its checker when the broker's check-back reaches it over Telemetry; its producer
    stays up until `delivered()` holds (waited for up to 30 s: the committed and the checked half
    readable, the rolled back one not)."""
    spec = tmp_path / f"tx-{uuid.uuid4().hex[:6]}.json"
    spec.write_text(json.dumps({"endpoint": endpoint, "topic": topic, "hold": True, "actions": [
        {"op": "tx", "body": "commit", "resolution": "commit"},
        {"op": "tx", "body": "rollback", "resolution": "rollback"},
        {"op": "orphan", "body": "orphan", "wait_s": 60}]}))
    proc = subprocess.Popen([str(RMQ5_PYTHON), str(DRIVER), str(spec)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        results = [json.loads(proc.stdout.readline()) for _ in range(3)]
        assert [r for r in results if not r["ok"]] == []
        assert all(r["transaction_id"] for r in results)
        assert results[2]["checked"] and results[2]["checked_bodies"] == ["orphan"], \
            "the broker's check-back reached the client's checker as RecoverOrphanedTransactionCommand"
        wait_until(delivered, 30, "the committed half and the checked orphan delivered, the rolled back one not")
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=60)
