"""What the cluster serves and holds: the engines a job can run on and which one it does, the queues, the
refusals of what the cluster can never run, and its capacity."""

from __future__ import annotations

import builtins  # `list` is also a method name below
import json
from pathlib import PurePosixPath

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ... import snapshot as snapshot_
from ... import storage, sweep, waits
from ...errors import FieldError, JobNotFound, SpecError
from ...spec import gpu_type, replica_name, replicas
from ...sweep import is_sweep
from . import capacity, naming, podspec, render
from .naming import SWEEP
from .objects import NamespaceObjects, owner_of
from .recent import RECENT, Recent
from .state import GPU
from .watch import KubeError, api_error

SUPERVISED = ("supervised by the Jupyter server (no engine in the cluster runs it): while no server or following CLI runs, "
              "nothing ends the job's other replicas, restarts a failed one or enforces its deadline")

NO_IMAGE = "an admin sets c.Distrain.controller_image (an image with jupyter-distrain installed)"

class Engines:
    """Picks each job's engine and refuses, before anything is made, what the cluster can never run."""

    def __init__(self, objects: NamespaceObjects):
        self.objects, self.settings, self.ns, self.core = objects, objects.settings, objects.ns, objects.core
        # what the cluster serves and holds, as answered within RECENT seconds (recent.py)
        self.served = Recent(self._served, RECENT)
        self.node_list = Recent(lambda: listed(self.core.list_node(_preload_content=False)), RECENT)
        self.live_pods = Recent(self._live_pods, RECENT)
        self.claim_list = Recent(lambda: self.objects.call(lambda: {  # the namespace's claims, by name
            c.metadata.name: c for c in self.core.list_namespaced_persistent_volume_claim(self.ns).items},
            "list volumes"), RECENT)
        self.queue_list = Recent(self._queues, RECENT)

    def _served(self) -> dict[str, str]:
        """The engines' resources the cluster serves (jobsets, tfjobs, pytorchjobs, paddlejobs, and Kueue's
        workloads), each with its API version."""
        groups = self.objects.call(lambda: client.ApisApi(self.objects.api).get_api_versions().groups,
                                   "list the cluster's APIs")
        served = {f"{g.name}/{v.version}" for g in groups for v in g.versions}
        out = {"jobsets": naming.JOBSET_API} if naming.JOBSET_API in served else {}
        if naming.KUBEFLOW_API in served:
            group, version = naming.KUBEFLOW_API.split("/")
            kinds = {k.plural for k in naming.KUBEFLOW.values()}
            try:
                resources = self.objects.custom.get_api_resources(group, version).resources
            except ApiException as e:  # a CRD just installed: the group is listed before it serves
                if e.status != 404:
                    raise api_error(e, "list Kubeflow's resources") from None
                resources = []
            out.update({r.name: naming.KUBEFLOW_API for r in resources if r.name in kinds})
        if naming.KUEUE_API in served:
            out["workloads"] = naming.KUEUE_API
        return out

    def engine(self, spec: dict | None = None, fresh: bool = False) -> tuple[str, str]:
        """The engine new jobs (or the job `spec`) run on, by c.Distrain.kubernetes_engine and what the
        cluster serves (as it answered within RECENT seconds, or `fresh`: for a submit, an engine installed a
        moment ago runs it), and why. "auto" prefers JobSet, then the Training Operator for the jobs it can run."""
        if spec is not None and is_sweep(spec):
            return SWEEP, "a sweep's controller runs in the cluster (a Job) and launches its trials"
        wanted = self.settings.kubernetes_engine
        if wanted == "pods":
            return "pods", f"c.Distrain.kubernetes_engine is 'pods': jobs are {SUPERVISED}"
        served = self.served(fresh)
        if wanted in ("auto", "jobset") and "jobsets" in served:
            return "jobset", ("the cluster serves JobSet (jobset.x-k8s.io/v1alpha2): its controller enforces each "
                              "job's lifecycle in the cluster")
        if wanted == "jobset":
            raise KubeError("c.Distrain.kubernetes_engine is 'jobset' but the cluster does not serve "
                            "jobset.x-k8s.io/v1alpha2: an admin installs JobSet (see docs/kubernetes.md), or choose 'auto'")
        kinds = sorted({k.kind for k in naming.KUBEFLOW.values() if k.plural in served})
        if not kinds:
            if wanted == "kubeflow":
                raise KubeError("c.Distrain.kubernetes_engine is 'kubeflow' but the cluster does not serve "
                                "kubeflow.org/v1: an admin installs Kubeflow's Training Operator, or choose 'auto'")
            return "pods", f"the cluster serves neither JobSet nor Kubeflow's Training Operator: jobs are {SUPERVISED}"
        why = (f"the cluster serves Kubeflow's Training Operator ({', '.join(kinds)}): it enforces each job's "
               "lifecycle in the cluster")
        framework = (spec or {}).get("framework", "python")
        kind = naming.KUBEFLOW.get(framework)
        if spec and kind and kind.kind not in kinds:
            missing = f"the cluster's Training Operator serves no {kind.kind}"
            if wanted == "kubeflow":
                raise KubeError(f"c.Distrain.kubernetes_engine is 'kubeflow' but {missing}")
            return "pods", f"{missing}: this job is {SUPERVISED}"
        refusal = podspec.kubeflow_refusal(spec) if spec and wanted == "auto" else None
        if refusal:
            return "pods", f"the Training Operator cannot run this job ({refusal.message.split('; ')[0]}): it is {SUPERVISED}"
        if not spec and wanted == "auto":
            why += f"; jobs it cannot run are {SUPERVISED}"
        return "kubeflow", why

    def trials_engine(self, spec: dict) -> str:
        """The engine a sweep's trials run on, the last one's (they differ in their names and hyperparameters alone),
        which its controller's rights follow (roles.sweeper); "" for a job that is no sweep."""
        return self.engine(sweep.trials(spec)[-1])[0] if is_sweep(spec) else ""

    def _queues(self) -> builtins.list[str] | None:
        """The namespace's Kueue LocalQueues, which a job's `queue` names; None without Kueue."""
        group, version = naming.KUEUE_API.split("/")
        try:
            found = self.objects.custom.list_namespaced_custom_object(group, version, self.ns, "localqueues")["items"]
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, "list Kueue's local queues") from None
        return sorted(q["metadata"]["name"] for q in found)

    def check(self, spec: dict, new_job: bool = True, engine: str | None = None) -> None:
        """Refuse, before anything is created, what the cluster can never run; then let the API server
        (and the engine's admission webhooks) validate every object of the job on `engine` (default: the
        one new jobs run on) in a server-side dry run, so a bad spec never half-creates a job."""
        engine = engine or self.engine(spec)[0]
        if is_sweep(spec):
            self._check_sweep(spec)  # its last trial checked as a job covers every field the sweep passes on
        elif errors := self._refusals(spec, engine):
            raise SpecError(errors)
        root_dict = render.root(spec, self.settings, engine, self.resume_source(spec))
        objects = render.workload(spec, self.settings, root_dict, engine, trials=self.trials_engine(spec))
        if new_job:  # a restart: the root and the TensorBoard exist
            objects = [root_dict, *objects, *render.tensorboard(spec, self.settings, root_dict)]
        for obj in objects:
            if obj["kind"] != "RoleBinding":  # its Role (checked: this identity may grant it) is not made yet
                self.objects.create(obj, dry_run=True)

    def _refusals(self, spec: dict, engine: str) -> builtins.list[FieldError]:
        """What the cluster can never run of the job on `engine`: its code, GPUs, name, queue and volumes."""
        errors = podspec.refusals(spec, engine)
        if "path" in spec.get("code", {}):
            errors.append(FieldError("code.path", "a local directory cannot reach the cluster; use a git repository"))
        if error := snapshot_.too_large(spec, render.SNAPSHOT_LIMIT, "a Secret holds"):
            errors.append(error)
        if spec["policy"].get("hang_after") and not self.settings.controller_image:
            errors.append(FieldError("policy.hang_after", "on Kubernetes a monitor in the cluster finds a job's hangs, "
                                     f"which runs in this product's image, and this server names none: {NO_IMAGE}"))
        errors += self._size_refusals(spec)
        if engine == "jobset":
            longest = max(len(replica_name(r, i)) for r, i in replicas(spec))
            limit = 63 - len("--0-0-abcde") - longest
            if len(spec["name"]) > limit:
                errors.append(FieldError("name", f"at most {limit} characters for this job on JobSet: its pods' names "
                                                 f"(<name>-<replica>-0-0-<5 characters>) must fit in 63"))
        if "queue" in spec and engine != "pods":  # on pods, podspec.refusals says why not
            queues = self.queue_list.admitting(lambda found: found is not None and spec["queue"] in found)
            if queues is None:
                errors.append(FieldError("queue", "the cluster has no Kueue (kueue.x-k8s.io): an admin installs it "
                                                  "(see docs/kubernetes.md), or leave the queue out"))
            elif spec["queue"] not in queues:
                errors.append(FieldError("queue", f"no LocalQueue {spec['queue']!r} in namespace {self.ns}; queues: "
                                                  f"{', '.join(queues) or 'none'}"))
        sources = {"data": spec.get("data"), "output": podspec.output_source(spec, self.settings)}
        named = {field_: source["volume"] for field_, source in sources.items() if source and "volume" in source}
        claims = self.claim_list.admitting(lambda found: set(named.values()) <= set(found))
        for field_, volume in named.items():
            if volume not in claims:
                errors.append(FieldError(f"{field_}.volume", f"no PersistentVolumeClaim {volume!r} in "
                                         f"namespace {self.ns}; volumes: {', '.join(sorted(claims)) or 'none'}"))
        if problem := storage.output_path_problem(spec):
            errors.append(FieldError("output.path", problem))
        data = spec.get("data", {})
        if data.get("volume") in claims:
            holds_others = data["volume"] == self.settings.output_claim or \
                (claims[data["volume"]].metadata.labels or {}).get(naming.HOLDS_OUTPUTS) == "true"
            parts = PurePosixPath(data.get("path", "")).parts
            if problem := storage.reading_problem(parts, self.objects.owner, self.settings.read_others_outputs,
                                                  holds_others):
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
        owner, name = self.objects.owner if owner is None else owner, resume[4:]
        try:  # a trial's maker, its sweep's controller, holds its sweep's jobs alone
            earlier = self.objects.job_root(name, beyond_scope=True)
        except JobNotFound:
            return {"volume": self.settings.output_claim, "path": "/".join((*storage.area(owner), name))}
        earlier_spec = json.loads(earlier.data["spec.json"])
        source = podspec.output_source(earlier_spec, self.settings)
        if "host_path" in source:
            raise SpecError([FieldError("resume_from", f"job {name!r} wrote its output to the host path "
                                                       f"{source['host_path']}, which only its nodes have; "
                                                       "name a checkpoint's path instead")])
        return {"volume": source["volume"], "path": storage.output_path(earlier_spec, owner_of(earlier))}

    def mark_holding_outputs(self, spec: dict) -> None:
        """Label the claim the job writes its output to as one holding owners' outputs (HOLDS_OUTPUTS), for
        every later job that reads it as data: its owners/ directory is no one's to read whole; once."""
        volume = podspec.output_source(spec, self.settings).get("volume")
        if volume is None:
            return
        claims = self.claim_list.admitting(lambda found: volume in found)
        if volume in claims and (claims[volume].metadata.labels or {}).get(naming.HOLDS_OUTPUTS) != "true":
            claims[volume] = self.objects.call(lambda: self.core.patch_namespaced_persistent_volume_claim(
                volume, self.ns, {"metadata": {"labels": {naming.HOLDS_OUTPUTS: "true"}}}), f"label volume {volume}")

    def _size_refusals(self, spec: dict) -> builtins.list[FieldError]:
        """The roles asking for more CPUs, memory or GPUs than the largest node they may use (of their GPU type)
        has; none where this identity may not list nodes (a sweep's controller: its trials were checked when it
        was submitted)."""
        errors = self._size_refusals_on(spec, fresh=False)
        return errors and self._size_refusals_on(spec, fresh=True)  # a node may have come meanwhile

    def _size_refusals_on(self, spec: dict, fresh: bool) -> builtins.list[FieldError]:
        try:
            nodes = capacity.free_on_nodes(self.node_list(fresh), [])
        except ApiException as e:
            if e.status != 403:
                raise api_error(e, "list nodes") from None
            return []
        errors = []
        for role in spec["replicas"]:
            kind, asked = gpu_type(spec, role), capacity.role_requests(spec, role)
            allowed = capacity.allowed(nodes, podspec.gpu_nodes(spec, role, self.settings).get("node_selector"))
            for key in capacity.RESOURCES:
                most = max((node["allocatable"][key] for node in allowed.values()), default=0)
                if asked[key] > most:
                    resource = waits.RESOURCE_NAMES[key]
                    have = ", ".join(f"{n}: {waits.number(resource, node['allocatable'][key])}"
                                     for n, node in sorted(allowed.items())) or "no nodes"
                    errors.append(FieldError(
                        f"replicas.{role}.resources.{resource}",
                        f"{waits.amount(resource, asked[key])} per {role} requested; the largest "
                        f"{f'{kind} ' if kind and key == GPU else ''}node has {waits.number(resource, most)} ({have})"))
        return errors

    def _check_sweep(self, spec: dict) -> None:
        """What a sweep needs on Kubernetes, then its trials checked as jobs of their own: the last, which has
        the longest name (they differ in their names and hyperparameters alone)."""
        errors = [] if self.settings.controller_image else [FieldError(
            "sweep", f"this server names no image for the sweep's controller: {NO_IMAGE}")]
        errors += [FieldError(f"output.{key}", "each trial writes to its own directory on the output volume "
                                               "(<volume>/<trial>): a sweep names its output.volume alone")
                   for key in ("path", "host_path") if key in spec.get("output", {})]
        if errors:
            raise SpecError(errors)
        self.check(sweep.trials(spec)[-1])

    def cluster(self) -> dict:
        """What the cluster offers now (read fresh: its answers are then recent for the checks that follow)."""
        engine, why = self.engine(fresh=True)
        pods, counted = self.live_pods(fresh=True)
        nodes = capacity.free_on_nodes(self.nodes(fresh=True), pods)
        offered = {name: node["allocatable"] for name, node in nodes.items()}
        gpus = {name: int(node[GPU]) for name, node in offered.items()}
        free = int(sum(node["free"][GPU] for node in nodes.values()))  # none on a cordoned node
        claims = self.claim_list(fresh=True)
        return {
            "backend": naming.BACKEND,
            "engine": {"name": engine, "reason": why},
            "namespaces": [self.ns],
            "volumes": sorted(claims),
            "queues": self.queue_list(fresh=True) or [],
            "cpus": int(sum(node["cpu"] for node in offered.values())),
            "memory_bytes": int(sum(node["memory"] for node in offered.values())),
            "gpus": {"capacity": sum(gpus.values()), "available": free,
                     "held_in": counted, "devices": [{"node": n, "gpus": count} for n, count in gpus.items() if count]},
        }

    # Nodes and pods of the whole cluster are read as the API server's JSON: the client's models cost ~6x the
    # request itself for a few hundred pods (bench/waiting.py).
    def nodes(self, fresh: bool = False) -> builtins.list[dict]:
        return self.objects.call(lambda: self.node_list(fresh), "list nodes")

    def _live_pods(self) -> tuple[builtins.list[dict], str]:
        """The pods not finished, of every namespace, or of the jobs' namespace only where the service
        account may not list the others (docs/jupyterhub.md: narrowing its rights); and which of the two."""
        live = "status.phase!=Succeeded,status.phase!=Failed"
        try:
            return listed(self.core.list_pod_for_all_namespaces(field_selector=live, _preload_content=False)), \
                "every namespace"
        except ApiException as e:
            if e.status != 403:
                raise api_error(e, "list pods") from None
        return self.objects.call(lambda: listed(self.core.list_namespaced_pod(self.ns, field_selector=live,
                                                                              _preload_content=False)),
                                 "list pods"), self.ns


def listed(response) -> builtins.list[dict]:
    """The items of a list the API server answered (a call made with _preload_content=False)."""
    return json.loads(response.data)["items"]
