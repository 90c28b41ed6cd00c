"""Whether a running job progresses: when its replicas last wrote a log line or a TensorBoard step (what
policy.hang_after measures), and which replica keeps a pace far below the others' (a straggler)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from .incluster.tensorboard import is_event_file


def last_written(log_dir: Path, output: Path, since: float) -> float:
    """When a replica last wrote a line to its log in `log_dir` or to an event file anywhere under `output` (the
    files' modification times), or `since` if neither is newer."""
    paths = [*log_dir.glob("*.log"), *(Path(directory) / name for directory, _, names in os.walk(output)
                                       for name in names if is_event_file(name))]
    newest = since
    for path in paths:
        try:
            newest = max(newest, path.stat().st_mtime)
        except OSError:  # gone meanwhile
            pass
    return newest


STRAGGLER_RATIO = 0.7  # a replica whose pace stays under this fraction of the others' median...
STRAGGLER_SECONDS = 60.0  # ...for this long is a straggler


class Stragglers:
    """Which replicas are stragglers, from their paces (steps per second) as they are read now and then: each
    named once per slow spell."""

    def __init__(self) -> None:
        self.slow_since: dict[str, float] = {}
        self.named: set[str] = set()

    def update(self, rates: dict[str, float], now: float) -> list[tuple[str, float, float]]:
        """The replicas that became stragglers with these paces (of the replicas running now) at `now`
        (seconds, monotonic): (replica, its pace, the others' median)."""
        slow = {}  # replica -> the others' median
        for name, rate in rates.items():
            others = [r for other, r in rates.items() if other != name]
            if others and rate < STRAGGLER_RATIO * statistics.median(others):
                slow[name] = statistics.median(others)
        self.slow_since = {name: self.slow_since.get(name, now) for name in slow}
        self.named &= set(slow)  # one that caught up is named again when it falls behind again
        found = [(name, rates[name], slow[name]) for name in slow
                 if name not in self.named and now - self.slow_since[name] >= STRAGGLER_SECONDS]
        self.named.update(name for name, _, _ in found)
        return found
