"""The Kubernetes backend. Every job has a root ConfigMap that owns the rest, and runs on an engine
(manifests.py renders both):

- "jobset": a JobSet, whose controller enforces the job's lifecycle in the cluster (success, failures,
  restarts, deadline), whether or not a Jupyter server runs. This backend only observes it: the
  JobSet's conditions, its Jobs and pods give the job's state (`jobset_state`).
- "kubeflow": the Training Operator's TFJob, PyTorchJob or PaddleJob, enforced in the cluster likewise;
  its conditions and pods give the job's state (`kubeflow_state`); the operator counts no restarts, so
  this backend records those it sees (`count_restarts`).
- "sweep": a sweep, whose controller runs in the cluster (incluster/sweep.py, in its Job's pod): it launches
  the trials, jobs of their own, and records the sweep's status, which this backend only reads.
- "pods": bare pods and Services, for clusters with neither engine. This backend supervises them: it
  applies the lifecycle policy as they change (`reconcile`), so a job stops being supervised while no
  Jupyter server (or following CLI) runs.

All state lives in the cluster, so a restarted Jupyter server (or a CLI on another machine) finds and
keeps observing running jobs:

    ConfigMap <job>    data: spec.json, cluster.json, status.json (run; a stop; on "pods" the phase,
                       reasons and each replica's end); label: the engine
    the engine's objects, Pods labelled with the job (its role, its run; the replica, or the index the
                       Training Operator labels it with); their live state
    Events             the scheduler's, the engine's and the job's own

`Controller` keeps a watch-fed cache of the namespace's jobs, workloads, pods and events (no LIST per
request), applies the policy to "pods" jobs as they change, and copies logs; without it (the CLI) each
call reads the cluster (and applies the policy once). Logs are copied from the pods/log API into files
under the storage root as they are written, so they remain readable after the pods are gone:
<root>/kubernetes/<namespace>/<job>/logs/<run>/<replica>.log, each pod's into the directory of the run its
label names. Each pod also writes its lines to the job's output volume; a run this process did not watch
from its start may have lines only there (pods gone while no server ran), so those are merged in first,
through a short-lived reader pod, and a run's directory is marked complete once it holds every line.

Beside it: manifests.py renders the objects per engine, kube_state.py reads a job's state from them,
kube_watch.py watches the namespace, kube_logs.py appends pods/log lines to the log files, kube_client.py
gives every request to the API server its deadline.
"""

from __future__ import annotations

import base64
import builtins  # `list` is also a method name below
import json
import logging
import shutil
import ssl
import threading
import time
from collections import Counter
from contextlib import contextmanager, nullcontext, suppress
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, Iterator, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .. import logs, snapshot as snapshot_, storage, sweep
from ..errors import DistrainError, FieldError, JobConflict, JobNotFound, SpecError
from ..logs import LogLine
from ..policy import (FINISHED, STOP_REQUESTED, Event, Phase, Replica, deadline_exceeded, decide, ending,
                      restart_event, run_ended)
from ..spec import expires, gpu_type, gpus, replica_name, replicas
from ..sweep import is_sweep
from . import manifests
from ..owners import sees
from ..records import ClusterTensorBoard, EventRecord, JobRecord, JobSummary, summary
from ..incluster.tensorboard import SECRET_HEADER
from .kube_client import in_cluster, load_client, with_deadlines
from .kube_logs import (append, from_pods_log, from_volume, last_stamp, line_batches, read_provenance,
                        seconds_since)
from .kube_state import (GPU, WORKLOAD_GRACE, count_restarts, created, current_run, deadline_left, ended_pod,
                         engine_of, event_job, event_time, event_view, involved_replica, jobset_state, kubeflow_state,
                         missing_pod, new_status, newest, newest_of_run, node_gpus, note_unschedulable,
                         policy_replicas, queued, replica_key, replica_state, run_end, seconds, stopped_status, unmade,
                         why_not_running, with_ending)
from .kube_watch import SELECTOR, WATCH_TIMEOUT, Cache, KubeError, Resource, WorkQueue, Write, api_error, listers
from .manifests import JOB, MANAGED, OWNER, ROLE, RUN, SWEEP, object_name, replica_of

if TYPE_CHECKING:
    from ..config import Distrain

# the built-in kinds a job is made of: their API and resource
OBJECT_APIS = {"ConfigMap": ("core", "config_map"), "Service": ("core", "service"), "Pod": ("core", "pod"),
               "Deployment": ("apps", "deployment"), "Secret": ("core", "secret"),
               "ServiceAccount": ("core", "service_account"), "Role": ("rbac", "role"),
               "RoleBinding": ("rbac", "role_binding"), "Job": ("batch", "job"), "CronJob": ("batch", "cron_job")}
# the kinds written here that the Cache holds
CACHED = {"ConfigMap": "configmaps", "Pod": "pods", "JobSet": "jobsets",
          **{k.kind: k.plural for k in manifests.KUBEFLOW.values()}}
COMPLETE = ".complete"  # in a run's log directory: it holds every line of the run
READER_TIMEOUT = 120  # seconds a log reader pod may take to serve (its image may be pulled first)
LOG_SILENCE = 300  # seconds a followed log may send nothing before it is asked for again
LOGS_GRACE = 30  # seconds a follower waits, past a run's end, for a controller to copy its last lines
SUPERVISED = ("supervised by the Jupyter server (no engine in the cluster runs it): while no server or following CLI runs, "
              "nothing ends the job's other replicas, restarts a failed one or enforces its deadline")


