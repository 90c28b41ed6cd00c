"""The Kubernetes backend. Every job has a root ConfigMap that owns the rest, and runs on an engine
(render.py renders both):

- "jobset": a JobSet, whose controller enforces the job's lifecycle in the cluster (success, failures,
  restarts, deadline), whether or not a Jupyter server runs. This backend only observes it: the
  JobSet's conditions, its Jobs and pods give the job's state (`jobset_state`).
- "kubeflow": the Training Operator's TFJob, PyTorchJob or PaddleJob, enforced in the cluster likewise;
  its conditions and pods give the job's state (`kubeflow_state`); the operator counts no restarts, so
  this backend records those it sees (`record_restarts`).
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
from typing import TYPE_CHECKING, Callable, Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ... import logs, notify, reasons
from ...errors import DistrainError, FieldError, SpecError
from ...incluster.tensorboard import SECRET_HEADER
from ...logs import LogLine
from ...policy import FINISHED, STOP_REQUESTED, Decision, Event, run_ended
from ...records import ClusterTensorBoard, JobRecord
from . import naming, podspec, render
from .controller import NamespaceController
from .credentials import CredentialStore
from .engines import NO_IMAGE
from .logcopy import READER_TIMEOUT
from .naming import SWEEP
from .objects import owner_of
from .observe import JobObserver
from .podstacks import ReplicaStacks
from .state import current_run, ended_run, engine_of, new_status, newest, stopped_status, why_not_running
from .waiting import WhyItWaits
from .watch import Cache, KubeError, api_error, listers

if TYPE_CHECKING:
    from ...config import Distrain


class KubeBackend(JobObserver, CredentialStore, ReplicaStacks, WhyItWaits):
    default_host_paths: tuple[str, ...] | None = podspec.HOST_PATHS_BY_DEFAULT
    controller: NamespaceController | None = None  # while started

    @classmethod
    def from_config(cls, config: Distrain) -> KubeBackend:
        return cls(config)

    def start(self, log: logging.Logger, job: str | None = None) -> None:
        """Watch the namespace (or only `job`), apply the policy to supervised jobs and copy logs (see
        NamespaceController)."""
        self.controller = NamespaceController(self, log, job=job)

    def observe(self, job: str, changed: Callable[[], None]) -> None:
        """Read `job` from a cache of its own objects alone, kept by their watches, calling `changed()` as each
        changes: its phase costs no request while it does not change. No policy is applied, no log copied (a
        run's monitor's; `start` does both). Its events and Kueue's reasons are not read."""
        engines = self.engines()  # the job's engine is served: asked once
        self.cache = Cache(lambda: listers(self.api, self.ns, engines, job, explained=False), lambda _: changed(),
                           logging.getLogger(__name__)).start()

    def close(self) -> None:
        """Stop watching; calls read the cluster again."""
        if self.controller:
            self.controller.stop()
        elif self.cache:
            self.cache.stop()
        self.controller = self.cache = None

    def tensorboard(self, spec: dict, replica: str | None = None) -> ClusterTensorBoard:
        """The job's one TensorBoard (a replica is one of its runs)."""
        if not spec["tensorboard"]["enabled"]:
            raise DistrainError(f"job {spec['name']} runs no TensorBoard: its tensorboard.enabled is false")
        service, port = naming.tensorboard_name(spec["name"]), podspec.TENSORBOARD_PORT
        try:
            secret = self.core.read_namespaced_secret(service, self.ns).data[naming.BOARD_KEY]
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


    def submit(self, spec: dict, snapshot: bytes | None = None, hooks: dict | None = None) -> JobRecord:
        with self.changing(spec["name"]):
            return self._submit(spec, snapshot, hooks)

    def _submit(self, spec: dict, snapshot: bytes | None, hooks: dict | None) -> JobRecord:
        engine, why = self.engine(spec)
        self.check(spec, engine=engine)
        root_dict = render.root(spec, self.settings, engine, self.resume_source(spec))
        root_dict["data"]["status.json"] = json.dumps(new_status(spec))
        if "trial_of" in spec:  # deleting the sweep deletes it, whatever its controller was doing then
            parent = self.api.sanitize_for_serialization(self.job_root_fresh(spec["trial_of"]))
            root_dict["metadata"]["ownerReferences"] = [naming.owned_by(parent)]
        self._mark_holding_outputs(spec)
        root_dict = self._create(root_dict)
        try:
            if snapshot is not None:
                self._create(render.snapshot_secret(spec, self.settings, root_dict, snapshot))
            if hooks:
                self._create(render.hooks_secret(spec, self.settings, root_dict, hooks))
            for obj in render.network_policy(spec, self.settings, root_dict):
                self._create(obj)
            self._start(spec, root_dict, engine, told=bool(hooks))
            for obj in render.tensorboard(spec, self.settings, root_dict):
                self._create(obj)
        except DistrainError:
            self._delete_root(spec["name"])
            raise
        self.record(spec["name"], Event(reasons.SUBMITTED, f"job accepted; engine {engine}: {why}"))
        self._warn_untold(spec, hooks)
        self._make_janitor(spec)
        return self.get(spec["name"])

    def _warn_untold(self, spec: dict, hooks: dict | None) -> None:
        """A run with webhooks has no one to post its events where no monitor can run: a Warning says so."""
        if hooks and not self.settings.controller_image and "trial_of" not in spec:  # a trial's: its sweep's
            self.record(spec["name"], Event(reasons.NO_MONITOR, "no one in the cluster posts this job's events to "
                                            f"its webhooks: this server names no image for its monitor ({NO_IMAGE})",
                                            type="Warning"))

    def _make_janitor(self, spec: dict) -> None:
        """Make the namespace's janitor (render.janitor) with the first job that has a time to be kept, if
        there is an image to run it; a failure is a Warning on the job (Jupyter servers and `distrain prune`
        still delete it when its time is over)."""
        settings = self.settings
        if self.janitor_made or not (spec["policy"].get("ttl_after_finished") and settings.janitor_schedule
                                     and settings.controller_image):
            return
        try:
            for obj in render.janitor(settings):
                self._make_shared(obj)
            self.janitor_made = True
        except DistrainError as e:
            self.record(spec["name"], Event(reasons.NO_JANITOR, "the cluster cannot delete this job when its time "
                                            f"to be kept is over, only a Jupyter server can: {e}", type="Warning"))

    def _make_shared(self, obj: dict) -> None:
        """Make an object the namespace's janitor or monitors share, once; a Role's rules or a CronJob's spec that
        an earlier version made are brought up to this version's."""
        if self._create(obj, exists_ok=True) or obj["kind"] not in ("Role", "CronJob"):
            return
        kind, name = obj["kind"], obj["metadata"]["name"]
        change = {"rules": obj["rules"]} if kind == "Role" else {"spec": obj["spec"]}
        merge = "application/merge-patch+json"  # lists are replaced as they are
        self._call(lambda: self._api("patch", kind)(name, self.ns, change, _content_type=merge),
                   f"update {kind} {name}")

    def _start(self, spec: dict, root_dict: dict, engine: str, run: int = 1, told: bool = False) -> None:
        self._make_programs()  # what the run's pods (and its TensorBoard's) run
        for obj in render.workload(spec, self.settings, root_dict, engine, run, trials=self.trials_engine(spec)):
            self._create(obj)
        self._make_monitor(spec, root_dict, run, told)

    def _make_monitor(self, spec: dict, root_dict: dict, run: int, told: bool) -> None:
        """Make the run's monitor (render.monitor), and the namespace's identity of monitors once; a failure is a
        Warning on the job: its hangs and stragglers are then not watched, nor its webhooks `told`."""
        try:
            for obj in render.monitor(spec, self.settings, root_dict, run, told):
                if obj["kind"] == "Job":
                    self._create(obj)
                elif not self.monitor_identity_made:
                    self._make_shared(obj)
            self.monitor_identity_made = True
        except DistrainError as e:
            self.record(spec["name"], Event(reasons.NO_MONITOR, "the cluster does not watch this run for hangs and "
                                            f"stragglers, nor tell its webhooks: {e}", type="Warning"))

    def stop(self, name: str, decision: Decision = STOP_REQUESTED) -> JobRecord:
        """On "pods", request the stop and apply the policy; on an engine, record the job's state as stopped
        (unless the engine ended it), then delete the engine's object (its pods follow). `decision`: how the job
        ends (by request; a hung job's monitor fails it)."""
        with self.changing(name):
            return self._stop(name, decision)

    def _stop(self, name: str, decision: Decision = STOP_REQUESTED) -> JobRecord:
        """A sweep's controller stops its trials and records its end once it sees the request."""
        root = self.job_root(name)
        for _ in range(10):
            status = json.loads(root.data["status.json"])
            if status["phase"] in FINISHED:
                return self.get(name)
            if engine_of(root) not in ("pods", SWEEP):
                observed = self._observe(root, self.job_pods(name))
                if observed["phase"] in FINISHED:
                    self._end_workload(root)
                    return self.get(name)
                status = stopped_status(observed, decision, time.time())
            elif decision != STOP_REQUESTED:
                status["stopped_as"] = [str(decision.phase), decision.reason, decision.message]
            status["stop_requested"] = True
            if self._write_status(root, status):
                break
            root = self.job_root_fresh(name)  # another writer came first (409): request the stop on its version
        else:
            raise KubeError(f"job {name} kept changing: its stop could not be recorded")
        if engine_of(root) == SWEEP:
            self._wait_ended(name)
        elif engine_of(root) != "pods":
            self.record(name, Event(decision.reason, decision.message, type="Warning"))
            self._end_workload(root)
        else:
            self.reconcile(self.job_root_fresh(name), newest(self.job_pods_fresh(name)))
        return self.get(name)

    def _wait_ended(self, name: str, timeout: float = 15) -> None:
        """Until the job's status records its end (a sweep's controller polls every second)."""
        deadline = time.monotonic() + timeout
        while self.status(name)["phase"] not in FINISHED and time.monotonic() < deadline:
            time.sleep(0.2)

    def status(self, name: str) -> dict:
        """The job's status as recorded in its ConfigMap (stop_requested with the rest)."""
        return json.loads(self.job_root_fresh(name).data["status.json"])

    def sweep_settings(self, name: str) -> dict:
        """The settings of the server that made the sweep, which its controller makes the trials with."""
        return json.loads(self.job_root_fresh(name).data["settings.json"])

    def update_status(self, name: str, **fields) -> None:
        """Record `fields` of the job's status, as a process in the cluster (a sweep's controller, a monitor)."""
        for _ in range(10):
            root = self.job_root_fresh(name)
            if self._write_status(root, {**json.loads(root.data["status.json"]), **fields}):
                return
        raise KubeError(f"job {name} kept changing: its status could not be recorded")

    def tell(self, job: JobRecord, hooks: dict | None, warning: Event | None = None) -> None:
        """Post the warning (default: the run's end, as `job` records it) to the webhooks, as a process in the
        cluster (a run's monitor, a sweep's controller), which waits for its posts before it exits
        (notifier.wait); what failed is a Warning on the job."""
        self.notifier.tell(hooks, notify.RunEvent.of(job, self.name, warning))

    def claim(self, name: str, key: str) -> bool:
        """Mark `key` in the status of the job's run unless it is marked: whether this caller marked it, of all
        that try at once (the one to post an event to the webhooks)."""
        for _ in range(10):
            root = self.job_root_fresh(name)
            status = json.loads(root.data["status.json"])
            if status.get(key):
                return False
            if self._write_status(root, {**status, key: True}):
                return True
        raise KubeError(f"job {name} kept changing: {key} could not be recorded")

    def _end_workload(self, root: client.V1ConfigMap) -> None:
        """Copy the logs of the job's pods, then delete the engine's object (its pods follow)."""
        name = root.metadata.name
        self.copy_logs(name, self.job_pods_fresh(name))
        group, version, resource = self._engine_api(root)
        with self._writing(resource, name) as write:
            try:
                self.custom.delete_namespaced_custom_object(group, version, self.ns, resource, name,
                                                            propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise api_error(e, f"delete {resource} {name}") from None
            write.forget()

    def restart(self, name: str, spec: dict | None = None, snapshot: bytes | None = None,
                hooks: dict | None = None) -> JobRecord:
        with self.changing(name):
            return self._restart(name, spec, snapshot, hooks)

    def snapshot(self, name: str) -> bytes | None:
        self.job_root(name)  # JobNotFound for another owner's
        try:
            secret = self.core.read_namespaced_secret(naming.snapshot_name(name), self.ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"read the snapshot of {name}") from None
        return base64.b64decode(secret.data[podspec.SNAPSHOT_KEY])

    def _restart(self, name: str, spec: dict | None, snapshot: bytes | None, hooks: dict | None) -> JobRecord:
        root = self.job_root_fresh(name)
        old = json.loads(root.data["spec.json"])
        spec = spec or old
        if spec["name"] != name:
            raise SpecError([FieldError("name", f"a restarted job keeps its name {name!r}; clone it for a new name")])
        self._stop(name)
        self._wait_gone(name)
        root = self.job_root_fresh(name)
        engine = engine_of(root)
        self.check(spec, new_job=False, engine=engine)
        status = new_status(spec)
        status["run"], status["previous"] = current_run(root) + 1, ended_run(json.loads(root.data["status.json"]))
        root.data.update({"spec.json": json.dumps(spec, sort_keys=True), "status.json": json.dumps(status),
                          "cluster.json": json.dumps(podspec.addresses(spec, self.ns, engine), sort_keys=True)})
        root.data.pop(naming.RESUME, None)
        if resume := self.resume_source(spec, owner_of(root)):
            root.data[naming.RESUME] = json.dumps(resume, sort_keys=True)
        with self._writing("configmaps", name) as write:
            root = self._call(lambda: self.core.replace_namespaced_config_map(name, self.ns, root), f"restart {name}")
            write.put(root)
        root_dict = self.api.sanitize_for_serialization(root)
        if snapshot is not None or "snapshot" not in spec.get("code", {}):  # edited: its own snapshot, or none
            self._delete("Secret", naming.snapshot_name(name))
        if snapshot is not None:
            self._create(render.snapshot_secret(spec, self.settings, root_dict, snapshot))
        self._delete("Secret", naming.notify_name(name))  # this run's webhooks are those of now
        if hooks:
            self._create(render.hooks_secret(spec, self.settings, root_dict, hooks))
        self._start(spec, root_dict, engine, status["run"], told=bool(hooks))
        if (spec["tensorboard"], spec.get("output")) != (old["tensorboard"], old.get("output")):
            self._replace_tensorboard(spec, root_dict)
        self.record(name, Event(reasons.RESTARTED, "job restarted"))
        self._warn_untold(spec, hooks)
        return self.get(name)

    def _replace_tensorboard(self, spec: dict, root_dict: dict) -> None:
        for kind in ("Deployment", "Service"):
            self._delete(kind, naming.tensorboard_name(spec["name"]))
        for obj in render.tensorboard(spec, self.settings, root_dict):
            self._create(obj, exists_ok=obj["kind"] == "Secret")  # its secret stays the job's

    def _wait_gone(self, name: str, timeout: float = 60) -> None:
        """Until the job's pods (and its engine's object, whose successor takes its name) are gone."""
        root = self.job_root_fresh(name)
        on_engine = engine_of(root) not in ("pods", SWEEP)
        deadline = time.monotonic() + timeout
        while (self.job_pods_fresh(name) or on_engine and self._workload_fresh(root)) and time.monotonic() < deadline:
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
            shutil.rmtree(self.home / name, ignore_errors=True)

    def _purge_output(self, name: str) -> None:
        """Delete the job's own output directory through a pod that mounts its volume (render.purger), and
        wait until it has; if it cannot, the job stays, so the delete can be asked again."""
        root = self.job_root_fresh(name)
        purger = render.purger(json.loads(root.data["spec.json"]), self.settings,
                                  self.api.sanitize_for_serialization(root))
        if purger is None:
            return
        pod = purger["metadata"]["name"]
        self._delete_pod_named(pod)  # one an interrupted delete left
        self._make_programs()
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

    def logs(self, name: str, replica: str | None = None, tail: int | None = None, since: str | None = None,
             follow: bool = False, finished: Callable[[], bool] | None = None,
             run: int | None = None) -> Iterator[LogLine]:
        """A run's log files (default: the current run's); without a controller in this process, their
        pods are read first (and, to follow, a controller runs until `finished()`, by default the run's end,
        and the run's lines are copied)."""
        run = logs.run_of(name, run, current_run(self.job_root(name)))
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

    def metrics(self, name: str) -> builtins.list[dict]:
        """Phases only: usage needs the cluster's metrics API, which this backend does not read yet."""
        return [{"replica": r["name"], "phase": r["phase"], "cpu_percent": None, "memory_bytes": None,
                 "gpu_memory_mib": None, "gpu_utilization": None} for r in self.get(name, events=0)["replicas"]]
