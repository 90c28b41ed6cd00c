"""The local backend: every replica a real process on this machine, run by a detached supervisor per job
(supervisor.py), which the backend starts through a launcher (launcher.py). Its jobs' records and files are
under the storage root (storage_root.py), so any process (CLI, Jupyter server) sees every job."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import fcntl
import logging
import os
import platform
import shutil
import signal
import sqlite3
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple, cast

import psutil

from ... import logs, notify, reasons, snapshot, stacks, storage, usage, waits
from ...errors import DistrainError, FieldError, JobConflict, SpecError, StorageFull
from ...policy import FINISHED, Event, Phase, run_ended
from ...private import read_private, write_private
from ...records import SUMMARY_FIELDS, EventFiles, EventRecord, JobRecord, JobSummary, run_record
from ...spec import expires, gpus, replicas
from ...sweep import is_sweep
from . import processes, processstacks
from .credentials import CredentialStore
from .launcher import Launcher

if TYPE_CHECKING:
    from ...config import Distrain

STOP_GRACE_SECONDS = 10.0
SNAPSHOT_LIMIT = 64 << 20  # bytes of a checkout's changes a job carries (code.snapshot)


class Listed(NamedTuple):
    """A list as read at a version of the store, with the rows of its unfinished jobs (whose runs may end
    without a write: a vanished supervisor)."""

    version: int
    jobs: list[JobSummary]
    unfinished: list[dict]


class LocalBackend(CredentialStore):
    name = "local"
    default_host_paths: tuple[str, ...] | None = None  # this user's own machine: any directory they can read

    def __init__(self, root: Path, owner: str | None = None, see_all: bool = False, others_outputs: bool = False):
        super().__init__(root, owner, see_all, others_outputs)
        self.launcher = Launcher(self.root)
        self.notifier = notify.Notifier(self._post_failed)  # the posts of its jobs' events, off the caller's thread
        self.listed: Listed | None = None  # the last list read, for the next while the store does not change

    @classmethod
    def from_config(cls, config: Distrain) -> LocalBackend:
        return cls(Path(config.root), config.owner, config.see_all_owners, config.read_others_outputs)

    def start(self, log: logging.Logger) -> None:
        """Nothing to keep current: every call reads the store, and supervisors run the jobs. Clears what a
        killed process left: the lock files of jobs it was submitting. Keeps a launcher ready (see
        daemon.serve), which ends with this process."""
        for lock in (self.root / "locks").glob("*"):
            with self.changing(lock.name, wait=False):
                pass  # unless someone holds it, it goes with no job of its name
        self.launcher.keep_ready()

    def close(self) -> None:
        self.launcher.close()
        self.store.close()

    def log_dir(self, name: str, run: int | None = None) -> Path:
        """The log directory of run `run` (default: the current run)."""
        job = self.row(name)
        return self._log_dir(name, logs.run_of(name, run, job["run"]))

    def _log_dir(self, name: str, run: int) -> Path:
        return self.job_dir(name) / "logs" / str(run)

    def tensorboard(self, spec: dict, replica: str | None = None) -> EventFiles:
        """The job's event files (a replica's in the logdir, under its name), for the TensorBoard the server runs;
        a sweep's, its trials'."""
        return EventFiles(self.output_of(spec), spec["tensorboard"]["logdir"], is_sweep(spec))

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

    def submit(self, spec: dict, snapshot: bytes | None = None, hooks: dict | None = None) -> JobRecord:
        self.check(spec)
        with self.changing(spec["name"]):
            try:
                self.store.insert_job(spec["name"], self.name, spec, str(self.output_dir(spec, self.owner)),
                                      replicas(spec), self.owner)
            except sqlite3.IntegrityError:
                raise JobConflict(spec["name"]) from None
            self._keep_snapshot(spec, snapshot)
            self._keep_hooks(spec["name"], hooks)
            self.store.add_event(spec["name"], reasons.SUBMITTED, "job accepted")
            self._launch(spec["name"])
            return self.get(spec["name"])

    def check(self, spec: dict, owner: str | None = None) -> None:
        """Refuse, before anything is created, what this machine cannot run, and what a job of `owner` (default:
        this backend's) may not touch."""
        owner = self.owner if owner is None else owner
        errors = self.storage_errors(spec, owner)
        wanted = sum(r["count"] * gpus(spec, role) for role, r in spec["replicas"].items())
        have = len(processes.gpus())
        if wanted > have:
            per_role = ", ".join(
                f"{r['count']} {role} x {gpus(spec, role)}" for role, r in spec["replicas"].items() if gpus(spec, role)
            )
            errors += [FieldError(f"replicas.{role}.resources.gpus",
                                  f"{wanted} GPUs requested ({per_role}); this machine has {have}")
                       for role in spec["replicas"] if gpus(spec, role)]
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

    def _launch(self, name: str) -> None:
        """Start the job's detached supervisor (launcher.py); the job fails if it does not start."""
        self.log_dir(name).mkdir(parents=True, exist_ok=True)
        message = self.launcher.launch(name)
        if message:
            self.store.update_job(name, phase=str(Phase.FAILED), reason=reasons.SUPERVISOR_FAILED, message=message,
                                  finished=time.time())
            raise DistrainError(f"could not start the job's supervisor: {message}")

    def get(self, name: str, events: int = 20) -> JobRecord:
        job = self._view(self.end_if_vanished(self.row(name)))
        if events:
            job["events"] = cast(builtins.list[EventRecord], self.store.events(name, limit=events))
        return job

    def list(self) -> list[JobSummary]:
        """Read again only where the store changed or a run was found ended (a long-lived server's list of
        10,000 jobs, asked every few seconds, is mostly the same)."""
        version, listed = self.store.version(), self.listed
        if listed and listed.version == version and all(self.end_if_vanished(job) is job for job in listed.unfinished):
            return list(listed.jobs)
        jobs = [job for job in self.store.summaries() if self.visible(job)]
        if any(self.end_if_vanished(job) is not job for job in jobs if job["phase"] not in FINISHED):
            jobs = [job for job in self.store.summaries() if self.visible(job)]  # a run was found ended
        summaries = [cast(JobSummary, {**{key: job[key] for key in SUMMARY_FIELDS if key != "expires"},
                                       "expires": expires(job["ttl_after_finished"], job["finished"])})
                     for job in jobs]
        self.listed = Listed(version, summaries, [job for job in jobs if job["phase"] not in FINISHED])
        return list(summaries)

    @staticmethod
    def _view(row: dict) -> JobRecord:
        """The job as every backend reports it: its row, with its logs (see `own_logs`); each replica that
        started runs on this machine."""
        replicas = [{**r, "node": platform.node() if r["pid"] else None} for r in row["replicas"]]
        return cast(JobRecord, {**row, "replicas": replicas, "logs": own_logs(row),
                                "expires": expires(row["spec"]["policy"].get("ttl_after_finished"), row["finished"])})

    def end_if_vanished(self, job: dict) -> dict:
        """`job` (a row), or the job as it ended if nothing runs it any more, since a job that nothing runs is
        never reported as running: its supervisor vanished (its replicas are Lost), or the process starting its
        run ended before the supervisor started (no pid, and no operation holds the job's lock). `job` may have
        been read before a launch or a restart: then it is left as is."""
        if job["phase"] in FINISHED:
            return job
        if job["supervisor_pid"]:
            if processes.alive(job["supervisor_pid"], job["supervisor_started"]):
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
            job = self.row(name)  # the supervisor may have finished just now, or a new run started
            if job["phase"] in FINISHED or (job["supervisor_pid"], job["supervisor_started"]) != supervisor:
                return job
            for r in job["replicas"]:
                if r["phase"] in FINISHED:
                    continue
                if r["pid"] is None:
                    self.store.update_replica(name, r["name"], phase=str(Phase.STOPPED), reason=reasons.NEVER_STARTED)
                    continue
                if processes.alive(r["pid"], r["pid_started"]):
                    processes.signal_group(r["pid"], signal.SIGKILL)
                    reason = reasons.SUPERVISOR_VANISHED
                else:
                    reason = reasons.PROCESS_VANISHED
                self.store.update_replica(job["name"], r["name"], phase=str(Phase.LOST), reason=reason,
                                          finished=time.time())
            if job["stop_requested"]:
                phase, reason, message = Phase.STOPPED, reasons.STOPPED, "stopped by request"
            elif not job["supervisor_pid"]:
                phase, reason, message = (Phase.FAILED, reasons.LAUNCH_INTERRUPTED, "the process starting this run "
                                          "ended before the job's supervisor started: restart the job")
            else:
                phase, reason, message = (Phase.FAILED, reasons.SUPERVISOR_VANISHED,
                                          "the job's supervisor process exited unexpectedly")
            self.store.update_job(job["name"], phase=str(phase), reason=reason, message=message, finished=time.time())
            self.store.add_event(job["name"], reason, message, type="Warning")
        logs.mark_ended(self._log_dir(name, job["run"]))
        shutil.rmtree(self.workspace(job["name"]), ignore_errors=True)
        ended = self.row(job["name"])
        if hooks := self.hooks(name):
            event = notify.RunEvent.of(ended, self.name)
            if self.launcher.process:  # a long-lived process (a Jupyter server's): its own thread posts
                self.notifier.tell(hooks, event)
            else:  # one that may exit once this read is answered (the CLI's)
                self.launcher.tell(hooks, event, self.job_dir(name) / "supervisor.log")
        return ended

    def record(self, name: str, event: Event) -> None:
        self.row(name)  # JobNotFound for none, or another owner's
        self.store.add_event(name, event.reason, event.message, event.replica, event.type)

    def stop(self, name: str) -> JobRecord:
        with self.changing(name):
            return self._stop(name)

    def _stop(self, name: str, timeout: float = STOP_GRACE_SECONDS + 20) -> JobRecord:
        job = self.end_if_vanished(self.row(name))
        if job["phase"] in FINISHED:
            return self.get(name)
        with suppress(StorageFull):  # the disk is full (the job may have filled it): the signal alone stops it
            self.store.update_job(name, stop_requested=1)
        alive = lambda: processes.alive(job["supervisor_pid"], job["supervisor_started"])  # noqa: E731
        if alive():
            os.kill(job["supervisor_pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and alive():  # every process of the job ends before it does
            time.sleep(0.05)
        return self.get(name)

    def restart(self, name: str, spec: dict | None = None, snapshot: bytes | None = None,
                hooks: dict | None = None) -> JobRecord:
        """Run the job again from its spec, or from an edited one with the same name."""
        if spec is not None and spec["name"] != name:
            raise SpecError([FieldError("name", f"a restarted job keeps its name {name!r}; clone it for a new name")])
        with self.changing(name):
            job = self.get(name, events=0)
            spec = spec or job["spec"]
            self.check(spec, job["owner"])
            ended = self._stop(name)  # stopped if it runs
            usage.keep(self.ledger, ended)
            self._keep_snapshot(spec, snapshot)
            self._keep_hooks(name, hooks)
            self.store.reset_job(name, spec, str(self.output_dir(spec, job["owner"])), replicas(spec),
                                 run_record(ended))
            self.store.add_event(name, reasons.RESTARTED, "job restarted")
            self._launch(name)
            return self.get(name)

    def earlier_run(self, name: str, run: int) -> dict | None:
        self.get(name, events=0)  # JobNotFound for another owner's
        return self.store.earlier_run(name, run)

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

    def _keep_hooks(self, name: str, hooks: dict | None) -> None:
        """The run's webhooks (notify.py), which its supervisor reads, mode 0600; none: the file goes."""
        path = self.hooks_file(name)
        if hooks is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, hooks, f"the webhooks of {name}")

    def hooks(self, name: str) -> dict | None:
        """The webhooks of the job's current run, if it has any."""
        return read_private(self.hooks_file(name))

    def _post_failed(self, event: notify.RunEvent, problem: str) -> None:
        self.store.add_event(event.job, reasons.WEBHOOK_FAILED, problem, type="Warning")

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
            usage.keep(self.ledger, job)  # its run, kept once its files are gone: a full disk has room again
            self.store.delete_job(name)

    # observation
    def cluster(self) -> dict:
        """What this machine offers: named volumes, CPUs, memory, and GPUs not held by running jobs."""
        volumes = self.root / "volumes"
        devices = processes.gpus()
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
        job = self.row(name)
        run = logs.run_of(name, run, job["run"])
        current = own_logs(job) if run == job["run"] else None
        return logs.run_files(name, self._log_dir(name, run), current, replica)

    def logs(self, name: str, replica: str | None = None, tail: int | None = None, since: str | None = None,
             follow: bool = False, finished: Callable[[], bool] | None = None,
             run: int | None = None) -> Iterator[logs.LogLine]:
        """A run's lines (default: the current run's); to follow, until `finished()` (default: that run ended)."""
        run = logs.run_of(name, run, self.row(name)["run"])
        files = self.log_files(name, replica, run)
        if not follow:
            return logs.read(files, tail=tail, since=since)
        finished = finished or (lambda: run_ended(self.get(name, events=0), run))
        return logs.follow(lambda: files, finished, tail=tail, since=since, directory=self._log_dir(name, run))

    def stacks(self, name: str, replica: str | None = None, kept: bool = False) -> dict:
        job = self.end_if_vanished(self.row(name))

        def running(names: builtins.list[str]) -> dict[str, int]:
            return {r["name"]: r["pid"] for r in job["replicas"]
                    if r["name"] in names and processes.alive(r["pid"], r["pid_started"])}
        return stacks.requested(job, replica, kept, lambda: processstacks.kept_in(self.log_dir(name)), running,
                                lambda found: processstacks.take(found, self.stack_locks()))

    def waiting(self, name: str) -> dict:
        """A job here waits only while its code is fetched and its requirements installed: its message says so."""
        job = self.get(name, events=0)
        return waits.pending(job, []) if job["phase"] == Phase.PENDING else waits.not_waiting(job)

    def outlook(self, spec: dict) -> builtins.list[FieldError]:
        return []  # a checked job starts at once: this machine queues nothing

    def metrics(self, name: str, interval: float = 0.5) -> builtins.list[dict]:
        """CPU %, resident memory and GPU memory of each running replica's process tree."""
        job = self.end_if_vanished(self.row(name))
        running = {r["name"]: r for r in job["replicas"] if processes.alive(r["pid"], r["pid_started"])}
        trees = {n: processes.tree_usage(r["pid"])[0] for n, r in running.items()}
        for tree in trees.values():
            for p in tree:
                try:
                    p.cpu_percent(None)
                except psutil.Error:
                    pass
        time.sleep(interval)
        on_gpu = processes.gpu_processes()
        devices = {g["uuid"]: g for g in processes.gpus()} if on_gpu else {}
        result = []
        for r in job["replicas"]:
            sample = {"replica": r["name"], "phase": r["phase"], "cpu_percent": None, "memory_bytes": None,
                      "gpu_memory_mib": None, "gpu_utilization": None, "unknown": None}
            if r["name"] in running:
                cpu = 0.0
                for p in trees[r["name"]]:
                    try:
                        cpu += p.cpu_percent(None)
                    except psutil.Error:
                        pass
                sample["cpu_percent"] = round(cpu, 1)
                sample["memory_bytes"] = processes.tree_usage(r["pid"])[1]
                used = [on_gpu[p.pid] for p in trees[r["name"]] if p.pid in on_gpu]
                if used:
                    sample["gpu_memory_mib"] = sum(mem or 0 for _, mem in used)
                    sample["gpu_utilization"] = max(
                        (devices[uuid]["utilization"] or 0 for uuid, _ in used if uuid in devices), default=None)
            result.append(sample)
        return result


def own_logs(row: dict) -> builtins.list[str]:
    """A job's logs: setup, then each replica's; a sweep's one log says what its controller did."""
    return ["sweep"] if is_sweep(row["spec"]) else ["setup"] + [r["name"] for r in row["replicas"]]

