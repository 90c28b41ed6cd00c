"""Whether a running job progresses: when its replicas last wrote a log line or a TensorBoard step (what
policy.hang_after measures), and which replica keeps a pace far below the others' (a straggler)."""

from __future__ import annotations

import itertools
import os
import stat
import statistics
from pathlib import Path

from . import reasons
from .incluster.tensorboard import MAX_WALKED, is_event_file
from .policy import Event
from .spec import duration_seconds, replicas


def last_written(log_dir: Path, output: Path, since: float) -> float:
    """When a replica last wrote a line to its log in `log_dir` or to an event file anywhere under `output` (the
    files' modification times; links not followed, at most MAX_WALKED walked), or `since` if neither is newer."""
    directories = itertools.islice(os.walk(output), MAX_WALKED)
    paths = [*log_dir.glob("*.log"), *(Path(directory) / name for directory, _, names in directories
                                       for name in names if is_event_file(name))]
    newest = since
    for path in paths:
        try:
            status = path.lstat()
        except OSError:  # gone meanwhile
            continue
        if stat.S_ISREG(status.st_mode):
            newest = max(newest, status.st_mtime)
    return newest


HUNG_CHECK_SECONDS = 30.0  # how often a hung job is looked at again, for its progress to resume


class Quiet:
    """A running job's quiet spells (policy.hang_after): hung once nothing was written for `hang_after` seconds,
    and no longer once something is written after that."""

    def __init__(self, hang_after: float) -> None:
        self.hang_after = hang_after
        self.hung: float | None = None  # while hung: the last progress then

    @classmethod
    def of(cls, spec: dict) -> Quiet | None:
        """The job's, if its (valid) policy has a hang_after."""
        seconds = duration_seconds(spec["policy"].get("hang_after") or "")
        return cls(seconds) if seconds else None

    def update(self, last: float, now: float) -> tuple[str, float]:
        """With the last progress at `last` (seconds since the epoch) and `now`: "hung" when a quiet spell reaches
        hang_after, "resumed" when there was progress after one, else ""; and in how many seconds to look again
        (as the spell would reach hang_after, or while hung, now and then)."""
        change = ""
        if self.hung is not None and last > self.hung:
            self.hung, change = None, "resumed"
        quiet = now - last
        if quiet < self.hang_after:
            return change, self.hang_after - quiet
        if self.hung is None:
            self.hung, change = last, "hung"
        return change, min(self.hang_after, HUNG_CHECK_SECONDS)


def hung_message(spec: dict, not_kept: str = "") -> str:
    """What a NoProgress warning (and a Hung job) says; `not_kept`: why no stacks were kept."""
    quiet = f"no replica wrote a log line or a TensorBoard step for {spec['policy']['hang_after']}"
    if not_kept:
        return f"{quiet}; no stacks were kept: {not_kept}"
    return f"{quiet}; their stacks then are kept (distrain stacks {spec['name']} --kept)"


def several(spec: dict) -> bool:
    """Whether the job has several replicas, whose paces are compared (a single replica has no straggler)."""
    return len(replicas(spec)) > 1


PACE_CHECK_SECONDS = 15.0  # how often the replicas' paces are read, for stragglers
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

    def warnings(self, rates: dict[str, float], now: float) -> list[Event]:
        """`update`'s stragglers, each as its warning event."""
        return [Event(reasons.STRAGGLER, f"{rate:.3g} steps/s, under {STRAGGLER_RATIO}x the other replicas' median "
                      f"({others:.3g}) for {STRAGGLER_SECONDS:.0f} s", replica=name, type="Warning")
                for name, rate, others in self.update(rates, now)]
