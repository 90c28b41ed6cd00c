"""Files only their user may read (stored git credentials, webhooks): JSON written whole, mode 0600, and read back."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from .errors import StorageFull


def read_private(path: Path) -> dict | None:
    """What `write_private` wrote at `path`; None if there is nothing."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def write_private(path: Path, content: dict, what: str) -> None:
    """Write `content` to `path` as JSON readable by this user only; nothing is left half written, and a full disk
    is StorageFull naming `what` and the directory."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(content, f)
    except OSError as e:
        path.unlink(missing_ok=True)
        if e.errno == errno.ENOSPC:
            raise StorageFull(f"{what} was not stored: the disk holding {path.parent} is full") from None
        raise
