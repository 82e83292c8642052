"""What the deployment tests share: the ssh control directory `ray up` leaves behind."""

from __future__ import annotations

import contextlib
import hashlib
from getpass import getuser
from pathlib import Path


def remove_ssh_control_dir(cluster_name: str) -> None:
    """Ray's ssh runner makes /tmp/ray_ssh_<user hash>/<cluster hash> (for ControlPath): remove it
    when empty, and its parent when that is empty too."""
    control = Path("/tmp") / f"ray_ssh_{hashlib.sha256(getuser().encode()).hexdigest()[:10]}"
    for d in (control / hashlib.sha256(cluster_name.encode()).hexdigest()[:10], control):
        with contextlib.suppress(OSError):
            d.rmdir()
