"""The local backend: every replica a real process on this machine, supervised by a detached process.

State lives in SQLite under the storage root, so any process (CLI, Jupyter server) sees every job:

    <root>/jobs.sqlite
    <root>/jobs/<name>/logs/<run>/<replica>.log
                                               each run's (1, then one more per restart) setup and
                                               replica logs, kept until the job is deleted
    <root>/jobs/<name>/workspace/              the code; exists only while the job runs
    <root>/jobs/<name>/snapshot.bundle         the checkout's changes the job runs (code.snapshot), if any
    <root>/outputs/owners/<owner>/<name>/      default output directory, kept after the job is deleted
    <root>/volumes/<volume>/                   named volumes for data and output (outputs in owners/<owner>/,
                                               see storage.py)
    <root>/secrets/<name>.json                 git credentials (mode 0600)
    <root>/envs/<hash>/                        a Python environment per requirements.txt, reused (pyenv.py)
    <root>/locks/<name>                        held while an operation changes the job (see `changing`)
"""

from __future__ import annotations

import builtins  # `list` is also a method name below
import errno
import fcntl
import json
import logging
import os
import platform
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, cast

import psutil

from .. import logs, snapshot, storage
from ..errors import DistrainError, FieldError, JobConflict, JobNotFound, SpecError, StorageFull
from ..policy import FINISHED, Phase, run_ended
from ..spec import expires, gpus, replicas
from ..store import Store
from ..sweep import is_sweep
from . import procs
from ..owners import current_owner, sees
from ..records import SUMMARY_FIELDS, EventFiles, EventRecord, JobRecord, JobSummary

if TYPE_CHECKING:
    from ..config import Distrain

STOP_GRACE_SECONDS = 10.0
SUPERVISOR = [sys.executable, "-m", "jupyter_distrain.backends.supervisor"]
LAUNCH_SECONDS = 60  # the most a job's supervisor may take to start
SNAPSHOT_LIMIT = 64 << 20  # bytes of a checkout's changes a job carries (code.snapshot)


