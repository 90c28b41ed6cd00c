"""The Kubernetes backend. Every job has a root ConfigMap that owns the rest, and runs on an engine
(render.py renders both):

- "jobset": a JobSet, whose controller enforces the job's lifecycle in the cluster (success, failures,
  restarts, deadline), whether or not a Jupyter server runs. This backend only observes it: the
  JobSet's conditions, its Jobs and pods give the job's state (`jobset_state`).
- "kubeflow": the Training Operator's TFJob, PyTorchJob or PaddleJob, enforced in the cluster likewise;
  its conditions and pods give the job's state (`kubeflow_state`); the operator counts no restarts, so
  this backend records those it sees, and on both engines each replica's start and end (`record_pods`).
- "sweep": a sweep, whose controller runs in the cluster (controllers/sweep.py, in its Job's pod): it launches
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

`NamespaceController` (controller.py) keeps a watch-fed cache of the namespace's jobs, workloads, pods and
events (no LIST per request), applies the policy to "pods" jobs as they change, and copies logs; without it (the
CLI) each call reads the cluster (and applies the policy once). Logs are copied from the pods/log API into files
under the storage root as they are written, so they remain readable after the pods are gone:
<root>/kubernetes/<namespace>/<job>/logs/<run>/<replica>.log, each pod's into the directory of the run its
label names. Each pod also writes its lines to the job's output volume; a run this process did not watch
from its start may have lines only there (pods gone while no server ran), so those are merged in first,
through a short-lived reader pod, and a run's directory is marked complete once it holds every line.

This module holds the verbs that change jobs; the package's __init__ lists the parts they stand on.
"""

from __future__ import annotations

import base64
import builtins  # `list` is also a method name below
import json
import logging
import shutil
import ssl
import time
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ... import logs, notify, reasons, usage
from ...errors import DistrainError, FieldError, SpecError
from ...incluster.tensorboard import SECRET_HEADER
from ...logs import LogLine
from ...policy import FINISHED, STOP_REQUESTED, Decision, Event, run_ended
from ...records import ClusterTensorBoard, JobRecord, JobSummary, run_record
from . import naming, podmetrics, podspec, render
from .companions import Companions
from .controller import NamespaceController
from .credentials import CredentialStore
from .engines import Engines
from .ledger import ConfigMapLedger
from .logcopy import READER_TIMEOUT, LogCopier
from .naming import SWEEP
from .objects import NamespaceObjects, owner_of
from .observe import JobObserver
from .podstacks import ReplicaStacks
from .reconcile import EVERY_JOB, PodSupervisor
from .state import current_run, engine_of, newest, next_run, stopped_status, why_not_running
from .waiting import WhyItWaits
from .watch import WATCH_TIMEOUT, Cache, KubeError, api_error, listers

if TYPE_CHECKING:
    from ...config import Distrain


