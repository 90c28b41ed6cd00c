"""JobManager: the one front door to jobs for the CLI, the REST API and the magics."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from . import code, spec as spec_
from .backends import open_backend
from .errors import JobConflict, ReplicaNotFound
from .logs import LogLine
from .spec import FieldError, SpecError

PUBLIC_JOB_FIELDS = ("name", "backend", "phase", "reason", "message", "exit_code", "run", "output_dir")
PUBLIC_REPLICA_FIELDS = ("name", "role", "phase", "exit_code", "reason", "address", "pid", "restarts")


class JobManager:
    def __init__(self, backend=None):
        self.backend = backend or open_backend()

    def prepare(self, raw: Any, base_dir: Path | None = None) -> dict:
        """Validate a spec and pin its code; raises SpecError listing every problem."""
        spec = spec_.validate(raw)
        source = spec.get("code", {})
        credentials = self.backend.credentials(source["credentials"]) if source.get("credentials") else None
        return code.resolve(spec, Path(base_dir or Path.cwd()), credentials)

    def submit(self, raw: Any, base_dir: Path | None = None, dry_run: bool = False) -> dict:
        """Start a job; a dry run checks everything a submit checks and returns the spec it would run."""
        spec = self.prepare(raw, base_dir)
        if dry_run:
            self.backend.check(spec)
            if self.exists(spec["name"]):
                raise JobConflict(spec["name"])
            return spec
        return self.backend.submit(spec)

    def restart(self, name: str, raw: Any = None, base_dir: Path | None = None) -> dict:
        return self.backend.restart(name, self.prepare(raw, base_dir) if raw is not None else None)

    def clone(self, name: str, changes: Any = None, base_dir: Path | None = None) -> dict:
        """Submit a new job from `name`'s spec (so the same pinned commit), with top-level fields replaced."""
        if changes is not None and not isinstance(changes, dict):
            raise SpecError([FieldError("", "a clone's changes must be an object of spec fields")])
        raw = {**self.get(name)["spec"], **(changes or {})}
        if not (changes or {}).get("name"):
            raw["name"] = self.free_name(name)
        return self.submit(raw, base_dir)

    def free_name(self, name: str) -> str:
        """`name-2`, `name-3`, ...: the first that no job uses, within the name length limit."""
        taken = {job["name"] for job in self.list()}
        longest = spec_.schema()["properties"]["name"]["maxLength"]
        candidates = (f"{name[:longest - 1 - len(str(n))]}-{n}" for n in itertools.count(2))
        return next(c for c in candidates if c not in taken)

    def get(self, name: str) -> dict:
        return self.backend.get(name)

    def list(self) -> list[dict]:
        return self.backend.list()

    def stop(self, name: str) -> dict:
        return self.backend.stop(name)

    def delete(self, name: str, purge_output: bool = False) -> None:
        self.backend.delete(name, purge_output=purge_output)

    def exists(self, name: str) -> bool:
        return self.backend.exists(name)

    def logs(self, name: str, **options: Any) -> Iterator[LogLine]:
        return self.backend.logs(name, **options)

    def log_files(self, name: str, replica: str | None = None) -> dict[str, Path]:
        return self.backend.log_files(name, replica)

    def log_dir(self, name: str) -> Path:
        """The directory holding every log file of the job (watched by live streams)."""
        self.log_files(name)  # raises JobNotFound
        return self.backend.log_dir(name)

    def metrics(self, name: str) -> list[dict]:
        return self.backend.metrics(name)

    def cluster(self) -> dict:
        return self.backend.cluster()

    def tensorboard_logdir(self, name: str, replica: str | None) -> Path:
        """The directory a TensorBoard for this replica (or, with None, the whole job) serves."""
        job = self.get(name)
        names = [r["name"] for r in job["replicas"]]
        if replica is not None and replica not in names:
            raise ReplicaNotFound(name, replica, names)
        return self.backend.tensorboard_logdir(job["spec"], replica)


def public(job: dict) -> dict:
    """The JSON shape of a job shown to users: no internal bookkeeping, times in ISO 8601."""
    out = {key: job[key] for key in PUBLIC_JOB_FIELDS}
    out.update({key: iso(job[key]) for key in ("created", "started", "finished")})
    out["replicas"] = [
        {**{key: r[key] for key in PUBLIC_REPLICA_FIELDS}, "index": r["idx"],
         "started": iso(r["started"]), "finished": iso(r["finished"])}
        for r in job["replicas"]
    ]
    out["spec"] = job["spec"]
    if "events" in job:
        out["events"] = [
            {"time": iso(e["time"]), "type": e["type"], "replica": e["replica"], "reason": e["reason"],
             "message": e["message"]}
            for e in job["events"]
        ]
    return out


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")
