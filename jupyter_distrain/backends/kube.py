"""The Kubernetes backend. Every job has a root ConfigMap that owns the rest, and runs on an engine
(manifests.py renders both):

- "jobset": a JobSet, whose controller enforces the job's lifecycle in the cluster (success, failures,
  restarts, deadline), whether or not a Jupyter server runs. This backend only observes it: the
  JobSet's conditions, its Jobs and pods give the job's state (`jobset_state`).
- "pods": bare pods and Services, for clusters without JobSet. This backend supervises them: it
  applies the lifecycle policy as they change (`reconcile`), so a job stops being supervised while no
  Jupyter server (or following CLI) runs.

All state lives in the cluster, so a restarted Jupyter server (or a CLI on another machine) finds and
keeps observing running jobs:

    ConfigMap <job>    data: spec.json, cluster.json, status.json (run; a stop; on "pods" the phase,
                       reasons and each replica's end); label: the engine
    JobSet, Jobs, Pods labelled with the job (and the role, index, replica and run); their live state
    Events             the scheduler's, the engine's and the job's own

`Controller` keeps a watch-fed cache of the namespace's jobs, workloads, pods and events (no LIST per
request), applies the policy to "pods" jobs as they change, and copies logs; without it (the CLI) each
call reads the cluster (and applies the policy once). Logs are copied from the pods/log API into files
under the storage root as they are written, so they remain readable after the pods are gone:
<root>/kubernetes/<namespace>/<job>/logs/<run>/<replica>.log, each pod's into the directory of the run its
label names.
"""

from __future__ import annotations

import base64
import builtins  # `list` is also a method name below
import fcntl
import json
import logging
import os
import shutil
import threading
import time
from collections import deque
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, Iterator, cast

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from .. import logs
from ..errors import DistrainError, FieldError, JobConflict, JobNotFound, SpecError
from ..logs import LogLine
from ..policy import (FINISHED, STOP_REQUESTED, Decision, Event, Phase, Replica, deadline_exceeded, decide, ending,
                      restart_event, run_ended)
from ..spec import gpus, replica_name, replicas
from . import manifests
from .base import ClusterTensorBoard, EventRecord, JobRecord
from .manifests import ENGINE, JOB, JOBSET_API, MANAGED, REPLICA, RESTARTS, RUN, object_name

if TYPE_CHECKING:
    from ..config import Distrain

SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED.items())
GPU = "nvidia.com/gpu"
OBJECT_APIS = {"ConfigMap": ("core", "config_map"), "Service": ("core", "service"), "Pod": ("core", "pod"),
               "Deployment": ("apps", "deployment")}  # the built-in kinds a job is made of: their API and resource
CACHED = {"ConfigMap": "configmaps", "Pod": "pods", "JobSet": "jobsets"}  # the kinds written here that the Cache holds
JOBSET_GROUP, JOBSET_VERSION = JOBSET_API.split("/")
SETTLING = 5  # seconds the objects that explain a JobSet's end may lag behind it in the cache
SUPERVISED = ("supervised by the Jupyter server (the cluster has no JobSet): while no server or following CLI runs, "
              "nothing ends the job's other replicas, restarts a failed one or enforces its deadline")


class KubeError(DistrainError):
    """The cluster refused a request; the message names the API call and the cluster's reason."""

    status = 502


def api_error(e: ApiException, what: str) -> KubeError:
    try:
        detail = json.loads(e.body).get("message", e.reason)
    except (TypeError, ValueError):
        detail = e.reason
    error = KubeError(f"Kubernetes refused to {what}: {detail}")
    error.status = 403 if e.status == 403 else 502 if e.status >= 500 else 400
    return error


def seconds(t: datetime | None) -> float | None:
    return t.timestamp() if t else None


def in_cluster(kubeconfig: str | None = None) -> bool:
    """Whether this process runs in a pod and should use its service account (no kubeconfig given)."""
    return not kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def load_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An API client from a kubeconfig file, else from the pod's service account when in a cluster."""
    if in_cluster(kubeconfig):
        config.load_incluster_config()
        return client.ApiClient()
    return config.new_client_from_config(config_file=kubeconfig, context=context)


