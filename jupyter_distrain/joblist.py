"""The job list as its readers follow it: what changed since the version a reader holds (a list of 10,000
jobs is not sent whole every refresh), and the one rule that filters it."""

from __future__ import annotations

import secrets
import threading
from typing import Any, Callable, Mapping

REMOVALS_KEPT = 10_000  # removed names remembered; a reader further behind is sent the whole list


def matches(job: Mapping[str, Any], words: str) -> bool:
    """Whether every word of `words` is in the job's name, phase, backend or owner, ignoring case (the panel's
    filter is the same rule: src/format.ts's matches)."""
    haystack = f"{job['name']} {job['phase']} {job['backend']} {job['owner']}".lower()
    return all(word in haystack for word in words.lower().split())


class ListChanges:
    """Hands out the job list as the changes since a version: the jobs added or changed since then, in the
    list's order, and the names removed; the whole list (`complete`) to a reader without a version, or with
    one this process cannot answer from (another process's, or older than the removals it remembers). One per
    server, shared by its readers: each read of the list is compared with the one before, and what differs is
    stamped with the next generation."""

    def __init__(self, read: Callable[[], list], as_json: Callable[[Any], dict]):
        """`read`: the whole list, in its order, each job a dict with its name (a JobSummary); `as_json`: a
        job as sent (summary_json), made only of those sent."""
        self.read, self.as_json = read, as_json
        self.epoch = secrets.token_hex(4)  # versions of another process (one since restarted) are not ours
        self.generation = 0
        self.jobs: dict[str, tuple[dict, int]] = {}  # name: the job as last read, the generation it changed in
        self.removed: dict[str, int] = {}  # name: the generation it was removed in, oldest first
        self.forgotten = 0  # removals up to this generation are no longer known
        self.lock = threading.Lock()  # readers at once take turns: each compares with the one before

    def since(self, version: str | None) -> dict:
        """The changes since `version` (None or "": the whole list), with the version they bring a reader to."""
        with self.lock:
            listed = self.read()
            self._compare(listed)
            held = self._generation_of(version)
            changed = listed if held is None else [job for job in listed if self.jobs[job["name"]][1] > held]
            return {"version": f"{self.epoch}.{self.generation}", "complete": held is None,
                    "jobs": [self.as_json(job) for job in changed],
                    "removed": [] if held is None else [name for name, gone in self.removed.items() if gone > held]}

    def _compare(self, listed: list[dict]) -> None:
        now, changed, names = self.generation + 1, False, set()
        for job in listed:
            names.add(job["name"])
            before = self.jobs.get(job["name"])
            if before is None or before[0] is not job and before[0] != job:
                self.jobs[job["name"]], changed = (job, now), True
                self.removed.pop(job["name"], None)  # made again
            elif before[0] is not job:  # the same, read again: kept, so the next read's is found at once
                self.jobs[job["name"]] = (job, before[1])
        for name in [name for name in self.jobs if name not in names]:  # in the list's order
            del self.jobs[name]
            self.removed[name], changed = now, True
        if changed:
            self.generation = now
        while len(self.removed) > REMOVALS_KEPT:
            self.forgotten = self.removed.pop(next(iter(self.removed)))

    def _generation_of(self, version: str | None) -> int | None:
        """The generation a reader's version names, None where it cannot be answered from."""
        epoch, _, generation = (version or "").partition(".")
        if epoch != self.epoch or not generation.isdigit():
            return None
        held = int(generation)
        return held if self.forgotten <= held <= self.generation else None
