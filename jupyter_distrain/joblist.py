"""The job list and sweeps' tables as their readers follow them: what changed since the version a reader holds
(10,000 jobs, or a sweep's 1,000 trials, are not sent whole every refresh), and the rule that filters the list."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from typing import Any, Callable, Mapping

REMOVALS_KEPT = 10_000  # removed names remembered; a reader further behind is sent the whole list
KEPT_SWEEPS = 64  # sweeps whose tables are followed (TrialChanges)


def matches(job: Mapping[str, Any], words: str) -> bool:
    """Whether every word of `words` is in the job's name, phase, backend or owner, ignoring case (the panel's
    filter is the same rule: src/format.ts's matches)."""
    haystack = f"{job['name']} {job['phase']} {job['backend']} {job['owner']}".lower()
    return all(word in haystack for word in words.lower().split())


class Changes:
    """What changed in a list of named rows (dicts with a "name") between its reads, for readers that each hold
    the version they last had: the rows added or changed since then, in the list's order, and the names
    removed; the whole list (`complete`) to a reader without a version, or with one this process cannot answer
    from (another process's, or older than the removals it remembers). Each read is compared with the one
    before, and what differs is stamped with the next generation."""

    def __init__(self) -> None:
        self.epoch = secrets.token_hex(4)  # versions of another process (one since restarted) are not ours
        self.generation = 0
        self.rows: dict[str, tuple[dict, int]] = {}  # name: the row as last read, the generation it changed in
        self.removed: dict[str, int] = {}  # name: the generation it was removed in, oldest first
        self.forgotten = 0  # removals up to this generation are no longer known
        self.lock = threading.Lock()  # readers take turns: each reads and compares with the read before

    def since(self, listed: list[dict], version: str | None) -> tuple[str, bool, list[dict], list[str]]:
        """Compare `listed`, read holding `lock`, with the read before; the version it brings a reader to, whether
        the answer is whole, the rows added or changed since `version` (None or "": all) and the names removed."""
        self._compare(listed)
        held = self._generation_of(version)
        changed = listed if held is None else [row for row in listed if self.rows[row["name"]][1] > held]
        removed = [] if held is None else [name for name, gone in self.removed.items() if gone > held]
        return f"{self.epoch}.{self.generation}", held is None, changed, removed

    def _compare(self, listed: list[dict]) -> None:
        now, changed, names = self.generation + 1, False, set()
        for row in listed:
            names.add(row["name"])
            before = self.rows.get(row["name"])
            if before is None or before[0] is not row and before[0] != row:
                self.rows[row["name"]], changed = (row, now), True
                self.removed.pop(row["name"], None)  # made again
            elif before[0] is not row:  # the same, read again: kept, so the next read's is found at once
                self.rows[row["name"]] = (row, before[1])
        for name in [name for name in self.rows if name not in names]:  # in the list's order
            del self.rows[name]
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


class ListChanges:
    """The job list as the panel follows it (`GET job-changes`): one per server, shared by its readers."""

    def __init__(self, read: Callable[[], list], as_json: Callable[[Any], dict]):
        """`read`: the whole list, in its order, each job a dict with its name (a JobSummary); `as_json`: a
        job as sent (summary_json), made only of those sent."""
        self.read, self.as_json, self.changes = read, as_json, Changes()

    def since(self, version: str | None) -> dict:
        """The changes since `version` (None or "": the whole list), with the version they bring a reader to."""
        with self.changes.lock:
            now, complete, changed, removed = self.changes.since(self.read(), version)
        return {"version": now, "complete": complete, "jobs": [self.as_json(job) for job in changed],
                "removed": removed}


class TrialChanges:
    """Sweeps' tables as their views follow them (`GET jobs/{sweep}/trials?since=`): the table with only its
    trials changed since the version a view holds, and every trial's name in the table's order. The tables of
    the KEPT_SWEEPS sweeps most recently asked about are followed; one per server."""

    def __init__(self, read: Callable[[str], dict]):
        """`read`: a sweep's table (JobManager.trials)."""
        self.read = read
        self.sweeps: OrderedDict[str, Changes] = OrderedDict()

    def since(self, sweep: str, version: str | None) -> dict:
        changes = self.sweeps.pop(sweep, None) or Changes()  # each step one of the GIL's: threads share them
        self.sweeps[sweep] = changes  # the most recently asked last
        while len(self.sweeps) > KEPT_SWEEPS:
            self.sweeps.popitem(last=False)
        with changes.lock:
            table = self.read(sweep)
            now, complete, changed, _ = changes.since(table["trials"], version)
        return {**table, "trials": changed, "order": [trial["name"] for trial in table["trials"]],
                "version": now, "complete": complete}