class KubeBackend:
    name = "kubernetes"

    def __init__(self, settings: Distrain, api: client.ApiClient | None = None):
        """Jobs in `settings.namespace`, through `api` (default: from `settings.kubeconfig`, $KUBECONFIG,
        ~/.kube/config, or the pod's service account inside a cluster)."""
        self.settings = settings
        self.ns = settings.namespace
        kubeconfig = settings.kubeconfig or None
        self.api = api or load_client(kubeconfig)
        self.inside = api is None and in_cluster(kubeconfig)  # reach Services directly, not through the API server
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.root = Path(settings.root).resolve() / "kubernetes" / self.ns
        self.cache: Cache | None = None
        self.controller: Controller | None = None
        self.streams: set = set()  # pods/log responses being followed, closed by Controller.stop

    @classmethod
    def from_config(cls, config: Distrain) -> KubeBackend:
        return cls(config)

    def start(self, log: logging.Logger) -> None:
        """Watch the namespace, apply the policy to supervised jobs and copy logs (see Controller)."""
        self.controller = Controller(self, log)

    # engines
    def has_jobset(self) -> bool:
        """Whether the cluster serves the JobSet API (its CRD is installed)."""
        groups = self._call(lambda: client.ApisApi(self.api).get_api_versions().groups, "list the cluster's APIs")
        return any(g.name == JOBSET_GROUP and any(v.version == JOBSET_VERSION for v in g.versions) for g in groups)

    def engine(self) -> tuple[str, str]:
        """The engine new jobs run on (c.Distrain.kubernetes_engine), and why."""
        wanted = self.settings.kubernetes_engine
        if wanted == "pods":
            return "pods", f"c.Distrain.kubernetes_engine is 'pods': jobs are {SUPERVISED}"
        if self.has_jobset():
            return "jobset", ("the cluster serves JobSet (jobset.x-k8s.io/v1alpha2): its controller enforces each "
                              "job's lifecycle in the cluster")
        if wanted == "jobset":
            raise KubeError("c.Distrain.kubernetes_engine is 'jobset' but the cluster does not serve "
                            "jobset.x-k8s.io/v1alpha2: an admin installs JobSet (see the README), or choose 'auto'")
        return "pods", f"the cluster does not serve JobSet: jobs are {SUPERVISED}"

    def close(self) -> None:
        """Stop watching; calls read the cluster again."""
        if self.controller:
            self.controller.stop()
        self.controller = self.cache = None

    # where things are
    def log_dir(self, name: str, run: int | None = None) -> Path:
        """The log directory of run `run` (default: the current run)."""
        return self._log_dir(name, logs.run_of(name, run, current_run(self._root(name))))

    def _log_dir(self, name: str, run: int) -> Path:
        return self.root / name / "logs" / str(run)

    def tensorboard(self, spec: dict, replica: str | None = None) -> ClusterTensorBoard:
        """The job's one TensorBoard (a replica is one of its runs)."""
        if not spec["tensorboard"]["enabled"]:
            raise DistrainError(f"job {spec['name']} runs no TensorBoard: its tensorboard.enabled is false")
        service, port = manifests.tensorboard_name(spec["name"]), manifests.TENSORBOARD_PORT
        if self.inside:
            return ClusterTensorBoard(f"http://{service}.{self.ns}.svc:{port}")
        c = self.api.configuration
        return ClusterTensorBoard(
            f"{c.host}/api/v1/namespaces/{self.ns}/services/http:{service}:http/proxy",
            headers={auth["key"]: auth["value"] for auth in c.auth_settings().values()},  # the token, if any
            tls={"ca_certs": c.ssl_ca_cert, "client_cert": c.cert_file, "client_key": c.key_file,
                 "validate_cert": c.verify_ssl})

    # reading the cluster (from the cache when watching)
    def _roots(self) -> list[client.V1ConfigMap]:
        if self.cache:
            return self.cache.items("configmaps")
        return self._call(lambda: self.core.list_namespaced_config_map(self.ns, label_selector=SELECTOR).items,
                          "list jobs")

    def _root(self, name: str) -> client.V1ConfigMap:
        found = [cm for cm in self._roots() if cm.metadata.name == name]
        if not found:
            raise JobNotFound(name)
        return found[0]

    def _pods(self, name: str) -> builtins.list[client.V1Pod]:
        """The job's replicas' pods (with restarts on the JobSet engine, several per replica)."""
        if not self.cache:
            return self._pods_fresh(name)
        return [p for p in self.cache.items("pods") if (p.metadata.labels or {}).get(JOB) == name
                and REPLICA in p.metadata.labels]

    def _jobs(self, name: str) -> dict[str, client.V1Job]:
        """The Jobs of a JobSet job, by replica."""
        if self.cache:
            jobs = self.cache.items("jobs")
        else:
            jobs = self._call(lambda: self.batch.list_namespaced_job(
                self.ns, label_selector=f"{SELECTOR},{JOB}={name}").items, "list Jobs")
        return {j.metadata.labels[REPLICA]: j for j in jobs if (j.metadata.labels or {}).get(JOB) == name
                and REPLICA in j.metadata.labels}

    def _jobset(self, name: str) -> dict | None:
        if self.cache:
            return next((js for js in self.cache.items("jobsets") if js.metadata.name == name), None)
        return self._jobset_fresh(name)

    def _jobset_fresh(self, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, self.ns, "jobsets", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"read JobSet {name}") from None

    def _events(self, name: str, replica_names) -> list[client.CoreV1Event]:
        """Events of the job (its ConfigMap, its JobSet) and of its replicas' objects (Pods, Jobs), the
        deleted ones' included."""
        if self.cache:
            events = self.cache.items("events")
        else:
            events = self._call(lambda: self.core.list_namespaced_event(self.ns).items, "list events")
        return [e for e in events if involved_replica(e.involved_object.name, name, replica_names) is not None]

    def _call(self, request, what: str):
        try:
            return request()
        except ApiException as e:
            raise api_error(e, what) from None

    def exists(self, name: str) -> bool:
        try:
            self.core.read_namespaced_config_map(name, self.ns)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise api_error(e, f"read job {name}") from None

    # credentials
    def credentials(self, secret: str) -> dict:
        try:
            data = self.core.read_namespaced_secret(secret, self.ns).data or {}
        except ApiException as e:
            if e.status == 404:
                raise SpecError([FieldError("code.credentials", f"no secret named {secret!r} in namespace "
                                            f"{self.ns} (create it with 'distrain secret set {secret}')")]) from None
            raise api_error(e, f"read secret {secret}") from None
        return {k: base64.b64decode(data.get(k, "")).decode() for k in ("username", "password")}

    def set_credentials(self, secret: str, username: str, password: str) -> None:
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=secret, namespace=self.ns, labels=dict(MANAGED)),
            type="kubernetes.io/basic-auth", string_data={"username": username, "password": password})
        try:
            self.core.create_namespaced_secret(self.ns, body)
        except ApiException as e:
            if e.status != 409:
                raise api_error(e, f"create secret {secret}") from None
            self._call(lambda: self.core.replace_namespaced_secret(secret, self.ns, body), f"replace secret {secret}")

    def credential_names(self) -> builtins.list[str]:
        """The Secrets this extension made (other Secrets of the namespace are none of its business)."""
        secrets = self._call(lambda: self.core.list_namespaced_secret(self.ns, label_selector=SELECTOR).items,
                             "list secrets")
        return [s.metadata.name for s in secrets]

    def delete_credentials(self, secret: str) -> None:
        self._call(lambda: self.core.delete_namespaced_secret(secret, self.ns), f"delete secret {secret}")

    # lifecycle
    def check(self, spec: dict, new_job: bool = True, engine: str | None = None) -> None:
        """Refuse, before anything is created, what the cluster can never run; then let the API server
        (and the engine's admission webhooks) validate every object of the job on `engine` (default: the
        one new jobs run on) in a server-side dry run, so a bad spec never half-creates a job."""
        engine = engine or self.engine()[0]
        errors = []
        if "path" in spec.get("code", {}):
            errors.append(FieldError("code.path", "a local directory cannot reach the cluster; use a git repository"))
        nodes = self._call(lambda: self.core.list_node().items, "list nodes")
        largest = {n.metadata.name: node_gpus(n) for n in nodes}
        most = max(largest.values(), default=0)
        for role in spec["replicas"]:
            if gpus(spec, role) > most:
                have = ", ".join(f"{n}: {g}" for n, g in sorted(largest.items())) or "no nodes"
                errors.append(FieldError(f"replicas.{role}.resources.gpus",
                                         f"{gpus(spec, role)} GPUs per {role} requested; the largest node has "
                                         f"{most} ({have})"))
        if engine == "jobset":
            longest = max(len(replica_name(r, i)) for r, i in replicas(spec))
            limit = 63 - len("--0-0-abcde") - longest
            if len(spec["name"]) > limit:
                errors.append(FieldError("name", f"at most {limit} characters for this job on JobSet: its pods' names "
                                                 f"(<name>-<replica>-0-0-<5 characters>) must fit in 63"))
        claims = {c.metadata.name for c in self._call(
            lambda: self.core.list_namespaced_persistent_volume_claim(self.ns).items, "list volumes")}
        for field_, source in (("data", spec.get("data")), ("output", spec.get("output", {
                "volume": self.settings.output_claim}))):
            if source and "volume" in source and source["volume"] not in claims:
                errors.append(FieldError(f"{field_}.volume", f"no PersistentVolumeClaim {source['volume']!r} in "
                                         f"namespace {self.ns}; volumes: {', '.join(sorted(claims)) or 'none'}"))
        if errors:
            raise SpecError(errors)
        owner = manifests.root(spec, self.settings, engine)
        objects = manifests.workload(spec, self.settings, owner, engine)
        if new_job:  # a restart: the root and the TensorBoard exist
            objects = [owner, *objects, *manifests.tensorboard(spec, self.settings, owner)]
        for obj in objects:
            self._create(obj, dry_run=True)

    def _api(self, verb: str, kind: str) -> Callable:
        """The client call that does `verb` (create, delete) to an object of `kind` in the namespace."""
        group, resource = OBJECT_APIS[kind]
        return getattr(getattr(self, group), f"{verb}_namespaced_{resource}")

    def _writing(self, kind: str | None, name: str):
        """Bracket a write to object `name` of the cached `kind` (see Cache: read your own writes); for
        another kind, or without a cache, the `Write` does nothing."""
        return self.cache.writing(kind, name) if self.cache and kind else nullcontext(Write(None, "", name))

    def _create(self, obj: dict, dry_run: bool = False, exists_ok: bool = False) -> dict:
        """Create the object, and answer what was made; with `exists_ok`, an object of its name that exists
        already is left as it is (the answer: {})."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        options = {"dry_run": "All"} if dry_run else {}
        with self._writing(None if dry_run else CACHED.get(kind), name) as write:
            try:
                if kind == "JobSet":
                    made = Resource(self.custom.create_namespaced_custom_object(
                        JOBSET_GROUP, JOBSET_VERSION, self.ns, "jobsets", obj, **options))
                else:
                    made = self._api("create", kind)(self.ns, obj, **options)
            except ApiException as e:
                if e.status == 409 and exists_ok:
                    return {}
                if e.status == 409 and kind == "ConfigMap":
                    raise JobConflict(name) from None
                raise api_error(e, f"create {kind} {name}") from None
            write.put(made)
        return self.api.sanitize_for_serialization(made)

    def submit(self, spec: dict) -> JobRecord:
        engine, why = self.engine()
        self.check(spec, engine=engine)
        owner = manifests.root(spec, self.settings, engine)
        owner["data"]["status.json"] = json.dumps(new_status(spec))
        owner = self._create(owner)
        try:
            self._start(spec, owner, engine)
            for obj in manifests.tensorboard(spec, self.settings, owner):
                self._create(obj)
        except DistrainError:
            self._delete_root(spec["name"])
            raise
        self.record(spec["name"], Event("Submitted", f"job accepted; engine {engine}: {why}"))
        return self.get(spec["name"])

    def _start(self, spec: dict, owner: dict, engine: str, run: int = 1) -> None:
        for obj in manifests.workload(spec, self.settings, owner, engine, run):
            self._create(obj)

    def get(self, name: str, events: int = 20) -> JobRecord:
        root = self._root(name)
        pods = self._pods(name)
        if engine_of(root) == "jobset":
            job = self._view(root, newest(pods), jobset_state(root, self._jobset(name), self._jobs(name), pods))
        else:
            job = self.reconcile(root, newest(pods)) if not self.cache else self._view(root, newest(pods))
        if events:
            names = [r["name"] for r in job["replicas"]]
            job["events"] = [cast(EventRecord, event_view(e, name, names)) for e in sorted(
                self._events(name, names), key=lambda e: event_time(e) or 0)][-events:]
        return job

    def list(self) -> list[JobRecord]:
        return [self.get(cm.metadata.name, events=0) for cm in self._roots()]

    def stop(self, name: str, timeout: float = 30) -> JobRecord:
        """On "pods", request the stop and apply the policy; on "jobset", record the job's state as stopped
        (unless the engine ended it), then delete its JobSet (its Jobs and pods follow)."""
        root = self._root(name)
        for _ in range(10):
            status = json.loads(root.data["status.json"])
            if status["phase"] in FINISHED:
                return self.get(name)
            if engine_of(root) == "jobset":
                job = self.get(name, events=0)
                if job["phase"] in FINISHED:
                    self._end_jobset(name)
                    return self.get(name)
                status = stopped_status(status, job)
            status["stop_requested"] = True
            if self._write_status(root, status):
                break
            root = self._root_fresh(name)  # another writer came first (409): request the stop on its version
        else:
            raise KubeError(f"job {name} kept changing: its stop could not be recorded")
        if engine_of(root) == "jobset":
            self.record(name, Event("Stopped", "stopped by request", type="Warning"))
            self._end_jobset(name)
        else:
            self.reconcile(self._root_fresh(name), newest(self._pods_fresh(name)))
        return self.get(name)

    def _end_jobset(self, name: str) -> None:
        """Copy the logs of the JobSet's pods, then delete it (its Jobs and pods follow)."""
        for pod in sorted(self._pods_fresh(name), key=created):
            self.archive(name, pod.metadata.labels[REPLICA], pod)
        with self._writing("jobsets", name) as write:
            try:
                self.custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, self.ns, "jobsets", name,
                                                            propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise api_error(e, f"delete JobSet {name}") from None
            write.forget()

    def restart(self, name: str, spec: dict | None = None) -> JobRecord:
        root = self._root_fresh(name)
        old = json.loads(root.data["spec.json"])
        spec = spec or old
        if spec["name"] != name:
            raise SpecError([FieldError("name", f"a restarted job keeps its name {name!r}; clone it for a new name")])
        self.stop(name)
        self._wait_gone(name)
        root = self._root_fresh(name)
        engine = engine_of(root)
        self.check(spec, new_job=False, engine=engine)
        status = new_status(spec)
        status["run"] = current_run(root) + 1
        root.data.update({"spec.json": json.dumps(spec, sort_keys=True), "status.json": json.dumps(status),
                          "cluster.json": json.dumps(manifests.addresses(spec, self.ns, engine), sort_keys=True)})
        with self._writing("configmaps", name) as write:
            root = self._call(lambda: self.core.replace_namespaced_config_map(name, self.ns, root), f"restart {name}")
            write.put(root)
        owner = self.api.sanitize_for_serialization(root)
        self._start(spec, owner, engine, status["run"])
        if (spec["tensorboard"], spec.get("output")) != (old["tensorboard"], old.get("output")):
            self._replace_tensorboard(spec, owner)
        self.record(name, Event("Restarted", "job restarted"))
        return self.get(name)

    def _replace_tensorboard(self, spec: dict, owner: dict) -> None:
        for kind in ("Deployment", "Service"):
            self._delete(kind, manifests.tensorboard_name(spec["name"]))
        for obj in manifests.tensorboard(spec, self.settings, owner):
            self._create(obj)

    def _wait_gone(self, name: str, timeout: float = 60) -> None:
        """Until the job's pods (and on "jobset" its JobSet, whose successor takes its name) are gone."""
        jobset = engine_of(self._root_fresh(name)) == "jobset"
        deadline = time.monotonic() + timeout
        while (self._pods_fresh(name) or jobset and self._jobset_fresh(name)) and time.monotonic() < deadline:
            time.sleep(0.2)

    def delete(self, name: str, purge_output: bool = False) -> None:
        """Stop the job until its pods are gone, then delete its ConfigMap: the garbage collector deletes
        every object it owns."""
        self.stop(name)
        self._wait_gone(name)
        self._delete_root(name)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def _delete_root(self, name: str) -> None:
        with self._writing("configmaps", name) as write:
            try:
                self.core.delete_namespaced_config_map(name, self.ns, propagation_policy="Background")
            except ApiException as e:
                if e.status != 404:
                    raise api_error(e, f"delete job {name}") from None
                return  # deleted by another: the watch brings (or brought) its deletion
            write.forget()

    def _root_fresh(self, name: str) -> client.V1ConfigMap:
        try:
            return self.core.read_namespaced_config_map(name, self.ns)
        except ApiException as e:
            if e.status == 404:
                raise JobNotFound(name) from None
            raise api_error(e, f"read job {name}") from None

    def _pods_fresh(self, name: str) -> builtins.list[client.V1Pod]:
        return self._call(lambda: self.core.list_namespaced_pod(
            self.ns, label_selector=f"{SELECTOR},{JOB}={name},{REPLICA}").items, "list pods")

    # the policy, applied to what the cluster shows (engine "pods")
    def reconcile(self, root: client.V1ConfigMap, pods: dict[str, client.V1Pod]) -> JobRecord:
        """Apply the lifecycle policy once to what `root` and `pods` (each replica's) show: restart, stop
        or clean up pods, record the job's status.

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
            return self._view(root, pods)
        states = {name: replica_state(status["replicas"][name], pods.get(name)) for name in status["replicas"]}
        for name, pod in pods.items():
            if pod.status.phase in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp:
                self.archive(spec["name"], name, pod)
        before = json.dumps(status, sort_keys=True)
        status["replicas"] = states
        policy = [Replica(*replica_key(n), Phase(s["phase"]), s["exit_code"], s["restarts"], bool(s["started"]))
                  for n, s in states.items()]
        if any(s["phase"] == str(Phase.RUNNING) for s in states.values()) and not status["started"]:
            status["started"] = time.time()
        decision = (STOP_REQUESTED if status["stop_requested"] else
                    deadline_exceeded(spec) if deadline_left(spec, status) == 0 else decide(spec, policy))
        for replica in policy:
            if replica.name in decision.restart:
                self._restart_replica(spec, root, replica, states[replica.name], pods.get(replica.name))
        if decision.phase in FINISHED:
            self._finish(spec, status, pods, ending(decision, policy, time.time()))
        else:
            status.update(phase=str(decision.phase), reason=decision.reason, message=decision.message)
            unschedulable = [(n, s) for n, s in states.items() if s["reason"] == "Unschedulable"]
            if unschedulable:
                status.update(reason="Unschedulable",
                              message="; ".join(f"{n}: {s['message']}" for n, s in unschedulable))
        if json.dumps(status, sort_keys=True) != before:
            root = self._write_status(root, status) or root
        return self._view(root, pods if decision.phase not in FINISHED else {})

    def _restart_replica(self, spec: dict, root, replica: Replica, state: dict, pod) -> None:
        self.record(spec["name"], restart_event(replica))
        state.update(phase=str(Phase.PENDING), reason="Restarting", restarts=state["restarts"] + 1, exit_code=None)
        if pod is not None:
            self._delete_pod(pod, wait=True)
        self._create(manifests.pod(spec, replica.role, replica.index, self.settings,
                                   self.api.sanitize_for_serialization(root), state["restarts"], current_run(root)),
                     exists_ok=True)

    def _delete_strays(self, job: str, run: int, pods: dict) -> None:
        """Delete the pods of a finished run (up to `run`) that are not being deleted: those a concurrent
        reconcile made as the run finished. A later run's pods are kept (`run` may predate a restart)."""
        for name, pod in pods.items():
            if not pod.metadata.deletion_timestamp and int((pod.metadata.labels or {}).get(RUN, run)) <= run:
                self.archive(job, name, pod)
                self._delete_pod(pod)

    def _finish(self, spec: dict, status: dict, pods: dict, end) -> None:
        for name, fields in end.replicas.items():
            status["replicas"][name].update(fields)
        for name, pod in pods.items():
            self.archive(spec["name"], name, pod)
            self._delete_pod(pod)
        for role, index in replicas(spec):
            self._delete("Service", object_name(spec["name"], replica_name(role, index)))
        status.update(end.job)
        self.record(spec["name"], end.event)

    def _delete_pod(self, pod, wait: bool = False) -> None:
        """Delete this pod (its uid: a successor of the same name is left alone); with `wait`, until it is gone."""
        self._delete("Pod", pod.metadata.name, grace=0, uid=pod.metadata.uid)
        if wait:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if self.core.read_namespaced_pod(pod.metadata.name, self.ns).metadata.uid != pod.metadata.uid:
                        return
                except ApiException as e:
                    if e.status == 404:
                        return
                time.sleep(0.1)

    def _delete(self, kind: str, name: str, grace: int | None = None, uid: str | None = None) -> None:
        """Delete the object (with `uid`, only if the name still holds that object); gone already is done."""
        options = {"body": client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))} if uid else {}
        try:
            self._api("delete", kind)(name, self.ns, grace_period_seconds=grace, **options)
        except ApiException as e:
            if e.status != 404 and not (uid and e.status == 409):  # 409: the uid precondition failed
                raise api_error(e, f"delete {kind} {name}") from None

    def _write_status(self, root: client.V1ConfigMap, status: dict) -> client.V1ConfigMap | None:
        """Record the status; a conflict means another writer got there first (the next change retries)."""
        patch = {"metadata": {"resourceVersion": root.metadata.resource_version},
                 "data": {"status.json": json.dumps(status)}}
        try:
            with self._writing("configmaps", root.metadata.name) as write:
                updated = self.core.patch_namespaced_config_map(root.metadata.name, self.ns, patch)
                write.put(updated)
        except ApiException as e:
            if e.status in (404, 409):
                return None
            raise api_error(e, f"record the status of {root.metadata.name}") from None
        return updated

    def _view(self, root: client.V1ConfigMap, pods: dict[str, client.V1Pod], status: dict | None = None) -> JobRecord:
        """The job as every backend reports it (see manager.public): its status as recorded in `root`, or
        `status` (the JobSet engine's), with each unfinished replica's state from its pod in `pods`."""
        spec = json.loads(root.data["spec.json"])
        stored = json.loads(root.data["status.json"])
        status = stored if stored["phase"] in FINISHED or status is None else status
        settled = status["phase"] in FINISHED or status is not stored  # the replicas' states are final or observed
        cluster = json.loads(root.data["cluster.json"])
        rows = []
        for name, recorded in status["replicas"].items():
            role, index = replica_key(name)
            live = recorded if settled else replica_state(recorded, pods.get(name))
            rows.append({"name": name, "role": role, "idx": index, "pid": None, "address": cluster[role][index],
                         **{k: live[k] for k in ("phase", "exit_code", "reason", "restarts", "started", "finished")},
                         "message": live.get("message", ""), "node": live.get("node")})
        return cast(JobRecord, {
            "name": spec["name"], "backend": self.name, "phase": status["phase"], "reason": status["reason"],
            "message": status["message"], "exit_code": status["exit_code"], "run": current_run(root),
            "output_dir": output_location(spec, self.settings), "spec": spec,
            "created": seconds(root.metadata.creation_timestamp), "started": status["started"],
            "finished": status["finished"], "replicas": rows, "logs": [row["name"] for row in rows],
            "engine": engine_of(root), "supervision": SUPERVISED if engine_of(root) == "pods" else "",
        })

    def record(self, name: str, event: Event) -> None:
        """A Kubernetes Event on the job's ConfigMap (or, with `event.replica`, its pod)."""
        reason, message, replica, type = event.reason, event.message, event.replica, event.type
        involved = object_name(name, replica) if replica else name
        now = datetime.now(timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{involved}.", namespace=self.ns, labels={JOB: name}),
            involved_object=client.V1ObjectReference(kind="Pod" if replica else "ConfigMap", name=involved,
                                                     namespace=self.ns),
            reason=reason, message=message, type=type, first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component="jupyter-distrain"))
        try:
            self.core.create_namespaced_event(self.ns, body)
        except ApiException:
            pass  # an event is a courtesy: the status in the ConfigMap is the record

    # logs: copied from pods/log into files, so they outlive the pods
    def log_files(self, name: str, replica: str | None = None, run: int | None = None) -> dict[str, Path]:
        """Each replica's log file of a run (default: the current one), or only `replica`'s."""
        root = self._root(name)
        current = current_run(root)
        run = logs.run_of(name, run, current)
        directory = self._log_dir(name, run)
        directory.mkdir(parents=True, exist_ok=True)  # watched by live streams
        names = list(json.loads(root.data["status.json"])["replicas"]) if run == current else None
        return logs.run_files(name, directory, names, replica)

    def logs(self, name: str, replica: str | None = None, tail: int | None = None, since: str | None = None,
             follow: bool = False, finished: Callable[[], bool] | None = None,
             run: int | None = None) -> Iterator[LogLine]:
        """A run's log files (default: the current run's); without a controller in this process, their
        pods are read first (and, to follow, a controller runs until `finished()`, by default the run's end)."""
        run = logs.run_of(name, run, current_run(self._root(name)))
        files = self.log_files(name, replica, run)
        finished = finished or (lambda: run_ended(self.get(name, events=0), run))
        if not follow:
            if not self.cache:
                self.catch_up(name)
            return logs.read(files, tail=tail, since=since)
        if self.cache:
            return logs.follow(lambda: files, finished, tail=tail, since=since, directory=self._log_dir(name, run))
        return self._follow_with_controller(files, finished, tail, since, self._log_dir(name, run))

    def _follow_with_controller(self, files, finished, tail, since, directory) -> Iterator[LogLine]:
        self.start(logging.getLogger(__name__))
        try:
            yield from logs.follow(lambda: files, finished, tail=tail, since=since, directory=directory)
        finally:
            self.close()

    def catch_up(self, name: str) -> None:
        """Copy whatever the job's pods logged since their files' last lines, oldest pods first."""
        for pod in sorted(self._pods(name), key=created):
            self.archive(name, pod.metadata.labels[REPLICA], pod)

    def archive(self, job: str, replica: str, pod: client.V1Pod, follow: bool = False) -> None:
        """Append the pod's log lines not yet in its file, in the directory of the pod's run; with `follow`,
        until the container ends."""
        if not pod.status.container_statuses and pod.status.phase == "Pending":
            return
        run = (pod.metadata.labels or {}).get(RUN)  # none on pods made before runs were labelled: the current run
        path = (self._log_dir(job, int(run)) if run else self.log_dir(job)) / f"{replica}.log"
        since = last_stamp(path)
        try:
            response = self.core.read_namespaced_pod_log(
                pod.metadata.name, self.ns, container="main", timestamps=True, follow=follow,
                _preload_content=False,
                **({"since_seconds": seconds_since(since)} if since else {}))
        except ApiException:
            return  # not started, or gone: nothing to copy
        self.streams.add(response)
        with response:
            pending = b""
            for chunk in response.stream(logs.READ_CHUNK, decode_content=True):
                *lines, pending = (pending + chunk).split(b"\n")
                append(path, lines)
            append(path, [pending] if pending else [])
        self.streams.discard(response)

    # observation
    def cluster(self) -> dict:
        engine, why = self.engine()
        nodes = self._call(lambda: self.core.list_node().items, "list nodes")
        pods = self._call(lambda: self.core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed").items, "list pods")
        held = sum(int((c.resources.limits or {}).get(GPU, 0)) for p in pods if p.spec.node_name
                   for c in p.spec.containers if c.resources)
        capacity = sum(node_gpus(n) for n in nodes)
        claims = self._call(lambda: self.core.list_namespaced_persistent_volume_claim(self.ns).items, "list volumes")
        return {
            "backend": self.name,
            "engine": {"name": engine, "reason": why},
            "namespaces": [self.ns],
            "volumes": sorted(c.metadata.name for c in claims),
            "cpus": int(sum(quantity((n.status.allocatable or {}).get("cpu", "0")) for n in nodes)),
            "memory_bytes": int(sum(quantity((n.status.allocatable or {}).get("memory", "0")) for n in nodes)),
            "gpus": {"capacity": capacity, "available": max(capacity - held, 0),
                     "devices": [{"node": n.metadata.name, "gpus": node_gpus(n)} for n in nodes if node_gpus(n)]},
        }

    def metrics(self, name: str) -> builtins.list[dict]:
        """Phases only: usage needs the cluster's metrics API, which this backend does not read yet."""
        return [{"replica": r["name"], "phase": r["phase"], "cpu_percent": None, "memory_bytes": None,
                 "gpu_memory_mib": None, "gpu_utilization": None} for r in self.get(name, events=0)["replicas"]]


# pure helpers
def engine_of(root: client.V1ConfigMap) -> str:
    """The engine a job runs on (jobs made before engines existed ran on pods)."""
    return (root.metadata.labels or {}).get(ENGINE, "pods")


class Resource(dict):
    """A custom resource as the API gives it (a dict), with the `metadata` attributes the Cache reads."""

    @property
    def metadata(self) -> SimpleNamespace:
        meta = self["metadata"]
        return SimpleNamespace(name=meta["name"], resource_version=meta.get("resourceVersion"),
                               labels=meta.get("labels"), uid=meta.get("uid"))


def created(obj) -> datetime:
    return obj.metadata.creation_timestamp or datetime.min.replace(tzinfo=timezone.utc)


def newest(pods: list[client.V1Pod]) -> dict[str, client.V1Pod]:
    """Each replica's newest pod."""
    return {p.metadata.labels[REPLICA]: p for p in sorted(pods, key=created)}


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


def jobset_end(jobset: dict | None) -> tuple[str, str, str, float] | None:
    """(Completed or Failed, reason, message, when) once the JobSet's controller ended it."""
    for c in ((jobset or {}).get("status") or {}).get("conditions") or []:
        if c["type"] in ("Completed", "Failed") and c["status"] == "True":
            when = datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
            return c["type"], c.get("reason", ""), c.get("message", ""), when
    return None


def jobset_replica(recorded: dict, job: client.V1Job | None, pods: list[client.V1Pod]) -> dict:
    """A replica's state on the JobSet engine: its newest pod's, as its Job judges it (a failed pod the Job
    replaces is a restart; a failed Job is the replica's end, its deadline's included)."""
    pods = sorted(pods, key=created)
    state = replica_state(recorded, pods[-1] if pods else None)
    failed, complete = condition(job, "Failed"), condition(job, "Complete")
    failures = (job.status.failed or 0) if job and job.status else 0
    state["restarts"] = max(failures - 1, 0) if failed else failures
    if pods and not state["started"]:
        state["started"] = next((seconds(p.status.start_time) for p in pods if p.status.start_time), None)
    if failed and (failed.reason == "DeadlineExceeded" or state["phase"] != str(Phase.FAILED)):
        state.update(phase=str(Phase.FAILED), reason=failed.reason or "Failed", message=failed.message or "",
                     finished=seconds(failed.last_transition_time) or time.time(),
                     exit_code=state["exit_code"] if failed.reason != "DeadlineExceeded" else None)
    elif complete and state["phase"] != str(Phase.SUCCEEDED):
        state.update(phase=str(Phase.SUCCEEDED), reason="Completed", message="", exit_code=0,
                     finished=seconds(complete.last_transition_time) or time.time())
    elif not failed and state["phase"] == str(Phase.FAILED):  # its Job makes the next pod
        state.update(phase=str(Phase.PENDING), reason="Restarting",
                     message=f"restart {state['restarts']} after exit code {state['exit_code']}")
    return state


def jobset_state(root: client.V1ConfigMap, jobset: dict | None, jobs: dict[str, client.V1Job],
                 pods: list[client.V1Pod]) -> dict:
    """A JobSet job's status (shaped as `new_status`) from what the cluster shows: the JobSet's controller
    decides when the job ends; policy.py's `decide` and `ending` say it as every backend does."""
    spec, status = json.loads(root.data["spec.json"]), json.loads(root.data["status.json"])
    run = current_run(root)
    mine: dict[str, list] = {}
    for pod in pods:
        if int((pod.metadata.labels or {}).get(RUN, run)) == run:
            mine.setdefault(pod.metadata.labels[REPLICA], []).append(pod)
    states = {name: jobset_replica(recorded, jobs.get(name), mine.get(name, []))
              for name, recorded in status["replicas"].items()}
    started = [s["started"] for s in states.values() if s["started"]]
    # a replica whose pods are gone (the engine deletes a running replica's Job when the job ends) ran if the job did
    replicas_ = [Replica(*replica_key(n), Phase(s["phase"]), s["exit_code"], s["restarts"],
                         s["started"] is not None or (n not in mine and bool(started))) for n, s in states.items()]
    status.update(replicas=states, started=min(started) if started else None)
    end = jobset_end(jobset)
    decision = decide(spec, replicas_)
    if any(s["reason"] == "DeadlineExceeded" for s in states.values()):
        decision = deadline_exceeded(spec)
    if end and decision.phase.value != end[0].replace("Completed", "Succeeded") and time.time() - end[3] < SETTLING:
        end = None  # what ended it (a pod, a Job) is still on its way through another watch
    if end:
        kind, reason, message, when = end
        if kind == "Completed" and decision.phase != Phase.SUCCEEDED:
            decision = Decision(Phase.SUCCEEDED, "Completed", message, 0)
        elif kind == "Failed" and decision.phase != Phase.FAILED:
            decision = Decision(Phase.FAILED, reason, message)
        ending_ = ending(decision, replicas_, when)
        for name, fields in ending_.replicas.items():
            states[name].update(fields)
        return {**status, **ending_.job}
    if decision.phase in FINISHED:  # the controller has yet to act on it
        decision = Decision(Phase.RUNNING)
    status.update(phase=str(decision.phase), reason=decision.reason, message=decision.message)
    unschedulable = [(n, s) for n, s in states.items() if s["reason"] == "Unschedulable"]
    if unschedulable:
        status.update(reason="Unschedulable", message="; ".join(f"{n}: {s['message']}" for n, s in unschedulable))
    return status


def stopped_status(status: dict, job: JobRecord) -> dict:
    """The status a stopped JobSet job keeps: its replicas as they were, the unfinished ones stopped."""
    fields = ("phase", "reason", "message", "exit_code", "restarts", "started", "finished", "node")
    states = {r["name"]: {k: cast(dict, r)[k] for k in fields} for r in job["replicas"]}
    end = ending(STOP_REQUESTED, [Replica(r["role"], r["idx"], Phase(r["phase"]), r["exit_code"], r["restarts"],
                                          r["started"] is not None) for r in job["replicas"]], time.time())
    for name, fields_ in end.replicas.items():
        states[name].update(fields_)
    return {**status, **end.job, "replicas": states, "started": job["started"]}


def deadline_left(spec: dict, status: dict) -> float | None:
    """Seconds until a supervised job's deadline (counted from its start); None without one or before."""
    deadline = spec["policy"].get("deadline_seconds")
    if not deadline or not status["started"]:
        return None
    return max(0.0, status["started"] + deadline - time.time())


def node_gpus(node: client.V1Node) -> int:
    return int((node.status.allocatable or {}).get(GPU, "0"))


def current_run(root: client.V1ConfigMap) -> int:
    """The job's run: 1, then one more per restart."""
    return json.loads(root.data["status.json"]).get("run", 1)


def new_status(spec: dict) -> dict:
    return {
        "phase": str(Phase.PENDING), "reason": "Created", "message": "", "exit_code": None, "run": 1,
        "started": None, "finished": None, "stop_requested": False,
        "replicas": {replica_name(r, i): {"phase": str(Phase.PENDING), "reason": "", "message": "", "exit_code": None,
                                          "restarts": 0, "started": None, "finished": None, "node": None}
                     for r, i in replicas(spec)},
    }


def replica_key(name: str) -> tuple[str, int]:
    role, _, index = name.rpartition("-")
    return role, int(index)


def replica_state(recorded: dict, pod: client.V1Pod | None) -> dict:
    """A replica's state from its pod, or from the record when the pod is gone."""
    state = dict(recorded)
    if pod is None:
        if recorded["phase"] == str(Phase.RUNNING):
            state.update(phase=str(Phase.LOST), reason="PodDeleted", message="its pod was deleted",
                         finished=time.time())
        return state
    state["restarts"] = int((pod.metadata.annotations or {}).get(RESTARTS, recorded["restarts"]))
    state["node"] = pod.spec.node_name
    status = pod.status
    main = next((c for c in status.container_statuses or [] if c.name == "main"), None)
    if status.phase == "Pending":
        state.update(phase=str(Phase.PENDING), **pending_reason(pod))
    elif status.phase == "Running":
        running = main.state.running if main and main.state else None
        state.update(phase=str(Phase.RUNNING), reason="", message="",
                     started=seconds(running.started_at) if running and running.started_at else
                     (recorded["started"] or time.time()))
    elif status.phase in ("Succeeded", "Failed"):
        end = terminated(pod)
        code = end.exit_code if end else (0 if status.phase == "Succeeded" else 1)
        state.update(phase=str(Phase.SUCCEEDED if code == 0 else Phase.FAILED), exit_code=code,
                     reason=(end.reason if end and end.reason else ("Completed" if code == 0 else "Error")),
                     message=(end.message or "") if end else "", started=state["started"] or seconds(status.start_time),
                     finished=seconds(end.finished_at) if end and end.finished_at else time.time())
    return state


def terminated(pod: client.V1Pod):
    """The termination that ended the pod: a failed init container's, else the main container's."""
    for c in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
        end = c.state.terminated if c.state else None
        if end and (end.exit_code or c.name == "main"):
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
    return {"reason": "Starting" if pod.spec.node_name else "Scheduling", "message": ""}


def event_time(e: client.CoreV1Event) -> float | None:
    return seconds(e.last_timestamp or e.event_time or e.first_timestamp or e.metadata.creation_timestamp)


def event_view(e: client.CoreV1Event, job: str, replica_names) -> dict:
    return {"time": event_time(e), "type": e.type or "Normal", "reason": e.reason or "", "message": e.message or "",
            "replica": involved_replica(e.involved_object.name, job, replica_names) or ""}


def output_location(spec: dict, settings: Distrain) -> str:
    source = spec.get("output", {"volume": settings.output_claim})
    if "host_path" in source:
        return source["host_path"]
    return f"pvc://{source['volume']}/{source.get('path', spec['name'])}"


def quantity(value: str) -> float:
    """A Kubernetes quantity (500m, 4, 16Gi) as a number."""
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
                "Ti": 2**40}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[:-len(suffix)]) * suffixes[suffix]
    return float(value)


