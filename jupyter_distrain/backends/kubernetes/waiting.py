"""Why a Kubernetes job waits (waits.py says it): each replica the scheduler cannot place against the most free on a
node it may use, or for a job Kueue holds, Kueue's reason and the job's place in its LocalQueue from Kueue's
visibility API; and before a submit, what would keep the job waiting if it were submitted now."""

from __future__ import annotations

import builtins  # `list` is also a method name below

from kubernetes.client.exceptions import ApiException

from ... import reasons, waits
from ...errors import FieldError, JobNotFound
from ...policy import Phase
from . import capacity, podspec
from .engines import Engines
from .objects import NamespaceObjects
from .observe import JobObserver
from .naming import KUEUE_VISIBILITY
from .state import newest
from .watch import api_error


class WhyItWaits:
    def __init__(self, objects: NamespaceObjects, engines: Engines, observer: JobObserver):
        self.objects, self.engines, self.observer = objects, engines, observer

    def waiting(self, name: str) -> dict:
        job = self.observer.get(name, events=0)
        if job["phase"] == Phase.QUEUED:
            return waits.queued(job, self._queue_place(job["spec"]["queue"], name))
        if job["phase"] not in (Phase.PENDING, Phase.RUNNING):
            return waits.not_waiting(job)
        unplaced = {r["name"] for r in job["replicas"] if r["reason"] == reasons.UNSCHEDULABLE}
        if job["phase"] == Phase.RUNNING and not unplaced:
            return waits.not_waiting(job)
        pods = {replica: self.objects.api.sanitize_for_serialization(pod)  # as the API server sends it
                for replica, pod in newest(self.objects.job_pods(name)).items() if replica in unplaced}
        nodes = self._nodes_free(fresh=True) if unplaced else {}
        replicas = [{"name": r["name"], "message": r["message"],
                     **capacity.against_nodes(capacity.pod_requests(pods[r["name"]]), nodes,
                                              pods[r["name"]]["spec"].get("nodeSelector"))}
                    for r in job["replicas"] if r["name"] in pods]
        return waits.pending(job, replicas)

    def outlook(self, spec: dict) -> builtins.list[FieldError]:
        """What would keep a job of this (checked) spec waiting were it submitted now, as warnings: a role no
        node has room for now, the workloads waiting in its queue (nodes and pods as recently read: it follows a
        check)."""
        nodes, found = self._nodes_free(fresh=False), []
        for role in spec["replicas"]:
            seen = capacity.against_nodes(capacity.role_requests(spec, role), nodes,
                                          podspec.gpu_nodes(spec, role, self.objects.settings).get("node_selector"))
            if not seen["nodes_with_room"]:
                found.append(FieldError(f"replicas.{role}.resources", waits.no_room_now(role, seen)))
        if "queue" in spec and (place := self._queue_place(spec["queue"])) and place["ahead"]:
            found.append(FieldError("queue", waits.would_queue(spec["queue"], place)))
        return found

    def _nodes_free(self, fresh: bool) -> dict[str, dict]:
        return capacity.free_on_nodes(self.engines.nodes(fresh), self.engines.live_pods(fresh)[0])

    def _queue_place(self, queue: str, job: str | None = None) -> dict | None:
        """A job's place in its LocalQueue, from Kueue's visibility API (without `job`: a new one's, behind all
        that wait there); None where the cluster does not serve that API, this identity may not ask it, or the
        job waits there no longer."""
        group, version = KUEUE_VISIBILITY
        try:
            pending = self.objects.custom.get_namespaced_custom_object(
                group, version, self.objects.ns, "localqueues", f"{queue}/pendingworkloads")["items"]
        except ApiException as e:
            if e.status in (403, 404, 503):
                return None
            raise api_error(e, f"ask Kueue where queue {queue}'s workloads wait") from None
        owners = [next((o["name"] for o in w["metadata"].get("ownerReferences", [])), "") for w in pending]
        position = len(owners) if job is None else next((i for i, o in enumerate(owners) if o == job), None)
        if position is None:
            return None
        ahead = owners[:position]
        return {"queue": queue, "position": position, "ahead": len(ahead),
                "ahead_seen": [owner for owner in ahead if self._sees(owner)],
                "position_in_cluster_queue": pending[position]["positionInClusterQueue"] if job else None}

    def _sees(self, job: str) -> bool:
        """Whether this backend's owner may see the job (owners' jobs are JobNotFound to others)."""
        try:
            self.objects.job_root(job)
        except JobNotFound:
            return False
        return True
