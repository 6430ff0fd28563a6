"""Small JSON documents written atomically: temp file, fsync, rename, fsync dir.

The credential and ACL stores are tiny and change rarely; a whole-file
rewrite is simpler than a log and a crash leaves either the old or the new
file, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(document, indent=1, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return default