def stamp(k8s_time: bytes) -> str:
    """A pods/log timestamp (RFC 3339, nanoseconds) in the log files' format (microseconds)."""
    text = k8s_time.decode()
    whole, _, fraction = text.rstrip("Z").partition(".")
    return f"{whole}.{(fraction + '000000')[:6]}Z"


def seconds_since(log_stamp: str) -> int:
    """Whole seconds back to a log timestamp, rounded up: pods/log's `sinceSeconds` (lines already
    copied that come again are dropped by `append`)."""
    moment = datetime.fromisoformat(log_stamp.replace("Z", "+00:00"))
    return max(1, int(time.time() - moment.timestamp()) + 2)


def last_lines(path: Path, count: int = 100) -> list[bytes]:
    if not path.exists():
        return []
    with open(path, "rb") as f:
        f.seek(logs.tail_offset(path, count))
        return f.read().splitlines()


def last_stamp(path: Path) -> str | None:
    lines = last_lines(path, 1)
    return lines[-1][:logs.STAMP_LEN].decode() if lines else None


def append(path: Path, raw_lines: list[bytes]) -> None:
    """Append pods/log lines not yet in the file: newer than its last line, or as old but not among the
    lines it holds with that time. A lock makes concurrent copiers (server and CLI) safe. The directory is
    made only for lines: a pod that logged nothing never brings back the directory of a deleted job."""
    if not raw_lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        tail = last_lines(path)
        last = tail[-1][:logs.STAMP_LEN].decode() if tail else ""
        seen = {line for line in tail if line.startswith(last.encode())}
        out = []
        for raw in raw_lines:
            when, _, text = raw.partition(b" ")
            line = stamp(when).encode() + b" " + text.rstrip(b"\r")[:logs.MAX_LINE]
            if line[:logs.STAMP_LEN].decode() > last or (line[:logs.STAMP_LEN].decode() == last and line not in seen):
                out.append(line + b"\n")
                seen.add(line)
        f.write(b"".join(out))


