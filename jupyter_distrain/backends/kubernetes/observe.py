"""A job as it stands, observed from its objects: its engine's (a JobSet, a Training Operator job), its pods and
Events, and the status its ConfigMap records; on "pods", reconciled here when no controller does."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Mapping, cast

from kubernetes import client

from ... import storage
from ...policy import FINISHED
from ...reasons import NOTICES
from ...records import EventRecord, JobRecord, JobSummary, Notice, running_notice, summary
from ...spec import expires
from . import podspec
from .engines import SUPERVISED
from .loglines import read_provenance
from .naming import BACKEND, SWEEP
from .objects import NamespaceObjects, owner_of
from .reconcile import PodSupervisor
from .state import (current_run, engine_of, event_time, event_view, jobset_state, kubeflow_state, newest, queued,
                    replica_key, replica_state, seconds)

if TYPE_CHECKING:
    from ...config import Distrain


class JobObserver:
    """Reads a job, or every job, as every backend reports them (records.JobRecord)."""

    def __init__(self, objects: NamespaceObjects, supervisor: PodSupervisor):
        self.objects, self.supervisor = objects, supervisor
        # a finished job's summary, made once from its ConfigMap (by uid), with the resourceVersion it read
        self.recorded: dict[str, tuple[str, JobSummary]] = {}

    def get(self, name: str, events: int = 20) -> JobRecord:
        job = self._current(self.objects.job_root(name))
        if events:
            names = [r["name"] for r in job["replicas"]]
            # not those of an earlier job of the same name, which Kubernetes keeps for an hour
            own = [e for e in self.objects.events(name, names) if (event_time(e) or 0) >= int(job["created"])]
            job["events"] = [cast(EventRecord, event_view(e, name, names))
                             for e in sorted(own, key=lambda e: event_time(e) or 0)][-events:]
            job["notice"] = newest_notice(job, own, names)
        return job

    def _current(self, root: client.V1ConfigMap) -> JobRecord:
        """The job of `root` as it stands: observed from its engine, or from its pods on "pods" (reconciled
        here unless this process's controller does, or this process supervises no such job: `supervises`)."""
        if engine_of(root) == SWEEP:  # as its controller records it
            return self._view(root, {})
        pods = self.objects.job_pods(root.metadata.name)
        if engine_of(root) == "pods":
            if self.objects.cache or not self.supervisor.supervises(root):
                return self._view(root, newest(pods))
            return self._view(*self.supervisor.reconcile(root, newest(pods)))
        if json.loads(root.data["status.json"])["phase"] in FINISHED:  # recorded as it ended: nothing to observe
            return self._view(root, newest(pods))
        return self._view(root, newest(pods), self.observed(root, pods))

    def list(self) -> list[JobSummary]:
        roots = self.objects.roots()
        listed = [self._summary(root) for root in roots]
        present = {root.metadata.uid for root in roots}
        self.recorded = {uid: seen for uid, seen in self.recorded.items() if uid in present}  # those gone forgotten
        return listed

    def _summary(self, root: client.V1ConfigMap) -> JobSummary:
        """The job as the list shows it: a finished one (most of a long list) as its ConfigMap recorded it,
        read again only where that changed."""
        uid, version = root.metadata.uid, root.metadata.resource_version
        seen = self.recorded.get(uid)
        if seen and seen[0] == version:
            return seen[1]
        status = json.loads(root.data["status.json"])
        if status["phase"] not in FINISHED:
            return summary(self._current(root))
        spec = json.loads(root.data["spec.json"])
        job = cast(JobSummary, {**self._state(root, spec, status, status.get("run", 1)),
                                "replica_phases": dict(Counter(r["phase"] for r in status["replicas"].values())),
                                "trial_of": spec.get("trial_of")})
        self.recorded[uid] = (version, job)
        return job

    def observed(self, root: client.V1ConfigMap, pods: builtins.list[client.V1Pod]) -> dict:
        """The status of a job an engine runs, from its object, its pods (and a JobSet's Jobs), and while
        it is queued Kueue's Workload: see state.jobset_state and kubeflow_state."""
        workload = self.objects.workload(root)
        admission = self.objects.admission(root.metadata.name) if queued(workload, None) else None  # why it waits
        if engine_of(root) == "jobset":
            return jobset_state(root, workload, self.objects.jobs(root.metadata.name), pods, admission, time.time())
        return kubeflow_state(root, workload, pods, admission, time.time())

    def _view(self, root: client.V1ConfigMap, pods: dict[str, client.V1Pod], status: dict | None = None) -> JobRecord:
        """The job as every backend reports it (see jobjson.job_json): its status as recorded in `root`, or
        `status` (the JobSet engine's), with each unfinished replica's state from its pod in `pods`."""
        spec = json.loads(root.data["spec.json"])
        stored = json.loads(root.data["status.json"])
        status = stored if stored["phase"] in FINISHED or status is None else status
        settled = status["phase"] in FINISHED or status is not stored  # the replicas' states are final or observed
        cluster = json.loads(root.data["cluster.json"])
        rows, digests = [], set[str]()
        for name, recorded in status["replicas"].items():
            role, index = replica_key(name)
            live = recorded if settled else replica_state(recorded, pods.get(name), time.time())
            rows.append({"name": name, "role": role, "idx": index, "pid": None, "address": cluster[role][index],
                         **{k: live[k] for k in ("phase", "exit_code", "reason", "restarts", "started", "finished")},
                         **{k: live.get(k) for k in ("node", "cpu_seconds", "peak_memory")},
                         "message": live.get("message", "")})
            digests.update(filter(None, [live.get("image_id")]))
        run = current_run(root)
        state = self._state(root, spec, status, run)
        if self.objects.watching("events") and status["phase"] not in FINISHED:  # they are at hand
            state["notice"] = newest_notice(state, self.objects.events(root.metadata.name, status["replicas"]),
                                            status["replicas"])
        return cast(JobRecord, {
            **state,
            "output_dir": output_location(spec, self.objects.settings, owner_of(root)),
            "spec": spec, "replicas": rows, "logs": [row["name"] for row in rows],
            "engine": engine_of(root), "supervision": SUPERVISED if engine_of(root) == "pods" else "",
            "environment": {"image": podspec.image(spec, self.objects.settings), "image_digests": sorted(digests),
                            **read_provenance(self.objects.run_log_dir(root.metadata.name, run))},
        })

    def _state(self, root: client.V1ConfigMap, spec: dict, status: dict, run: int) -> dict:
        """The job's own fields (JobState), from its ConfigMap, its spec and a status."""
        return {"name": root.metadata.name, "backend": BACKEND,
                "owner": owner_of(root), "run": run,
                "created": seconds(root.metadata.creation_timestamp),
                "expires": expires(spec["policy"].get("ttl_after_finished"), status["finished"]),
                **{key: status[key] for key in ("phase", "reason", "message", "exit_code", "started", "finished")},
                "notice": None}


def newest_notice(job: Mapping[str, Any], events: builtins.list[client.CoreV1Event], replicas) -> Notice | None:
    """The job's notice (records.running_notice) from its events, of its `replicas` (names)."""
    noticed = [e for e in events if e.reason in NOTICES and event_time(e)]
    newest = max(noticed, key=lambda e: event_time(e) or 0, default=None)
    if newest is None:
        return None
    seen = event_view(newest, job["name"], replicas)
    return running_notice(job["phase"], job["started"],
                          cast(Notice, {key: seen[key] for key in Notice.__annotations__}))


def output_location(spec: dict, settings: Distrain, owner: str) -> str:
    """Where a job of `owner` keeps its output: a host path, or pvc://<claim>/<its directory>."""
    source = podspec.output_source(spec, settings)
    if "host_path" in source:
        return source["host_path"]
    return f"pvc://{source['volume']}/{storage.output_path(spec, owner)}"
