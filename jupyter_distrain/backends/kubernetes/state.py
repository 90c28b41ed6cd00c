"""What the cluster's objects say about a job, as every backend says it: pure functions of a job's
root ConfigMap, its pods and its engine's objects (a JobSet and its Jobs, or the Training Operator's
TFJob, PyTorchJob or PaddleJob); no I/O."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Container, cast

from kubernetes import client

from ... import logs, reasons
from ...incluster.logtee import USED
from ...policy import FINISHED, STOP_REQUESTED, Decision, Ending, Phase, Replica, deadline_exceeded, decide, ending
from ...spec import replica_name, replicas
from .naming import ENGINE, QUEUE_NAME, RESTARTS, RESUME, RUN, RUNS, TOLD_END, replica_of

GPU = "nvidia.com/gpu"
# a replica's end as its pod showed it (and when: `finished`), with what its command used (`used_by`)
ENDED = ("phase", "reason", "message", "exit_code", "cpu_seconds", "peak_memory")
KEPT_RUNS = 20  # earlier runs a job's ConfigMap keeps (a ConfigMap holds 1 MiB; a run's packages may take 30 KiB)
SETTLING = 5  # seconds the objects that explain an engine's end of a job may lag behind it in the cache
# seconds a run's JobSet or TFJob may be missing after the run was asked for (made right after the ConfigMap, then
# seen through a watch); past them the run failed: its submit was interrupted, or the object was deleted by hand
WORKLOAD_GRACE = 60


def seconds(t: datetime | None) -> float | None:
    return t.timestamp() if t else None


def engine_of(root: client.V1ConfigMap) -> str:
    """The engine a job runs on (jobs made before engines existed ran on pods)."""
    return (root.metadata.labels or {}).get(ENGINE, "pods")


def created(obj) -> datetime:
    return obj.metadata.creation_timestamp or datetime.min.replace(tzinfo=timezone.utc)


def newest(pods: list[client.V1Pod]) -> dict[str, client.V1Pod]:
    """Each replica's newest pod."""
    return {replica_of(p.metadata.labels): p for p in sorted(pods, key=created)}


def event_job(involved: str, jobs: Container[str]) -> str | None:
    """The job an event is of, from the name of the object it involves (<job>, <job>-<replica>...): the longest
    of `jobs` it names, so that the events of job aj-worker-0-x are never job aj's. Its prefixes are looked up, so
    a dict or set of every job costs no more than a list of two."""
    cuts = [i for i in range(len(involved), 0, -1) if i == len(involved) or involved[i] == "-"]
    return next((involved[:i] for i in cuts if involved[:i] in jobs), None)


def involved_replica(involved: str, job: str, replica_names) -> str | None:
    """Whose an event is, from the name of the object it involves: "" for the job's own (its ConfigMap,
    its JobSet), a replica's name for the replica's objects (<job>-<replica>, its Job <job>-<replica>-0,
    their pods), None for another job's."""
    if involved == job:
        return ""
    rest = involved[len(job) + 1:] if involved.startswith(job + "-") else ""
    found = [r for r in replica_names if rest == r or rest.startswith(r + "-")]
    return max(found, key=len) if found else None


def condition(obj, kind: str):
    """A Job's condition of type `kind` that holds, or None."""
    return next((c for c in (obj.status.conditions or []) if c.type == kind and c.status == "True"), None) \
        if obj is not None and obj.status else None


