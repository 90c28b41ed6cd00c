"""Copying a job's log lines into its log files, from pods/log and from the files its replicas wrote to the
output volume: their timestamps, and appending without duplicates."""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator

from ... import logs
from ...incluster import logtee


RUNTIME_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")  # pods/log's, RFC 3339 in UTC
LOG_END = re.compile(RUNTIME_TIME.pattern + rb" " + logs.STAMP + re.escape(logtee.END))


def stamp(k8s_time: bytes) -> str:
    """A pods/log timestamp (RFC 3339, nanoseconds) in the log files' format (microseconds)."""
    text = k8s_time.decode()
    whole, _, fraction = text.rstrip("Z").partition(".")
    return f"{whole}.{(fraction + '000000')[:6]}Z"


def from_pods_log(raw: bytes) -> bytes | None:
    """A pods/log line (`<the runtime's time> <text>`) as a log file line. A replica's command runs under
    incluster/logtee.py, which stamped the text itself as it wrote the same line to the output volume: that
    stamp (and its mark of stderr) is kept, so both copies are the same bytes. Other lines get the runtime's time.
    None for a line with no time, none of the container's: the kubelet's word, in place of the log, that it has
    none (`unable to retrieve container logs for ...`, once the container is gone: what it logged is then only on
    the volume, see LogCopier.archive)."""
    when, _, text = raw.partition(b" ")
    if not RUNTIME_TIME.fullmatch(when):
        return None
    if logs.STAMPED.match(text):
        return bounded(text)
    return bounded(stamp(when).encode() + b" " + text)


def ends_log(raw: bytes) -> bool:
    """Whether a pods/log line is incluster/logtee.py's last: the container's log ends there, whole."""
    return LOG_END.fullmatch(raw) is not None


def from_volume(raw: bytes) -> bytes | None:
    """A line of a log file a replica wrote to the output volume; None if it is not one (the volume is
    the job's to write)."""
    return bounded(raw) if logs.STAMPED.match(raw) else None


def bounded(line: bytes) -> bytes:
    """A stamped log file line without a carriage return, its text cut at logs.MAX_LINE."""
    return line.rstrip(b"\r")[:logs.STAMP_LEN + 1 + logs.MAX_LINE]


PROVENANCE = b"distrain-provenance "  # the line of incluster/install.py's report
PROVENANCE_FILE = "provenance.json"  # in a run's log directory


def keep_provenance(lines: list[bytes], directory: Path) -> list[bytes]:
    """The log file `lines` except incluster/install.py's report of what a replica's Python has, which becomes
    the run's provenance in `directory` if it has none yet: every replica runs the same image and
    requirements, so the first report stands for the run."""
    kept = []
    for line in lines:
        text = line[logs.STAMP_LEN + 1:]
        if not text.startswith(PROVENANCE):
            kept.append(line)
        elif (report := provenance_report(text[len(PROVENANCE):])) and not (directory / PROVENANCE_FILE).exists():
            directory.mkdir(parents=True, exist_ok=True)
            temporary = directory / f".{PROVENANCE_FILE}.{os.getpid()}"
            temporary.write_text(json.dumps(report))
            temporary.replace(directory / PROVENANCE_FILE)
    return kept


def provenance_report(raw: bytes) -> dict | None:
    """A report's python, requirements and packages; None if it is not one (the job prints what it likes)."""
    try:
        report = json.loads(raw)
    except ValueError:
        return None
    names = lambda value: value is None or isinstance(value, list) and all(isinstance(v, str) for v in value)  # noqa: E731
    if isinstance(report, dict) and isinstance(report.get("python"), str) and names(report.get("requirements")) \
            and names(report.get("packages")):
        return {key: report.get(key) for key in ("python", "requirements", "packages")}
    return None


def read_provenance(directory: Path) -> dict:
    """What a run's replicas' Python had, as far as it is known."""
    try:
        return json.loads((directory / PROVENANCE_FILE).read_text())
    except FileNotFoundError:
        return {}


def line_batches(chunks: Iterable[bytes], partial: bool = True) -> Iterator[list[bytes]]:
    """The lines of a stream of chunks, a list per chunk; with `partial`, a last line without its newline."""
    pending = b""
    for chunk in chunks:
        *lines, pending = (pending + chunk).split(b"\n")
        yield lines
    if partial and pending:
        yield [pending]


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


def append(path: Path, lines: list[bytes]) -> None:
    """Append the log file lines (`<stamp> <text>`) not yet in the file: newer than its last line, or as old
    but not among the lines it holds with that time; incluster/install.py's report goes to the run's provenance
    instead (keep_provenance). A lock makes concurrent copiers (server and CLI) safe. The directory is made
    only for lines: a pod that logged nothing never brings back the directory of a deleted job."""
    lines = keep_provenance(lines, path.parent)
    if not lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        tail = last_lines(path)
        last = tail[-1][:logs.STAMP_LEN].decode() if tail else ""
        seen = {line for line in tail if line.startswith(last.encode())}
        out = []
        for line in lines:
            if line[:logs.STAMP_LEN].decode() > last or (line[:logs.STAMP_LEN].decode() == last and line not in seen):
                out.append(line + b"\n")
                seen.add(line)
        f.write(b"".join(out))
