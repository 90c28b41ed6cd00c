"""What a job's current run used, per replica and in all: how long each replica ran, its GPUs held for that long (a
GPU counts from its replica's start to its end), and, where the backend measured them, its processes' CPU seconds
and largest resident set (the local backend, once a replica has ended: backends/local/accounted.py)."""

from __future__ import annotations

import time
from typing import Any, Mapping

from .records import ReplicaRecord
from .roles import gpus


def of_replica(replica: ReplicaRecord, spec: dict, run_ended: float | None) -> dict:
    """The replica's usage (openapi.yaml's Usage): so far while it runs; until its run ended where its own end is
    not known (a pod deleted with its job's end, on Kubernetes)."""
    wall = seconds_between(replica["started"], replica["finished"] or run_ended)
    return {"wall_seconds": rounded(wall), "cpu_seconds": rounded(replica.get("cpu_seconds")),
            "peak_memory": replica.get("peak_memory"),
            "gpu_hours": None if wall is None else rounded(gpus(spec, replica["role"]) * wall / 3600, 6)}


def of_job(job: Mapping[str, Any], each: list[dict]) -> dict:
    """The run's usage from its replicas' (`each`, as of_replica answers them): the run's time, the sums of their
    CPU seconds and GPU-hours, the largest of their peaks; a measure none of them has is None."""
    known = {key: [used[key] for used in each if used[key] is not None] for key in ("cpu_seconds", "peak_memory",
                                                                                   "gpu_hours")}
    return {"wall_seconds": rounded(seconds_between(job["started"], job["finished"])),
            "cpu_seconds": rounded(sum(known["cpu_seconds"])) if known["cpu_seconds"] else None,
            "peak_memory": max(known["peak_memory"], default=None),
            "gpu_hours": rounded(sum(known["gpu_hours"]), 6) if known["gpu_hours"] else None}


def seconds_between(started: float | None, finished: float | None) -> float | None:
    """How long something ran from `started` to `finished` (so far, until it has); None if it never started."""
    return None if started is None else max(0.0, (finished or time.time()) - started)


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