class LocalBackend:
    name = "local"
    default_host_paths: tuple[str, ...] | None = None  # this user's own machine: any directory they can read

    def __init__(self, root: Path, owner: str | None = None, see_all: bool = False, others_outputs: bool = False):
        """The jobs under `root` that `owner` (default: this user, base.current_owner) sees: their own, those
        made before jobs had owners, and with `see_all` every one. Their jobs read other owners' outputs only
        with `others_outputs`."""
        self.root = Path(root).resolve()
        self.store = Store(self.root / "jobs.sqlite")
        self.owner = owner or current_owner()
        self.see_all = see_all
        self.others_outputs = others_outputs
        self.launcher: subprocess.Popen | None = None  # while a long-lived process uses this backend
        self.launching = threading.Lock()  # one exchange with the launcher at a time

    @classmethod
    def from_config(cls, config: Distrain) -> LocalBackend:
        return cls(Path(config.root), config.owner, config.see_all_owners, config.read_others_outputs)

    def start(self, log: logging.Logger) -> None:
        """Nothing to keep current: every call reads the store, and supervisors run the jobs. Clears what a
        killed process left: the lock files of jobs it was submitting. Keeps a launcher ready (see
        supervisor.serve), which ends with this process."""
        for lock in (self.root / "locks").glob("*"):
            with self.changing(lock.name, wait=False):
                pass  # unless someone holds it, it goes with no job of its name
        self.launcher = subprocess.Popen([*SUPERVISOR, "--root", str(self.root), "--launcher"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                         env=self._supervisor_env(), start_new_session=True)

    def close(self) -> None:
        if self.launcher:
            self.launcher.communicate()  # its input closed, it exits
        self.store.close()

    # where things are
    def job_dir(self, name: str) -> Path:
        return self.root / "jobs" / name

    def record(self, name: str) -> dict:
        """The job's row as stored (no reconciling); JobNotFound if there is none, or it is not the owner's."""
        job = self.store.job(name)
        if job is None or not self.visible(job):
            raise JobNotFound(name)
        return job

    def visible(self, job: dict) -> bool:
        return sees(self.owner, job["owner"], self.see_all)

    def log_dir(self, name: str, run: int | None = None) -> Path:
        """The log directory of run `run` (default: the current run)."""
        job = self.record(name)
        return self._log_dir(name, logs.run_of(name, run, job["run"]))

    def _log_dir(self, name: str, run: int) -> Path:
        return self.job_dir(name) / "logs" / str(run)

    def workspace(self, name: str) -> Path:
        return self.job_dir(name) / "workspace"

    def volume_root(self, source: dict | None) -> Path:
        """The root of the volume `source` names (the default outputs directory for None), or its host path."""
        if source is None:
            return self.root / "outputs"
        return Path(source["host_path"]) if "host_path" in source else self.root / "volumes" / source["volume"]

    def output_dir(self, spec: dict, owner: str) -> Path:
        """Where a job of `owner` writes its output (storage.output_parts): a host path, else its owner's own
        directory of its volume."""
        if "host_path" in spec.get("output", {}):
            return Path(spec["output"]["host_path"])
        return self.volume_root(spec.get("output")).joinpath(*storage.output_parts(spec, owner))

    def output_of(self, spec: dict) -> Path:
        """Where the job of this spec writes its output: as recorded, else (a trial not launched yet) where a job
        of this backend's owner would."""
        job = self.store.job(spec["name"])
        return Path(job["output_dir"]) if job else self.output_dir(spec, self.owner)

    def in_volume(self, path: Path) -> tuple[Path, tuple[str, ...]] | None:
        """The volume root holding the resolved `path` (the outputs directory, or a volume) and the parts of
        `path` within it; None for a path outside every volume."""
        for volumes, depth in ((self.root / "outputs", 0), (self.root / "volumes", 1)):
            if path.is_relative_to(volumes) and len(path.relative_to(volumes).parts) >= depth:
                parts = path.relative_to(volumes).parts
                return volumes.joinpath(*parts[:depth]), parts[depth:]
        return None

    def purgeable(self, output: Path, owner: str) -> bool:
        """Whether deleting the resolved path `output` deletes the output of a job of `owner` and nothing else:
        a directory inside the owner's own directory of a volume (storage.purgeable), never the storage root, a
        volume, another owner's directory, or anything outside the root (a `..` or a symbolic link cannot lead
        there: the path is resolved first)."""
        found = self.in_volume(output)
        return found is not None and storage.purgeable(found[1], owner)

    def input_dir(self, spec: dict) -> Path:
        if "data" not in spec:
            return self.job_dir(spec["name"]) / "input"
        return self.volume_root(spec["data"]).joinpath(spec["data"].get("path", ""))

    def event_files(self, spec: dict, replica: str | None = None) -> Path:
        """Where a replica writes event files: <output>/<logdir>/<replica>; without a replica, the parent."""
        logdir = self.output_of(spec) / spec["tensorboard"]["logdir"]
        return logdir / replica if replica else logdir

    def tensorboard(self, spec: dict, replica: str | None = None) -> EventFiles:
        """The job's event files (a replica's under its name), for the TensorBoard the server runs."""
        return EventFiles(self.event_files(spec))

    def _secret_file(self, secret: str) -> Path:
        return self.root / "secrets" / f"{secret}.json"

    def _stored(self, secret: str) -> dict | None:
        """The stored secret, if this owner sees it (theirs, or stored before secrets had owners)."""
        try:
            stored = {"owner": "", "host": "", **json.loads(self._secret_file(secret).read_text())}
        except FileNotFoundError:
            return None
        return stored if self.visible(stored) else None

    def credentials(self, secret: str) -> dict:
        stored = self._stored(secret)
        if stored is None:
            raise SpecError([FieldError("code.credentials", f"no secret named {secret!r} of yours (create it with "
                                                            f"'distrain secret set {secret} --host HOST')")])
        return {key: stored[key] for key in ("username", "password", "host")}

    def set_credentials(self, secret: str, username: str, password: str, host: str) -> None:
        """Store the secret, or replace one of this owner's; another owner's name is refused."""
        path = self._secret_file(secret)
        if path.exists() and self._stored(secret) is None:
            raise SpecError([FieldError("name", f"{secret!r} is another user's secret; choose another name")],
                            subject="credentials")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"username": username, "password": password, "host": host, "owner": self.owner}, f)
        except OSError as e:
            path.unlink(missing_ok=True)  # no secret half written
            if e.errno == errno.ENOSPC:
                raise StorageFull(f"secret {secret!r} was not stored: the disk holding {path.parent} is full") from None
            raise

    def credential_names(self) -> builtins.list[str]:
        return [path.stem for path in (self.root / "secrets").glob("*.json") if self._stored(path.stem)]

    def delete_credentials(self, secret: str) -> None:
        if self._stored(secret) is not None:
            self._secret_file(secret).unlink(missing_ok=True)

    def exists(self, name: str) -> bool:
        return self.store.job(name) is not None

    # lifecycle
    @contextmanager
    def changing(self, name: str, wait: bool = True) -> Iterator[bool]:
        """Hold the job's lock, which every operation that changes a job (submit, stop, restart, delete) takes
        in every process, so any interleaving of them ends where one after the other would. Without `wait`,
        only if no one holds it (yields whether it is held now). The lock file exists only while its job does;
        a waiter that got the lock of a file deleted meanwhile tries again."""
        path = self.root / "locks" / name
        path.parent.mkdir(exist_ok=True, mode=0o700)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                yield False
                return
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        try:
            yield True
        finally:
            if not self.exists(name):
                path.unlink()
            os.close(fd)

    def submit(self, spec: dict, snapshot: bytes | None = None) -> JobRecord:
        self.check(spec)
        with self.changing(spec["name"]):
            try:
                self.store.insert_job(spec["name"], self.name, spec, str(self.output_dir(spec, self.owner)),
                                      replicas(spec), self.owner)
            except sqlite3.IntegrityError:
                raise JobConflict(spec["name"]) from None
            self._keep_snapshot(spec, snapshot)
            self.store.add_event(spec["name"], "Submitted", "job accepted")
            self._launch(spec["name"])
            return self.get(spec["name"])

    def check(self, spec: dict, owner: str | None = None) -> None:
        """Refuse, before anything is created, what this machine cannot run, and what a job of `owner` (default:
        this backend's) may not touch."""
        owner = self.owner if owner is None else owner
        errors = self._storage_errors(spec, owner)
        wanted = sum(r["count"] * gpus(spec, role) for role, r in spec["replicas"].items())
        have = len(procs.gpus())
        if wanted > have:
            per_role = ", ".join(
                f"{r['count']} {role} x {gpus(spec, role)}" for role, r in spec["replicas"].items() if gpus(spec, role)
            )
            errors.append(FieldError("replicas", f"{wanted} GPUs requested ({per_role}); this machine has {have}"))
        if error := snapshot.too_large(spec, SNAPSHOT_LIMIT, "a local job keeps"):
            errors.append(error)
        if "data" in spec and not self.input_dir(spec).is_dir():
            errors.append(FieldError(storage.source_field("data", spec["data"]),
                                     f"no such directory: {self.input_dir(spec)}"))
        if "queue" in spec:
            errors.append(FieldError("queue", "only the Kubernetes backend queues jobs (through Kueue); this machine "
                                              "runs a job at once: leave the queue out"))
        resume = spec.get("resume_from")
        if resume and not self.resume_path(resume, owner).exists():
            errors.append(FieldError("resume_from", f"nothing to resume from at {self.resume_path(resume, owner)}"))
        if errors:
            raise SpecError(errors)

    def _storage_errors(self, spec: dict, owner: str) -> list[FieldError]:
        """What of the storage root the spec would read or write that a job of `owner` may not (storage.py):
        another owner's outputs, the root's own files."""
        errors = []
        if "host_path" in spec.get("output", {}):
            path = Path(spec["output"]["host_path"]).resolve()
            found = self.in_volume(path)
            if found and not storage.purgeable(found[1], owner):
                errors.append(FieldError("output.host_path", f"{path} is not inside your own directory of the volume "
                                                             f"({found[0].joinpath(*storage.area(owner))})"))
            elif not found and path.is_relative_to(self.root):
                errors.append(FieldError("output.host_path", f"{path} is inside distrain's own storage ({self.root})"))
        read = [(storage.source_field("data", spec["data"]), self.input_dir(spec))] if "data" in spec else []
        if spec.get("resume_from", "").startswith("/"):
            read.append(("resume_from", Path(spec["resume_from"])))
        for field, path in ((field, path.resolve()) for field, path in read):
            if problem := self.reading_problem(path, owner):
                errors.append(FieldError(field, f"{path} {problem}"))
        return errors

    def reading_problem(self, path: Path, owner: str) -> str | None:
        """Why a job of `owner` may not read the resolved `path` (None: it may): storage.reading_problem in a
        volume, whose owners/ says whose outputs it holds; the rest of the storage root is distrain's own."""
        found = self.in_volume(path)
        if found is None:
            return f"is inside distrain's own storage ({self.root})" if path.is_relative_to(self.root) else None
        owners = found[0] / storage.OWNERS
        holds_others = owners.is_dir() and any(entry.name != storage.owner_dir(owner) for entry in owners.iterdir())
        return storage.reading_problem(found[1], owner, self.others_outputs, holds_others)

    def resume_path(self, resume_from: str, owner: str) -> Path:
        """What `resume_from` names for a job of `owner`: a path, or job:NAME, the output of that job of theirs
        (or one they see), or, once it is deleted, its directory of theirs in the default outputs."""
        if not resume_from.startswith("job:"):
            return Path(resume_from)
        name = resume_from[4:]
        earlier = self.store.job(name)
        if earlier and self.visible(earlier):
            return Path(earlier["output_dir"])
        return self.volume_root(None).joinpath(*storage.area(owner), name)

    def _launch(self, name: str) -> None:
        """Start the detached supervisor, which keeps running after this process exits: through the launcher,
        or (without one, or if it is gone) from a new interpreter."""
        self.log_dir(name).mkdir(parents=True, exist_ok=True)
        message = self._launched(name)
        if message is None:
            result = subprocess.run([*SUPERVISOR, "--root", str(self.root), name], stdin=subprocess.DEVNULL,
                                    capture_output=True, text=True, timeout=LAUNCH_SECONDS, env=self._supervisor_env())
            message = result.stderr.strip()[-2000:] or f"exit code {result.returncode}" if result.returncode else ""
        if message:
            self.store.update_job(name, phase=str(Phase.FAILED), reason="SupervisorFailed", message=message,
                                  finished=time.time())
            raise DistrainError(f"could not start the job's supervisor: {message}")

    def _launched(self, name: str) -> str | None:
        """What the launcher says of starting the job's supervisor ("" once started); None without one."""
        with self.launching:
            if not self.launcher:
                return None
            ask, answers = self.launcher.stdin, self.launcher.stdout
            assert ask and answers  # pipes
            try:
                ask.write(name + "\n")
                ask.flush()
                answer = answers.readline() if select.select([answers], [], [], LAUNCH_SECONDS)[0] else ""
            except OSError:
                answer = ""
            if answer:
                return json.loads(answer)
            self.launcher.kill()  # gone, or broken: every later launch starts an interpreter
            self.launcher.wait()
            self.launcher = None
            return None

    def _supervisor_env(self) -> dict[str, str]:
        return {**os.environ, "DISTRAIN_HOME": str(self.root)}  # replicas' `distrain` commands see these jobs

    def get(self, name: str, events: int = 20) -> JobRecord:
        job = self._view(self.reconcile(self.record(name)))
        if events:
            job["events"] = cast(builtins.list[EventRecord], self.store.events(name, limit=events))
        return job

    def list(self) -> list[JobSummary]:
        jobs = [job for job in self.store.summaries() if self.visible(job)]
        if any(self.reconcile(job) is not job for job in jobs if job["phase"] not in FINISHED):
            jobs = [job for job in self.store.summaries() if self.visible(job)]  # a run was found ended
        return [cast(JobSummary, {**{key: job[key] for key in SUMMARY_FIELDS if key != "expires"},
                                  "expires": expires(job["ttl_after_finished"], job["finished"])}) for job in jobs]

    @staticmethod
    def _view(row: dict) -> JobRecord:
        """The job as every backend reports it: its row, with its logs (see `own_logs`); each replica that
        started runs on this machine."""
        replicas = [{**r, "node": platform.node() if r["pid"] else None} for r in row["replicas"]]
        return cast(JobRecord, {**row, "replicas": replicas, "logs": own_logs(row),
                                "expires": expires(row["spec"]["policy"].get("ttl_after_finished"), row["finished"])})

    def reconcile(self, job: dict) -> dict:
        """A job that nothing runs is never reported as running: its supervisor vanished (its replicas are
        Lost), or the process starting its run ended before the supervisor started (no pid, and no operation
        holds the job's lock). `job` may have been read before a launch or a restart: then it is left as is."""
        if job["phase"] in FINISHED:
            return job
        if job["supervisor_pid"]:
            if procs.alive(job["supervisor_pid"], job["supervisor_started"]):
                return job
            return self._ended_vanished(job)
        with self.changing(job["name"], wait=False) as abandoned:
            return self._ended_vanished(job) if abandoned and self.exists(job["name"]) else job

    def _ended_vanished(self, job: dict) -> dict:
        """end_vanished; on a full disk (which the job may have filled, ending its supervisor) its processes end
        all the same, and the job is shown as stored until there is room to record its end."""
        try:
            return self.end_vanished(job["name"], (job["supervisor_pid"], job["supervisor_started"]))
        except StorageFull:
            return job

    def end_vanished(self, name: str, supervisor: tuple[int | None, float | None]) -> dict:
        """Record the end of the job's run whose supervisor, (pid, start time), vanished, or (None, None) never
        started; kill what still runs. Not if its end is recorded, or the job has another supervisor now."""
        with self.store.transaction():  # one reader ends the job, however many notice at once
            job = self.record(name)  # the supervisor may have finished just now, or a new run started
            if job["phase"] in FINISHED or (job["supervisor_pid"], job["supervisor_started"]) != supervisor:
                return job
            for r in job["replicas"]:
                if r["phase"] in FINISHED:
                    continue
                if r["pid"] is None:
                    self.store.update_replica(name, r["name"], phase=str(Phase.STOPPED), reason="NeverStarted")
                    continue
                if procs.alive(r["pid"], r["pid_started"]):
                    procs.signal_group(r["pid"], signal.SIGKILL)
                    reason = "SupervisorVanished"
                else:
                    reason = "ProcessVanished"
                self.store.update_replica(job["name"], r["name"], phase=str(Phase.LOST), reason=reason,
                                          finished=time.time())
            if job["stop_requested"]:
                phase, reason, message = Phase.STOPPED, "Stopped", "stopped by request"
            elif not job["supervisor_pid"]:
                phase, reason, message = (Phase.FAILED, "LaunchInterrupted", "the process starting this run ended "
                                          "before the job's supervisor started: restart the job")
            else:
                phase, reason, message = (Phase.FAILED, "SupervisorVanished",
                                          "the job's supervisor process exited unexpectedly")
            self.store.update_job(job["name"], phase=str(phase), reason=reason, message=message, finished=time.time())
            self.store.add_event(job["name"], reason, message, type="Warning")
        shutil.rmtree(self.workspace(job["name"]), ignore_errors=True)
        return self.record(job["name"])

    def stop(self, name: str) -> JobRecord:
        with self.changing(name):
            return self._stop(name)

    def _stop(self, name: str, timeout: float = STOP_GRACE_SECONDS + 20) -> JobRecord:
        job = self.reconcile(self.record(name))
        if job["phase"] in FINISHED:
            return self.get(name)
        with suppress(StorageFull):  # the disk is full (the job may have filled it): the signal alone stops it
            self.store.update_job(name, stop_requested=1)
        alive = lambda: procs.alive(job["supervisor_pid"], job["supervisor_started"])  # noqa: E731
        if alive():
            os.kill(job["supervisor_pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():  # every process of the job ends before it does
            time.sleep(0.05)
        return self.get(name)

    def restart(self, name: str, spec: dict | None = None, snapshot: bytes | None = None) -> JobRecord:
        """Run the job again from its spec, or from an edited one with the same name."""
        if spec is not None and spec["name"] != name:
            raise SpecError([FieldError("name", f"a restarted job keeps its name {name!r}; clone it for a new name")])
        with self.changing(name):
            job = self.get(name, events=0)
            spec = spec or job["spec"]
            self.check(spec, job["owner"])
            if job["phase"] not in FINISHED:
                self._stop(name)
            self._keep_snapshot(spec, snapshot)
            self.store.reset_job(name, spec, str(self.output_dir(spec, job["owner"])), replicas(spec))
            self.store.add_event(name, "Restarted", "job restarted")
            self._launch(name)
            return self.get(name)

    def snapshot_file(self, name: str) -> Path:
        return self.job_dir(name) / "snapshot.bundle"

    def snapshot(self, name: str) -> bytes | None:
        self.get(name, events=0)  # JobNotFound for another owner's
        path = self.snapshot_file(name)
        return path.read_bytes() if path.is_file() else None

    def _keep_snapshot(self, spec: dict, snapshot: bytes | None) -> None:
        """Store a new bundle of the spec's code.snapshot with the job; drop the stored one if the spec has
        none; else keep it."""
        path = self.snapshot_file(spec["name"])
        if snapshot is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(snapshot)
        elif "snapshot" not in spec.get("code", {}):
            path.unlink(missing_ok=True)

    def delete(self, name: str, purge_output: bool = False) -> None:
        """Stop the job and forget it; its output stays unless purge_output (and it is purgeable). On a full disk
        (which the job may have filled) its end cannot be recorded, but its processes end all the same, and
        its files go before its records, which then have room to go too."""
        with self.changing(name):
            job = self._stop(name)
            output = Path(job["output_dir"]).resolve()
            if purge_output and self.purgeable(output, job["owner"]):
                shutil.rmtree(output, ignore_errors=True)
            shutil.rmtree(self.job_dir(name), ignore_errors=True)
            self.store.delete_job(name)

    # observation
    def cluster(self) -> dict:
        """What this machine offers: named volumes, CPUs, memory, and GPUs not held by running jobs."""
        volumes = self.root / "volumes"
        devices = procs.gpus()
        held = sum(gpus(job["spec"], role)  # by every owner's jobs (a sweep has no replicas: its trials hold them)
                   for job in self.store.jobs() if job["phase"] not in FINISHED
                   for role, _ in replicas(job["spec"]))
        return {
            "backend": self.name,
            "namespaces": [],
            "volumes": sorted(p.name for p in volumes.iterdir() if p.is_dir()) if volumes.is_dir() else [],
            "cpus": os.cpu_count(),
            "memory_bytes": psutil.virtual_memory().total,
            "gpus": {"capacity": len(devices), "available": max(len(devices) - held, 0), "devices": devices},
        }

    def log_files(self, name: str, replica: str | None = None, run: int | None = None) -> dict[str, Path]:
        """Each log file of a run (default: the current one): setup, then the replicas; or only `replica`'s."""
        job = self.record(name)
        run = logs.run_of(name, run, job["run"])
        current = own_logs(job) if run == job["run"] else None
        return logs.run_files(name, self._log_dir(name, run), current, replica)

    def logs(self, name: str, replica: str | None = None, tail: int | None = None, since: str | None = None,
             follow: bool = False, finished: Callable[[], bool] | None = None,
             run: int | None = None) -> Iterator[logs.LogLine]:
        """A run's lines (default: the current run's); to follow, until `finished()` (default: that run ended)."""
        run = logs.run_of(name, run, self.record(name)["run"])
        files = self.log_files(name, replica, run)
        if not follow:
            return logs.read(files, tail=tail, since=since)
        finished = finished or (lambda: run_ended(self.get(name, events=0), run))
        return logs.follow(lambda: files, finished, tail=tail, since=since, directory=self._log_dir(name, run))

    def metrics(self, name: str, interval: float = 0.5) -> builtins.list[dict]:
        """CPU %, resident memory and GPU memory of each running replica's process tree."""
        job = self.reconcile(self.record(name))
        running = {r["name"]: r for r in job["replicas"] if procs.alive(r["pid"], r["pid_started"])}
        trees = {n: procs.tree_usage(r["pid"])[0] for n, r in running.items()}
        for processes in trees.values():
            for p in processes:
                try:
                    p.cpu_percent(None)
                except psutil.Error:
                    pass
        time.sleep(interval)
        on_gpu = procs.gpu_processes()
        gpus = {g["uuid"]: g for g in procs.gpus()} if on_gpu else {}
        result = []
        for r in job["replicas"]:
            sample = {"replica": r["name"], "phase": r["phase"], "cpu_percent": None, "memory_bytes": None,
                      "gpu_memory_mib": None, "gpu_utilization": None}
            if r["name"] in running:
                cpu = 0.0
                for p in trees[r["name"]]:
                    try:
                        cpu += p.cpu_percent(None)
                    except psutil.Error:
                        pass
                sample["cpu_percent"] = round(cpu, 1)
                sample["memory_bytes"] = procs.tree_usage(r["pid"])[1]
                used = [on_gpu[p.pid] for p in trees[r["name"]] if p.pid in on_gpu]
                if used:
                    sample["gpu_memory_mib"] = sum(mem or 0 for _, mem in used)
                    sample["gpu_utilization"] = max(
                        (gpus[uuid]["utilization"] or 0 for uuid, _ in used if uuid in gpus), default=None)
            result.append(sample)
        return result


def own_logs(row: dict) -> builtins.list[str]:
    """A job's logs: setup, then each replica's; a sweep's one log says what its controller did."""
    return ["sweep"] if is_sweep(row["spec"]) else ["setup"] + [r["name"] for r in row["replicas"]]

