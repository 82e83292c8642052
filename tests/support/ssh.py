"""What the deployment tests share: the ssh control directory `ray up` uses (and leaves behind)."""

from __future__ import annotations

import contextlib
import hashlib
from getpass import getuser
from pathlib import Path


def ssh_control_root() -> Path:
    """Ray's ssh runner keeps its ControlPath sockets in /tmp/ray_ssh_<user hash>/<cluster hash>."""
    return Path("/tmp") / f"ray_ssh_{hashlib.sha256(getuser().encode()).hexdigest()[:10]}"


def remove_ssh_control_dir(cluster_name: str) -> None:
    """Remove a cluster's ssh control directory when empty, and its parent when that is empty too."""
    control = ssh_control_root()
    for d in (control / hashlib.sha256(cluster_name.encode()).hexdigest()[:10], control):
        with contextlib.suppress(OSError):
            d.rmdir()