WATCH_TIMEOUT = 300  # seconds the API server lets a watch run; it then resumes where it was
_GONE = object()  # a write's answer and a watch's note that the object was deleted


class Write:
    """One write of this process to a cached object: `put` the API server's answer, or `forget` the
    object once deleted, by `Cache`'s rule (without a cache, both do nothing)."""

    def __init__(self, cache: Cache | None, kind: str, name: str, generation: int = 0):
        self.cache, self.kind, self.name, self.generation = cache, kind, name, generation

    def put(self, obj) -> None:
        if self.cache:
            self.cache._answer(self, obj.metadata.resource_version, obj)

    def forget(self) -> None:
        if self.cache:
            self.cache._answer(self, _GONE, None)


def listers(api: client.ApiClient, namespace: str, jobset: bool) -> dict[str, Callable]:
    """What a Cache lists and watches in the namespace: the jobs' ConfigMaps, pods and events, and with
    `jobset` their JobSets and Jobs."""
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    out: dict[str, Callable] = {
        "configmaps": lambda **kw: core.list_namespaced_config_map(namespace, label_selector=SELECTOR, **kw),
        "pods": lambda **kw: core.list_namespaced_pod(namespace, label_selector=SELECTOR, **kw),
        "events": lambda **kw: core.list_namespaced_event(namespace, **kw),
    }
    if jobset:
        out["jobs"] = lambda **kw: batch.list_namespaced_job(namespace, label_selector=SELECTOR, **kw)
        out["jobsets"] = lambda **kw: custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, namespace, "jobsets", label_selector=SELECTOR, **kw)
    return out


