"""Files only their user may read (stored git credentials, webhooks): JSON written whole, mode 0600, and read back."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

from .errors import StorageFull


def read_private(path: Path) -> dict | None:
    """What `write_private` wrote at `path`; None if there is nothing."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def write_private(path: Path, content: dict, what: str) -> None:
    """Write `content` to `path` as JSON readable by this user only, at once: a reader sees the earlier file or
    this one whole, and a write that fails leaves the earlier one. A full disk is StorageFull naming `what` and the
    directory."""
    written = None
    try:
        fd, written = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")  # mode 0600
        with os.fdopen(fd, "w") as f:
            json.dump(content, f)
        os.replace(written, path)
    except OSError as e:
        if written:
            Path(written).unlink(missing_ok=True)
        if e.errno == errno.ENOSPC:
            raise StorageFull(f"{what} was not stored: the disk holding {path.parent} is full") from None
        raise
