"""`namesrv demo --real-client`: an unmodified RocketMQ client sends over TCP beside the Ray producers
through the broker kill, and its acknowledged messages are among those checked after the restart."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

NAMESRV = str(Path(sys.executable).parent / "namesrv")


@pytest.mark.timeout(420)
def test_demo_with_the_real_client_loses_nothing_acknowledged() -> None:
    out = subprocess.run([NAMESRV, "demo", "--real-client", "--duration", "3", "--rate", "20"],
                         capture_output=True, text=True, timeout=360)
    assert out.returncode == 0, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert "OK: nothing acknowledged was lost" in out.stdout
    line = re.search(r"real RocketMQ client \(TCP\): sent (\d+), failed (\d+) of (\d+) attempted "
                     r"\((\d+) after the kill\)", out.stdout)
    assert line, out.stdout
    sent, failed, attempted, after_kill = map(int, line.groups())
    assert sent + failed == attempted == 60 and sent > 0
    # its first send is acknowledged before the Ray producers start, the kill comes 1 s later, and it
    # paces the other 59 over 2.95 s from that first acknowledgement
    assert after_kill > 0, "the real client was still sending when broker-b was killed"
    acknowledged = re.search(r"^acknowledged messages\s+(\d+)$", out.stdout, re.M)
    assert acknowledged and int(acknowledged.group(1)) >= sent, "its acknowledged messages are in the check"


def test_demo_help_names_the_real_client_option() -> None:
    out = subprocess.run([NAMESRV, "demo", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--real-client" in out.stdout
