"""Reaching a deployment's RocketMQ 5 gRPC proxy from a test: raw calls of one RPC (`stub`), and the
official 5.x Python client run from its own venv (`run_client`, driving tests/support/rmq5_client.py).
Shared by the proxy's tests and the ACL tests."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from actors.deployment.launcher import Deployment
from namesrv.acl.plain_acl import SessionCredentials
from namesrv.proxy.descriptors import SERVICE, load

ROOT = Path(__file__).resolve().parents[2]
RMQ5_PYTHON = ROOT / os.environ.get("NAMESRV_RMQ5_VENV", ".venv-rmq5") / "bin" / "python"  # run.sh's venv
DRIVER = ROOT / "tests" / "support" / "rmq5_client.py"
P = load()


def require_client() -> None:
    if not RMQ5_PYTHON.exists():
        pytest.fail(f"{RMQ5_PYTHON} is missing: `bash run.sh test` makes the RocketMQ 5 client's venv")


def endpoint(dep: Deployment) -> str:
    return next(iter(dep.proxy_endpoints.values()))


def stub(dep: Deployment, method: str, kind: str = "unary_unary") -> Any:
    """A callable for one RPC of the deployment's (first) proxy, taking and giving v2 messages."""
    req, resp, _, _ = P.methods()[method]
    channel = grpc.insecure_channel(endpoint(dep))
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
