"""How many descriptors of this process are open on files below a directory."""

from __future__ import annotations

import os
from pathlib import Path


def open_files_under(path: Path) -> int:
    """Count only files below ``path``: sockets, pipes and files of other code in the
    process (a client thread an earlier test left behind reconnecting, say) come and
    go on their own and would make a count of all descriptors flaky."""
    prefix = str(path.resolve())
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith(prefix):
            count += 1
    return count
