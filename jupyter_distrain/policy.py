"""The lifecycle policy, written once for every backend: what the replicas' states mean for the job."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Mapping

from . import reasons
from .spec import chief, replica_name
from .spec import replicas as replicas_of  # `replicas` names a job's replica states below


class Phase(str, Enum):
    QUEUED = "Queued"  # waiting for the cluster's queue (Kueue) to admit it
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"
    LOST = "Lost"  # a replica whose process vanished while nobody watched

    def __str__(self) -> str:
        return self.value


FINISHED = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.LOST})


def run_ended(job: Mapping[str, Any], run: int) -> bool:
    """Whether run `run` of the job is over: the job finished, or a restart began a later run."""
    return job["phase"] in FINISHED or job["run"] != run


@dataclass(frozen=True)
class Replica:
    role: str
    index: int
    phase: Phase
    exit_code: int | None = None
    restarts: int = 0
    started: bool = False  # it ran at least once
    error: str = ""  # one line saying why it failed, where known (the last error line of its output)

    @property
    def name(self) -> str:
        return replica_name(self.role, self.index)


@dataclass(frozen=True)
class Decision:
    """The job's phase now, and what the backend must do to get there."""

    phase: Phase
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    restart: tuple[str, ...] = ()
    stop_others: bool = False  # stop every replica still running (the job has ended)


STOP_REQUESTED = Decision(Phase.STOPPED, reasons.STOPPED, "stopped by request", stop_others=True)


@dataclass(frozen=True)
class Event:
    """Something that happened to a job (or, with `replica`, to one of its replicas)."""

    reason: str
    message: str
    replica: str = ""
    type: str = "Normal"  # or Warning, as Kubernetes events


@dataclass(frozen=True)
class Ending:
    """What a finished decision records, whatever the backend: the job's fields, each unfinished replica's
    fields, and the event."""

    job: dict
    replicas: dict[str, dict]
    event: Event


def restart_event(replica: Replica) -> Event:
    """The event of a failed replica the policy restarts."""
    return Event(reasons.RESTARTING, f"restart {replica.restarts + 1} after exit code {replica.exit_code}",
                 replica.name, "Warning")


def ending(decision: Decision, replicas: list[Replica], now: float) -> Ending:
    """The end of a job: its phase, reason and exit code; every replica not finished yet is stopped
    (NeverStarted if it never ran)."""
    why = "stopped by request" if decision.phase == Phase.STOPPED else f"job {decision.phase.value.lower()}"
    stopped = {r.name: {"phase": str(Phase.STOPPED), "reason": why if r.started else reasons.NEVER_STARTED,
                        "finished": now if r.started else None}
               for r in replicas if r.phase not in FINISHED}
    job = {"phase": str(decision.phase), "reason": decision.reason, "message": decision.message,
           "exit_code": decision.exit_code, "finished": now}
    event = Event(decision.reason or str(decision.phase), decision.message,
                  type="Normal" if decision.phase == Phase.SUCCEEDED else "Warning")
    return Ending(job, stopped, event)


def deadline_exceeded(spec: dict) -> Decision:
    """The end of a job that ran longer than its policy's deadline_seconds."""
    return Decision(Phase.FAILED, reasons.DEADLINE_EXCEEDED,
                    f"the job ran longer than {spec['policy']['deadline_seconds']} s",
                    stop_others=True)


def may_restart(spec: dict, replica: Replica) -> bool:
    """Whether a failed replica is restarted: Kubeflow's Never / OnFailure / ExitCode (128-255 only)."""
    policy = spec["policy"]
    if replica.phase != Phase.FAILED or replica.restarts >= policy["max_restarts"]:
        return False
    if policy["restart"] == "on-failure":
        return True
    return policy["restart"] == "exit-code" and (replica.exit_code or 0) >= 128


def decide(spec: dict, replicas: list[Replica]) -> Decision:
    """Apply the job's policy to its replicas' current phases."""
    restart = tuple(r.name for r in replicas if may_restart(spec, r))
    # A replica about to be restarted counts as running again.
    replicas = [replace(r, phase=Phase.RUNNING, exit_code=None) if r.name in restart else r for r in replicas]
    for r in replicas:
        if r.phase in (Phase.FAILED, Phase.LOST):
            why = "exited with code %s" % r.exit_code if r.phase == Phase.FAILED else "vanished"
            return Decision(
                Phase.FAILED,
                reason=reasons.REPLICA_FAILED,
                message=f"replica {r.name} {why}" + (f": {r.error}" if r.error else "; the job is stopped"),
                exit_code=r.exit_code,
                stop_others=True,
            )
    by_name = {r.name: r for r in replicas}
    training = [by_name[name] for name in training_deciders(spec)]
    evaluators = [r for r in replicas if r.role == "evaluator" and r not in training]
    if all(r.phase == Phase.SUCCEEDED for r in training + evaluators):
        label = "all workers" if spec["policy"]["success"] == "all-workers" else training[0].name
        return Decision(
            Phase.SUCCEEDED,
            reason=reasons.COMPLETED,
            message=" and ".join([label, *(r.name for r in evaluators)]) + " succeeded",
            exit_code=0,
            stop_others=True,
        )
    if all(r.phase in FINISHED for r in replicas):
        return Decision(Phase.STOPPED, reason=reasons.STOPPED, message="every replica stopped", stop_others=True)
    if any(r.phase == Phase.PENDING for r in replicas):
        pending = ", ".join(r.name for r in replicas if r.phase == Phase.PENDING)
        return Decision(Phase.PENDING, reason=reasons.REPLICAS_PENDING, message=f"waiting for {pending}",
                        restart=restart)
    if all(r.phase == Phase.SUCCEEDED for r in training):
        evaluating = ", ".join(r.name for r in evaluators if r.phase != Phase.SUCCEEDED)
        return Decision(Phase.RUNNING, reason=reasons.EVALUATING,
                        message=f"training succeeded; waiting for {evaluating}",
                        restart=restart)
    return Decision(Phase.RUNNING, restart=restart)


def training_deciders(spec: dict) -> list[str]:
    """The replicas whose success is the training's: the chief (master, else worker 0), or with `all-workers`
    every trainer. The job succeeds once they and every evaluator have (an evaluator ends on its own, after
    evaluating the training's last checkpoint)."""
    if spec["policy"]["success"] == "all-workers":
        return [replica_name(r, i) for r, i in replicas_of(spec) if r in ("chief", "master", "worker")]
    return [replica_name(*chief(spec))]


def success_replicas(spec: dict) -> list[str]:
    """Every replica that must succeed for the job to: the training's deciders and the evaluators."""
    training = training_deciders(spec)
    evaluators = [replica_name(r, i) for r, i in replicas_of(spec) if r == "evaluator"]
    return training + [name for name in evaluators if name not in training]


def running(job: dict) -> str:
    """How many of a job's replicas run, out of all of them: "2/4" (from its JSON's `replica_phases`)."""
    phases = job["replica_phases"]
    return f"{phases.get(Phase.RUNNING.value, 0)}/{sum(phases.values())}"


def shown_reason(job: dict) -> str:
    """A job's reason as people read it: none where it only repeats the phase ("Stopped")."""
    reason = job.get("reason") or ""
    return "" if reason == job["phase"] else reason
