"""Copying pods/log lines into the job's log files: their timestamps, and appending without duplicates."""

from __future__ import annotations

import fcntl
import time
from datetime import datetime
from pathlib import Path

from .. import logs


def stamp(k8s_time: bytes) -> str:
    """A pods/log timestamp (RFC 3339, nanoseconds) in the log files' format (microseconds)."""
    text = k8s_time.decode()
    whole, _, fraction = text.rstrip("Z").partition(".")
    return f"{whole}.{(fraction + '000000')[:6]}Z"


def seconds_since(log_stamp: str) -> int:
    """Whole seconds back to a log timestamp, rounded up: pods/log's `sinceSeconds` (lines already
    copied that come again are dropped by `append`)."""
    moment = datetime.fromisoformat(log_stamp.replace("Z", "+00:00"))
    return max(1, int(time.time() - moment.timestamp()) + 2)


def last_lines(path: Path, count: int = 100) -> list[bytes]:
    if not path.exists():
        return []
    with open(path, "rb") as f:
        f.seek(logs.tail_offset(path, count))
        return f.read().splitlines()


def last_stamp(path: Path) -> str | None:
    lines = last_lines(path, 1)
    return lines[-1][:logs.STAMP_LEN].decode() if lines else None


def append(path: Path, raw_lines: list[bytes]) -> None:
    """Append pods/log lines not yet in the file: newer than its last line, or as old but not among the
    lines it holds with that time. A lock makes concurrent copiers (server and CLI) safe. The directory is
    made only for lines: a pod that logged nothing never brings back the directory of a deleted job."""
    if not raw_lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        tail = last_lines(path)
        last = tail[-1][:logs.STAMP_LEN].decode() if tail else ""
        seen = {line for line in tail if line.startswith(last.encode())}
        out = []
        for raw in raw_lines:
            when, _, text = raw.partition(b" ")
            line = stamp(when).encode() + b" " + text.rstrip(b"\r")[:logs.MAX_LINE]
            if line[:logs.STAMP_LEN].decode() > last or (line[:logs.STAMP_LEN].decode() == last and line not in seen):
                out.append(line + b"\n")
                seen.add(line)
        f.write(b"".join(out))
