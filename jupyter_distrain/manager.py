"""JobManager: the one front door to jobs for the CLI, the REST API and the magics."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import functools
import hashlib
import itertools
import logging
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Iterator, cast

from . import code, notify, reasons, repo, snapshot, sweep
from . import spec as spec_
from .accounting import Accounts
from .backends import open_backend
from .contract import Backend
from .eta import ProgressReader, furthest_behind
from .errors import (DistrainError, FieldError, JobConflict, JobNotFound, NotFound, ReplicaNotFound, RunNotFound,
                     SpecError, Unavailable)
from .jobjson import pinned_image
from .logs import LogLine
from .policy import FINISHED, Event, Phase
from .records import EventFiles, JobRecord, JobSummary, TensorBoardTarget, iso, metrics_window, printable
from .rules import AdminRules

if TYPE_CHECKING:
    from .config import Distrain
    from .scalars import Scalars

KEPT_METRICS = 10_000  # finished trials' metrics kept (JobManager.metric_of): ten sweeps of the most trials


class JobManager:
    """Routes each call to the backend holding the job; submits go to the named or the default one."""

    def __init__(self, backends: dict[str, Backend], config: Distrain, default: str | None = None,
                 checkouts_under: Path | None = None):
        """`checkouts_under`: the only directory whose checkouts a spec's code.changes_from may name (a Jupyter
        server's root: its users reach nothing else); None: any."""
        self.backends = backends
        self.config = config
        self.default = default or next(iter(self.backends))
        self.checkouts_under = checkouts_under.resolve() if checkouts_under else None
        self.finished_metrics: OrderedDict[tuple, tuple[str | None, sweep.Points]] = OrderedDict()
        self.progress = ProgressReader()
        self.webhooks = notify.Webhooks(config)
        self.accounts = Accounts(self.backends, config)

    @classmethod
    def from_config(cls, config: Distrain, names: list[str] | None = None,
                    checkouts_under: Path | None = None) -> JobManager:
        """The backends `names` (default: every enabled one), the first the default."""
        names = names or config.enabled
        return cls({name: opened(config, name) for name in names}, config, default=names[0],
                   checkouts_under=checkouts_under)

    def start(self, log: logging.Logger) -> None:
        """Keep every backend's view current, for a long-lived process (the Jupyter server)."""
        for backend in self.backends.values():
            backend.start(log)

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()

    @property
    def backend(self) -> Backend:
        """The default backend."""
        return self.backends[self.default]

    def target(self, backend: str | None) -> Backend:
        if backend is None:
            return self.backend
        if backend not in self.backends:
            raise DistrainError(f"backend {backend!r} is not enabled on this server; enabled: "
                                f"{', '.join(self.backends)}")
        return self.backends[backend]

    def backend_of(self, name: str) -> Backend:
        for backend in self.backends.values():
            if backend.exists(name):
                return backend
        raise JobNotFound(name)

    def prepare(self, raw: Any, base_dir: Path | None = None, backend: str | None = None,
                carried: bytes | None = None) -> tuple[dict, bytes | None]:
        """Validate a spec, apply the admin's rules and pin its code; raises SpecError listing every problem.
        With code.changes_from, the checkout's snapshot is taken: the spec and the snapshot's bundle are
        returned. A spec whose code.snapshot was taken before comes with its bundle (`carried`)."""
        target = self.target(backend)
        spec = self.rules(target).apply(spec_.validate(raw))
        spec = code.resolve(spec, Path(base_dir or Path.cwd()), self.credentials_for(spec, target))
        source = spec.get("code", {})
        if "changes_from" in source:
            self.check_checkout(Path(source["changes_from"]))
            return snapshot.pin(spec)
        if "snapshot" not in source:
            return spec, None
        if carried is None or hashlib.sha256(carried).hexdigest() != source["snapshot"]["sha256"]:
            raise SpecError([FieldError("code.snapshot", "filled in at submit from code.changes_from, a checkout "
                                                         "whose changes the job runs")])
        return spec, carried

    def check_checkout(self, checkout: Path) -> None:
        """A checkout (resolved: no '..' or link left) that code.changes_from may name: one under
        `checkouts_under`."""
        if self.checkouts_under and not checkout.is_relative_to(self.checkouts_under):
            raise SpecError([FieldError("code.changes_from", f"{checkout} is outside the server's root "
                                                             f"({self.checkouts_under}): name a checkout under it")])

    def rules(self, backend: Backend) -> AdminRules:
        """The admin's rules for jobs on `backend`."""
        return AdminRules.from_config(self.config, backend.default_host_paths)

    @staticmethod
    def credentials_for(spec: dict, backend: Backend) -> dict | None:
        """The stored secret the spec's code.credentials names, if any, once known to be for code.git's host."""
        source = spec.get("code", {})
        if not source.get("credentials"):
            return None
        credentials = backend.credentials(source["credentials"])
        code.check_credentials_host(source["git"], source["credentials"], credentials)
        return credentials

    def submit(self, raw: Any, base_dir: Path | None = None, dry_run: bool = False,
               backend: str | None = None, carried: bytes | None = None) -> JobRecord | dict:
        """Start a job; a dry run checks everything a submit checks and returns the spec it would run."""
        target = self.target(backend)
        spec, bundle = self.prepare(raw, base_dir, backend, carried)
        if self.exists(spec["name"]):
            raise JobConflict(spec["name"])
        if sweep.is_sweep(spec):
            taken = [trial["name"] for trial in sweep.trials(spec) if self.exists(trial["name"])]
            if taken:
                raise SpecError([FieldError("name", f"its trials would be named {', '.join(taken[:3])}"
                                                    f"{', ...' if len(taken) > 3 else ''}, as jobs that exist are; "
                                                    "choose another name")])
        over = self.accounts.over_budget(spec, self.config.owner, warn=not dry_run)
        if dry_run:
            target.check(spec)
            return spec
        return self.warned(target, target.submit(spec, bundle, self.webhooks.of_job(spec["name"], self.config.owner)),
                           over)

    def restart(self, name: str, raw: Any = None, base_dir: Path | None = None, repin: bool = False) -> JobRecord:
        """Begin the job's next run, from its spec (under the admin's rules of now) or an edited one; its
        snapshot stays, unless the edited spec takes a new one (code.changes_from) or has none. To `repin`, its
        ref is pinned again: the run takes the commit the ref names now, without the snapshot."""
        backend = self.backend_of(name)
        job = backend.get(name, events=0)
        spec = job["spec"]
        if sweep.is_sweep(spec):
            raise DistrainError(f"{name!r} is a sweep, which runs once; clone it to sweep again")
        hooks = self.webhooks.of_job(name, job["owner"])
        if repin:
            raw = code.unpinned(spec if raw is None else raw)
        edited: dict | None
        if raw is not None:
            edited, bundle = self.prepare(raw, base_dir, backend.name, backend.snapshot(name))
        else:
            self.credentials_for(spec, backend)  # the secret may have been stored again since, for another host
            ruled = self.rules(backend).apply(spec)
            edited, bundle = ruled if ruled != spec else None, None
        over = self.accounts.over_budget(edited or spec, job["owner"], but=name)
        return self.warned(backend, backend.restart(name, edited, bundle, hooks), over)

    @staticmethod
    def warned(backend: Backend, job: JobRecord, over_budget: FieldError | None) -> JobRecord:
        """The job just submitted or restarted, its budget's warning (where the admin's budgets warn) recorded on it."""
        if over_budget is None:
            return job
        backend.record(job["name"], Event(reasons.OVER_BUDGET, over_budget.message, type="Warning"))
        return backend.get(job["name"])

    def clone(self, name: str, changes: Any = None, base_dir: Path | None = None,
              dry_run: bool = False, reproduce: bool = False) -> JobRecord | dict:
        """Submit a new job from `name`'s spec (so the same pinned commit and snapshot), with top-level fields
        replaced; to `reproduce` it, also on the image its pods ran, by digest, when they reported one. A dry
        run returns the spec it would submit."""
        if changes is not None and not isinstance(changes, dict):
            raise SpecError([FieldError("", "a clone's changes must be an object of spec fields")])
        job = self.get(name)
        pinned = pinned_image(job) if reproduce else None
        raw = {**job["spec"], **({"image": pinned} if pinned else {}), **(changes or {})}
        raw.pop("trial_of", None)  # a clone of a trial is no sweep's
        if not (changes or {}).get("name"):
            raw["name"] = self.free_name(name)
        backend = self.backend_of(name)
        return self.submit(raw, base_dir, dry_run=dry_run, backend=backend.name, carried=backend.snapshot(name))

    def snapshot(self, name: str) -> bytes | None:
        """The bundle of the snapshot of changes the job runs, if it runs one."""
        return self.backend_of(name).snapshot(name)

    def code_now(self, name: str) -> dict:
        """The code the job runs: a directory (`path`: its files as they are when a run starts), or a repository
        (`git`, `ref`, the pinned `commit`, the `snapshot` of changes if any) with what its ref names now
        (code.ref_now)."""
        spec = self.get(name, events=0)["spec"]
        source = spec.get("code", {})
        if "git" not in source:
            return {"path": source.get("path")}
        pinned = {"git": source["git"], "ref": source["ref"], "commit": source.get("commit"),
                  "snapshot": source.get("snapshot")}
        try:
            credentials = self.credentials_for(spec, self.backend_of(name))
        except DistrainError as e:  # the secret is gone, or is for another host now
            return {**pinned, "head": None, "behind": None, "unreachable": str(e)}
        return {**pinned, **code.ref_now(source, credentials)}

    def last_with_code(self, source: dict, looked_at: int = 100) -> dict | None:
        """Of the `looked_at` newest jobs, the newest whose code is `source`'s repository or directory (a sweep's
        trial stands for its sweep), for a new job's form to start from: its `name`, `backend` and `spec`, and
        `next_name`, one free for the next. None without one, or where the jobs cannot be read now."""
        try:
            for summary in reversed(self.list()[-looked_at:]):
                job = self.get(summary["name"], events=0)
                if not sweep.is_sweep(job["spec"]) and repo.same_code(job["spec"].get("code"), source):
                    return {"name": job["name"], "backend": job["backend"], "spec": job["spec"],
                            "next_name": self.free_name(job["name"])}
        except DistrainError:
            pass
        return None

    def free_name(self, name: str, first: bool = False) -> str:
        """`name-2`, `name-3`, ... (`name` itself `first`): the first that no job uses, within the name length
        limit."""
        longest = spec_.schema()["properties"]["name"]["maxLength"]
        candidates = itertools.chain([name[:longest]] if first else [],
                                     (f"{name[:longest - 1 - len(str(n))]}-{n}" for n in itertools.count(2)))
        return next(c for c in candidates if not self.exists(c))  # another owner's names are taken too

    def get(self, name: str, events: int = 20) -> JobRecord:
        """The job as its backend reports it, its events' messages `printable`: every event shown (API, CLI) comes
        through here, whoever recorded it, and none can print lines of its own."""
        job = self.backend_of(name).get(name, events)
        if "events" in job:
            job["events"] = [{**e, "message": printable(e["message"])} for e in job["events"]]
        return job

    def run(self, name: str, run: int | None = None) -> JobRecord:
        """The job as its run `run` is or was (default: the current one): an earlier run with its spec, what it ran
        on and its end as the restart that ended it kept them."""
        job = self.get(name, events=0)
        if run is None or run == job["run"]:
            return job
        if not 1 <= run < job["run"]:
            raise RunNotFound(name, run, job["run"])
        if (kept := self.backend_of(name).earlier_run(name, run)) is None:
            raise NotFound(f"run {run} of job {name!r} was not kept: it ended before this version kept a job's runs")
        return cast(JobRecord, {**job, **kept})

    def view(self, name: str) -> JobRecord:
        """The job as its page and `distrain get` show it: `get`'s, with its replicas' progress while it runs."""
        job = self.get(name)
        if job["phase"] == Phase.RUNNING:
            job["progress"] = self.progress.of_job(self.backends[job["backend"]], name, lambda: job, self.scalars_of)
        job["cost"] = self.accounts.cost(job)
        return job

    def list(self) -> list[JobSummary]:
        """Every job, as the list shows it, oldest first."""
        return sorted((job for b in self.backends.values() for job in b.list()), key=lambda job: job["created"])

    def listed(self) -> builtins.list[JobSummary]:
        """`list`'s jobs as the REST list and `distrain list` show them: a running one with its progress."""
        jobs = self.list()
        for i, job in enumerate(jobs):
            if job["phase"] == Phase.RUNNING:
                backend, name = self.backends[job["backend"]], job["name"]
                jobs[i] = cast(JobSummary, {**job, "progress": furthest_behind(
                    self.progress.of_job(backend, name, lambda: backend.get(name, 0), self.scalars_of))})
        return jobs

    def finished_before(self, moment: float, phases: Collection[str] = ()) -> builtins.list[JobSummary]:
        """The jobs that finished before `moment` (a time.time()), only those in `phases` if any are given."""
        return [job for job in self.list() if job["finished"] is not None and job["finished"] < moment
                and (not phases or job["phase"] in phases)]

    def expired(self, moment: float, phases: Collection[str] = ()) -> builtins.list[JobSummary]:
        """The finished jobs whose time to be kept (policy.ttl_after_finished) was over at `moment`, only those
        in `phases` if any are given."""
        return [job for job in self.list() if job["expires"] is not None and job["expires"] <= moment
                and (not phases or job["phase"] in phases)]

    def delete_expired(self, moment: float, phases: Collection[str] = (),
                       purge_output: bool = False) -> Iterator[tuple[JobSummary, DistrainError | None]]:
        """Delete the jobs expired at `moment` (see expired), one by one as the iterator is read: each job with
        the error that kept it from being deleted, None once it is; raises if they cannot be listed."""
        return self.delete_each(self.expired(moment, phases), purge_output)

    def delete_each(self, jobs: Collection[JobSummary],
                    purge_output: bool = False) -> Iterator[tuple[JobSummary, DistrainError | None]]:
        """Delete the jobs one by one as the iterator is read: each with the error that kept it from being
        deleted, None once it is."""
        for job in jobs:
            try:
                self.delete(job["name"], purge_output=purge_output)
            except DistrainError as e:
                yield job, e
            else:
                yield job, None

    def stop(self, name: str) -> JobRecord:
        return self.backend_of(name).stop(name)

    def delete(self, name: str, purge_output: bool = False) -> None:
        """Delete the job; a sweep is stopped first (it launches no more trials), then its trials go."""
        backend = self.backend_of(name)
        spec = backend.get(name, events=0)["spec"]
        if sweep.is_sweep(spec):
            backend.stop(name)
            for trial in self.trials_of(backend, name):
                backend.delete(trial["name"], purge_output=purge_output)
        backend.delete(name, purge_output=purge_output)

    @staticmethod
    def trials_of(backend: Backend, name: str) -> builtins.list[JobSummary]:
        """The sweep's trials that were launched (and not deleted since), as the list shows them."""
        return [job for job in backend.list() if job["trial_of"] == name]

    def trials(self, name: str) -> dict:
        """A sweep's table, best first (each trial's swept values, phase, metric's points), and its `best` succeeded."""
        backend = self.backend_of(name)  # asked once: on Kubernetes, whether the job exists is a request
        spec = backend.get(name, events=0)["spec"]
        if not sweep.is_sweep(spec):
            raise DistrainError(f"job {name!r} is not a sweep (it has no sweep section)")
        metric, launched = spec["sweep"]["metric"], {job["name"]: job for job in self.trials_of(backend, name)}
        rows, tags = [], set()
        for number, (trial, values) in enumerate(sweep.trial_specs(spec), 1):
            job = launched.get(trial["name"])
            tag, points = self.metric_of(backend, job, metric.get("tag")) if job else (None, [])
            tags.add(tag)
            rows.append({"name": trial["name"], "number": number, "phase": job["phase"] if job else None,
                         "hyperparameters": values,
                         "step": points[-1][0] if points else None, "value": points[-1][1] if points else None,
                         "points": points, "started": iso(job["started"]) if job else None,
                         "finished": iso(job["finished"]) if job else None})
        rows = sweep.ranked(rows, metric["goal"])
        best = next((row["name"] for row in rows if row["phase"] == "Succeeded" and row["value"] is not None), None)
        tag = metric.get("tag") or min((t for t in tags if t), default=None)
        return {"name": name, "metric": {"tag": tag, "goal": metric["goal"]}, "best": best, "trials": rows}

    def metric_of(self, backend: Backend, job: JobSummary, tag: str | None) -> tuple[str | None, sweep.Points]:
        """The tag a trial logged and its points of the sweep's metric, thinned; none where they cannot be read now
        (Kubernetes: no TensorBoard, or not answering yet). A finished run's are kept (they change no more): a
        sweep's view, asked every few seconds, reads again its running trials' alone."""
        key = (job["backend"], job["name"], job["run"], job["started"], tag)
        if (kept := self.finished_metrics.pop(key, None)) is not None:  # each step one of the GIL's: threads share it
            self.finished_metrics[key] = kept  # the most recently asked last
            return kept
        try:
            spec = backend.get(job["name"], 0)["spec"]
            found = self.scalars_of(backend.tensorboard(spec), tag, job["started"])
        except DistrainError:
            return None, []
        logged = found["tag"], sweep.thinned(sweep.metric_points(spec, found))
        if job["phase"] in FINISHED:
            self.finished_metrics[key] = logged
            while len(self.finished_metrics) > KEPT_METRICS:
                self.finished_metrics.popitem(last=False)
        return logged

    def finetune(self, name: str, changes: Any = None, base_dir: Path | None = None,
                 dry_run: bool = False) -> JobRecord | dict:
        """A new job from the sweep's best trial (its spec and code) that resumes from that trial's output:
        `changes` replace its top-level fields, but for hyperparameters, which are merged into the trial's."""
        best = self.trials(name)["best"]
        if best is None:
            raise DistrainError(f"sweep {name!r} has no trial that succeeded with a value of its metric yet")
        if changes is not None and not isinstance(changes, dict):
            raise SpecError([FieldError("", "a fine-tune's changes must be an object of spec fields")])
        changes = dict(changes or {})
        if isinstance(changes.get("hyperparameters"), dict):
            changes["hyperparameters"] = {**self.get(best, events=0)["spec"]["hyperparameters"],
                                          **changes["hyperparameters"]}
        return self.clone(best, {"name": self.free_name(f"{name}-best", first=True), "resume_from": f"job:{best}",
                                 **changes}, base_dir, dry_run=dry_run)

    def exists(self, name: str) -> bool:
        return any(backend.exists(name) for backend in self.backends.values())

    def logs(self, name: str, **options: Any) -> Iterator[LogLine]:
        """The job's lines; `run` picks one of its runs (default: the current one)."""
        return self.backend_of(name).logs(name, **options)

    def log_files(self, name: str, replica: str | None = None, run: int | None = None) -> dict[str, Path]:
        return self.backend_of(name).log_files(name, replica, run)

    def log_dir(self, name: str, run: int | None = None) -> Path:
        """The directory holding every log file of a run of the job, the current one by default (watched by
        live streams)."""
        return self.backend_of(name).log_dir(name, run)

    def metrics(self, name: str) -> builtins.list[dict]:
        return self.backend_of(name).metrics(name)

    def stacks(self, name: str, replica: str | None = None, kept: bool = False) -> dict:
        return self.backend_of(name).stacks(name, replica, kept)

    def waiting(self, name: str) -> dict:
        return self.backend_of(name).waiting(name)

    def outlook(self, spec: dict, backend: str | None = None) -> builtins.list[FieldError]:
        """What would keep a checked spec's job waiting were it submitted now, as warnings (a sweep's trials
        are launched as there is room, so none for a sweep), and its budget problem where budgets warn. A cluster
        that cannot be read for it is a warning."""
        if sweep.is_sweep(spec):
            return self.accounts.warning(spec, self.config.owner)
        try:
            return [*self.accounts.warning(spec, self.config.owner), *self.target(backend).outlook(spec)]
        except DistrainError as e:
            return [FieldError("", f"whether it would wait is not known: {e}")]

    def scalars(self, name: str, tag: str | None = None, run: int | None = None) -> dict:
        """What the job logged to event files under its output directory (scalars.Scalars.of): locally read here, on
        Kubernetes asked of the job's TensorBoard; split into the current run's points (or `run`'s) and earlier
        runs'."""
        job = self.run(name, run)
        return self.scalars_of(self.backend_of(name).tensorboard(job["spec"]), tag, *metrics_window(job))

    @functools.cached_property
    def event_files(self) -> Scalars:
        """The local jobs' event files, followed as they grow for as long as this manager lives."""
        from .scalars import Scalars  # TensorBoard's protos: not for every command of the CLI

        return Scalars()

    def scalars_of(self, target: TensorBoardTarget, tag: str | None = None, since: float | None = None,
                   until: float | None = None) -> dict:
        """What scalars answers, from where a job's TensorBoard is, for the run of the job started at `since` (and
        replaced at `until`, an earlier run: metrics_window)."""
        from .scalars import from_tensorboard

        if isinstance(target, EventFiles):
            return self.event_files.of(target, tag, since, until)
        return from_tensorboard(target, tag, since, until)

    # git credentials: written, listed by name, deleted; never read back
    def set_credentials(self, name: str, username: Any, password: Any, host: Any,
                        backend: str | None = None) -> None:
        """Store a username and password as the secret `name`, for specs' code.credentials whose code.git is
        on `host` (a host name, with its port if the URL has one): it is never sent to another."""
        from .backends.kubernetes.naming import JOB_SECRET_SUFFIXES  # not with every command: the client's import

        errors = [*spec_.credential_errors(name, username, password, host),
                  *(FieldError("name", f"names ending in {suffix} are those of {whose}; choose another")
                    for suffix, whose in JOB_SECRET_SUFFIXES.items() if name.endswith(suffix))]
        if errors:
            raise SpecError(errors, subject="credentials")
        self.target(backend).set_credentials(name, username, password, host.lower())

    def credential_names(self, backend: str | None = None) -> builtins.list[str]:
        return sorted(self.target(backend).credential_names())

    def delete_credentials(self, name: str, backend: str | None = None) -> None:
        if not (spec_.secret_name(name) and name in self.credential_names(backend)):
            raise NotFound(f"no secret named {name!r}")
        self.target(backend).delete_credentials(name)

    def cluster(self, backend: str | None = None) -> dict:
        """What the backend offers, and the admin's limits on it."""
        target = self.target(backend)
        return {**target.cluster(), "limits": self.rules(target).public()}

    def tensorboard(self, name: str, replica: str | None) -> TensorBoardTarget:
        """Where the TensorBoard of this replica (None: the whole job) is: locally, the directory this
        server serves; on Kubernetes, the job's TensorBoard in the cluster."""
        job = self.get(name, events=0)
        names = [r["name"] for r in job["replicas"]]
        if replica is not None and replica not in names:
            raise ReplicaNotFound(name, replica, names)
        return self.backend_of(name).tensorboard(job["spec"], replica)


def opened(config: Distrain, name: str) -> Backend:
    """The backend `name`, or, if it cannot be opened, one that answers every call with why: a server whose
    job database is corrupt still starts, says so on every route, and stops."""
    try:
        return open_backend(config, name)
    except DistrainError as e:
        return cast(Backend, Unopened(name, str(e)))


class Unopened:
    def __init__(self, name: str, why: str):
        self.name, self.why = name, why

    def start(self, log: logging.Logger) -> None:
        log.error("distrain: the %s backend cannot be used: %s", self.name, self.why)

    def close(self) -> None:
        pass

    def __getattr__(self, attribute: str) -> Any:
        raise Unavailable(f"the {self.name} backend cannot be used: {self.why}")

