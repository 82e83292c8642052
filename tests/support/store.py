"""The store under real conditions: a small tmpfs this test mounts (root only; skipped, saying why,
elsewhere) and retention's local-hour arithmetic."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HOUR_MS = 3_600_000



def at_local_hour(hour: int, start_ms: int = 1_700_000_000_000) -> int:
    t = start_ms - start_ms % HOUR_MS
    while time.localtime(t / 1000).tm_hour != hour:
        t += HOUR_MS
    return t + 60_000


@contextlib.contextmanager
def mounted_tmpfs(mnt: Path, size_kib: int) -> Iterator[Path]:
    """A tmpfs of `size_kib` KiB mounted at `mnt` (made here) for the block, then unmounted; skips
    the test, saying why, where mounting is not permitted (not root, or no mount in a container)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