class KubeBackend:
    name = "kubernetes"
    default_host_paths: tuple[str, ...] | None = manifests.HOST_PATHS_BY_DEFAULT

    def __init__(self, settings: Distrain, api: client.ApiClient | None = None):
        """Jobs in `settings.namespace`, through `api` (default: from `settings.kubeconfig`, $KUBECONFIG,
        ~/.kube/config, or the pod's service account inside a cluster)."""
        self.settings = settings
        self.ns = settings.namespace
        kubeconfig = settings.kubeconfig or None
        self.api = with_deadlines(api, settings.kubernetes_timeout) if api else \
            load_client(settings.kubernetes_timeout, kubeconfig)
        self.inside = api is None and in_cluster(kubeconfig)  # reach Services directly, not through the API server
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.root = Path(settings.root).resolve() / "kubernetes" / self.ns
        self.owner = settings.owner
        self.cache: Cache | None = None
        self.controller: Controller | None = None
        self.streams: set = set()  # pods/log responses being followed, closed by Controller.stop
        self.reading = threading.Lock()  # one log reader pod at a time
        self.locks: dict[str, threading.RLock] = {}  # job -> held while this process changes it
        self.locking = threading.Lock()
        self.janitor_made = False  # by this process, or found made

    @classmethod
    def from_config(cls, config: Distrain) -> KubeBackend:
        return cls(config)

    def start(self, log: logging.Logger, job: str | None = None) -> None:
        """Watch the namespace (or only `job`), apply the policy to supervised jobs and copy logs (see
        Controller)."""
        self.controller = Controller(self, log, job=job)

    # engines
    def engines(self) -> dict[str, str]:
        """The engines' resources the cluster serves (jobsets, tfjobs, pytorchjobs, paddlejobs, and Kueue's
        workloads), each with its API version."""
        groups = self._call(lambda: client.ApisApi(self.api).get_api_versions().groups, "list the cluster's APIs")
        served = {f"{g.name}/{v.version}" for g in groups for v in g.versions}
        out = {"jobsets": manifests.JOBSET_API} if manifests.JOBSET_API in served else {}
        if manifests.KUBEFLOW_API in served:
            group, version = manifests.KUBEFLOW_API.split("/")
            kinds = {k.plural for k in manifests.KUBEFLOW.values()}
            try:
                resources = self.custom.get_api_resources(group, version).resources
            except ApiException as e:  # a CRD just installed: the group is listed before it serves
                if e.status != 404:
                    raise api_error(e, "list Kubeflow's resources") from None
                resources = []
            out.update({r.name: manifests.KUBEFLOW_API for r in resources if r.name in kinds})
        if manifests.KUEUE_API in served:
            out["workloads"] = manifests.KUEUE_API
        return out

    def engine(self, spec: dict | None = None) -> tuple[str, str]:
        """The engine new jobs (or the job `spec`) run on, by c.Distrain.kubernetes_engine and what the
        cluster serves, and why. "auto" prefers JobSet, then the Training Operator for the jobs it can run."""
        if spec is not None and is_sweep(spec):
            return SWEEP, "a sweep's controller runs in the cluster (a Job) and launches its trials"
        wanted = self.settings.kubernetes_engine
        if wanted == "pods":
            return "pods", f"c.Distrain.kubernetes_engine is 'pods': jobs are {SUPERVISED}"
        served = self.engines()
        if wanted in ("auto", "jobset") and "jobsets" in served:
            return "jobset", ("the cluster serves JobSet (jobset.x-k8s.io/v1alpha2): its controller enforces each "
                              "job's lifecycle in the cluster")
        if wanted == "jobset":
            raise KubeError("c.Distrain.kubernetes_engine is 'jobset' but the cluster does not serve "
                            "jobset.x-k8s.io/v1alpha2: an admin installs JobSet (see the README), or choose 'auto'")
        kinds = sorted({k.kind for k in manifests.KUBEFLOW.values() if k.plural in served})
        if not kinds:
            if wanted == "kubeflow":
                raise KubeError("c.Distrain.kubernetes_engine is 'kubeflow' but the cluster does not serve "
                                "kubeflow.org/v1: an admin installs Kubeflow's Training Operator, or choose 'auto'")
            return "pods", f"the cluster serves neither JobSet nor Kubeflow's Training Operator: jobs are {SUPERVISED}"
        why = (f"the cluster serves Kubeflow's Training Operator ({', '.join(kinds)}): it enforces each job's "
               "lifecycle in the cluster")
        framework = (spec or {}).get("framework", "python")
        kind = manifests.KUBEFLOW.get(framework)
        if spec and kind and kind.kind not in kinds:
            missing = f"the cluster's Training Operator serves no {kind.kind}"
            if wanted == "kubeflow":
                raise KubeError(f"c.Distrain.kubernetes_engine is 'kubeflow' but {missing}")
            return "pods", f"{missing}: this job is {SUPERVISED}"
        refusal = manifests.kubeflow_refusal(spec) if spec and wanted == "auto" else None
        if refusal:
            return "pods", f"the Training Operator cannot run this job ({refusal.message.split('; ')[0]}): it is {SUPERVISED}"
        if not spec and wanted == "auto":
            why += f"; jobs it cannot run are {SUPERVISED}"
        return "kubeflow", why

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
        """Under the job's uid: a job made under the name of a deleted one starts with none of its lines, whichever
        process copied them."""
        return self.root / name / self._root(name).metadata.uid / "logs" / str(run)

    def tensorboard(self, spec: dict, replica: str | None = None) -> ClusterTensorBoard:
        """The job's one TensorBoard (a replica is one of its runs)."""
        if not spec["tensorboard"]["enabled"]:
            raise DistrainError(f"job {spec['name']} runs no TensorBoard: its tensorboard.enabled is false")
        service, port = manifests.tensorboard_name(spec["name"]), manifests.TENSORBOARD_PORT
        try:
            secret = self.core.read_namespaced_secret(service, self.ns).data[manifests.BOARD_KEY]
            board = {SECRET_HEADER: base64.b64decode(secret).decode()}
        except ApiException as e:
            if e.status != 404:
                raise api_error(e, f"read secret {service}") from None
            board = {}  # a TensorBoard made before boards had secrets asks for none
        if self.inside:
            return ClusterTensorBoard(f"http://{service}.{self.ns}.svc:{port}", board)
        c = self.api.configuration
        return ClusterTensorBoard(
            f"{c.host}/api/v1/namespaces/{self.ns}/services/http:{service}:http/proxy",
            headers={**board, **{auth["key"]: auth["value"] for auth in c.auth_settings().values()}},  # the token
            tls=self._tls)

    @cached_property
    def _tls(self) -> ssl.SSLContext:
        """TLS to the API server as the client's configuration says: its CA, client certificate, verification."""
        c = self.api.configuration
        context = ssl.create_default_context(cafile=c.ssl_ca_cert)
        if c.cert_file:
            context.load_cert_chain(c.cert_file, c.key_file)
        if not c.verify_ssl:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context

    # reading the cluster (from the cache when watching)
    def _roots(self) -> list[client.V1ConfigMap]:
        """The ConfigMaps of the jobs this backend's owner sees (see `visible`)."""
        return [cm for cm in self._every_owners_roots() if self.visible(cm)]

    def _every_owners_roots(self) -> list[client.V1ConfigMap]:
        if self.cache:
            return self.cache.items("configmaps")
        return self._call(lambda: self.core.list_namespaced_config_map(self.ns, label_selector=SELECTOR).items,
                          "list jobs")

    def visible(self, obj: client.V1ConfigMap | client.V1Secret) -> bool:
        """Whether the owner sees a job's ConfigMap (or a Secret): theirs, made before there were owners, or
        everyone's to an admin."""
        return sees(self.owner, owner_of(obj), self.settings.see_all_owners)

    def _root(self, name: str) -> client.V1ConfigMap:
        root = self.cache.get("configmaps", name) if self.cache else \
            next((cm for cm in self._roots() if cm.metadata.name == name), None)
        if root is None or not self.visible(root):
            raise JobNotFound(name)
        return root

    def _pods(self, name: str) -> builtins.list[client.V1Pod]:
        """The job's replicas' pods (with restarts on the JobSet engine, several per replica)."""
        if not self.cache:
            return self._pods_fresh(name)
        return [p for p in self.cache.of_job("pods", name) if ROLE in p.metadata.labels]

    def _jobs(self, name: str) -> dict[str, client.V1Job]:
        """The Jobs of a JobSet job, by replica."""
        if self.cache and self.cache.holds("jobs"):
            jobs = self.cache.of_job("jobs", name)
        else:
            jobs = self._call(lambda: self.batch.list_namespaced_job(
                self.ns, label_selector=f"{SELECTOR},{JOB}={name}").items, "list Jobs")
        return {replica_of(j.metadata.labels): j for j in jobs if (j.metadata.labels or {}).get(JOB) == name
                and ROLE in j.metadata.labels}

    @staticmethod
    def _engine_api(root: client.V1ConfigMap) -> tuple[str, str, str]:
        """(group, version, resource) of the object that runs the job on its engine (a JobSet, a TFJob...)."""
        api_version, resource = manifests.engine_resource(json.loads(root.data["spec.json"]), engine_of(root))
        group, version = api_version.split("/")
        return group, version, resource

    def _workload(self, root: client.V1ConfigMap) -> dict | None:
        """The object that runs the job on its engine, as the engine reports it."""
        resource = self._engine_api(root)[2]
        if self.cache and self.cache.holds(resource):
            return self.cache.get(resource, root.metadata.name)
        return self._workload_fresh(root)

    def _workload_fresh(self, root: client.V1ConfigMap) -> dict | None:
        group, version, resource = self._engine_api(root)
        try:
            return self.custom.get_namespaced_custom_object(group, version, self.ns, resource, root.metadata.name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"read {resource} {root.metadata.name}") from None

    def run_over(self, root: client.V1ConfigMap) -> bool:
        """Whether the job's current run has ended in the cluster: the status recorded says so, or its engine
        (the view may wait a little longer for the objects that explain the end)."""
        if json.loads(root.data["status.json"])["phase"] in FINISHED:
            return True
        return engine_of(root) not in ("pods", SWEEP) and run_end(root, self._workload(root)) is not None

    def _observe(self, root: client.V1ConfigMap, pods: builtins.list[client.V1Pod]) -> dict:
        """The status of a job an engine runs, from its object, its pods (and a JobSet's Jobs), and while
        it is queued Kueue's Workload: see kube_state.jobset_state and kubeflow_state."""
        workload = self._workload(root)
        admission = self._admission(root.metadata.name) if queued(workload, None) else None  # why it waits
        if engine_of(root) == "jobset":
            return jobset_state(root, workload, self._jobs(root.metadata.name), pods, admission)
        return kubeflow_state(root, workload, pods, admission)

    def _admission(self, name: str) -> dict | None:
        """Kueue's Workload for the job (owned by the job's JobSet or TFJob..., named as the job)."""
        if self.cache:
            workloads = self.cache.items("workloads") if self.cache.holds("workloads") else []
        else:
            group, version = manifests.KUEUE_API.split("/")
            workloads = self._call(lambda: self.custom.list_namespaced_custom_object(
                group, version, self.ns, "workloads")["items"], "list Kueue's workloads")
        return next((w for w in workloads if any(o["name"] == name for o in w["metadata"].get("ownerReferences", []))),
                    None)

    def _events(self, name: str, replica_names) -> list[client.CoreV1Event]:
        """Events of the job (its ConfigMap, its JobSet) and of its replicas' objects (Pods, Jobs), the
        deleted ones' included."""
        if self.cache:
            events = self.cache.items("events")
        else:
            events = self._call(lambda: self.core.list_namespaced_event(self.ns).items, "list events")
        # of the jobs whose names begin as this one's objects' do (another owner's aj-worker-0-x for job aj), the
        # longest name an object's begins with is its job's
        longer = [cm.metadata.name for cm in self._every_owners_roots() if cm.metadata.name.startswith(name + "-")]
        return [e for e in events if involved_replica(e.involved_object.name, name, replica_names) is not None
                and (not longer or event_job(e.involved_object.name, [name, *longer]) == name)]

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

    # credentials: only the Secrets this extension made (its label), each for its owner (the annotation)
    def _secret(self, secret: str) -> client.V1Secret | None:
        """The Secret `secret`, if this extension made it and its owner is this backend's."""
        try:
            found = self.core.read_namespaced_secret(secret, self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"read secret {secret}") from None
        return found if self._own_credentials(found) else None

    def _own_credentials(self, secret: client.V1Secret) -> bool:
        """Whether `secret` is credentials this extension stored for this owner (not a job's snapshot)."""
        labels = secret.metadata.labels or {}
        return all(labels.get(key) == value for key, value in MANAGED.items()) and JOB not in labels \
            and self.visible(secret)

    def credentials(self, secret: str) -> dict:
        found = self._secret(secret)
        if found is None:
            raise SpecError([FieldError("code.credentials", f"no secret named {secret!r} of yours in namespace "
                                        f"{self.ns} (create it with 'distrain secret set {secret} --host HOST')")])
        data = found.data or {}
        return {k: base64.b64decode(data.get(k, "")).decode() for k in ("username", "password", "host")}

    def set_credentials(self, secret: str, username: str, password: str, host: str) -> None:
        """Create the Secret, or replace one this extension made for this owner; any other Secret of that name
        is left alone and the name refused."""
        metadata = client.V1ObjectMeta(name=secret, namespace=self.ns,
                                       labels={**MANAGED, OWNER: manifests.label_value(self.owner)},
                                       annotations={OWNER: self.owner})
        body = client.V1Secret(metadata=metadata, type="kubernetes.io/basic-auth",
                               string_data={"username": username, "password": password, "host": host})
        try:
            self.core.create_namespaced_secret(self.ns, body)
            return
        except ApiException as e:
            if e.status != 409:
                raise api_error(e, f"create secret {secret}") from None
        existing = self._call(lambda: self.core.read_namespaced_secret(secret, self.ns), f"read secret {secret}")
        if not self._own_credentials(existing):
            raise SpecError([FieldError("name", f"namespace {self.ns} has a Secret {secret!r} that is not one of "
                                                "yours from jupyter-distrain; choose another name")],
                            subject="credentials")
        metadata.annotations = existing.metadata.annotations  # an admin replacing it keeps its owner
        metadata.resource_version = existing.metadata.resource_version  # unless it changed meanwhile
        self._call(lambda: self.core.replace_namespaced_secret(secret, self.ns, body), f"replace secret {secret}")

    def credential_names(self) -> builtins.list[str]:
        """The Secrets this extension made for this owner (other Secrets of the namespace are none of its
        business)."""
        secrets = self._call(lambda: self.core.list_namespaced_secret(  # not a job's (its snapshot's)
            self.ns, label_selector=f"{SELECTOR},!{JOB}").items, "list secrets")
        return [s.metadata.name for s in secrets if self.visible(s)]

    def delete_credentials(self, secret: str) -> None:
        self._call(lambda: self.core.delete_namespaced_secret(secret, self.ns), f"delete secret {secret}")

    # lifecycle
    def check(self, spec: dict, new_job: bool = True, engine: str | None = None) -> None:
        """Refuse, before anything is created, what the cluster can never run; then let the API server
        (and the engine's admission webhooks) validate every object of the job on `engine` (default: the
        one new jobs run on) in a server-side dry run, so a bad spec never half-creates a job."""
        engine = engine or self.engine(spec)[0]
        if is_sweep(spec):
            self._check_sweep(spec)  # its last trial checked as a job covers every field the sweep passes on
        elif errors := self._refusals(spec, engine):
            raise SpecError(errors)
        owner = manifests.root(spec, self.settings, engine, self.resume_source(spec))
        objects = manifests.workload(spec, self.settings, owner, engine)
        if new_job:  # a restart: the root and the TensorBoard exist
            objects = [owner, *objects, *manifests.tensorboard(spec, self.settings, owner)]
        for obj in objects:
            if obj["kind"] != "RoleBinding":  # its Role (checked: this identity may grant it) is not made yet
                self._create(obj, dry_run=True)

    def _refusals(self, spec: dict, engine: str) -> builtins.list[FieldError]:
        """What the cluster can never run of the job on `engine`: its code, GPUs, name, queue and volumes."""
        errors = manifests.refusals(spec, engine)
        if "path" in spec.get("code", {}):
            errors.append(FieldError("code.path", "a local directory cannot reach the cluster; use a git repository"))
        if error := snapshot_.too_large(spec, manifests.SNAPSHOT_LIMIT, "a Secret holds"):
            errors.append(error)
        errors += self._gpu_refusals(spec)
        if engine == "jobset":
            longest = max(len(replica_name(r, i)) for r, i in replicas(spec))
            limit = 63 - len("--0-0-abcde") - longest
            if len(spec["name"]) > limit:
                errors.append(FieldError("name", f"at most {limit} characters for this job on JobSet: its pods' names "
                                                 f"(<name>-<replica>-0-0-<5 characters>) must fit in 63"))
        if "queue" in spec and engine != "pods":  # on pods, manifests.refusals says why not
            queues = self.queues()
            if queues is None:
                errors.append(FieldError("queue", "the cluster has no Kueue (kueue.x-k8s.io): an admin installs it "
                                                  "(see the README), or leave the queue out"))
            elif spec["queue"] not in queues:
                errors.append(FieldError("queue", f"no LocalQueue {spec['queue']!r} in namespace {self.ns}; queues: "
                                                  f"{', '.join(queues) or 'none'}"))
        claims = {c.metadata.name: c for c in self._call(
            lambda: self.core.list_namespaced_persistent_volume_claim(self.ns).items, "list volumes")}
        for field_, source in (("data", spec.get("data")), ("output", manifests.output_source(spec, self.settings))):
            if source and "volume" in source and source["volume"] not in claims:
                errors.append(FieldError(f"{field_}.volume", f"no PersistentVolumeClaim {source['volume']!r} in "
                                         f"namespace {self.ns}; volumes: {', '.join(sorted(claims)) or 'none'}"))
        data = spec.get("data", {})
        if data.get("volume") in claims:
            holds_others = data["volume"] == self.settings.output_claim or \
                (claims[data["volume"]].metadata.labels or {}).get(manifests.HOLDS_OUTPUTS) == "true"
            parts = PurePosixPath(data.get("path", "")).parts
            if problem := storage.reading_problem(parts, self.owner, self.settings.read_others_outputs, holds_others):
                errors.append(FieldError(storage.source_field("data", data),
                                         f"{'/'.join((data['volume'], *parts))} {problem}"))
        return errors

    def resume_source(self, spec: dict, owner: str | None = None) -> dict | None:
        """The claim and directory a job of `owner` (default: this backend's) resumes from, for its
        resume_from: job:NAME: that job's output, if they see it, else, once it is deleted, the directory of
        its name in their own on the output claim. None for no resume_from or a path in the image."""
        resume = spec.get("resume_from", "")
        if not resume.startswith("job:"):
            return None
        owner, name = self.owner if owner is None else owner, resume[4:]
        try:
            earlier = self._root(name)
        except JobNotFound:
            return {"volume": self.settings.output_claim, "path": "/".join((*storage.area(owner), name))}
        earlier_spec = json.loads(earlier.data["spec.json"])
        source = manifests.output_source(earlier_spec, self.settings)
        if "host_path" in source:
            raise SpecError([FieldError("resume_from", f"job {name!r} wrote its output to the host path "
                                                       f"{source['host_path']}, which only its nodes have; "
                                                       "name a checkpoint's path instead")])
        return {"volume": source["volume"], "path": storage.output_path(earlier_spec, owner_of(earlier))}

    def _mark_holding_outputs(self, spec: dict) -> None:
        """Label the claim the job writes its output to as one holding owners' outputs (HOLDS_OUTPUTS), for
        every later job that reads it as data: its owners/ directory is no one's to read whole."""
        source = manifests.output_source(spec, self.settings)
        if "volume" in source:
            self._call(lambda: self.core.patch_namespaced_persistent_volume_claim(
                source["volume"], self.ns, {"metadata": {"labels": {manifests.HOLDS_OUTPUTS: "true"}}}),
                f"label volume {source['volume']}")

    def _gpu_refusals(self, spec: dict) -> builtins.list[FieldError]:
        """The roles asking for more GPUs than the largest node (of their GPU type) has; none where this
        identity may not list nodes (a sweep's controller: its trials were checked when it was submitted)."""
        try:
            nodes = self.core.list_node().items
        except ApiException as e:
            if e.status != 403:
                raise api_error(e, "list nodes") from None
            return []
        errors = []
        for role in spec["replicas"]:
            kind = gpu_type(spec, role)
            selector = manifests.gpu_nodes(spec, role, self.settings).get("node_selector", {})
            largest = {n.metadata.name: node_gpus(n) for n in nodes
                       if selector.items() <= (n.metadata.labels or {}).items()}
            most = max(largest.values(), default=0)
            if gpus(spec, role) > most:
                have = ", ".join(f"{n}: {g}" for n, g in sorted(largest.items())) or "no nodes"
                errors.append(FieldError(f"replicas.{role}.resources.gpus",
                                         f"{gpus(spec, role)} GPUs per {role} requested; the largest "
                                         f"{f'{kind} ' if kind else ''}node has {most} ({have})"))
        return errors

    def _check_sweep(self, spec: dict) -> None:
        """What a sweep needs on Kubernetes, then its trials checked as jobs of their own: the last, which has
        the longest name (they differ in their names and hyperparameters alone)."""
        errors = [] if self.settings.controller_image else [FieldError(
            "sweep", "this server names no image for the sweep's controller: an admin sets "
                     "c.Distrain.controller_image (an image with jupyter-distrain installed)")]
        errors += [FieldError(f"output.{key}", "each trial writes to its own directory on the output volume "
                                               "(<volume>/<trial>): a sweep names its output.volume alone")
                   for key in ("path", "host_path") if key in spec.get("output", {})]
        if errors:
            raise SpecError(errors)
        self.check(sweep.trials(spec)[-1])

    def _api(self, verb: str, kind: str) -> Callable:
        """The client call that does `verb` (create, delete) to an object of `kind` in the namespace."""
        group, resource = OBJECT_APIS[kind]
        return getattr(getattr(self, group), f"{verb}_namespaced_{resource}")

    def _writing(self, kind: str | None, name: str):
        """Bracket a write to object `name` of the cached `kind` (see Cache: read your own writes); for
        another kind (or one the cluster does not serve), or without a cache, the `Write` does nothing."""
        if self.cache and kind in self.cache.listers:
            return self.cache.writing(kind, name)
        return nullcontext(Write(None, "", name))

    def _create(self, obj: dict, dry_run: bool = False, exists_ok: bool = False) -> dict:
        """Create the object, and answer what was made; with `exists_ok`, an object of its name that exists
        already is left as it is (the answer: {})."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        options = {"dry_run": "All"} if dry_run else {}
        with self._writing(None if dry_run else CACHED.get(kind), name) as write:
            try:
                if obj["apiVersion"] in (manifests.JOBSET_API, manifests.KUBEFLOW_API):
                    group, version = obj["apiVersion"].split("/")
                    made = Resource(self.custom.create_namespaced_custom_object(
                        group, version, self.ns, kind.lower() + "s", obj, **options))
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

    @contextmanager
    def changing(self, name: str) -> Iterator[None]:
        """One change (submit, stop, restart, delete) of a job at a time in this process; those of other
        processes meet the API server's conflicts (a name taken, a stale resourceVersion) instead."""
        with self.locking:
            lock = self.locks.setdefault(name, threading.RLock())
        with lock:
            yield

    def submit(self, spec: dict, snapshot: bytes | None = None) -> JobRecord:
        with self.changing(spec["name"]):
            return self._submit(spec, snapshot)

    def _submit(self, spec: dict, snapshot: bytes | None) -> JobRecord:
        engine, why = self.engine(spec)
        self.check(spec, engine=engine)
        owner = manifests.root(spec, self.settings, engine, self.resume_source(spec))
        owner["data"]["status.json"] = json.dumps(new_status(spec))
        if "trial_of" in spec:  # deleting the sweep deletes it, whatever its controller was doing then
            parent = self.api.sanitize_for_serialization(self._root_fresh(spec["trial_of"]))
            owner["metadata"]["ownerReferences"] = [manifests.owned_by(parent)]
        self._mark_holding_outputs(spec)
        owner = self._create(owner)
        try:
            if snapshot is not None:
                self._create(manifests.snapshot_secret(spec, self.settings, owner, snapshot))
            self._start(spec, owner, engine)
            for obj in manifests.tensorboard(spec, self.settings, owner):
                self._create(obj)
        except DistrainError:
            self._delete_root(spec["name"])
            raise
        self.record(spec["name"], Event("Submitted", f"job accepted; engine {engine}: {why}"))
        self._make_janitor(spec)
        return self.get(spec["name"])

    def _make_janitor(self, spec: dict) -> None:
        """Make the namespace's janitor (manifests.janitor) with the first job that has a time to be kept, if
        there is an image to run it; a failure is a Warning on the job (Jupyter servers and `distrain prune`
        still delete it when its time is over)."""
        settings = self.settings
        if self.janitor_made or not (spec["policy"].get("ttl_after_finished") and settings.janitor_schedule
                                     and settings.controller_image):
            return
        try:
            for obj in manifests.janitor(settings):
                self._create(obj, exists_ok=True)
            self.janitor_made = True
        except DistrainError as e:
            self.record(spec["name"], Event("NoJanitor", "the cluster cannot delete this job when its time to be "
                                                         f"kept is over, only a Jupyter server can: {e}", type="Warning"))

    def _start(self, spec: dict, owner: dict, engine: str, run: int = 1) -> None:
        for obj in manifests.workload(spec, self.settings, owner, engine, run):
            self._create(obj)

    def get(self, name: str, events: int = 20) -> JobRecord:
        job = self._current(self._root(name))
        if events:
            names = [r["name"] for r in job["replicas"]]
            # not those of an earlier job of the same name, which Kubernetes keeps for an hour
            own = [e for e in self._events(name, names) if (event_time(e) or 0) >= int(job["created"])]
            job["events"] = [cast(EventRecord, event_view(e, name, names))
                             for e in sorted(own, key=lambda e: event_time(e) or 0)][-events:]
        return job

    def _current(self, root: client.V1ConfigMap) -> JobRecord:
        """The job of `root` as it stands: observed from its engine, or from its pods on "pods" (reconciled
        here unless this process's controller does)."""
        if engine_of(root) == SWEEP:  # as its controller records it
            return self._view(root, {})
        pods = self._pods(root.metadata.name)
        if engine_of(root) == "pods":
            return self.reconcile(root, newest(pods)) if not self.cache else self._view(root, newest(pods))
        if json.loads(root.data["status.json"])["phase"] in FINISHED:  # recorded as it ended: nothing to observe
            return self._view(root, newest(pods))
        return self._view(root, newest(pods), self._observe(root, pods))

    def list(self) -> list[JobSummary]:
        return [self._summary(root) for root in self._roots()]

    def _summary(self, root: client.V1ConfigMap) -> JobSummary:
        """The job as the list shows it: a finished one (most of a long list) straight from its recorded
        status."""
        status = json.loads(root.data["status.json"])
        if status["phase"] not in FINISHED:
            return summary(self._current(root))
        return cast(JobSummary, {**self._state(root, json.loads(root.data["spec.json"]), status, status.get("run", 1)),
                                 "replica_phases": dict(Counter(r["phase"] for r in status["replicas"].values()))})

    def stop(self, name: str) -> JobRecord:
        """On "pods", request the stop and apply the policy; on an engine, record the job's state as stopped
        (unless the engine ended it), then delete the engine's object (its pods follow)."""
        with self.changing(name):
            return self._stop(name)

    def _stop(self, name: str) -> JobRecord:
        """A sweep's controller stops its trials and records its end once it sees the request."""
        root = self._root(name)
        for _ in range(10):
            status = json.loads(root.data["status.json"])
            if status["phase"] in FINISHED:
                return self.get(name)
            if engine_of(root) not in ("pods", SWEEP):
                observed = self._observe(root, self._pods(name))
                if observed["phase"] in FINISHED:
                    self._end_workload(root)
                    return self.get(name)
                status = stopped_status(observed)
            status["stop_requested"] = True
            if self._write_status(root, status):
                break
            root = self._root_fresh(name)  # another writer came first (409): request the stop on its version
        else:
            raise KubeError(f"job {name} kept changing: its stop could not be recorded")
        if engine_of(root) == SWEEP:
            self._wait_ended(name)
        elif engine_of(root) != "pods":
            self.record(name, Event("Stopped", "stopped by request", type="Warning"))
            self._end_workload(root)
        else:
            self.reconcile(self._root_fresh(name), newest(self._pods_fresh(name)))
        return self.get(name)

    def _wait_ended(self, name: str, timeout: float = 15) -> None:
        """Until the job's status records its end (a sweep's controller polls every second)."""
        deadline = time.monotonic() + timeout
        while self.status(name)["phase"] not in FINISHED and time.monotonic() < deadline:
            time.sleep(0.2)

    def status(self, name: str) -> dict:
        """The job's status as recorded in its ConfigMap (stop_requested with the rest)."""
        return json.loads(self._root_fresh(name).data["status.json"])

    def sweep_settings(self, name: str) -> dict:
        """The settings of the server that made the sweep, which its controller makes the trials with."""
        return json.loads(self._root_fresh(name).data["settings.json"])

    def update_status(self, name: str, **fields) -> None:
        """Record `fields` of the job's status, as the process that runs the job (a sweep's controller)."""
        for _ in range(10):
            root = self._root_fresh(name)
            if self._write_status(root, {**json.loads(root.data["status.json"]), **fields}):
                return
        raise KubeError(f"job {name} kept changing: its status could not be recorded")

    def _end_workload(self, root: client.V1ConfigMap) -> None:
        """Copy the logs of the job's pods, then delete the engine's object (its pods follow)."""
        name = root.metadata.name
        self.copy_logs(name, self._pods_fresh(name))
        group, version, resource = self._engine_api(root)
        with self._writing(resource, name) as write:
            try:
                self.custom.delete_namespaced_custom_object(group, version, self.ns, resource, name,
                                                            propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise api_error(e, f"delete {resource} {name}") from None
            write.forget()

    def restart(self, name: str, spec: dict | None = None, snapshot: bytes | None = None) -> JobRecord:
        with self.changing(name):
            return self._restart(name, spec, snapshot)

    def snapshot(self, name: str) -> bytes | None:
        self._root(name)  # JobNotFound for another owner's
        try:
            secret = self.core.read_namespaced_secret(manifests.snapshot_name(name), self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"read the snapshot of {name}") from None
        return base64.b64decode(secret.data[manifests.SNAPSHOT_KEY])

    def _restart(self, name: str, spec: dict | None, snapshot: bytes | None) -> JobRecord:
        root = self._root_fresh(name)
        old = json.loads(root.data["spec.json"])
        spec = spec or old
        if spec["name"] != name:
            raise SpecError([FieldError("name", f"a restarted job keeps its name {name!r}; clone it for a new name")])
        self._stop(name)
        self._wait_gone(name)
        root = self._root_fresh(name)
        engine = engine_of(root)
        self.check(spec, new_job=False, engine=engine)
        status = new_status(spec)
        status["run"] = current_run(root) + 1
        root.data.update({"spec.json": json.dumps(spec, sort_keys=True), "status.json": json.dumps(status),
                          "cluster.json": json.dumps(manifests.addresses(spec, self.ns, engine), sort_keys=True)})
        root.data.pop(manifests.RESUME, None)
        if resume := self.resume_source(spec, owner_of(root)):
            root.data[manifests.RESUME] = json.dumps(resume, sort_keys=True)
        with self._writing("configmaps", name) as write:
            root = self._call(lambda: self.core.replace_namespaced_config_map(name, self.ns, root), f"restart {name}")
            write.put(root)
        owner = self.api.sanitize_for_serialization(root)
        if snapshot is not None or "snapshot" not in spec.get("code", {}):  # edited: its own snapshot, or none
            self._delete("Secret", manifests.snapshot_name(name))
        if snapshot is not None:
            self._create(manifests.snapshot_secret(spec, self.settings, owner, snapshot))
        self._start(spec, owner, engine, status["run"])
        if (spec["tensorboard"], spec.get("output")) != (old["tensorboard"], old.get("output")):
            self._replace_tensorboard(spec, owner)
        self.record(name, Event("Restarted", "job restarted"))
        return self.get(name)

    def _replace_tensorboard(self, spec: dict, owner: dict) -> None:
        for kind in ("Deployment", "Service"):
            self._delete(kind, manifests.tensorboard_name(spec["name"]))
        for obj in manifests.tensorboard(spec, self.settings, owner):
            self._create(obj, exists_ok=obj["kind"] == "Secret")  # its secret stays the job's

    def _wait_gone(self, name: str, timeout: float = 60) -> None:
        """Until the job's pods (and its engine's object, whose successor takes its name) are gone."""
        root = self._root_fresh(name)
        on_engine = engine_of(root) not in ("pods", SWEEP)
        deadline = time.monotonic() + timeout
        while (self._pods_fresh(name) or on_engine and self._workload_fresh(root)) and time.monotonic() < deadline:
            time.sleep(0.2)

    def delete(self, name: str, purge_output: bool = False) -> None:
        """Stop the job until its pods are gone, with `purge_output` delete its output, then delete its
        ConfigMap: the garbage collector deletes every object it owns."""
        with self.changing(name):
            self._stop(name)
            self._wait_gone(name)
            if purge_output:
                self._purge_output(name)
            self._delete_root(name)
            shutil.rmtree(self.root / name, ignore_errors=True)

    def _purge_output(self, name: str) -> None:
        """Delete the job's own output directory through a pod that mounts its volume (manifests.purger), and
        wait until it has; if it cannot, the job stays, so the delete can be asked again."""
        root = self._root_fresh(name)
        purger = manifests.purger(json.loads(root.data["spec.json"]), self.settings,
                                  self.api.sanitize_for_serialization(root))
        if purger is None:
            return
        pod = purger["metadata"]["name"]
        self._delete_pod_named(pod)  # one an interrupted delete left
        self._create(purger)
        try:
            ended = self._wait_pod_ended(pod, READER_TIMEOUT)
        finally:
            self._delete_pod_named(pod)
        if ended.phase != "Succeeded":
            raise KubeError(f"the output of job {name} was not deleted (pod {pod}: {why_not_running(ended)})")

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
            root = self.core.read_namespaced_config_map(name, self.ns)
        except ApiException as e:
            if e.status == 404:
                raise JobNotFound(name) from None
            raise api_error(e, f"read job {name}") from None
        if not self.visible(root):
            raise JobNotFound(name)
        return root

    def _pods_fresh(self, name: str) -> builtins.list[client.V1Pod]:
        return self._call(lambda: self.core.list_namespaced_pod(
            self.ns, label_selector=f"{SELECTOR},{JOB}={name},{ROLE}").items, "list pods")

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
        for name, asked in unmade(status, pods).items():
            if time.time() > asked + WORKLOAD_GRACE:
                missing_pod(states[name], asked)
        self.copy_logs(spec["name"], list(pods.values()), ended=True)
        before = json.dumps(status, sort_keys=True)
        status["replicas"] = states
        policy = policy_replicas(states)
        if any(s["phase"] == str(Phase.RUNNING) for s in states.values()) and not status["started"]:
            status["started"] = time.time()
        decision = (STOP_REQUESTED if status["stop_requested"] else
                    deadline_exceeded(spec) if deadline_left(spec, status["started"]) == 0 else decide(spec, policy))
        announced = []  # recorded once the status is: a reconcile that loses the write announces nothing
        for replica in policy:
            if replica.name in decision.restart:
                self._restart_replica(spec, root, replica, states[replica.name], pods.get(replica.name))
                announced.append(restart_event(replica))
        if decision.phase in FINISHED:
            end = ending(decision, policy, time.time())
            self._finish(spec, status, pods, end)
            announced.append(end.event)
        else:
            status.update(phase=str(decision.phase), reason=decision.reason, message=decision.message)
            note_unschedulable(status)
        if json.dumps(status, sort_keys=True) != before and (written := self._write_status(root, status)):
            root = written
            for event in announced:
                self.record(spec["name"], event)
        return self._view(root, pods if decision.phase not in FINISHED else {})

    def _restart_replica(self, spec: dict, root, replica: Replica, state: dict, pod) -> None:
        state.update(phase=str(Phase.PENDING), reason="Restarting", restarts=state["restarts"] + 1, exit_code=None,
                     requested=time.time())
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
        with_ending(status, end)
        for name, pod in pods.items():
            self.archive(spec["name"], name, pod)
            self._delete_pod(pod)
        for role, index in replicas(spec):
            self._delete("Service", object_name(spec["name"], replica_name(role, index)))

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

    def count_restarts(self, root: client.V1ConfigMap, pods: builtins.list[client.V1Pod]) -> None:
        """Record the replicas' restarts on the kubeflow engine (see kube_state.count_restarts): the operator
        replaces a failed pod under its name and counts nothing."""
        status = json.loads(root.data["status.json"])
        if status["phase"] not in FINISHED and count_restarts(status, newest_of_run(root, pods)):
            self._write_status(root, status)

    def _view(self, root: client.V1ConfigMap, pods: dict[str, client.V1Pod], status: dict | None = None) -> JobRecord:
        """The job as every backend reports it (see manager.public): its status as recorded in `root`, or
        `status` (the JobSet engine's), with each unfinished replica's state from its pod in `pods`."""
        spec = json.loads(root.data["spec.json"])
        stored = json.loads(root.data["status.json"])
        status = stored if stored["phase"] in FINISHED or status is None else status
        settled = status["phase"] in FINISHED or status is not stored  # the replicas' states are final or observed
        cluster = json.loads(root.data["cluster.json"])
        rows, digests = [], set[str]()
        for name, recorded in status["replicas"].items():
            role, index = replica_key(name)
            live = recorded if settled else replica_state(recorded, pods.get(name))
            rows.append({"name": name, "role": role, "idx": index, "pid": None, "address": cluster[role][index],
                         **{k: live[k] for k in ("phase", "exit_code", "reason", "restarts", "started", "finished")},
                         "message": live.get("message", ""), "node": live.get("node")})
            digests.update(filter(None, [live.get("image_id")]))
        run = current_run(root)
        return cast(JobRecord, {
            **self._state(root, spec, status, run),
            "output_dir": output_location(spec, self.settings, owner_of(root)),
            "spec": spec, "replicas": rows, "logs": [row["name"] for row in rows],
            "engine": engine_of(root), "supervision": SUPERVISED if engine_of(root) == "pods" else "",
            "environment": {"image": manifests.image(spec, self.settings), "image_digests": sorted(digests),
                            **read_provenance(self._log_dir(root.metadata.name, run))},
        })

    def _state(self, root: client.V1ConfigMap, spec: dict, status: dict, run: int) -> dict:
        """The job's own fields (JobState), from its ConfigMap, its spec and a status."""
        return {"name": root.metadata.name, "backend": self.name,
                "owner": owner_of(root), "run": run,
                "created": seconds(root.metadata.creation_timestamp),
                "expires": expires(spec["policy"].get("ttl_after_finished"), status["finished"]),
                **{key: status[key] for key in ("phase", "reason", "message", "exit_code", "started", "finished")}}

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
        pods are read first (and, to follow, a controller runs until `finished()`, by default the run's end,
        and the run's lines are copied)."""
        run = logs.run_of(name, run, current_run(self._root(name)))
        files = self.log_files(name, replica, run)
        if not follow:
            if not self.cache:
                self.catch_up(name)
            return logs.read(files, tail=tail, since=since)
        finished = self._until_lines_copied(name, run, finished or (lambda: run_ended(self.get(name, events=0), run)))
        if self.cache:
            return logs.follow(lambda: files, finished, tail=tail, since=since, directory=self._log_dir(name, run))
        return self._follow_with_controller(name, files, finished, tail, since, self._log_dir(name, run))

    def _follow_with_controller(self, name, files, finished, tail, since, directory) -> Iterator[LogLine]:
        """Follow the job's files while a controller of this job alone copies its lines (and supervises it)."""
        self.start(logging.getLogger(__name__), job=name)
        try:
            yield from logs.follow(lambda: files, finished, tail=tail, since=since, directory=directory)
        finally:
            self.close()

    def _until_lines_copied(self, name: str, run: int, over: Callable[[], bool]) -> Callable[[], bool]:
        """`over()`, and the run's lines all in its files: the cluster ends a run as its pods end, and a
        controller copies what they logged after that (and marks it done), or LOGS_GRACE seconds later."""
        seen_over: list[float] = []

        def finished() -> bool:
            if not over():
                return False
            seen_over[:] = seen_over or [time.monotonic()]
            return self.logs_complete(name, run) or time.monotonic() - seen_over[0] > LOGS_GRACE
        return finished

    def catch_up(self, name: str) -> None:
        """Copy whatever the job's pods logged since their files' last lines; first, once a run has ended,
        what its replicas wrote to the output volume."""
        root = self._root(name)
        run = current_run(root)
        unread = self.run_over(root) and not self.logs_complete(name, run)
        read = unread and self.read_volume_logs(name, run)
        self.copy_logs(name, self._pods(name))
        if read:
            self.mark_logs_complete(name, run)

    def copy_logs(self, job: str, pods: builtins.list[client.V1Pod], ended: bool = False) -> None:
        """Copy what `pods` (with `ended`, those that ended or are being deleted) logged since their files'
        last lines, oldest pods first: a replica's restarts in order."""
        for pod in sorted(pods, key=created):
            if not ended or ended_pod(pod):
                self.archive(job, replica_of(pod.metadata.labels), pod)

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
                pod.metadata.name, self.ns, container=pod.spec.containers[0].name, timestamps=True, follow=follow,
                _preload_content=False, _request_timeout=(self.settings.kubernetes_timeout,
                                                          LOG_SILENCE if follow else self.settings.kubernetes_timeout),
                **({"since_seconds": seconds_since(since)} if since else {}))
        except ApiException:
            return  # not started, or gone: nothing to copy
        self.streams.add(response)
        try:
            with response:
                for lines in line_batches(response.stream(logs.READ_CHUNK, decode_content=True)):
                    append(path, [from_pods_log(line) for line in lines])
        except HTTPError:  # silent too long (a connection that died unseen, or a quiet container): ask again
            if not follow:
                raise
        finally:
            self.streams.discard(response)

    # logs the replicas wrote to the output volume, for lines pods/log no longer has
    def logs_complete(self, name: str, run: int) -> bool:
        return (self._log_dir(name, run) / COMPLETE).exists()

    def mark_logs_complete(self, name: str, run: int) -> None:
        directory = self._log_dir(name, run)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / COMPLETE).touch()

    def read_volume_logs(self, name: str, run: int) -> bool:
        """Merge what the job's replicas wrote to its output volume in run `run` into the run's log files;
        lines copied from pods/log already are the same bytes (incluster/logtee.py's stamps) and are skipped.
        A failure becomes a Warning event on the job (and False): pods/log still gives what it has."""
        try:
            self._read_volume_logs(name, run)
            return True
        except (DistrainError, ApiException, HTTPError, OSError, ValueError) as e:
            self.record(name, Event("LogsNotRead", "the lines the replicas wrote to the output volume could not "
                                                   f"be read: {e}", type="Warning"))
            return False

    def _read_volume_logs(self, name: str, run: int) -> None:
        root = self._root_fresh(name)
        reader = manifests.log_reader(json.loads(root.data["spec.json"]), self.settings,
                                      self.api.sanitize_for_serialization(root))
        pod = reader["metadata"]["name"]
        with self.reading:
            self._delete_pod_named(pod)  # one a stopped process left
            self._create(reader)
            try:
                self._wait_serving(pod)
                for file in json.loads(self._from_reader(pod, str(run)).read()):
                    if not isinstance(file, str) or not manifests.LOG_FILE.fullmatch(file):
                        raise ValueError(f"the reader listed {file!r}, which is no replica's log")
                    self._import(self._from_reader(pod, f"{run}/{file}"), self._log_dir(name, run) / file)
            finally:
                self._delete_pod_named(pod)

    def _from_reader(self, pod: str, path: str = ""):
        """GET `path` from a log reader pod through the API server's pod proxy (a streaming response)."""
        options = {"_preload_content": False, "_request_timeout": (10, 60)}
        target = f"{pod}:{manifests.LOG_READER_PORT}"
        if path:
            return self.core.connect_get_namespaced_pod_proxy_with_path(target, self.ns, path, **options)
        return self.core.connect_get_namespaced_pod_proxy(target, self.ns, **options)

    def _wait_serving(self, pod: str) -> None:
        """Until the reader answers; it fails if its pod ends or it takes READER_TIMEOUT."""
        deadline = time.monotonic() + READER_TIMEOUT
        while True:
            try:
                return self._from_reader(pod).release_conn()
            except ApiException as e:
                status = self._read_pod_status(pod)
                if status.phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
                    raise KubeError(f"its reader pod {pod} did not serve ({why_not_running(status)}; "
                                    f"{e.status} {e.reason})") from None
                time.sleep(0.5)

    def _wait_pod_ended(self, pod: str, timeout: float) -> client.V1PodStatus:
        """The pod's status once it has ended, or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (status := self._read_pod_status(pod)).phase not in ("Succeeded", "Failed") \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        return status

    def _read_pod_status(self, pod: str) -> client.V1PodStatus:
        return self._call(lambda: self.core.read_namespaced_pod(pod, self.ns), f"read pod {pod}").status

    def _import(self, response, path: Path) -> None:
        with response:  # a last line without its newline is still being written: pods/log brings it
            for lines in line_batches(response.stream(logs.READ_CHUNK), partial=False):
                append(path, [line for line in map(from_volume, lines) if line])

    def _delete_pod_named(self, pod: str) -> None:
        """Delete the pod (a log reader, a purger), until it is gone (the next one takes its name)."""
        try:
            self._delete_pod(self.core.read_namespaced_pod(pod, self.ns), wait=True)
        except ApiException as e:
            if e.status != 404:
                raise api_error(e, f"read pod {pod}") from None

    # observation
    def queues(self) -> builtins.list[str] | None:
        """The namespace's Kueue LocalQueues, which a job's `queue` names; None without Kueue."""
        group, version = manifests.KUEUE_API.split("/")
        try:
            found = self.custom.list_namespaced_custom_object(group, version, self.ns, "localqueues")["items"]
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, "list Kueue's local queues") from None
        return sorted(q["metadata"]["name"] for q in found)

    def cluster(self) -> dict:
        engine, why = self.engine()
        nodes = self._call(lambda: self.core.list_node().items, "list nodes")
        pods, counted = self._live_pods()
        held = sum(int((c.resources.limits or {}).get(GPU, 0)) for p in pods if p.spec.node_name
                   for c in p.spec.containers if c.resources)
        capacity = sum(node_gpus(n) for n in nodes)
        claims = self._call(lambda: self.core.list_namespaced_persistent_volume_claim(self.ns).items, "list volumes")
        return {
            "backend": self.name,
            "engine": {"name": engine, "reason": why},
            "namespaces": [self.ns],
            "volumes": sorted(c.metadata.name for c in claims),
            "queues": self.queues() or [],
            "cpus": int(sum(quantity((n.status.allocatable or {}).get("cpu", "0")) for n in nodes)),
            "memory_bytes": int(sum(quantity((n.status.allocatable or {}).get("memory", "0")) for n in nodes)),
            "gpus": {"capacity": capacity, "available": max(capacity - held, 0), "held_in": counted,
                     "devices": [{"node": n.metadata.name, "gpus": node_gpus(n)} for n in nodes if node_gpus(n)]},
        }

    def _live_pods(self) -> tuple[builtins.list[client.V1Pod], str]:
        """The pods not finished, of every namespace, or of the jobs' namespace only where the service
        account may not list the others (README: narrowing its rights); and which of the two."""
        live = "status.phase!=Succeeded,status.phase!=Failed"
        try:
            return self.core.list_pod_for_all_namespaces(field_selector=live).items, "every namespace"
        except ApiException as e:
            if e.status != 403:
                raise api_error(e, "list pods") from None
        return self._call(lambda: self.core.list_namespaced_pod(self.ns, field_selector=live).items,
                          "list pods"), self.ns

    def metrics(self, name: str) -> builtins.list[dict]:
        """Phases only: usage needs the cluster's metrics API, which this backend does not read yet."""
        return [{"replica": r["name"], "phase": r["phase"], "cpu_percent": None, "memory_bytes": None,
                 "gpu_memory_mib": None, "gpu_utilization": None} for r in self.get(name, events=0)["replicas"]]