class KubeBackend:
    """Jobs in one namespace, for one owner: the verbs that change them here, the rest by the parts it is made of,
    each given the namespace's objects (the client, the cache, the locks) they share."""

    name = naming.BACKEND
    default_host_paths: tuple[str, ...] | None = podspec.HOST_PATHS_BY_DEFAULT

    def __init__(self, settings: Distrain, api: client.ApiClient | None = None, supervised: str = EVERY_JOB,
                 copies_logs: bool = True):
        """Jobs in `settings.namespace`, through `api` (see NamespaceObjects); `supervised` and `copies_logs`: what
        reads do besides reading (see PodSupervisor and LogCopier)."""
        self.settings, self.ns, self.owner = settings, settings.namespace, settings.owner
        self.objects = NamespaceObjects(settings, api)
        self.engines = Engines(self.objects)
        self.copier = LogCopier(self.objects, copies_logs)
        self.supervisor = PodSupervisor(self.objects, self.copier, supervised)
        self.observer = JobObserver(self.objects, self.supervisor)
        self.credential_store = CredentialStore(self.objects)
        self.replica_stacks = ReplicaStacks(self.objects, self.observer)
        self.why = WhyItWaits(self.objects, self.engines, self.observer)
        self.companions = Companions(self.objects)
        self.ledger = ConfigMapLedger(self.objects)
        self.notifier = notify.Notifier(self._post_failed)  # the posts of its jobs' events (`tell`)
        self.controller: NamespaceController | None = None  # while started

    @classmethod
    def from_config(cls, config: Distrain) -> KubeBackend:
        return cls(config)

    def start(self, log: logging.Logger, scope: str = "", watch_timeout: int = WATCH_TIMEOUT,
              explained: bool = True) -> None:
        """Watch the namespace (or the jobs `scope` selects: see listers), apply the policy to supervised jobs and
        copy logs, if this process copies them (see NamespaceController)."""
        self.controller = NamespaceController(self.objects, self.observer, self.supervisor, self.copier,
                                              self.engines.served, log, watch_timeout, scope, explained)

    def observe(self, job: str | None = None, changed: Callable[[], None] = lambda: None) -> None:
        """Read `job` (or every job) from a cache of its own objects alone, kept by their watches, calling
        `changed()` as each changes: its phase costs no request while it does not change. No policy is applied, no
        log copied (a run's monitor's, the janitor's; `start` does both). Events and Kueue's reasons are not read."""
        engines, scope = self.engines.served(), naming.of_job(job) if job else ""  # its engine is served: asked once
        self.objects.cache = Cache(lambda: listers(self.objects.api, self.ns, engines, scope, explained=False),
                                   lambda _: changed(), logging.getLogger(__name__), scope=scope).start()

    def close(self) -> None:
        """Stop watching; calls read the cluster again."""
        if self.controller:
            self.controller.stop()
        elif self.objects.cache:
            self.objects.cache.stop()
        self.controller = self.objects.cache = None

    # what its parts answer
    def check(self, spec: dict, new_job: bool = True, engine: str | None = None) -> None:
        self.engines.check(spec, new_job, engine)

    def cluster(self) -> dict:
        return self.engines.cluster()

    def exists(self, name: str) -> bool:
        return self.objects.exists(name)

    def get(self, name: str, events: int = 20) -> JobRecord:
        return self.observer.get(name, events)

    def list(self) -> builtins.list[JobSummary]:
        return self.observer.list()

    def answer(self, name: str) -> JobRecord:
        """The job as a verb (submit, stop, restart) answers it: with its events where they cost no list of the
        namespace's (watched, or a CLI's one call); a sweep's controller listed them at each trial's launch."""
        return self.get(name, events=20 if self.objects.watching("events") or not self.objects.cache else 0)

    def log_dir(self, name: str, run: int | None = None) -> Path:
        return self.objects.log_dir(name, run)

    def log_files(self, name: str, replica: str | None = None, run: int | None = None) -> dict[str, Path]:
        return self.copier.log_files(name, replica, run)

    def record(self, name: str, event: Event) -> None:
        self.objects.record(name, event)

    def stacks(self, name: str, replica: str | None = None, kept: bool = False) -> dict:
        return self.replica_stacks.stacks(name, replica, kept)

    def keep_stacks(self, name: str, taken: dict) -> None:
        self.replica_stacks.keep_stacks(name, taken)

    def waiting(self, name: str) -> dict:
        return self.why.waiting(name)

    def outlook(self, spec: dict) -> builtins.list[FieldError]:
        return self.why.outlook(spec)

    def credentials(self, secret: str) -> dict:
        return self.credential_store.credentials(secret)

    def set_credentials(self, secret: str, username: str, password: str, host: str) -> None:
        self.credential_store.set_credentials(secret, username, password, host)

    def credential_names(self) -> builtins.list[str]:
        return self.credential_store.credential_names()

    def delete_credentials(self, secret: str) -> None:
        self.credential_store.delete_credentials(secret)

    def tensorboard(self, spec: dict, replica: str | None = None) -> ClusterTensorBoard:
        """The job's one TensorBoard (a replica is one of its runs)."""
        if not spec["tensorboard"]["enabled"]:
            raise DistrainError(f"job {spec['name']} runs no TensorBoard: its tensorboard.enabled is false")
        service, port = naming.tensorboard_name(spec["name"]), podspec.TENSORBOARD_PORT
        try:
            secret = self.objects.core.read_namespaced_secret(service, self.ns).data[naming.BOARD_KEY]
            board = {SECRET_HEADER: base64.b64decode(secret).decode()}
        except ApiException as e:
            if e.status != 404:
                raise api_error(e, f"read secret {service}") from None
            board = {}  # a TensorBoard made before boards had secrets asks for none
        if self.objects.inside:
            return ClusterTensorBoard(f"http://{service}.{self.ns}.svc:{port}", board)
        c = self.objects.api.configuration
        return ClusterTensorBoard(
            f"{c.host}/api/v1/namespaces/{self.ns}/services/http:{service}:http/proxy",
            headers={**board, **{auth["key"]: auth["value"] for auth in c.auth_settings().values()}},  # the token
            tls=self._tls)

    @cached_property
    def _tls(self) -> ssl.SSLContext:
        """TLS to the API server as the client's configuration says: its CA, client certificate, verification."""
        c = self.objects.api.configuration
        context = ssl.create_default_context(cafile=c.ssl_ca_cert)
        if c.cert_file:
            context.load_cert_chain(c.cert_file, c.key_file)
        if not c.verify_ssl:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context

    def submit(self, spec: dict, snapshot: bytes | None = None, hooks: dict | None = None) -> JobRecord:
        with self.objects.changing(spec["name"]):
            return self._submit(spec, snapshot, hooks)

    def _submit(self, spec: dict, snapshot: bytes | None, hooks: dict | None) -> JobRecord:
        trial = "trial_of" in spec  # a sweep's controller launches it
        engine, why = self.engines.engine(spec, fresh=not trial)
        if not trial:  # a sweep's submit checked its trials (they differ in names and hyperparameters alone)
            self.check(spec, engine=engine)
        root_dict = render.root(spec, self.settings, engine, self.engines.resume_source(spec))
        if trial:  # deleting the sweep deletes it (the garbage collector's, were the sweep gone already)
            parent = self.objects.api.sanitize_for_serialization(self.objects.job_root(spec["trial_of"]))
            root_dict["metadata"]["ownerReferences"] = [naming.owned_by(parent)]
        self.engines.mark_holding_outputs(spec)
        root_dict = self.objects.create(root_dict)
        try:
            if snapshot is not None:
                self.objects.create(render.snapshot_secret(spec, self.settings, root_dict, snapshot))
            if hooks:
                self.objects.create(render.hooks_secret(spec, self.settings, root_dict, hooks))
            for obj in render.network_policy(spec, self.settings, root_dict):
                self.objects.create(obj)
            self._start(spec, root_dict, engine, told=bool(hooks))
            for obj in render.tensorboard(spec, self.settings, root_dict):
                self.objects.create(obj)
        except DistrainError:
            self._delete_root(spec["name"])
            raise
        self.record(spec["name"], Event(reasons.SUBMITTED, f"job accepted; engine {engine}: {why}"))
        self.companions.warn_untold(spec, hooks)
        self.companions.make_janitor(spec)
        return self.answer(spec["name"])

    def _start(self, spec: dict, root_dict: dict, engine: str, run: int = 1, told: bool = False) -> None:
        self.objects.make_programs()  # what the run's pods (and its TensorBoard's) run
        trials = self.engines.trials_engine(spec)
        for obj in render.workload(spec, self.settings, root_dict, engine, run, trials=trials):
            self.objects.create(obj)
        self.companions.make_monitor(spec, root_dict, run, told)

    def stop(self, name: str, decision: Decision = STOP_REQUESTED) -> JobRecord:
        """On "pods", request the stop and apply the policy; on an engine, record the job's state as stopped
        (unless the engine ended it), then delete the engine's object (its pods follow). `decision`: how the job
        ends (by request; a hung job's monitor fails it)."""
        with self.objects.changing(name):
            return self._stop(name, decision)

    def _stop(self, name: str, decision: Decision = STOP_REQUESTED) -> JobRecord:
        """A sweep's controller stops its trials and records its end once it sees the request."""
        root = self.objects.job_root(name)
        for _ in range(10):
            status = json.loads(root.data["status.json"])
            if status["phase"] in FINISHED:
                return self.answer(name)
            if engine_of(root) not in ("pods", SWEEP):
                observed = self.observer.observed(root, self.objects.job_pods(name))
                if observed["phase"] in FINISHED:  # as the engine ended it, answered before its object goes
                    ended = self.answer(name)
                    self._end_workload(root)
                    return ended
                status = stopped_status(observed, decision, time.time())
            elif decision != STOP_REQUESTED:
                status["stopped_as"] = [str(decision.phase), decision.reason, decision.message]
            status["stop_requested"] = True
            if self.objects.write_status(root, status):
                break
            root = self.objects.job_root_fresh(name)  # another writer came first (409): request the stop on its version
        else:
            raise KubeError(f"job {name} kept changing: its stop could not be recorded")
        if engine_of(root) == SWEEP:
            self._wait_ended(name)
        elif engine_of(root) != "pods":
            self.record(name, Event(decision.reason, decision.message, type="Warning"))
            self._end_workload(root)
        else:
            self.supervisor.reconcile(self.objects.job_root_fresh(name), newest(self.objects.job_pods_fresh(name)))
        return self.answer(name)

    def _wait_ended(self, name: str, timeout: float = 15) -> None:
        """Until the job's status records its end (a sweep's controller polls every second)."""
        deadline = time.monotonic() + timeout
        while self.status(name)["phase"] not in FINISHED and time.monotonic() < deadline:
            time.sleep(0.2)

    def status(self, name: str) -> dict:
        """The job's status as recorded in its ConfigMap (stop_requested with the rest), as this process's watches
        last brought it (without them, as the API server has it): asked for again and again, it costs nothing."""
        return json.loads(self.objects.job_root(name).data["status.json"])

    def sweep_settings(self, name: str) -> dict:
        """The settings of the server that made the sweep, which its controller makes the trials with."""
        return json.loads(self.objects.job_root_fresh(name).data["settings.json"])

    def update_status(self, name: str, **fields) -> None:
        """Record `fields` of the job's status, as a process in the cluster (a sweep's controller, a monitor)."""
        for _ in range(10):
            root = self.objects.job_root_fresh(name)
            if self.objects.write_status(root, {**json.loads(root.data["status.json"]), **fields}):
                return
        raise KubeError(f"job {name} kept changing: its status could not be recorded")

    def tell(self, job: JobRecord, hooks: dict | None, warning: Event | None = None) -> None:
        """Post the warning (default: the run's end, as `job` records it) to the webhooks, as a process in the
        cluster (a run's monitor, a sweep's controller), which waits for its posts before it exits
        (notifier.wait); what failed is a Warning on the job."""
        self.notifier.tell(hooks, notify.RunEvent.of(job, self.name, warning))

    def _post_failed(self, event: notify.RunEvent, problem: str) -> None:
        self.record(event.job, Event(reasons.WEBHOOK_FAILED, problem, type="Warning"))
        print(problem, flush=True)

    def claim(self, name: str, key: str) -> bool:
        """Mark `key` in the status of the job's run unless it is marked: whether this caller marked it, of all
        that try at once (the one to post an event to the webhooks)."""
        for _ in range(10):
            root = self.objects.job_root_fresh(name)
            status = json.loads(root.data["status.json"])
            if status.get(key):
                return False
            if self.objects.write_status(root, {**status, key: True}):
                return True
        raise KubeError(f"job {name} kept changing: {key} could not be recorded")

    def _end_workload(self, root: client.V1ConfigMap) -> None:
        """Copy the logs of the job's pods, then delete the engine's object (its pods follow)."""
        name = root.metadata.name
        self.copier.copy_logs(name, self.objects.job_pods_fresh(name))
        group, version, resource = self.objects.engine_api(root)
        with self.objects.writing(resource, name) as write:
            try:
                self.objects.custom.delete_namespaced_custom_object(group, version, self.ns, resource, name,
                                                                    propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise api_error(e, f"delete {resource} {name}") from None
            write.forget()

    def restart(self, name: str, spec: dict | None = None, snapshot: bytes | None = None,
                hooks: dict | None = None) -> JobRecord:
        with self.objects.changing(name):
            return self._restart(name, spec, snapshot, hooks)

    def earlier_run(self, name: str, run: int) -> dict | None:
        return json.loads(self.objects.job_root(name).data.get(naming.RUNS, "{}")).get(str(run))

    def snapshot(self, name: str) -> bytes | None:
        self.objects.job_root(name)  # JobNotFound for another owner's
        try:
            secret = self.objects.core.read_namespaced_secret(naming.snapshot_name(name), self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"read the snapshot of {name}") from None
        return base64.b64decode(secret.data[podspec.SNAPSHOT_KEY])

    def _restart(self, name: str, spec: dict | None, snapshot: bytes | None, hooks: dict | None) -> JobRecord:
        root = self.objects.job_root_fresh(name)
        old = json.loads(root.data["spec.json"])
        spec = spec or old
        if spec["name"] != name:
            raise SpecError([FieldError("name", f"a restarted job keeps its name {name!r}; clone it for a new name")])
        ended = self._stop(name)
        usage.keep(self.ledger, ended)
        self._wait_gone(name)
        engine = engine_of(self.objects.job_root_fresh(name))
        self.check(spec, new_job=False, engine=engine)
        root = self._next_run(name, spec, engine, run_record(ended))
        root_dict = self.objects.api.sanitize_for_serialization(root)
        if snapshot is not None or "snapshot" not in spec.get("code", {}):  # edited: its own snapshot, or none
            self.objects.delete("Secret", naming.snapshot_name(name))
        if snapshot is not None:
            self.objects.create(render.snapshot_secret(spec, self.settings, root_dict, snapshot))
        self.objects.delete("Secret", naming.notify_name(name))  # this run's webhooks are those of now
        if hooks:
            self.objects.create(render.hooks_secret(spec, self.settings, root_dict, hooks))
        self._start(spec, root_dict, engine, current_run(root), told=bool(hooks))
        if (spec["tensorboard"], spec.get("output")) != (old["tensorboard"], old.get("output")):
            self._replace_tensorboard(spec, root_dict)
        self.record(name, Event(reasons.RESTARTED, "job restarted"))
        self.companions.warn_untold(spec, hooks)
        return self.answer(name)

    def _next_run(self, name: str, spec: dict, engine: str, ended: dict) -> client.V1ConfigMap:
        """Record the job's next run of `spec` in its ConfigMap, keeping the run before (`ended`: see next_run); a
        write that came first (that run's monitor marking its end told) is read and kept."""
        for _ in range(10):
            root = self.objects.job_root_fresh(name)
            next_run(root, spec, podspec.addresses(spec, self.ns, engine), ended)
            if resume := self.engines.resume_source(spec, owner_of(root)):
                root.data[naming.RESUME] = json.dumps(resume, sort_keys=True)
            try:
                with self.objects.writing("configmaps", name) as write:
                    root = self.objects.core.replace_namespaced_config_map(name, self.ns, root)
                    write.put(root)
                return root
            except ApiException as e:
                if e.status != 409:
                    raise api_error(e, f"restart {name}") from None
        raise KubeError(f"job {name} kept changing: its restart could not be recorded")

    def _replace_tensorboard(self, spec: dict, root_dict: dict) -> None:
        for kind in ("Deployment", "Service"):
            self.objects.delete(kind, naming.tensorboard_name(spec["name"]))
        for obj in render.tensorboard(spec, self.settings, root_dict):
            self.objects.create(obj, exists_ok=obj["kind"] == "Secret")  # its secret stays the job's

    def _wait_gone(self, name: str, timeout: float = 60) -> None:
        """Until the job's pods (and its engine's object, whose successor takes its name) are gone."""
        root = self.objects.job_root_fresh(name)
        on_engine = engine_of(root) not in ("pods", SWEEP)
        deadline = time.monotonic() + timeout
        while (self.objects.job_pods_fresh(name) or on_engine and self.objects.workload_fresh(root)) \
                and time.monotonic() < deadline:
            time.sleep(0.2)

    def delete(self, name: str, purge_output: bool = False) -> None:
        """Stop the job until its pods are gone, with `purge_output` delete its output, then delete its
        ConfigMap: the garbage collector deletes every object it owns."""
        with self.objects.changing(name):
            usage.keep(self.ledger, self._stop(name))
            self._wait_gone(name)
            if purge_output:
                self._purge_output(name)
            self._delete_root(name)
            shutil.rmtree(self.objects.home / name, ignore_errors=True)

    def _purge_output(self, name: str) -> None:
        """Delete the job's own output directory through a pod that mounts its volume (render.purger), and
        wait until it has; if it cannot, the job stays, so the delete can be asked again."""
        root = self.objects.job_root_fresh(name)
        purger = render.purger(json.loads(root.data["spec.json"]), self.settings,
                               self.objects.api.sanitize_for_serialization(root))
        if purger is None:
            return
        pod = purger["metadata"]["name"]
        self.objects.delete_pod_named(pod)  # one an interrupted delete left
        self.objects.make_programs()
        self.objects.create(purger)
        try:
            ended = self.objects.wait_pod_ended(pod, READER_TIMEOUT)
        finally:
            self.objects.delete_pod_named(pod)
        if ended.phase != "Succeeded":
            raise KubeError(f"the output of job {name} was not deleted (pod {pod}: {why_not_running(ended)})")

    def _delete_root(self, name: str) -> None:
        with self.objects.writing("configmaps", name) as write:
            try:
                self.objects.core.delete_namespaced_config_map(name, self.ns, propagation_policy="Background")
            except ApiException as e:
                if e.status != 404:
                    raise api_error(e, f"delete job {name}") from None
                return  # deleted by another: the watch brings (or brought) its deletion
            write.forget()

    def logs(self, name: str, replica: str | None = None, tail: int | None = None, since: str | None = None,
             follow: bool = False, finished: Callable[[], bool] | None = None,
             run: int | None = None) -> Iterator[LogLine]:
        """A run's log files (default: the current run's); without a controller in this process, their
        pods are read first (and, to follow, a controller runs until `finished()`, by default the run's end,
        and the run's lines are copied)."""
        run = logs.run_of(name, run, current_run(self.objects.job_root(name)))
        files = self.copier.log_files(name, replica, run)
        if not follow:
            if not self.objects.cache:
                self.copier.catch_up(name)
            return logs.read(files, tail=tail, since=since)
        finished = self.copier.until_lines_copied(name, run, finished or (lambda: run_ended(self.get(name, events=0), run)))
        directory = self.objects.run_log_dir(name, run)
        if self.objects.cache:
            return logs.follow(lambda: files, finished, tail=tail, since=since, directory=directory)
        return self._follow_with_controller(name, files, finished, tail, since, directory)

    def _follow_with_controller(self, name, files, finished, tail, since, directory) -> Iterator[LogLine]:
        """Follow the job's files while a controller of this job alone copies its lines (and supervises it)."""
        self.start(logging.getLogger(__name__), naming.of_job(name))
        try:
            yield from logs.follow(lambda: files, finished, tail=tail, since=since, directory=directory)
        finally:
            self.close()

    def metrics(self, name: str) -> builtins.list[dict]:
        return podmetrics.samples(self.objects, name, self.get(name, events=0)["replicas"])
