"""The `namesrv` command run as a user runs it (a subprocess), and what a successful or a refused
run must look like: one line on stderr, no traceback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.ray_cluster import (
    RAY_CORE_LOG_LINE,
)

NAMESRV = str(Path(sys.executable).parent / "namesrv")




def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NAMESRV, *argv], capture_output=True, text=True, timeout=timeout)

def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout

def fails(result: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip() and not re.match(RAY_CORE_LOG_LINE, ln)]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]

def tcp(addr: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return run(*argv, "-n", addr)

def tcp_json(addr: str, *argv: str) -> Any:
    return json.loads(ok(tcp(addr, *argv, "--json")))
