"""The JSON shape of a job, as the REST API answers it and `distrain ... -o json` prints it (openapi.yaml's
Job and JobSummary): times in ISO 8601, no internal bookkeeping."""

from __future__ import annotations

import re
from typing import Any, Mapping, cast

from . import hints, usage
from . import spec as spec_
from .eta import furthest_behind
from .policy import Phase
from .records import JobRecord, JobSummary, Progress, iso, summary

TIMES = ("created", "started", "finished", "expires")  # a job's, in seconds since the epoch; ISO 8601 in JSON
REPLICA_FIELDS = ("name", "role", "phase", "exit_code", "reason", "address", "node", "pid", "restarts")


def summary_json(job: JobSummary) -> dict:
    """A job as the list shows it (JobSummary)."""
    out = {key: iso(cast(float | None, value)) if key in TIMES else value for key, value in job.items()}
    if job["notice"]:
        out["notice"] = {**job["notice"], "time": iso(job["notice"]["time"])}
    if "progress" in job:
        out["progress"] = progress_json(job["progress"])
    return out


def progress_json(progress: Progress | None) -> dict | None:
    """Where a running job or replica stands (eta.Progress), its times in ISO 8601 to the millisecond."""
    return progress and {**progress, "ends": iso(progress["ends"], "milliseconds"),
                         "updated": iso(progress["updated"], "milliseconds")}


def job_json(job: Mapping[str, Any]) -> dict:
    """A job shown by itself (Job): its summary, with its spec, replicas, logs and provenance, and its events
    when asked for."""
    progress, shown = job.get("progress"), summary(cast(JobRecord, job))  # progress: while it runs (view)
    out = summary_json(shown if progress is None else {**shown, "progress": furthest_behind(progress)})
    out.update(output_dir=job["output_dir"], logs=job["logs"],
               hint=hints.hint(job["message"]) if job["phase"] == Phase.FAILED else None)
    used = [usage.of_replica(r, job["spec"], job["finished"]) for r in job["replicas"]]
    out["replicas"] = [
        {**{key: r[key] for key in REPLICA_FIELDS}, "index": r["idx"],
         "started": iso(r["started"]), "finished": iso(r["finished"]), "usage": replica_used,
         **({"progress": progress_json(progress.get(r["name"]))} if progress is not None else {})}
        for r, replica_used in zip(job["replicas"], used)
    ]
    out["usage"] = {**usage.of_job(job, used), "cost": job.get("cost")}  # cost: in its view (JobManager.view)
    out["spec"] = job["spec"]
    out.update({key: job[key] for key in ("engine", "supervision") if key in job})
    out["provenance"] = provenance(job)
    if "events" in job:
        out["events"] = [
            {"time": iso(e["time"]), "type": e["type"], "replica": e["replica"], "reason": e["reason"],
             "message": e["message"]}
            for e in job["events"]
        ]
    return out


def provenance(job: Mapping[str, Any]) -> dict:
    """What the job's current run ran: its code (the commit, and the snapshot of changes on top of it), the
    command with its hyperparameters substituted, and what the backend recorded of where it ran (fields the
    backend does not know are null)."""
    spec, source = job["spec"], job["spec"].get("code", {})
    taken, environment = source.get("snapshot"), job.get("environment") or {}
    return {
        "code": {key: source[key] for key in ("git", "commit", "path") if key in source} or None,
        "snapshot": {key: taken[key] for key in ("sha256", "size", "files")} if taken else None,
        "hyperparameters": spec.get("hyperparameters", {}),
        "command": spec_.substituted_command(spec),
        **{key: environment.get(key) for key in ("python", "requirements", "packages", "image", "image_digests")},
    }


def pinned_image(job: Mapping[str, Any]) -> str | None:
    """The image the job's pods ran, by digest (repository@sha256:...), if they all reported the same one."""
    digests = {re.sub(r"^[a-z-]+://", "", d) for d in (job.get("environment") or {}).get("image_digests") or []}
    return digests.pop() if len(digests) == 1 and "@sha256:" in next(iter(digests)) else None

