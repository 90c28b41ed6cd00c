"""What runs used, and what that costs.

A job's current run, per replica and in all: how long each replica ran, its GPUs held for that long (a GPU counts
from its replica's start to its end), and, where the backend measured them, its processes' CPU seconds and largest
resident set (the local backend, once a replica has ended: backends/local/accounted.py).

Each run's usage is kept in its backend's ledger (contract.Ledger) as the run ends its job's life (a restart
begins the next, a delete forgets the job): `ledger_row`. A report (`report`) sums the ledger's runs and the current
runs of the jobs that exist, per owner and sweep, priced by the admin's `c.Distrain.prices`; `budget_problem`
says whether a new job's worst case fits what is left of its owner's monthly GPU-hours (`c.Distrain.budgets`)."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .errors import FieldError, SpecError
from .records import ReplicaRecord, iso
from .roles import cores, gpu_type, gpus, replicas
from .spec import duration_seconds
from .sweep import is_sweep, points

if TYPE_CHECKING:
    from .contract import Ledger


def of_replica(replica: ReplicaRecord, spec: dict, run_ended: float | None) -> dict:
    """The replica's usage (openapi.yaml's Usage): so far while it runs; until its run ended where its own end is
    not known (a pod deleted with its job's end, on Kubernetes)."""
    wall = seconds_between(replica["started"], replica["finished"] or run_ended)
    return {"wall_seconds": rounded(wall), "cpu_seconds": rounded(replica.get("cpu_seconds")),
            "peak_memory": replica.get("peak_memory"),
            "gpu_hours": None if wall is None else rounded(gpus(spec, replica["role"]) * wall / 3600, 6)}


def of_job(job: Mapping[str, Any], each: list[dict]) -> dict:
    """The run's usage from its replicas' (`each`, as of_replica answers them): the run's time, the sums of their
    CPU seconds and GPU-hours, the largest of their peaks; CPU seconds and the peak are None unless each replica that
    ran has them (a sum of some would pass for the run's), GPU-hours unless one has them."""
    ran = [used for used in each if used["wall_seconds"] is not None]
    measured = {key: [used[key] for used in ran] for key in ("cpu_seconds", "peak_memory")}
    whole = {key: ran and None not in values for key, values in measured.items()}
    gpu_hours = [used["gpu_hours"] for used in each if used["gpu_hours"] is not None]
    return {"wall_seconds": rounded(seconds_between(job["started"], job["finished"])),
            "cpu_seconds": rounded(sum(measured["cpu_seconds"])) if whole["cpu_seconds"] else None,
            "peak_memory": max(measured["peak_memory"]) if whole["peak_memory"] else None,
            "gpu_hours": rounded(sum(gpu_hours), 6) if gpu_hours else None}


def seconds_between(started: float | None, finished: float | None) -> float | None:
    """How long something ran from `started` to `finished` (so far, until it has); None if it never started."""
    return None if started is None else max(0.0, (finished or time.time()) - started)


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# the ledger
def ledger_row(job: Mapping[str, Any]) -> dict:
    """The job's current run as a ledger keeps it (openapi.yaml's UsedRun): whose, which, when, how it ended, what it
    used; its GPU-hours by GPU type ("" where the spec names none) and its CPU-hours, for a price: measured where the
    backend measured them, else its replicas' requested cores for as long as each ran (`cpu_measured` says which)."""
    spec = job["spec"]
    used = [of_replica(r, spec, job["finished"]) for r in job["replicas"]]
    by_type: dict[str, float] = defaultdict(float)
    requested = 0.0
    for replica, replica_used in zip(job["replicas"], used):
        if replica_used["gpu_hours"]:
            by_type[gpu_type(spec, replica["role"]) or ""] += replica_used["gpu_hours"]
        requested += (cores(spec, replica["role"]) or 0) * (replica_used["wall_seconds"] or 0) / 3600
    total = of_job(job, used)
    measured = total["cpu_seconds"] is not None
    return {"job": job["name"], "owner": job["owner"], "backend": job["backend"], "run": job["run"],
            "created": job["created"], "trial_of": spec.get("trial_of"), "phase": job["phase"],
            "started": job["started"], "finished": job["finished"], **total,
            "cpu_hours": rounded(total["cpu_seconds"] / 3600 if measured else requested or None, 6),
            "cpu_measured": measured, "gpu_hours_by_type": {kind: rounded(h, 6) for kind, h in by_type.items()}}


def keep(ledger: Ledger, job: Mapping[str, Any]) -> None:
    """Keep the job's current run, ended, in `ledger` as the run ends the job's life (a backend's restart or delete,
    once it stopped it): not a run that never started, nor a sweep's own (its trials are runs of their own)."""
    if job["started"] is not None and not is_sweep(job["spec"]):
        ledger.add(ledger_row(job))


def row_key(row: Mapping[str, Any]) -> str:
    """The run's key in a ledger (a ConfigMap's key too): its job, when the job was made (a job of the same name
    made again is another), its run."""
    return f"{row['job']}.{int(row['created'] * 1000)}.{row['run']}"


def counted_since(row: Mapping[str, Any], since: float) -> bool:
    """Whether a run counts in a report from `since`: it had not finished by then (a run counts whole, in the report
    of the period it ended in)."""
    return row["started"] is not None and (row["finished"] is None or row["finished"] >= since)


def moment_of(text: str, now: float) -> float:
    """The moment `text` names, for a report's `since`: a date or time in ISO 8601 (UTC unless it says), or a
    duration before `now` (7d, 12h, 1d12h); SpecError naming `since` otherwise."""
    seconds = duration_seconds(text)
    try:
        named = datetime.fromisoformat(text) if seconds is None else datetime.fromtimestamp(now - seconds, timezone.utc)
        moment = (named if named.tzinfo else named.replace(tzinfo=timezone.utc)).timestamp()
        month_start(moment)  # within the calendar, its month too
    except (ValueError, OverflowError, OSError):
        raise SpecError([FieldError("since", f"{text!r} is neither a date or time in ISO 8601 (2026-11-01, "
                                             "2026-11-01T09:00Z) nor a duration before now (7d, 12h)")],
                        subject="request") from None
    return moment


def month_start(moment: float) -> float:
    """The start of `moment`'s calendar month, in UTC: budgets are per month."""
    day = datetime.fromtimestamp(moment, timezone.utc)
    return day.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


# prices
def cost(row: Mapping[str, Any], prices: Mapping[str, Any]) -> float | None:
    """What the run cost at `prices` (c.Distrain.prices: gpu_hour per GPU type, "*" for any other, and cpu_hour);
    None where the admin set none."""
    if not prices:
        return None
    per_gpu = prices.get("gpu_hour", {})
    gpu = sum(hours * per_gpu.get(kind or "*", per_gpu.get("*", 0)) for kind, hours in row["gpu_hours_by_type"].items())
    return round(gpu + (row["cpu_hours"] or 0) * prices.get("cpu_hour", 0), 4)


def report(runs: Iterable[dict], since: float, now: float, prices: Mapping[str, Any],
           budgets: Mapping[str, float]) -> dict:
    """The runs counted since `since` (see counted_since) with their cost, summed per owner and per sweep; each
    owner's budget for this month beside it, from the runs in `runs` counted since the month's start."""
    runs = sorted(runs, key=lambda row: row["started"] or 0)
    shown = [{**row, "cost": cost(row, prices), "started": iso(row["started"]), "finished": iso(row["finished"]),
              "created": iso(row["created"])} for row in runs if counted_since(row, since)]
    owners, sweeps = totals(shown, "owner"), totals([row for row in shown if row["trial_of"]], "trial_of")
    month = month_start(now)
    for owner in owners:
        if (budget := budget_of(budgets, owner["owner"])) is not None:
            used = sum(row["gpu_hours"] or 0 for row in runs if row["owner"] == owner["owner"]
                       and counted_since(row, month))
            owner["budget"] = {"gpu_hours": budget, "used": rounded(used, 6), "left": rounded(budget - used, 6)}
    return {"since": iso(since), "until": iso(now), "currency": prices.get("currency") if prices else None,
            "owners": owners, "sweeps": [{"sweep": s.pop("trial_of"), **s} for s in sweeps], "runs": shown}


def totals(runs: list[dict], by: str) -> list[dict]:
    """The runs' GPU-hours, CPU-hours and cost summed per value of `by`, in the order first seen."""
    summed: dict[str, dict] = {}
    for row in runs:
        total = summed.setdefault(row[by], {by: row[by], "runs": 0, "gpu_hours": 0.0, "cpu_hours": 0.0, "cost": None})
        total["runs"] += 1
        total["gpu_hours"] = rounded(total["gpu_hours"] + (row["gpu_hours"] or 0), 6)
        total["cpu_hours"] = rounded(total["cpu_hours"] + (row["cpu_hours"] or 0), 6)
        if row["cost"] is not None:
            total["cost"] = round((total["cost"] or 0) + row["cost"], 4)
    return list(summed.values())


# budgets
def budget_of(budgets: Mapping[str, float], owner: str) -> float | None:
    """The owner's GPU-hours a month (c.Distrain.budgets: by owner, "*" for everyone else); None: no budget."""
    return budgets.get(owner, budgets.get("*"))


def gpu_count(spec: dict) -> int:
    """GPUs the job holds while every replica runs; a sweep's, every trial's together (each may run to its
    deadline)."""
    if is_sweep(spec):
        return len(points(spec["sweep"])) * gpu_count({key: value for key, value in spec.items() if key != "sweep"})
    return sum(gpus(spec, role) for role, _ in replicas(spec))


def held(job: Mapping[str, Any], now: float, launched: int = 0) -> float:
    """GPU-hours an unfinished job may still use at most: its GPUs for what is left of its deadline; a sweep's, its
    trials not `launched` yet for their whole deadline (those launched are jobs of their own). A job with no deadline
    (begun before budgets) counts none."""
    spec = job["spec"]
    deadline = spec["policy"].get("deadline_seconds")
    if not deadline:
        return 0.0
    if is_sweep(spec):
        trials = len(points(spec["sweep"]))
        return gpu_count(spec) / trials * max(0, trials - launched) * deadline / 3600
    left = deadline - (now - job["started"] if job["started"] else 0)
    return gpu_count(spec) * max(0.0, left) / 3600


def budget_problem(spec: dict, owner: str, budgets: Mapping[str, float], used: float, held_now: float
                   ) -> FieldError | None:
    """Why the job does not fit its owner's budget, with the numbers: its worst case (its GPUs for its whole
    deadline) beyond what is left this month once `used` and what unfinished jobs may still use (`held_now`) are
    counted; None if it fits, asks for no GPU, or the owner has no budget."""
    budget, count = budget_of(budgets, owner), gpu_count(spec)
    if budget is None or not count:
        return None
    left = budget - used - held_now
    standing = (f"{owner or 'you'} may use {budget:g} GPU-hours a month: {used:.2f} used this month, "
                f"{held_now:.2f} held by unfinished jobs (their GPUs to their deadlines), {left:.2f} left")
    deadline = spec.get("policy", {}).get("deadline_seconds")
    if not deadline:
        return FieldError("policy.deadline_seconds", f"a job of {count} GPUs needs a deadline under a budget, "
                                                     f"which bounds what it may use; {standing}")
    worst = count * deadline / 3600
    if worst <= left:
        return None
    return FieldError("policy.deadline_seconds", f"the job may use {worst:.2f} GPU-hours ({count} GPUs for its "
                                                 f"deadline of {deadline / 3600:g} h), more than is left; {standing}")