class Cache:
    """An informer: list, then watch each kind `listers` names (see `listers`), calling `changed(job)` for
    every job a change touches.

    Each kind is listed once, then watched from the listing's resourceVersion. A watch that ends (the API
    server ends it after `watch_timeout`, the connection drops, an error after a backoff) resumes from the
    last resourceVersion it delivered, bookmarks included; only 410 Gone (that version has left the API
    server's window) lists again.

    resourceVersions are opaque: only equality means anything. The watch is the ordered truth, and this
    process reads its own writes at once by one rule:
    - a write runs in `writing(kind, name)`; while it is in flight, the watch notes the versions it
      delivers for that name;
    - its answer (`Write.put`, `Write.forget`) is dropped if the watch already delivered it: the cache holds
      it or later. Otherwise the answer is shown, and the watch's events for that name are skipped until the
      one with its version (for a deletion, its DELETED event): they come before it in the stream;
    - a listing replaces everything and forgets the answers awaiting their event (a listing asked for after
      a write shows it or later); a write in flight across a listing drops its answer (the watch from the
      listing brings what the listing lacks).
    """

    WHAT = {"configmaps": "jobs", "pods": "pods", "events": "events", "jobs": "Jobs", "jobsets": "JobSets"}
    # what the watch delivers; a custom resource comes as a dict, made a Resource
    MODELS = {"configmaps": "V1ConfigMap", "pods": "V1Pod", "events": "CoreV1Event", "jobs": "V1Job", "jobsets": None}

    def __init__(self, listers: dict[str, Callable], changed, log, watch_timeout: int = WATCH_TIMEOUT):
        self.listers, self.changed, self.log = listers, changed, log
        self.watch_timeout = watch_timeout
        kinds = list(listers)
        self.objects: dict[str, dict[str, Any]] = {k: {} for k in kinds}
        self.versions: dict[str, str | None] = dict.fromkeys(kinds)  # where each watch resumes; None: list
        self.generation = dict.fromkeys(kinds, 0)  # listings applied
        self.awaited: dict[str, dict[str, Any]] = {k: {} for k in kinds}  # name -> its answer's version
        self.in_flight: dict[str, dict[str, list]] = {k: {} for k in kinds}  # name -> [writes, versions seen]
        self.ready = {k: threading.Event() for k in kinds}
        self.errors: dict[str, Exception] = {}  # the last failure of each kind's list or watch
        self.watches: dict[str, watch.Watch] = {}  # each kind's current watch, ended by stop()
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # held around dictionary operations only
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True, name=f"distrain-watch-{k}")
                        for k in kinds]

    def start(self) -> Cache:
        for t in self.threads:
            t.start()
        return self

    def items(self, kind: str) -> list:
        """The cached objects; until the first listing, its failure if it failed (e.g. Forbidden)."""
        deadline = time.monotonic() + 30
        while not self.ready[kind].wait(0.05):
            error = self.errors.get(kind)
            if isinstance(error, ApiException):
                raise api_error(error, f"list {self.WHAT[kind]}")
            if error or time.monotonic() > deadline:
                raise KubeError(f"cannot reach Kubernetes to list {self.WHAT[kind]}: {error or 'no answer in 30 s'}")
        with self.lock:
            return list(self.objects[kind].values())

    # this process's writes
    @contextmanager
    def writing(self, kind: str, name: str) -> Iterator[Write]:
        """Bracket a write to object `name` of `kind`: the API call, then the `Write`'s answer."""
        with self.lock:
            self.in_flight[kind].setdefault(name, [0, set()])[0] += 1
            write = Write(self, kind, name, self.generation[kind])
        try:
            yield write
        finally:
            with self.lock:
                entry = self.in_flight[kind][name]
                entry[0] -= 1
                if not entry[0]:
                    del self.in_flight[kind][name]

    def _answer(self, write: Write, version, obj) -> None:
        kind, name = write.kind, write.name
        with self.lock:
            if write.generation != self.generation[kind] or version in self.in_flight[kind][name][1]:
                return
            if obj is None:
                self.objects[kind].pop(name, None)
            else:
                self.objects[kind][name] = obj
            self.awaited[kind][name] = version

    # the watch
    def _deliver(self, kind: str, type_: str, obj) -> str | None:
        """Apply one watch event; the job it touches."""
        with self.lock:
            job = self._job_of(kind, obj)
            self._apply(kind, type_, obj)
            self.versions[kind] = obj.metadata.resource_version
        return job

    def _apply(self, kind: str, type_: str, obj) -> None:
        """One watch event (the lock held), unless it comes before an answer awaiting its event."""
        name, version = obj.metadata.name, obj.metadata.resource_version
        if name in self.in_flight[kind]:
            self.in_flight[kind][name][1].update((version, _GONE) if type_ == "DELETED" else (version,))
        awaited = self.awaited[kind].get(name)
        if awaited is not None:
            if awaited != version and not (awaited is _GONE and type_ == "DELETED"):
                return
            del self.awaited[kind][name]
        if type_ == "DELETED":
            self.objects[kind].pop(name, None)
        else:
            self.objects[kind][name] = obj

    def _job_of(self, kind: str, obj) -> str | None:
        """The job an object belongs to (the lock held: an event's job is a cached ConfigMap's name)."""
        if kind == "events":
            name = obj.involved_object.name or ""
            jobs = [j for j in self.objects["configmaps"] if name == j or name.startswith(j + "-")]
            return max(jobs, key=len) if jobs else None
        return (obj.metadata.labels or {}).get(JOB)

    def _run(self, kind: str) -> None:
        lister = self.listers[kind]
        failures = 0
        error: Exception
        while not self.stopping.is_set():
            try:
                if self.versions[kind] is None:
                    self._list(kind, lister)
                self._watch(kind, lister)
                failures = 0
                continue
            except ApiException as e:
                error = e
                if e.status == 410:  # the version has left the API server's window: list again
                    self.versions[kind] = None
            except Exception as e:  # a dropped connection, Forbidden, ...: resume after a backoff
                error = e
            if self.stopping.is_set():
                return
            self.errors[kind] = error
            self.log.debug("watch of %s restarts: %s", kind, error)
            if failures or not (isinstance(error, ApiException) and error.status == 410):
                self.stopping.wait(min(0.5 * 2 ** failures, 10))
            failures += 1

    def _list(self, kind: str, lister) -> None:
        listing = lister()
        if isinstance(listing, dict):  # custom resources
            items, version = [Resource(o) for o in listing["items"]], listing["metadata"]["resourceVersion"]
        else:
            items, version = listing.items, listing.metadata.resource_version
        with self.lock:
            touched = {self._job_of(kind, o) for o in self.objects[kind].values()}
            self.objects[kind] = {o.metadata.name: o for o in items}
            touched |= {self._job_of(kind, o) for o in items}
            self.awaited[kind].clear()
            self.generation[kind] += 1
            self.versions[kind] = version
        self.errors.pop(kind, None)
        self.ready[kind].set()
        for job in touched - {None}:
            self.changed(job)

    def _watch(self, kind: str, lister) -> None:
        """Watch from `versions[kind]` until the API server ends the watch (raises its failure)."""
        stream = watch.Watch(return_type=self.MODELS[kind])  # a lambda names no type to find
        with self.lock:
            self.watches[kind] = stream
        if self.stopping.is_set():
            return
        for event in stream.stream(lister, resource_version=self.versions[kind], timeout_seconds=self.watch_timeout,
                                   allow_watch_bookmarks=True, _request_timeout=(30, self.watch_timeout + 30)):
            if self.stopping.is_set():
                return
            if event["type"] == "BOOKMARK":  # no object, only how far the stream has come
                self.versions[kind] = event["raw_object"]["metadata"]["resourceVersion"]
                continue
            obj = event["object"]
            job = self._deliver(kind, event["type"], Resource(obj) if isinstance(obj, dict) else obj)
            if job:
                self.changed(job)

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            watches = list(self.watches.values())
        for stream in watches:
            stream.stop()  # unblocks the thread reading it


