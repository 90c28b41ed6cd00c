"""The lifecycle policy applied to a job on bare pods (engine "pods"), which no engine in the cluster runs."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import json
import time

from kubernetes import client

from ... import reasons
from ...policy import FINISHED, Phase, Replica, deadline_exceeded, decide, ending, restart_event
from ...spec import replica_name, replicas
from . import podspec
from .logcopy import LogCopier
from .naming import RUN, object_name
from .objects import NamespaceObjects
from .state import (WORKLOAD_GRACE, count_restarts, current_run, deadline_left, engine_of, missing_pod, newest_of_run,
                    policy_replicas, record_seen, replica_state, stop_decision, unfinished, unmade, with_ending)


EVERY_JOB = "*"


class PodSupervisor:
    """Restarts, stops and cleans up a supervised job's pods as policy.py decides."""

    def __init__(self, objects: NamespaceObjects, copier: LogCopier, supervised: str = EVERY_JOB):
        """`supervised`: the jobs on "pods" a read applies the policy to when no controller runs in this process:
        every one it sees (the CLI); in the cluster, those its service account may supervise (roles.py): a sweep's
        trials, by its controller (`supervised` names the sweep), or none (""): a monitor, the janitor, which may
        not make pods."""
        self.objects, self.copier, self.supervised = objects, copier, supervised

    def supervises(self, root: client.V1ConfigMap) -> bool:
        """Whether reading the job of `root` (on "pods") applies the policy to it (see `supervised`)."""
        if self.supervised == EVERY_JOB:
            return True
        return bool(self.supervised) and json.loads(root.data["spec.json"]).get("trial_of") == self.supervised

    def reconcile(self, root: client.V1ConfigMap, pods: dict[str, client.V1Pod]
                  ) -> tuple[client.V1ConfigMap, dict[str, client.V1Pod]]:
        """Apply the lifecycle policy once to what `root` and `pods` (each replica's) show: restart, stop
        or clean up pods, record the job's status. The answer, for the job's view: its ConfigMap and the pods
        as they stand after.

        No lock is held while the API server answers, so reconciles of one job may overlap: the controller's
        work queue gives a job to one worker at a time, but `stop` (here or in a CLI) and other servers
        reconcile too. That is safe because each acts on its own snapshot with requests that are conditional
        or idempotent: the status is written only if `root` is still the current version (a 409 means another
        writer came first, and its write brings the next reconcile); a pod is deleted by uid, never a successor
        of the same name; a replacement pod that exists already (409) and a deletion of what is gone (404) are
        work done; copying logs skips lines already copied. Pods that a reconcile which lost the status write
        made for a run that has finished are deleted by the next reconcile.
        """
        spec = json.loads(root.data["spec.json"])
        status = json.loads(root.data["status.json"])
        if status["phase"] in FINISHED:
            self._delete_strays(spec["name"], current_run(root), pods)
            return root, pods
        now = time.time()
        states = {name: replica_state(status["replicas"][name], pods.get(name), now) for name in status["replicas"]}
        for name, asked in unmade(status, pods).items():
            if now > asked + WORKLOAD_GRACE:
                missing_pod(states[name], asked)
        self.copier.copy_logs(spec["name"], list(pods.values()), ended=True)
        before = json.dumps(status, sort_keys=True)
        status["replicas"] = states
        policy = policy_replicas(states)
        if any(s["phase"] == str(Phase.RUNNING) for s in states.values()) and not status["started"]:
            status["started"] = now
        decision = (stop_decision(status) if status["stop_requested"] else
                    deadline_exceeded(spec) if deadline_left(spec, status["started"], now) == 0 else
                    decide(spec, policy))
        announced = []  # recorded once the status is: a reconcile that loses the write announces nothing
        for replica in policy:
            if replica.name in decision.restart:
                self._restart_replica(spec, root, replica, states[replica.name], pods.get(replica.name))
                announced.append(restart_event(replica))
        if decision.phase in FINISHED:
            end = ending(decision, policy, now)
            self._finish(spec, status, pods, end)
            announced.append(end.event)
        else:
            unfinished(status, decision)
        if json.dumps(status, sort_keys=True) != before and (written := self.objects.write_status(root, status)):
            root = written
            for event in announced:
                self.objects.record(spec["name"], event)
        return root, pods if decision.phase not in FINISHED else {}

    def _restart_replica(self, spec: dict, root, replica: Replica, state: dict, pod) -> None:
        state.update(phase=str(Phase.PENDING), reason=reasons.RESTARTING, restarts=state["restarts"] + 1,
                     exit_code=None, requested=time.time())
        if pod is not None:
            self.objects.delete_pod(pod, wait=True)
        self.objects.make_programs()  # this version's, which the job's first pods may not have had
        root_dict = self.objects.api.sanitize_for_serialization(root)
        self.objects.create(podspec.pod(spec, replica.role, replica.index, self.objects.settings, root_dict,
                                        state["restarts"], current_run(root)), exists_ok=True)

    def _delete_strays(self, job: str, run: int, pods: dict) -> None:
        """Delete the pods of a finished run (up to `run`) that are not being deleted: those a concurrent
        reconcile made as the run finished. A later run's pods are kept (`run` may predate a restart)."""
        for name, pod in pods.items():
            if not pod.metadata.deletion_timestamp and int((pod.metadata.labels or {}).get(RUN, run)) <= run:
                self.copier.archive(job, name, pod)
                self.objects.delete_pod(pod)

    def _finish(self, spec: dict, status: dict, pods: dict, end) -> None:
        with_ending(status, end)
        for name, pod in pods.items():
            self.copier.archive(spec["name"], name, pod)
            self.objects.delete_pod(pod)
        for role, index in replicas(spec):
            self.objects.delete("Service", object_name(spec["name"], replica_name(role, index)))

    def record_pods(self, root: client.V1ConfigMap, pods: builtins.list[client.V1Pod]) -> None:
        """Record what an engine's pods show and may not keep: each replica's start and end (state.record_seen:
        on "pods", its start alone, as `reconcile` records the rest) and, on the kubeflow engine, its restarts
        (state.count_restarts: the operator replaces a failed pod under its name and counts nothing)."""
        status = json.loads(root.data["status.json"])
        if status["phase"] in FINISHED:
            return
        current = newest_of_run(root, pods)
        restarted = engine_of(root) == "kubeflow" and count_restarts(status, current)
        if record_seen(status, current, time.time(), ends=engine_of(root) != "pods") or restarted:
            self.objects.write_status(root, status)
