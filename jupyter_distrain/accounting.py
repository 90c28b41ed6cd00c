"""What runs used, across every backend a manager holds: the runs their ledgers kept (each backend keeps a run as a
restart or a delete ends it: usage.keep) with the current runs of the jobs that exist, reported from a moment on; a
job's cost; the budget a new run must fit. The sums and rules are usage.py's."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import time
from collections import Counter
from typing import TYPE_CHECKING, Iterable

from . import usage
from .errors import FieldError, Forbidden, SpecError
from .owners import sees
from .policy import FINISHED
from .records import JobRecord, JobSummary
from .sweep import is_sweep

if TYPE_CHECKING:
    from .config import Distrain
    from .contract import Backend


class Accounts:
    """The usage of the jobs of `backends`, as the owner of `config` (an admin: every owner) sees it."""

    def __init__(self, backends: dict[str, Backend], config: Distrain):
        self.backends, self.config = backends, config

    def runs_since(self, moment: float, owner: str | None = None) -> builtins.list[dict]:
        """Every run counted since `moment` (usage.counted_since) that this manager's owner sees, or `owner`'s
        alone: those kept in the ledgers, and the current runs of the jobs that exist (sweeps' own left out)."""
        if owner not in (None, self.config.owner) and not self.config.see_all_owners:
            raise Forbidden("only an admin (c.Distrain.see_all_owners) sees another owner's usage")
        jobs = self._listed(owner)
        return self._runs(moment, owner, self._got(job for job in jobs if usage.counted_since(job, moment)))

    def _listed(self, owner: str | None) -> builtins.list[JobSummary]:
        """The summaries of the jobs that exist, `owner`'s alone if named."""
        return [job for backend in self.backends.values() for job in backend.list() if owner in (None, job["owner"])]

    def _got(self, jobs: Iterable[JobSummary]) -> builtins.list[JobRecord]:
        return [self.backends[job["backend"]].get(job["name"], events=0) for job in jobs]

    def _runs(self, moment: float, owner: str | None, current: builtins.list[JobRecord]) -> builtins.list[dict]:
        """The ledgers' runs since `moment` with the `current` jobs' runs, as this manager's owner sees them."""
        kept = [row for backend in self.backends.values() for row in backend.ledger.since(moment)]
        runs = {usage.row_key(row): row for row in [*kept, *(usage.ledger_row(job) for job in current
                                                                if not is_sweep(job["spec"]))]
                if sees(self.config.owner, row["owner"], self.config.see_all_owners) and owner in (None, row["owner"])}
        return list(runs.values())

    def report(self, since: str | None = None, owner: str | None = None) -> dict:
        """usage.report of the runs since `since` (usage.moment_of; default: this month's start), `owner`'s alone
        if named."""
        now = time.time()
        month = usage.month_start(now)
        moment = month if since is None else usage.moment_of(since, now)
        return usage.report(self.runs_since(min(moment, month), owner), moment, now, self.config.prices,
                            self.config.budgets)

    def cost(self, job: JobRecord) -> float | None:
        """What the job's current run cost so far, at the admin's prices (None without them)."""
        return usage.cost(usage.ledger_row(job), self.config.prices) if self.config.prices else None

    def budget_problem(self, spec: dict, owner: str, but: str | None = None) -> FieldError | None:
        """Why a job of `spec` does not fit `owner`'s budget (usage.budget_problem): this month's runs counted, and
        what the owner's unfinished jobs may still use (but job `but`'s, which a restart ends)."""
        if usage.budget_of(self.config.budgets, owner) is None or not usage.gpu_count(spec):
            return None
        now = time.time()
        month = usage.month_start(now)
        jobs = self._listed(owner)
        got = self._got(job for job in jobs if usage.counted_since(job, month) or job["phase"] not in FINISHED)
        used = sum(row["gpu_hours"] or 0
                   for row in self._runs(month, owner, [job for job in got if usage.counted_since(job, month)]))
        launched = Counter(job["trial_of"] for job in jobs)
        held = sum(usage.held(job, now, launched[job["name"]])
                   for job in got if job["phase"] not in FINISHED and job["name"] != but)
        return usage.budget_problem(spec, owner, self.config.budgets, used, held)

    def over_budget(self, spec: dict, owner: str, but: str | None = None, warn: bool = True) -> FieldError | None:
        """The job's budget problem: refused (SpecError, with the numbers) where the admin's budgets refuse; where they
        warn, answered to be warned of (not looked for without `warn`: a dry run's warnings are `warning`'s)."""
        if self.config.budget_action == "warn" and not warn:
            return None
        problem = self.budget_problem(spec, owner, but)
        if problem and self.config.budget_action == "refuse":
            raise SpecError([problem])
        return problem

    def warning(self, spec: dict, owner: str) -> builtins.list[FieldError]:
        """Where the admin's budgets warn, the job's budget problem as a warning."""
        problem = self.budget_problem(spec, owner) if self.config.budget_action == "warn" else None
        return [problem] if problem else []