def owner_of(obj: client.V1ConfigMap | client.V1Secret) -> str:
    """Who a job's ConfigMap (or a Secret) is of, as its annotation says ("" for one made before there were
    owners)."""
    return (obj.metadata.annotations or {}).get(OWNER, "")


def output_location(spec: dict, settings: Distrain, owner: str) -> str:
    """Where a job of `owner` keeps its output: a host path, or pvc://<claim>/<its directory>."""
    source = manifests.output_source(spec, settings)
    if "host_path" in source:
        return source["host_path"]
    return f"pvc://{source['volume']}/{storage.output_path(spec, owner)}"


def quantity(value: str) -> float:
    """A Kubernetes quantity (500m, 4, 16Gi) as a number."""
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
                "Ti": 2**40}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[:-len(suffix)]) * suffixes[suffix]
    return float(value)


class Controller:
    """Keeps the backend's cache current and applies the policy to every job a change touches (or to `job`
    alone), a few jobs at a time and each job by one worker at a time (see WorkQueue); copies running pods'
    logs into the log files as they are written."""

    WORKERS = 4

    def __init__(self, backend: KubeBackend, log, watch_timeout: int = WATCH_TIMEOUT, job: str | None = None):
        self.backend, self.log = backend, log
        self.queue = WorkQueue()
        self.followers: dict[str, threading.Thread] = {}  # pod uid -> its log copier
        self.reminders: dict[str, threading.Timer] = {}  # job -> its deadline's reconcile
        # job -> its runs seen: whether this process has all their lines; a job's entry is only ever touched by
        # the one worker that has the job (see WorkQueue)
        self.runs: dict[str, dict[int, bool]] = {}
        self.stopping = False
        self.workers = [threading.Thread(target=self._work, daemon=True, name=f"distrain-reconcile-{i}")
                        for i in range(1 if job else self.WORKERS)]
        for worker in self.workers:
            worker.start()
        self.cache = backend.cache = Cache(lambda: listers(backend.api, backend.ns, backend.engines(), job),
                                           self.queue.add, log, watch_timeout)
        self.cache.start()

    def _work(self) -> None:
        while (name := self.queue.get()) is not None:
            try:
                try:
                    root = self.backend._root(name)
                except JobNotFound:  # deleted, or another owner's
                    self.runs.pop(name, None)
                else:
                    if engine_of(root) == SWEEP:
                        continue  # its controller runs it in the cluster; it has no pods or logs
                    self._read_volume_first(root)
                    pods = self.backend._pods(name)
                    if engine_of(root) == "pods":
                        self.backend.reconcile(root, newest(pods))
                        self._remind(name)
                    else:  # the engine applies the policy; copy what ended pods logged
                        if engine_of(root) == "kubeflow":
                            self.backend.count_restarts(root, pods)
                        self.backend.copy_logs(name, pods, ended=True)
                    self._follow(name, pods)
                    self._mark_complete(root, pods)
            except Exception:
                self.log.exception("reconciling job %s", name)
            finally:
                self.queue.done(name)

    def _read_volume_first(self, root: client.V1ConfigMap) -> None:
        """Before this process copies anything of a run from pods/log: if the run began while it was not
        watching, merge in what the replicas wrote to the output volume, which holds the lines of pods that
        are gone (pods/log brings only later lines after those a log file has)."""
        name, run = root.metadata.name, current_run(root)
        runs = self.runs.setdefault(name, {})
        if run not in runs:
            runs[run] = False  # tried once
            began = self.backend.get(name, events=0)["started"] or self.backend.run_over(root)
            missing = began and not self.backend.logs_complete(name, run)
            runs[run] = not missing or self.backend.read_volume_logs(name, run)

    def _mark_complete(self, root: client.V1ConfigMap, pods: list[client.V1Pod]) -> None:
        """Once the cluster has ended a run whose lines this process has all, and its pods have ended."""
        name, run = root.metadata.name, current_run(root)
        if (self.runs[name][run] and all(ended_pod(p) for p in pods) and not self.backend.logs_complete(name, run)
                and self.backend.run_over(root)):
            self.backend.mark_logs_complete(name, run)

    def _remind(self, name: str) -> None:
        """Reconcile a supervised job again at its deadline, or when a pod it lacks is missing (no change in the
        cluster marks either)."""
        root = self.backend._root(name)
        status = json.loads(root.data["status.json"])
        if status["phase"] in FINISHED:
            return
        spec, now = json.loads(root.data["spec.json"]), time.time()
        times = [deadline_left(spec, status["started"]),
                 *(asked + WORKLOAD_GRACE - now for asked in unmade(status, newest(self.backend._pods(name))).values())]
        left = min((t for t in times if t is not None), default=None)
        if previous := self.reminders.pop(name, None):
            previous.cancel()
        if left is not None:
            timer = threading.Timer(max(left, 0) + 0.1, self._reminded, (name,))
            timer.daemon = True
            self.reminders[name] = timer
            timer.start()

    def _reminded(self, name: str) -> None:
        self.reminders.pop(name, None)
        self.queue.add(name)

    def _follow(self, job: str, pods: list[client.V1Pod]) -> None:
        for pod in pods:
            replica, uid = replica_of(pod.metadata.labels), pod.metadata.uid
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
            with suppress(ValueError, RuntimeError):  # raised when its connection is closed already
                response.shutdown()  # unblocks the copier reading it
        for thread in [*self.workers, *self.cache.threads, *list(self.followers.values())]:
            thread.join(10)  # none is left reading a connection as the process exits
