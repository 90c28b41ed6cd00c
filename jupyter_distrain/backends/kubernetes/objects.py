"""A namespace's objects as the Kubernetes backend's parts read and write them: from the controller's watch-fed cache
when one runs, else straight from the API server; writes bracketed so the cache reads them at once. One
`NamespaceObjects` holds what those parts share (the client, the cache, the locks), and each is given it."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import json
import secrets
import threading
import time
from contextlib import contextmanager, nullcontext, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ... import logs
from ...errors import JobConflict, JobNotFound
from ...owners import sees
from ...policy import FINISHED, Event
from . import naming, render
from .apiclient import in_cluster, load_client, with_deadlines
from .naming import JOB, OWNER, ROLE, SWEEP, object_name, replica_of
from .state import current_run, engine_of, event_job, involved_replica, run_end
from .watch import SELECTOR, Cache, KubeError, Resource, Write, api_error

if TYPE_CHECKING:
    from ...config import Distrain

# the built-in kinds a job is made of: their API and resource
OBJECT_APIS = {"ConfigMap": ("core", "config_map"), "Service": ("core", "service"), "Pod": ("core", "pod"),
               "Deployment": ("apps", "deployment"), "Secret": ("core", "secret"),
               "ServiceAccount": ("core", "service_account"), "Role": ("rbac", "role"),
               "RoleBinding": ("rbac", "role_binding"), "Job": ("batch", "job"), "CronJob": ("batch", "cron_job"),
               "NetworkPolicy": ("networking", "network_policy")}
# the kinds written here that the Cache holds
CACHED = {"ConfigMap": "configmaps", "Pod": "pods", "JobSet": "jobsets",
          **{k.kind: k.plural for k in naming.KUBEFLOW.values()}}


class KeyedLocks:
    """A reentrant lock per key, kept only while a thread holds it or waits for it."""

    def __init__(self) -> None:
        self.locks: dict[str, tuple[threading.RLock, int]] = {}  # key -> its lock and how many hold or await it
        self.guard = threading.Lock()

    @contextmanager
    def held(self, key: str) -> Iterator[None]:
        with self.guard:
            lock, users = self.locks.get(key) or (threading.RLock(), 0)
            self.locks[key] = lock, users + 1
        try:
            with lock:
                yield
        finally:
            with self.guard:
                users = self.locks[key][1] - 1
                if users:
                    self.locks[key] = lock, users
                else:
                    del self.locks[key]


class NamespaceObjects:
    """The jobs' objects in one namespace, for one owner (see `visible`)."""

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
        self.networking = client.NetworkingV1Api(self.api)
        self.home = Path(settings.root).resolve() / "kubernetes" / self.ns  # the jobs' copied logs
        self.owner = settings.owner
        self.cache: Cache | None = None
        self.streams: set = set()  # pods/log responses being followed, closed by the controller's stop
        self.reading = threading.Lock()  # one log reader pod at a time in this process
        self.changes = KeyedLocks()  # a job's, held while this process changes it
        self.programs_made = False  # the namespace's ConfigMap of the pods' programs (render.programs), by this
        # process or found made

    def call(self, request, what: str):
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

    def visible(self, obj: client.V1ConfigMap | client.V1Secret) -> bool:
        """Whether the owner sees a job's ConfigMap (or a Secret): theirs, made before there were owners, or
        everyone's to an admin."""
        return sees(self.owner, owner_of(obj), self.settings.see_all_owners)

    def roots(self) -> list[client.V1ConfigMap]:
        """The ConfigMaps of the jobs this backend's owner sees (see `visible`)."""
        return [cm for cm in self.every_owners_roots() if self.visible(cm)]

    def every_owners_roots(self) -> list[client.V1ConfigMap]:
        if self.cache:
            return self.cache.items("configmaps")
        return self.call(lambda: self.core.list_namespaced_config_map(self.ns, label_selector=SELECTOR).items,
                         "list jobs")

    def job_root(self, name: str, beyond_scope: bool = False) -> client.V1ConfigMap:
        """The job's ConfigMap, from the cache if there is one; `beyond_scope`: a job the cache lacks because it
        holds some jobs alone (a monitor's, a sweep's controller's: its scope) is read from the API server."""
        if not self.cache:
            root = next((cm for cm in self.roots() if cm.metadata.name == name), None)
        elif (root := self.cache.get("configmaps", name)) is None and beyond_scope and self.cache.scope:
            return self.job_root_fresh(name)
        if root is None or not self.visible(root):
            raise JobNotFound(name)
        return root

    def job_root_fresh(self, name: str) -> client.V1ConfigMap:
        try:
            root = self.core.read_namespaced_config_map(name, self.ns)
        except ApiException as e:
            if e.status == 404:
                raise JobNotFound(name) from None
            raise api_error(e, f"read job {name}") from None
        if not self.visible(root):
            raise JobNotFound(name)
        return root

    def job_pods(self, name: str) -> builtins.list[client.V1Pod]:
        """The job's replicas' pods (with restarts on the JobSet engine, several per replica)."""
        if not self.cache:
            return self.job_pods_fresh(name)
        return [p for p in self.cache.of_job("pods", name) if ROLE in p.metadata.labels]

    def job_pods_fresh(self, name: str) -> builtins.list[client.V1Pod]:
        return self.call(lambda: self.core.list_namespaced_pod(
            self.ns, label_selector=f"{SELECTOR},{JOB}={name},{ROLE}").items, "list pods")

    def jobs(self, name: str) -> dict[str, client.V1Job]:
        """The Jobs of a JobSet job, by replica."""
        if self.cache:
            jobs = self.cache.of_job("jobs", name)
        else:
            jobs = self.call(lambda: self.batch.list_namespaced_job(
                self.ns, label_selector=f"{SELECTOR},{JOB}={name}").items, "list Jobs")
        return {replica_of(j.metadata.labels): j for j in jobs if (j.metadata.labels or {}).get(JOB) == name
                and ROLE in j.metadata.labels}

    @staticmethod
    def engine_api(root: client.V1ConfigMap) -> tuple[str, str, str]:
        """(group, version, resource) of the object that runs the job on its engine (a JobSet, a TFJob...)."""
        api_version, resource = naming.engine_resource(json.loads(root.data["spec.json"]), engine_of(root))
        group, version = api_version.split("/")
        return group, version, resource

    def workload(self, root: client.V1ConfigMap) -> dict | None:
        """The object that runs the job on its engine, as the engine reports it."""
        if self.cache:
            return self.cache.get(self.engine_api(root)[2], root.metadata.name)
        return self.workload_fresh(root)

    def workload_fresh(self, root: client.V1ConfigMap) -> dict | None:
        group, version, resource = self.engine_api(root)
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
        return engine_of(root) not in ("pods", SWEEP) and run_end(root, self.workload(root), time.time()) is not None

    def admission(self, name: str) -> dict | None:
        """Kueue's Workload for the job (owned by the job's JobSet or TFJob..., named as the job)."""
        if self.cache:
            workloads = self.cache.of_job("workloads", name)
        else:
            group, version = naming.KUEUE_API.split("/")
            workloads = self.call(lambda: self.custom.list_namespaced_custom_object(
                group, version, self.ns, "workloads")["items"], "list Kueue's workloads")
        return next((w for w in workloads if any(o["name"] == name for o in w["metadata"].get("ownerReferences", []))),
                    None)

    def events(self, name: str, replica_names) -> list[client.CoreV1Event]:
        """Events of the job (its ConfigMap, its JobSet) and of its replicas' objects (Pods, Jobs), the
        deleted ones' included."""
        # of the jobs whose names begin as this one's objects' do (another owner's aj-worker-0-x for job aj), the
        # longest name an object's begins with is its job's
        if cache := self.watching("events"):  # found by the objects they involve, as the jobs by their names
            events = [e for found in cache.under("events", name).values() for e in found]
            longer = [job for job in cache.under("configmaps", name) if job != name]
        else:
            events = self.call(lambda: self.core.list_namespaced_event(self.ns).items, "list events")
            longer = [cm.metadata.name for cm in self.every_owners_roots() if cm.metadata.name.startswith(name + "-")]
        return [e for e in events if involved_replica(e.involved_object.name, name, replica_names) is not None
                and (not longer or event_job(e.involved_object.name, [name, *longer]) == name)]

    def api_for(self, verb: str, kind: str) -> Callable:
        """The client call that does `verb` (create, delete) to an object of `kind` in the namespace."""
        group, resource = OBJECT_APIS[kind]
        return getattr(getattr(self, group), f"{verb}_namespaced_{resource}")

    def writing(self, kind: str | None, name: str):
        """Bracket a write to object `name` of the cached `kind` (see Cache: read your own writes); for
        another kind (or one the cluster does not serve), or without a cache, the `Write` does nothing."""
        if kind and (cache := self.watching(kind)):
            return cache.writing(kind, name)
        return nullcontext(Write(None, "", name))

    def watching(self, kind: str) -> Cache | None:
        """The cache, where it watches `kind` (a run's monitor's watches no events; the CLI keeps none)."""
        return self.cache if self.cache and kind in self.cache.listers else None

    def create(self, obj: dict, dry_run: bool = False, exists_ok: bool = False) -> dict:
        """Create the object, and answer what was made; with `exists_ok`, an object of its name that exists
        already is left as it is (the answer: {})."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        options = {"dry_run": "All"} if dry_run else {}
        with self.writing(None if dry_run else CACHED.get(kind), name) as write:
            try:
                if obj["apiVersion"] in (naming.JOBSET_API, naming.KUBEFLOW_API):
                    group, version = obj["apiVersion"].split("/")
                    made = Resource(self.custom.create_namespaced_custom_object(
                        group, version, self.ns, kind.lower() + "s", obj, **options))
                else:
                    made = self.api_for("create", kind)(self.ns, obj, **options)
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
        with self.changes.held(name):
            yield

    def delete(self, kind: str, name: str, grace: int | None = None, uid: str | None = None) -> None:
        """Delete the object (with `uid`, only if the name still holds that object); gone already is done."""
        # in the body, beside the precondition: the API server reads a DELETE's query only when it has no body
        body = client.V1DeleteOptions(grace_period_seconds=grace,
                                      preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            self.api_for("delete", kind)(name, self.ns, body=body)
        except ApiException as e:
            if e.status != 404 and not (uid and e.status == 409):  # 409: the uid precondition failed
                raise api_error(e, f"delete {kind} {name}") from None

    def delete_pod(self, pod, wait: bool = False, grace: int | None = None) -> None:
        """Delete this pod (its uid: a successor of the same name is left alone) after `grace` seconds (default:
        its own) of SIGTERM; with `wait`, until it is gone."""
        self.delete("Pod", pod.metadata.name, grace=grace, uid=pod.metadata.uid)
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

    def delete_pod_named(self, pod: str) -> None:
        """Delete the pod (a log reader, a purger) at once, until it is gone (the next one takes its name)."""
        try:
            self.delete_pod(self.core.read_namespaced_pod(pod, self.ns), wait=True, grace=0)
        except ApiException as e:
            if e.status != 404:
                raise api_error(e, f"read pod {pod}") from None

    def read_pod_status(self, pod: str) -> client.V1PodStatus:
        return self.call(lambda: self.core.read_namespaced_pod(pod, self.ns), f"read pod {pod}").status

    def wait_pod_ended(self, pod: str, timeout: float) -> client.V1PodStatus:
        """The pod's status once it has ended, or after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (status := self.read_pod_status(pod)).phase not in ("Succeeded", "Failed") \
                and time.monotonic() < deadline:
            time.sleep(0.5)
        return status

    def write_status(self, root: client.V1ConfigMap, status: dict) -> client.V1ConfigMap | None:
        """Record the status; a conflict means another writer got there first (the next change retries)."""
        patch = {"metadata": {"resourceVersion": root.metadata.resource_version},
                 "data": {"status.json": json.dumps(status)}}
        try:
            with self.writing("configmaps", root.metadata.name) as write:
                updated = self.core.patch_namespaced_config_map(root.metadata.name, self.ns, patch)
                write.put(updated)
        except ApiException as e:
            if e.status in (404, 409):
                return None
            raise api_error(e, f"record the status of {root.metadata.name}") from None
        return updated

    def record(self, name: str, event: Event) -> None:
        """A Kubernetes Event on the job's ConfigMap (or, with `event.replica`, its pod), named here (as the
        kubelet names its own: <object>.<unique>) so that this process reads it at once (see Cache)."""
        reason, message, replica, type = event.reason, event.message, event.replica, event.type
        involved = object_name(name, replica) if replica else name
        now = datetime.now(timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{involved}.{secrets.token_hex(8)}", namespace=self.ns,
                                         labels={JOB: name}),
            involved_object=client.V1ObjectReference(kind="Pod" if replica else "ConfigMap", name=involved,
                                                     namespace=self.ns),
            reason=reason, message=message, type=type, first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component="jupyter-distrain"))
        try:
            with self.writing("events", body.metadata.name) as write:
                write.put(self.core.create_namespaced_event(self.ns, body))
        except ApiException:
            pass  # an event is a courtesy: the status in the ConfigMap is the record

    def make_programs(self) -> None:
        """Make the namespace's ConfigMap of the programs the pods about to be made run (render.programs), once in
        this process, unless it exists (never changed: its name is their hash; an identity that may not make it finds
        it made). Not through `create`: it is no job's, which the cache holds."""
        if self.programs_made:
            return
        programs = render.programs(self.settings)
        name = programs["metadata"]["name"]
        try:
            self.core.create_namespaced_config_map(self.ns, programs)
        except ApiException as e:
            made = e.status == 409
            if e.status == 403:
                with suppress(KubeError):  # nor may it read it: the create's refusal says so
                    made = self.exists(name)
            if not made:
                raise api_error(e, f"create ConfigMap {name}") from None
        self.programs_made = True

    def log_dir(self, name: str, run: int | None = None) -> Path:
        """The log directory of run `run` (default: the current run)."""
        return self.run_log_dir(name, logs.run_of(name, run, current_run(self.job_root(name))))

    def run_log_dir(self, name: str, run: int) -> Path:
        """Under the job's uid: a job made under the name of a deleted one starts with none of its lines, whichever
        process copied them."""
        return self.home / name / self.job_root(name).metadata.uid / "logs" / str(run)


def owner_of(obj: client.V1ConfigMap | client.V1Secret) -> str:
    """Who a job's ConfigMap (or a Secret) is of, as its annotation says ("" for one made before there were
    owners)."""
    return (obj.metadata.annotations or {}).get(OWNER, "")