def timestamp(text: str) -> float:
    """Seconds since the epoch of a custom object's RFC 3339 time (the client parses only built-in kinds')."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def engine_end(workload: dict | None) -> tuple[Phase, str, str, float] | None:
    """(Succeeded or Failed, reason, message, when) once the engine ended the job: the condition
    Completed (JobSet) or Succeeded (Kubeflow), or Failed."""
    for c in ((workload or {}).get("status") or {}).get("conditions") or []:
        if c["type"] in ("Completed", "Succeeded", "Failed") and c["status"] == "True":
            when = timestamp(c["lastTransitionTime"])
            phase = Phase.FAILED if c["type"] == "Failed" else Phase.SUCCEEDED
            return phase, c.get("reason", ""), c.get("message", ""), when
    return None


def run_end(root: client.V1ConfigMap, workload: dict | None, now: float) -> tuple[Phase, str, str, float] | None:
    """How the job's current run ended on its engine (engine_end), or ended for want of the engine's object: a
    run whose object is missing WORKLOAD_GRACE seconds after the run was asked for Failed at that moment,
    whoever observes it, so every observer (a server, the CLI, the janitor) records the same end, and the job's
    time to be kept runs from it."""
    if workload is not None:
        return engine_end(workload)
    status = json.loads(root.data["status.json"])
    asked = status.get("requested") or cast(float, seconds(root.metadata.creation_timestamp))
    if now < asked + WORKLOAD_GRACE:
        return None
    kind = "JobSet" if root.metadata.labels.get(ENGINE) == "jobset" else "Training Operator job"
    return (Phase.FAILED, reasons.WORKLOAD_MISSING,
            f"the job's {kind} is missing from the cluster: deleted, or never made (its submit was interrupted); "
            "Restart makes it again",
            asked + WORKLOAD_GRACE)


def queued(workload: dict | None, admission: dict | None) -> tuple[str, str] | None:
    """(reason, message) while the job waits in its Kueue queue: the engine's object suspended, and
    `admission` (Kueue's Workload for it) not yet holding its quota; Kueue's own reason once it gave one."""
    if not workload or QUEUE_NAME not in (workload["metadata"].get("labels") or {}):
        return None
    spec = workload.get("spec") or {}
    if not (spec.get("suspend") or (spec.get("runPolicy") or {}).get("suspend")):
        return None
    for c in ((admission or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == "QuotaReserved" and c["status"] == "False":
            return c.get("reason") or "Pending", c.get("message", "")
    queue = workload["metadata"]["labels"][QUEUE_NAME]
    return "Queued", f"waiting in queue {queue} until Kueue admits it"


def jobset_replica(recorded: dict, job: client.V1Job | None, pods: list[client.V1Pod], now: float) -> dict:
    """A replica's state on the JobSet engine: its newest pod's, as its Job judges it (a failed pod the Job
    replaces is a restart; a failed Job is the replica's end, its deadline's included)."""
    pods = sorted(pods, key=created)
    state = replica_state(recorded, pods[-1] if pods else None, now)
    failed, complete = condition(job, "Failed"), condition(job, "Complete")
    failures = (job.status.failed or 0) if job and job.status else 0
    state["restarts"] = max(failures - 1, 0) if failed else failures
    if pods and not state["started"]:
        state["started"] = next((seconds(p.status.start_time) for p in pods if p.status.start_time), None)
    if not state["started"] and job and job.status and job.status.start_time and (failed or complete):
        state["started"] = seconds(job.status.start_time)  # its pods are gone: it started with its Job
    if failed and (failed.reason == "DeadlineExceeded" or state["phase"] != str(Phase.FAILED)):
        state.update(phase=str(Phase.FAILED), reason=failed.reason or "Failed", message=failed.message or "",
                     finished=seconds(failed.last_transition_time) or now,
                     exit_code=state["exit_code"] if failed.reason != "DeadlineExceeded" else None)
    elif complete and state["phase"] != str(Phase.SUCCEEDED):
        state.update(phase=str(Phase.SUCCEEDED), reason=reasons.COMPLETED, message="", exit_code=0,
                     finished=seconds(complete.last_transition_time) or now)
    elif not failed and state["phase"] == str(Phase.FAILED):  # its Job makes the next pod
        state.update(phase=str(Phase.PENDING), reason=reasons.RESTARTING,
                     message=f"restart {state['restarts']} after exit code {state['exit_code']}")
    return state


def ended_pod(pod: client.V1Pod) -> bool:
    """Whether the pod ended or is being deleted: what it logged is all it will log."""
    return pod.status.phase in ("Succeeded", "Failed") or bool(pod.metadata.deletion_timestamp)


def policy_replicas(states: dict[str, dict], ran=()) -> list[Replica]:
    """The replicas as policy.py sees them; a replica counts as started if it did or is in `ran`."""
    return [Replica(*replica_key(n), Phase(s["phase"]), s["exit_code"], s["restarts"], bool(s["started"]) or n in ran,
                    s["message"]) for n, s in states.items()]


def with_ending(status: dict, end: Ending) -> dict:
    """`status` (its replicas' states included) with the end of the job applied."""
    for name, fields in end.replicas.items():
        status["replicas"][name].update(fields)
    status.update(end.job)
    return status


def unfinished(status: dict, decision: Decision) -> None:
    """Record an unfinished job's state: `decision`'s, but NoProgress while the run's monitor finds it hung (its
    `hung`), and the scheduler's reason while it cannot place a replica."""
    if decision.phase == Phase.RUNNING and status.get("hung"):
        decision = Decision(Phase.RUNNING, reasons.NO_PROGRESS, status["hung"])
    status.update(phase=str(decision.phase), reason=decision.reason, message=decision.message)
    note_unschedulable(status)


def note_unschedulable(status: dict) -> None:
    """Make the job's reason the scheduler's, naming each replica it cannot place."""
    unschedulable = [(n, s) for n, s in status["replicas"].items() if s["reason"] == reasons.UNSCHEDULABLE]
    if unschedulable:
        status.update(reason=reasons.UNSCHEDULABLE, message="; ".join(f"{n}: {s['message']}" for n, s in unschedulable))


def by_replica(root: client.V1ConfigMap, pods: list[client.V1Pod]) -> dict[str, list[client.V1Pod]]:
    """The pods of the job's current run, by replica."""
    run, mine = current_run(root), dict[str, list[client.V1Pod]]()
    for pod in pods:
        if int((pod.metadata.labels or {}).get(RUN, run)) == run:
            mine.setdefault(replica_of(pod.metadata.labels), []).append(pod)
    return mine


def newest_of_run(root: client.V1ConfigMap, pods: list[client.V1Pod]) -> dict[str, client.V1Pod]:
    """Each replica's newest pod of the job's current run."""
    return {name: max(ps, key=created) for name, ps in by_replica(root, pods).items()}


def jobset_state(root: client.V1ConfigMap, jobset: dict | None, jobs: dict[str, client.V1Job],
                 pods: list[client.V1Pod], admission: dict | None, now: float) -> dict:
    """A JobSet job's status (shaped as `new_status`) from what the cluster shows: the JobSet's controller
    decides when the job ends; policy.py's `decide` and `ending` say it as every backend does."""
    status, mine = json.loads(root.data["status.json"]), by_replica(root, pods)
    states = {name: jobset_replica(recorded, jobs.get(name), mine.get(name, []), now)
              for name, recorded in status["replicas"].items()}
    return engine_state(root, status, states, set(mine), run_end(root, jobset, now), now,
                        waiting=queued(jobset, admission))


def kubeflow_state(root: client.V1ConfigMap, workload: dict | None, pods: list[client.V1Pod],
                   admission: dict | None, now: float) -> dict:
    """A Training Operator job's status (shaped as `new_status`): each replica's newest pod, its restarts
    as recorded (`count_restarts`); the operator decides when the job ends."""
    status, current = json.loads(root.data["status.json"]), newest_of_run(root, pods)
    states = {name: replica_state(recorded, current.get(name), now) for name, recorded in status["replicas"].items()}
    began = ((workload or {}).get("status") or {}).get("startTime")
    return engine_state(root, status, states, set(current), run_end(root, workload, now), now,
                        began and timestamp(began), queued(workload, admission))


def count_restarts(status: dict, pods: dict[str, client.V1Pod]) -> bool:
    """Record in `status` each replica's newest pod, counting a restart when it replaced an earlier one
    of the same run (the Training Operator makes the replacement under the same name and keeps no count).
    Whether anything changed."""
    changed = False
    for name, pod in pods.items():
        recorded = status["replicas"][name]
        if recorded.get("pod") != pod.metadata.uid:
            if recorded.get("pod"):
                recorded["restarts"] += 1
            recorded["pod"], changed = pod.metadata.uid, True
    return changed


def record_seen(status: dict, pods: dict[str, client.V1Pod], now: float, ends: bool = True) -> bool:
    """Record in `status` what each replica's newest pod showed that its engine may not keep: when it began, once it
    has run, and (with `ends`) how it ended. An engine deletes the pods of a job it ended, with the GPU-hours they
    held and the exit of a replica that was ending by itself. Whether anything was new."""
    changed = False
    for name, pod in pods.items():
        recorded = status["replicas"].get(name)
        if not recorded:
            continue
        if not recorded["started"] and pod.status.phase != "Pending" and pod.status.start_time:
            recorded["started"], changed = seconds(pod.status.start_time), True
        ended = replica_state(recorded, pod, now) if ends and pod.status.phase in ("Succeeded", "Failed") else None
        if ended and any(recorded.get(key) != ended.get(key) for key in ENDED):
            recorded.update({key: ended.get(key) for key in (*ENDED, "finished")})
            changed = True
    return changed


def engine_state(root: client.V1ConfigMap, status: dict, states: dict[str, dict], with_pods: set[str],
                 end: tuple[Phase, str, str, float] | None, now: float, began: float | None = None,
                 waiting: tuple[str, str] | None = None) -> dict:
    """The job's status once an engine ran it: the replicas' `states`, judged by policy.py, and the
    engine's `end` (see `engine_end`) once it has one; then `began`, when the engine started the job, stands
    in for the replicas' starts if their pods are gone (the Training Operator deletes them all at its deadline).
    `waiting`: Kueue's (reason, message) while the job is queued (see `queued`)."""
    spec = json.loads(root.data["spec.json"])
    started = [s["started"] for s in states.values() if s["started"]] or ([began] if began and end else [])
    # a replica whose pods are gone (the engine deletes a running replica's pods when the job ends) ran if the job did
    ran = set(states) - with_pods if started else ()
    replicas_ = policy_replicas(states, ran)
    status.update(replicas=states, started=min(started) if started else None)
    decision = decide(spec, replicas_)
    if end and decision.phase != end[0]:
        # replicas a signal ended once the engine had ended the job (in its second: both times are whole seconds),
        # if the end is theirs without them, were stopped by it (their pods killed as the job ended): running until then
        stopped = policy_replicas({name: {**s, "phase": str(Phase.RUNNING), "exit_code": None}
                                   if (s["exit_code"] or 0) >= 128 and (s["finished"] or 0) >= end[3] else s
                                   for name, s in states.items()}, ran)
        if (without := decide(spec, stopped)).phase == end[0]:
            replicas_, decision = stopped, without
    deadline = spec["policy"].get("deadline_seconds")
    if any(s["reason"] == "DeadlineExceeded" for s in states.values()) or (
            end and end[0] == Phase.FAILED and decision.phase != Phase.FAILED and deadline
            and started and end[3] - min(started) >= deadline):
        decision = deadline_exceeded(spec)
    if end and decision.phase != end[0] and now - end[3] < SETTLING:
        end = None  # what ended it (a pod, a Job) is still on its way through another watch
    if end:
        phase, reason, message, when = end
        if phase != decision.phase:
            decision = Decision(phase, reasons.COMPLETED if phase == Phase.SUCCEEDED else reason, message,
                                0 if phase == Phase.SUCCEEDED else None)
        return with_ending(status, ending(decision, replicas_, when))
    if decision.phase in FINISHED:  # the engine has yet to act on it
        decision = Decision(Phase.RUNNING)
    if waiting:
        decision = Decision(Phase.QUEUED, *waiting)
    unfinished(status, decision)
    return status


def stopped_status(observed: dict, decision: Decision, now: float) -> dict:
    """The status a job stopped on an engine keeps (`decision`: by request, or as hung): its replicas as they were
    observed, the unfinished ones stopped."""
    return with_ending(observed, ending(decision, policy_replicas(observed["replicas"]), now))


def stop_decision(status: dict) -> Decision:
    """How a job on "pods" whose stop was requested ends: by request, or as the requester said (stopped_as)."""
    if "stopped_as" not in status:
        return STOP_REQUESTED
    phase, reason, message = status["stopped_as"]
    return Decision(Phase(phase), reason, message, stop_others=True)


def deadline_left(spec: dict, started: float | None, now: float) -> float | None:
    """Seconds until a supervised job's deadline (counted from its start); None without one or before."""
    deadline = spec["policy"].get("deadline_seconds")
    if not deadline or not started:
        return None
    return max(0.0, started + deadline - now)


def current_run(root: client.V1ConfigMap) -> int:
    """The job's run: 1, then one more per restart."""
    return json.loads(root.data["status.json"]).get("run", 1)


def new_status(spec: dict) -> dict:
    """The status of a run asked for now (`requested`)."""
    return {
        "phase": str(Phase.PENDING), "reason": reasons.CREATED, "message": "", "exit_code": None, "run": 1,
        "requested": time.time(),
        "started": None, "finished": None, "stop_requested": False,
        "replicas": {replica_name(r, i): {"phase": str(Phase.PENDING), "reason": "", "message": "", "exit_code": None,
                                          "restarts": 0, "started": None, "finished": None, "node": None}
                     for r, i in replicas(spec)},
    }


def next_run(root: client.V1ConfigMap, spec: dict, addresses: dict, ended: dict) -> None:
    """Make the job's ConfigMap `root` record its next run of `spec` (its replicas at `addresses`), keeping the run
    before as the restart ended it (`ended`, records.run_record, in RUNS: the last KEPT_RUNS) and that run's end
    (`ended_run`)."""
    status = new_status(spec)
    status["run"], status["previous"] = current_run(root) + 1, ended_run(json.loads(root.data["status.json"]))
    runs = sorted({**json.loads(root.data.get(RUNS, "{}")), str(ended["run"]): ended}.items(), key=lambda r: int(r[0]))
    root.data.update({"spec.json": json.dumps(spec, sort_keys=True), "status.json": json.dumps(status),
                      RUNS: json.dumps(dict(runs[-KEPT_RUNS:])), "cluster.json": json.dumps(addresses, sort_keys=True)})
    root.data.pop(RESUME, None)


def ended_run(status: dict) -> dict:
    """What the next run's status keeps of the run `status` records the end of: the end, and whether its webhooks
    were told of it (a monitor that looked away as its run was restarted tells of it when it looks again)."""
    return {"run": status.get("run", 1), **{key: status[key] for key in ("phase", "reason", "message")},
            "told": bool(status.get(TOLD_END))}


def unmade(status: dict, pods: dict[str, client.V1Pod]) -> dict[str, float]:
    """On "pods": each replica Pending without a pod, and when its pod was asked for (its restart, else its
    run). WORKLOAD_GRACE seconds after, it is Lost (missing_pod)."""
    return {name: asked for name, r in status["replicas"].items()
            if name not in pods and r["phase"] == str(Phase.PENDING)
            and (asked := r.get("requested") or status.get("requested"))}


def missing_pod(state: dict, asked: float) -> None:
    state.update(phase=str(Phase.LOST), reason=reasons.POD_MISSING, finished=asked + WORKLOAD_GRACE,
                 message="its pod is missing from the cluster: deleted before it ran, or never made (its submit was "
                         "interrupted); Restart makes it again")


def replica_key(name: str) -> tuple[str, int]:
    role, _, index = name.rpartition("-")
    return role, int(index)


def replica_state(recorded: dict, pod: client.V1Pod | None, now: float) -> dict:
    """A replica's state from its pod, or from the record when the pod is gone."""
    state = dict(recorded)
    if pod is None:
        if recorded["phase"] == str(Phase.RUNNING):
            state.update(phase=str(Phase.LOST), reason=reasons.POD_DELETED, message="its pod was deleted",
                         finished=now)
        return state
    state["restarts"] = int((pod.metadata.annotations or {}).get(RESTARTS, recorded["restarts"]))
    state["node"] = pod.spec.node_name
    status = pod.status
    main = next((c for c in status.container_statuses or [] if c.name == pod.spec.containers[0].name), None)
    if main and main.image_id:  # the image's digest, as the kubelet pulled it; an image put on the node has none
        state["image_id"] = main.image_id if "@" in main.image_id else f"{main.image} (a local image, {main.image_id})"
    if status.phase == "Pending":
        state.update(phase=str(Phase.PENDING), **pending_reason(pod))
    elif status.phase == "Running":
        running = main.state.running if main and main.state else None
        state.update(phase=str(Phase.RUNNING), reason="", message="",
                     started=seconds(running.started_at) if running and running.started_at else
                     (recorded["started"] or now))
    elif status.phase in ("Succeeded", "Failed"):
        end = terminated(pod)
        code = end.exit_code if end else (0 if status.phase == "Succeeded" else 1)
        used, said = used_by(end.message or "" if end else "")
        state.update(phase=str(Phase.SUCCEEDED if code == 0 else Phase.FAILED), exit_code=code,
                     # the kubelet's reason for ending the pod (DeadlineExceeded, Evicted) before its container's
                     reason=status.reason or (end.reason if end and end.reason else
                                             (reasons.COMPLETED if code == 0 else "Error")),
                     # its termination message (the log tee's, or the output's end) in a line
                     message=logs.error_line((status.message or said).encode()),
                     started=state["started"] or seconds(status.start_time),
                     finished=seconds(end.finished_at) if end and end.finished_at else now, **used)
    return state


def used_by(message: str) -> tuple[dict, str]:
    """What a replica's command used (its CPU seconds and peak memory in bytes, each None where not known), as the
    log tee's first line of its container's termination message says (incluster/logtee.py), and the rest of the
    message: nothing known of a message without that line (a container the tee did not end)."""
    first, _, rest = message.partition("\n")
    if not first.startswith(USED.decode()):
        return {}, message
    try:
        said = json.loads(first[len(USED):])
        cpu, peak = said["cpu_seconds"], said["peak_memory"]
        if isinstance(cpu, (int, float)) and (peak is None or isinstance(peak, int)):
            return {"cpu_seconds": float(cpu), "peak_memory": peak}, rest
    except (ValueError, TypeError, KeyError):  # a line the command wrote itself, or cut short
        pass
    return {}, rest


def why_not_running(status: client.V1PodStatus) -> str:
    """Why a pod that should serve or succeed did not: its container's waiting or termination reason, else
    its phase."""
    states = [c.state.waiting or c.state.terminated for c in status.container_statuses or []]
    return next((f"{s.reason}: {s.message or ''}" for s in states if s), status.phase)


def terminated(pod: client.V1Pod):
    """The termination that ended the pod: a failed init container's, else the main (first) container's."""
    main = pod.spec.containers[0].name
    for c in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
        end = c.state.terminated if c.state else None
        if end and (end.exit_code or c.name == main):
            return end
    return None


def pending_reason(pod: client.V1Pod) -> dict:
    """Why a pod is pending: the scheduler's message, an image or init problem, or starting."""
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return {"reason": condition.reason or "Unschedulable", "message": condition.message or ""}
    for c in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
        waiting = c.state.waiting if c.state else None
        if waiting and waiting.reason not in (None, "PodInitializing", "ContainerCreating"):
            return {"reason": waiting.reason, "message": waiting.message or ""}
    return {"reason": reasons.STARTING if pod.spec.node_name else reasons.SCHEDULING, "message": ""}


def event_time(e: client.CoreV1Event) -> float | None:
    return seconds(e.last_timestamp or e.event_time or e.first_timestamp or e.metadata.creation_timestamp)


def event_view(e: client.CoreV1Event, job: str, replica_names) -> dict:
    return {"time": event_time(e), "type": e.type or "Normal", "reason": e.reason or "", "message": e.message or "",
            "replica": involved_replica(e.involved_object.name, job, replica_names) or ""}