class WorkQueue:
    """Job names to reconcile, as client-go's workqueue: a name added while it waits waits once (the dirty
    set); a name added while a worker processes it is processed again after `done`, never by two workers
    at once (the processing set)."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.waiting: deque[str] = deque()
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.closed = False

    def add(self, name: str) -> None:
        with self.condition:
            if self.closed or name in self.dirty:
                return
            self.dirty.add(name)
            if name not in self.processing:
                self.waiting.append(name)
                self.condition.notify()

    def get(self) -> str | None:
        """The next name, now processing until `done(name)`; None once shut down."""
        with self.condition:
            while not self.waiting and not self.closed:
                self.condition.wait()
            if self.closed:
                return None
            name = self.waiting.popleft()
            self.dirty.discard(name)
            self.processing.add(name)
            return name

    def done(self, name: str) -> None:
        with self.condition:
            self.processing.discard(name)
            if name in self.dirty and not self.closed:
                self.waiting.append(name)
                self.condition.notify()

    def shut_down(self) -> None:
        with self.condition:
            self.closed = True
            self.condition.notify_all()


class Controller:
    """Keeps the backend's cache current and applies the policy to every job a change touches, a few jobs
    at a time and each job by one worker at a time (see WorkQueue); copies running pods' logs into the log
    files as they are written."""

    WORKERS = 4

    def __init__(self, backend: KubeBackend, log, watch_timeout: int = WATCH_TIMEOUT):
        self.backend, self.log = backend, log
        self.queue = WorkQueue()
        self.followers: dict[str, threading.Thread] = {}  # pod uid -> its log copier
        self.reminders: dict[str, threading.Timer] = {}  # job -> its deadline's reconcile
        self.stopping = False
        self.workers = [threading.Thread(target=self._work, daemon=True, name=f"distrain-reconcile-{i}")
                        for i in range(self.WORKERS)]
        for worker in self.workers:
            worker.start()
        self.cache = backend.cache = Cache(listers(backend.api, backend.ns, backend.has_jobset()), self.queue.add, log,
                                           watch_timeout)
        self.cache.start()

    def _work(self) -> None:
        while (name := self.queue.get()) is not None:
            try:
                roots = [cm for cm in self.cache.items("configmaps") if cm.metadata.name == name]
                if roots:
                    pods = self.backend._pods(name)
                    if engine_of(roots[0]) == "pods":
                        job = self.backend.reconcile(roots[0], newest(pods))
                        self._remind(name, job)
                    else:  # the engine applies the policy; copy what ended pods logged
                        for pod in sorted(pods, key=created):
                            if pod.status.phase in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp:
                                self.backend.archive(name, pod.metadata.labels[REPLICA], pod)
                    self._follow(name, pods)
            except Exception:
                self.log.exception("reconciling job %s", name)
            finally:
                self.queue.done(name)

    def _remind(self, name: str, job: JobRecord) -> None:
        """Reconcile a running supervised job again at its deadline (no change in the cluster marks it)."""
        status = {"started": job["started"]}
        left = None if job["phase"] in FINISHED else deadline_left(job["spec"], status)
        if left is not None and name not in self.reminders:
            timer = threading.Timer(left + 0.1, self._reminded, (name,))
            timer.daemon = True
            self.reminders[name] = timer
            timer.start()

    def _reminded(self, name: str) -> None:
        self.reminders.pop(name, None)
        self.queue.add(name)

    def _follow(self, job: str, pods: list[client.V1Pod]) -> None:
        for pod in pods:
            replica, uid = pod.metadata.labels[REPLICA], pod.metadata.uid
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp and uid not in self.followers:
                thread = threading.Thread(target=self._copy, args=(job, replica, pod), daemon=True,
                                          name=f"distrain-logs-{pod.metadata.name}")
                self.followers[uid] = thread
                thread.start()

    def _copy(self, job: str, replica: str, pod: client.V1Pod) -> None:
        try:
            while not self.stopping:
                self.backend.archive(job, replica, pod, follow=True)
                current = next((p for p in self.cache.items("pods") if p.metadata.uid == pod.metadata.uid), None)
                if current is None or current.status.phase != "Running" or current.metadata.deletion_timestamp:
                    self.backend.archive(job, replica, current or pod)
                    return
                time.sleep(0.5)  # the stream ended while the container runs: pick up where the file ends
        except Exception:
            if not self.stopping:
                self.log.exception("copying the log of %s", pod.metadata.name)
        finally:
            self.followers.pop(pod.metadata.uid, None)

    def stop(self) -> None:
        self.stopping = True
        for timer in list(self.reminders.values()):
            timer.cancel()
        self.cache.stop()
        self.queue.shut_down()
        for response in list(self.backend.streams):
            response.shutdown()  # unblocks the copier reading it
