"""Kubernetes objects for a job, as plain dicts: pure functions of the spec, the settings
(c.Distrain.*) and the engine that runs the job. No I/O.

    ConfigMap <job>                 the job's root: its spec, engine and cluster addresses; owns the rest

engine "jobset": the cluster's JobSet controller enforces the lifecycle
    JobSet    <job>                 one replicated job per replica (grouped by role: each replica's
                                    environment is its own), its success policy the job's, each Job's
                                    backoff limit and pod failure policy its restart policy, each Job's
                                    active deadline the job's; the controller makes a headless Service
                                    <job> giving pod <job>-<role>-<i>-0-0 a stable DNS name

engine "kubeflow": Kubeflow's Training Operator enforces the lifecycle (tensorflow, keras, pytorch, paddle)
    TFJob | PyTorchJob | PaddleJob <job>
                                    one replica type per role (the operator's names: Paddle's ps is its
                                    Master), its success policy, restart policy, backoff limit and active
                                    deadline the job's; the operator makes pod and headless Service
                                    <job>-<type>-<i> for each replica and sets its framework's variables
                                    (TF_CONFIG, MASTER_ADDR...) itself; the others come from clusterenv,
                                    each replica's picked by the index the operator labels its pod with

engine "pods": this Jupyter server supervises (backends/kube.py applies policy.py)
    Service   <job>-<role>-<i>      headless, one per replica, so each has a stable DNS name
    Pod       <job>-<role>-<i>      one per replica

With a `queue` (jobset or kubeflow), the JobSet or the operator's job carries Kueue's queue-name label and
starts suspended: Kueue admits it (unsuspends it) when its ClusterQueue has the quota.

A replica's pod, whatever the engine: the code fetched by an init container at the pinned commit,
requirements installed (incluster/install.py, which then reports in one line what the replica's Python has),
the command run under incluster/logtee.py, which stamps each line and writes it both to the container's
output (pods/log) and to /output/.distrain/logs/<run>/<replica>.log.
    Pod       <job>-logs            while the server reads those files (they outlive the pods): serves
                                    them read-only from the output volume, then is deleted
    Pod       <job>-purge           on `delete --purge-output`: deletes the job's output directory, which
                                    the delete waits for
    Secret, Deployment, Service <job>-tensorboard
                                    with tensorboard.enabled: one TensorBoard reading the job's
                                    output volume (every replica a run), answering requests that carry
                                    its Secret's secret; it stays until the job is deleted
    Secret    <credentials>         made by `set_credentials`, only ever referenced here
A sweep (engine "sweep") runs no replicas: its controller launches its trials, jobs of their own whose
ConfigMaps the sweep's owns, from the cluster (incluster/sweep.py runs sweep.Controller):
    ServiceAccount, Role, RoleBinding <sweep>-sweeper
                                    the controller's identity: what this server's Role grants (rbac.yaml),
                                    but making sweeps
    Job       <sweep>-sweeper       one pod at a time running the controller (a new one if it fails, or
                                    its node goes), with the output volume's root at /output: the
                                    trials' event files, the sweep's links to them
The namespace's janitor, every owner's, made with the first job that has a policy.ttl_after_finished (janitor):
    ServiceAccount, Role, RoleBinding, CronJob distrain-janitor
                                    on c.Distrain.janitor_schedule, a pod running incluster/janitor.py deletes the
                                    jobs past that time, whether or not a Jupyter server runs
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import shlex
from dataclasses import dataclass
from importlib.resources import files

import yaml

from ... import incluster, snapshot, storage
from ...clusterenv import Dirs, replica_env
from ...code import CREDENTIAL_HELPER
from ...config import Distrain
from ...errors import FieldError, SpecError
from ...incluster import tensorboard as board
from ...policy import success_replicas
from ...spec import gpu_type, gpus, render_command, replica_name, replicas
from ...sweep import is_sweep

GROUP = "distrain.jupyter.org"
MANAGED = {"app.kubernetes.io/managed-by": "jupyter-distrain"}
JOB, ROLE, INDEX, REPLICA, RUN, RESTARTS, ENGINE, OWNER = (f"{GROUP}/{k}" for k in (
    "job", "role", "index", "replica", "run", "restarts", "engine", "owner"))
SWEEP = "sweep"  # the engine label of a sweep's ConfigMap
HOST_PATHS_BY_DEFAULT: tuple[str, ...] = ()  # a shared node's files are no job's to mount
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUBEFLOW_API = "kubeflow.org/v1"
KUBEFLOW_INDEX = "training.kubeflow.org/replica-index"  # the label the Training Operator gives each pod
KUEUE_API = "kueue.x-k8s.io/v1beta1"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"  # the label that puts a JobSet or a Training Operator job in a queue
SIGNALS = list(range(128, 256))  # exit codes of a process killed by a signal: what restart "exit-code" retries
COMPONENT = "app.kubernetes.io/component"
PORTS = {"pytorch": 23456}  # per framework; every other framework uses 2222, as Kubeflow does
WORKSPACE = "/workspace"
SNAPSHOT_DIR, SNAPSHOT_KEY = "/snapshot", "snapshot.bundle"  # where fetch-code finds the bundle (snapshot_secret)
SNAPSHOT_LIMIT = 1 << 20  # the most data a Secret holds
TENSORBOARD_PORT = 6006
BOARD_SUFFIX, BOARD_KEY = "-tensorboard", "secret"  # the TensorBoard's objects, its Secret's key (board_secret)
# the Secrets a job makes are named after it so: no credentials' name ends so
JOB_SECRET_SUFFIXES = {snapshot.SECRET_SUFFIX: "jobs' snapshots of changes", BOARD_SUFFIX: "jobs' TensorBoards"}
TENSORBOARD_PROGRAM = incluster.source("tensorboard")
TEE_PROGRAM = incluster.source("logtee")
READER_PROGRAM = incluster.source("logreader")
HOLDS_OUTPUTS = f"{GROUP}/holds-outputs"  # a claim's label: owners' outputs are in its owners/ directory
RESUME = "resume.json"  # in a job's ConfigMap: the volume and directory it resumes from (mounted at /resume)
VOLUME_LOGS = ".distrain/logs"  # in the output volume: <job's uid>/<run>/<replica>.log (volume_logs)
LOG_READER_PORT = 8080
LOG_FILE = re.compile(r"[a-z]+-[0-9]+\.log")  # a replica's log file: <role>-<index>.log


@dataclass(frozen=True)
class KubeflowKind:
    """How the Training Operator runs a framework: its kind, the field of its replica specs, the container
    and port names it looks for, the replica type of each role, and the variables it sets itself."""

    kind: str
    replica_specs: str
    container: str
    port: str
    types: dict[str, str]
    own_env: frozenset[str]

    @property
    def plural(self) -> str:
        return self.kind.lower() + "s"


TFJOB = KubeflowKind("TFJob", "tfReplicaSpecs", "tensorflow", "tfjob-port",
                     {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"}, frozenset({"TF_CONFIG"}))
KUBEFLOW = {
    "tensorflow": TFJOB, "keras": TFJOB,
    "pytorch": KubeflowKind("PyTorchJob", "pytorchReplicaSpecs", "pytorch", "pytorchjob-port",
                            {"master": "Master", "worker": "Worker"},
                            frozenset({"PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
                                       "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK",
                                       "PET_NPROC_PER_NODE"})),
    "paddle": KubeflowKind("PaddleJob", "paddleReplicaSpecs", "paddle", "master", {"ps": "Master", "worker": "Worker"},
                           frozenset({"PYTHONUNBUFFERED"})),
}
KUBEFLOW_RESTART = {"never": "Never", "on-failure": "OnFailure", "exit-code": "ExitCode"}


def kubeflow_refusal(spec: dict) -> FieldError | None:
    """Why the Training Operator cannot keep this job's policy (None if it can). It decides success by
    replica type: a TFJob by its chief (else worker 0, or with AllWorkers every worker), a PyTorchJob or
    PaddleJob by its Master (else every worker). Paddle's Master is the job's ps, which Paddle ends once
    every trainer is done (trainer 0 stops the pservers, or Paddle's launcher does): `all-workers`."""
    framework = spec.get("framework", "python")
    elsewhere = "; run it on the jobset or pods engine"
    if framework not in KUBEFLOW:
        return FieldError("framework", f"the Training Operator runs tensorflow, keras, pytorch and paddle jobs, "
                                       f"not {framework} ones{elsewhere}")
    kind, roles, success = KUBEFLOW[framework], set(spec["replicas"]), spec["policy"]["success"]
    if "evaluator" in roles:
        return FieldError("replicas.evaluator", f"a {kind.kind} succeeds without waiting for its evaluator, "
                                                f"which the job does{elsewhere}")
    if kind is TFJOB:
        keeps = "chief" if "chief" in roles or success == "chief" else "all-workers"
    elif framework == "pytorch":
        keeps = "chief" if "master" in roles else "all-workers"
    else:  # a PaddleJob's Masters (its parameter servers) end once all its trainers are done
        keeps = "all-workers"
    if success == keeps:
        return None
    return FieldError("policy.success", f"a {kind.kind} with these replicas succeeds as {keeps!r} says, "
                                        f"not {success!r}{elsewhere}")


def object_name(job: str, replica: str) -> str:
    return f"{job}-{replica}"


def replica_of(labels: dict[str, str]) -> str:
    """The replica a pod (or Job) belongs to, from its labels; the Training Operator's pods carry the role
    (their template's) and the index it gives them."""
    return labels.get(REPLICA) or replica_name(labels[ROLE], int(labels[KUBEFLOW_INDEX]))


def port(spec: dict) -> int:
    return PORTS.get(spec.get("framework", "python"), 2222)


def host(spec: dict, replica: str, namespace: str, engine: str) -> str:
    """A replica's stable DNS name: its pod's hostname under the JobSet's Service, or its own Service."""
    job = spec["name"]
    if engine == "jobset":  # the JobSet's Job <job>-<replicated job>-0, whose one pod has index 0
        return f"{object_name(job, replica)}-0-0.{job}.{namespace}.svc"
    if engine == "kubeflow":  # the operator's Service <job>-<replica type>-<index>
        role, _, index = replica.rpartition("-")
        return f"{job}-{KUBEFLOW[spec['framework']].types[role].lower()}-{index}.{namespace}.svc"
    return f"{object_name(job, replica)}.{namespace}.svc"


def addresses(spec: dict, namespace: str, engine: str) -> dict[str, list[str]]:
    """Each role's replica addresses, in index order."""
    out: dict[str, list[str]] = {}
    for role, index in replicas(spec):
        out.setdefault(role, []).append(f"{host(spec, replica_name(role, index), namespace, engine)}:{port(spec)}")
    return out


def labels(job: str, role: str | None = None, index: int = 0) -> dict[str, str]:
    out = {**MANAGED, JOB: job}
    if role is not None:
        out.update({ROLE: role, INDEX: str(index), REPLICA: replica_name(role, index)})
    return out


def label_value(text: str) -> str:
    """`text` as a label value: at most 63 of [A-Za-z0-9_.-], beginning and ending alphanumeric."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63].strip("-_.")


def owner_label(root: dict) -> dict[str, str]:
    """The label naming who submitted the job, as its ConfigMap `root` carries it, for every object and pod
    of the job (whoever renders them: an admin restarting it too)."""
    value = (root["metadata"].get("labels") or {}).get(OWNER)
    return {OWNER: value} if value else {}


def metadata(name: str, settings: Distrain, labels: dict, owner: dict) -> dict:
    """Metadata of an object the job's ConfigMap owns, once it exists (has a uid): deleting it deletes them."""
    meta = {"name": name, "namespace": settings.namespace, "labels": {**labels, **owner_label(owner)}}
    if owner["metadata"].get("uid"):
        meta["ownerReferences"] = [owned_by(owner)]
    return meta


def owned_by(root: dict) -> dict:
    """The reference to a job's ConfigMap (a job's own, or the sweep's a trial is) that makes its garbage
    collector delete what it owns."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": root["metadata"]["name"], "uid": root["metadata"]["uid"],
            "blockOwnerDeletion": True}


def refusals(spec: dict, engine: str) -> list[FieldError]:
    """Why `engine` cannot run the job as its spec says (none if it can)."""
    out = [refusal] if engine == "kubeflow" and (refusal := kubeflow_refusal(spec)) else []
    if "queue" in spec and engine == "pods":
        out.append(FieldError("queue", "Kueue queues JobSets and the Training Operator's jobs; on this cluster "
                                       "the job would run on bare pods (engine pods)"))
    return out


def runnable(spec: dict, engine: str) -> None:
    """Refuse (SpecError) a job `engine` cannot run as its spec says."""
    if errors := refusals(spec, engine):
        raise SpecError(errors)


def root(spec: dict, settings: Distrain, engine: str, resume: dict | None = None) -> dict:
    """The job's ConfigMap: its spec, status and replicas' addresses; its owner as a label (sanitized, to
    select by) and an annotation (exact, to decide by); what it `resume`s from (a claim's `volume` and
    `path`), if anything."""
    runnable(spec, engine)
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": spec["name"], "namespace": settings.namespace,
                     "labels": {**labels(spec["name"]), ENGINE: engine, OWNER: label_value(settings.owner)},
                     "annotations": {OWNER: settings.owner}},
        "data": {
            "spec.json": json.dumps(spec, sort_keys=True),
            "cluster.json": json.dumps(addresses(spec, settings.namespace, engine), sort_keys=True),
            # a sweep's controller makes its trials as this server would
            **({"settings.json": json.dumps(settings.for_cluster(), sort_keys=True)} if engine == SWEEP else {}),
            **({RESUME: json.dumps(resume, sort_keys=True)} if resume else {}),
        },
    }


def service(spec: dict, role: str, index: int, settings: Distrain, owner: dict) -> dict:
    name = object_name(spec["name"], replica_name(role, index))
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(name, settings, labels(spec["name"], role, index), owner),
        "spec": {
            "clusterIP": "None",
            # the name resolves before the pod is ready: workers never race the chief's DNS record
            "publishNotReadyAddresses": True,
            "selector": {JOB: spec["name"], REPLICA: replica_name(role, index)},
            "ports": [{"name": "distrain", "port": port(spec), "targetPort": port(spec)}],
        },
    }


def image(spec: dict, settings: Distrain) -> str:
    return spec.get("image") or settings.default_images.get(spec.get("framework", "python")) or settings.default_images["python"]


def pod(spec: dict, role: str, index: int, settings: Distrain, owner: dict, restarts: int = 0, run: int = 1) -> dict:
    """The replica's pod (engine "pods"), labelled with the job's run it belongs to (its logs are archived
    there)."""
    name = replica_name(role, index)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {**metadata(object_name(spec["name"], name), settings,
                                {**labels(spec["name"], role, index), RUN: str(run)}, owner),
                     "annotations": {RESTARTS: str(restarts)}},
        "spec": {**pod_spec(spec, role, [index], settings, owner, addresses(spec, settings.namespace, "pods"), run),
                 "hostname": object_name(spec["name"], name)},
    }


INSTALL_PROGRAM = incluster.source("install")
INSTALL = f"python -c {shlex.quote(INSTALL_PROGRAM)} || exit 1"  # requirements.txt, then what the Python has


def program(spec: dict, role: str, index: int, addresses: dict[str, list[str]]) -> tuple[dict[str, str], str]:
    """Replica `role`-`index`'s environment and command, as its container sees them."""
    logdir = f"/output/{spec['tensorboard']['logdir']}/{replica_name(role, index)}"
    resume = spec.get("resume_from")
    dirs = Dirs(input="/input", output="/output", logdir=logdir,
                resume_from=("/resume" if resume.startswith("job:") else resume) if resume else None)
    command = render_command(spec)
    return replica_env(spec, addresses, role, index, dirs), command


def pod_spec(spec: dict, role: str, indices: list[int], settings: Distrain, root: dict,
             addresses: dict[str, list[str]], run: int, kubeflow: KubeflowKind | None = None) -> dict:
    """The pod spec of replicas `role`-`indices` in the job's run `run`: one replica's, except on the
    kubeflow engine, where a role's replicas share one template and each runs the branch of its index (the
    operator's label; the kubelet puts it in the log's path too). On that engine the container and port
    have the operator's names and it sets its variables itself."""
    programs = [program(spec, role, index, addresses) for index in indices]
    own = kubeflow.own_env if kubeflow else frozenset()
    envs = [{k: v for k, v in env.items() if k not in own} for env, _ in programs]
    shared = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
    env: list[dict] = [{"name": k, "value": v} for k, v in sorted(shared.items())]
    if len(programs) == 1:
        script = f"exec /bin/sh -c {shlex.quote(programs[0][1])}"
        log = f"{volume_logs(root)}/{run}/{replica_name(role, indices[0])}.log"
    else:
        env.append({"name": "DISTRAIN_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{KUBEFLOW_INDEX}']"}}})
        branches = ["".join([f"  {index})", *(f" export {k}={shlex.quote(v)};" for k, v in sorted(own_env.items())
                                               if k not in shared and k != "DISTRAIN_INDEX"),
                             f" exec /bin/sh -c {shlex.quote(command)};;"])
                    for index, own_env, (_, command) in zip(indices, envs, programs)]
        script = "\n".join(['case "$DISTRAIN_INDEX" in', *branches,
                            '  *) echo "this job has no replica $DISTRAIN_INDEX" >&2; exit 1;;', "esac"])
        log = f"{volume_logs(root)}/{run}/{role}-$(DISTRAIN_INDEX).log"
    volumes, mounts = _volumes(spec, settings, root)
    main = {
        "name": kubeflow.container if kubeflow else "main",
        "image": image(spec, settings),
        "workingDir": WORKSPACE,
        "command": ["python", "-c", TEE_PROGRAM, log, "/bin/sh", "-c", f"{INSTALL}\n{script}"],
        "env": env,
        "ports": [{"name": kubeflow.port if kubeflow else "distrain", "containerPort": port(spec)}],
        "resources": _resources(spec, role),
        "volumeMounts": mounts,
    }
    body = {"restartPolicy": "Never", "containers": [main], "volumes": volumes, **_placement(spec, role, settings)}
    fetch = _fetch_code(spec, settings)
    if fetch:
        body["initContainers"] = [fetch]
    if "snapshot" in spec.get("code", {}):
        body["volumes"] = [*body["volumes"], {"name": "snapshot", "secret": {"secretName": snapshot_name(spec["name"])}}]
    return secured(body, settings)


def secured(pod: dict, settings: Distrain) -> dict:
    """A pod spec as the Pod Security Standard `settings.pod_security` wants it. Every pod this product makes
    passes "baseline" as rendered (unless a spec mounts a host path); "restricted" adds a non-root user
    (settings.run_as_user, also the group and the volumes' group), no privilege escalation, no capabilities
    and the runtime's default seccomp profile. HOME is then the writable workspace, where pip installs a
    job's requirements for that user."""
    if settings.pod_security != "restricted":
        return pod
    uid = settings.run_as_user
    confined = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

    def container(c: dict) -> dict:
        home = [{"name": "HOME", "value": WORKSPACE}] if any(
            m["mountPath"] == WORKSPACE for m in c.get("volumeMounts", [])) else []
        return {**c, "securityContext": confined, **({"env": [*c.get("env", []), *home]} if home else {})}

    return {**pod, "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
                                       "seccompProfile": {"type": "RuntimeDefault"}},
            **{key: [container(c) for c in pod[key]] for key in ("containers", "initContainers") if key in pod}}


def jobset(spec: dict, settings: Distrain, owner: dict, run: int = 1) -> dict:
    """The job as a JobSet (engine "jobset"): the cluster's controller then enforces policy.py's rules.

    - success: the JobSet completes when the chief (master, or worker 0) succeeds, or with
      `all-workers` when every trainer does, and every evaluator has too; the controller then deletes
      the Jobs still running.
    - failure: a replica's Job fails once its pod failed `max_restarts` + 1 times (`never`: once); with
      `exit-code`, at once unless the main container was killed by a signal (exit code 128-255); a
      failed Job fails the JobSet, which deletes the rest.
    - deadline: every Job's activeDeadlineSeconds (counted from its start, so from admission when queued).
    """
    job, policy = spec["name"], spec["policy"]
    success = {"operator": "All", "targetReplicatedJobs": success_replicas(spec)}
    where = addresses(spec, settings.namespace, "jobset")
    replicated = []
    for role, index in replicas(spec):
        pod_labels = {**labels(job, role, index), RUN: str(run), **owner_label(owner)}
        job_spec: dict = {
            "parallelism": 1, "completions": 1, "completionMode": "Indexed",
            "backoffLimit": 0 if policy["restart"] == "never" else policy["max_restarts"],
            "template": {"metadata": {"labels": pod_labels},
                         "spec": pod_spec(spec, role, [index], settings, owner, where, run)},
        }
        if policy["restart"] == "exit-code":
            job_spec["podFailurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": {
                "containerName": "main", "operator": "NotIn", "values": SIGNALS}}]}
        if policy.get("deadline_seconds"):
            job_spec["activeDeadlineSeconds"] = policy["deadline_seconds"]
        replicated.append({"name": replica_name(role, index), "groupName": role, "replicas": 1,
                           "template": {"metadata": {"labels": pod_labels}, "spec": job_spec}})
    return {
        "apiVersion": JOBSET_API, "kind": "JobSet",
        "metadata": metadata(job, settings, engine_labels(spec, run), owner),
        "spec": {"replicatedJobs": replicated, "successPolicy": success, "failurePolicy": {"maxRestarts": 0},
                 "network": {"enableDNSHostnames": True, "subdomain": job, "publishNotReadyAddresses": True},
                 **({"suspend": True} if "queue" in spec else {})},
    }


def engine_labels(spec: dict, run: int) -> dict[str, str]:
    """The engine's object's labels; with a `queue`, Kueue's, so the job starts suspended until Kueue admits it."""
    return {**labels(spec["name"]), RUN: str(run), **({QUEUE_NAME: spec["queue"]} if "queue" in spec else {})}


def kubeflow(spec: dict, settings: Distrain, owner: dict, run: int = 1) -> dict:
    """The job as the Training Operator's kind for its framework (engine "kubeflow"), whose controller then
    enforces the lifecycle: success by its rule (see `kubeflow_refusal`, which `check` applies first),
    each replica's restart policy the job's (Kubeflow's ExitCode retries exit codes 128-255), the job's
    backoff limit `max_restarts` (Kubeflow counts the restarts of all replicas together) and its active
    deadline `deadline_seconds`; when the job ends the operator deletes the pods still running and keeps
    the finished ones."""
    job, policy, kind = spec["name"], spec["policy"], KUBEFLOW[spec["framework"]]
    where = addresses(spec, settings.namespace, "kubeflow")
    indices: dict[str, list[int]] = {}
    for role, index in replicas(spec):
        indices.setdefault(role, []).append(index)
    deadline = {"activeDeadlineSeconds": policy["deadline_seconds"]} if policy.get("deadline_seconds") else {}
    replica_specs = {
        kind.types[role]: {
            "replicas": len(numbers), "restartPolicy": KUBEFLOW_RESTART[policy["restart"]],
            # The operator looks at the job's deadline only when some event reconciles the job; the kubelet
            # ends each pod at the same deadline (counted from the pod's start, so never before the job's),
            # which is one.
            "template": {"metadata": {"labels": {**labels(job), ROLE: role, RUN: str(run), **owner_label(owner)}},
                         "spec": {**pod_spec(spec, role, numbers, settings, owner, where, run, kind), **deadline}}}
        for role, numbers in indices.items()}
    run_policy: dict = {"cleanPodPolicy": "Running", **deadline}
    if policy["restart"] != "never":
        run_policy["backoffLimit"] = policy["max_restarts"]
    if "queue" in spec:
        run_policy["suspend"] = True
    body: dict = {kind.replica_specs: replica_specs, "runPolicy": run_policy}
    if kind is TFJOB and policy["success"] == "all-workers":
        body["successPolicy"] = "AllWorkers"
    if kind.kind == "PyTorchJob":
        body["nprocPerNode"] = "1"  # one process per replica, as on every engine
    return {"apiVersion": KUBEFLOW_API, "kind": kind.kind,
            "metadata": metadata(job, settings, engine_labels(spec, run), owner), "spec": body}


def _fetch_code(spec: dict, settings: Distrain) -> dict | None:
    source = spec.get("code", {})
    if "git" not in source:
        return None
    # The workspace (an emptyDir) is root's; under pod_security "restricted" another user clones into it,
    # and git works in another user's directory only when told it is safe.
    in_workspace = f"git -c safe.directory={WORKSPACE} -C {WORKSPACE}"
    checkout = [["checkout", "--quiet", "--detach", source["commit"]]]
    if "snapshot" in source:  # the checkout's changes on top, from the bundle in the job's Secret
        checkout = snapshot.steps(f"{SNAPSHOT_DIR}/{SNAPSHOT_KEY}", source["snapshot"]["commit"])
    script = " && ".join([f"git clone --quiet --no-checkout -- {shlex.quote(source['git'])} {WORKSPACE}",
                          *(f"{in_workspace} {shlex.join(step)}" for step in checkout)])
    env: list[dict] = [{"name": "GIT_TERMINAL_PROMPT", "value": "0"}]
    if source.get("credentials"):
        script = script.replace("git clone", f"git -c credential.helper={shlex.quote(CREDENTIAL_HELPER)} clone", 1)
        env += [{"name": f"DISTRAIN_GIT_{key.upper()}",
                 "valueFrom": {"secretKeyRef": {"name": source["credentials"], "key": key}}}
                for key in ("username", "password", "host")]
    mounts: list[dict] = [{"name": "workspace", "mountPath": WORKSPACE}]
    if "snapshot" in source:
        mounts.append({"name": "snapshot", "mountPath": SNAPSHOT_DIR, "readOnly": True})
    return {"name": "fetch-code", "image": settings.git_image, "command": ["/bin/sh", "-c", script], "env": env,
            "volumeMounts": mounts}


def snapshot_secret(spec: dict, settings: Distrain, owner: dict, bundle: bytes) -> dict:
    """The Secret holding the bundle of the job's code.snapshot, which its pods' fetch-code mounts; owned by
    the job's ConfigMap, so it goes with the job."""
    meta = metadata(snapshot_name(spec["name"]), settings, {**labels(spec["name"]), COMPONENT: "snapshot"}, owner)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {**meta, "annotations": {OWNER: job_owner(owner)}},
            "data": {SNAPSHOT_KEY: base64.b64encode(bundle).decode()}}


def snapshot_name(job: str) -> str:
    return f"{job}{snapshot.SECRET_SUFFIX}"


def _resources(spec: dict, role: str) -> dict:
    wanted = spec["replicas"][role].get("resources", {})
    amounts = {key: str(wanted[key]) for key in ("cpu", "memory") if key in wanted}
    limits = dict(amounts)
    if gpus(spec, role):
        limits["nvidia.com/gpu"] = str(gpus(spec, role))
    return {key: value for key, value in (("requests", amounts), ("limits", limits)) if value}


def gpu_nodes(spec: dict, role: str, settings: Distrain) -> dict:
    """The admin's GPU type the role names ({} when none): its node_selector and tolerations."""
    kind = gpu_type(spec, role)
    return settings.gpu_types.get(kind, {}) if kind else {}


def _placement(spec: dict, role: str, settings: Distrain) -> dict:
    """Where the scheduler may put a role's pods, and their priority: the admin's GPU type the role names
    and priority class."""
    nodes = gpu_nodes(spec, role, settings)
    placement = {"nodeSelector": nodes.get("node_selector"), "tolerations": nodes.get("tolerations"),
                 "priorityClassName": settings.priority_class}
    return {key: value for key, value in placement.items() if value}


def _volume(source: dict, name: str, sub: str, read_only: bool) -> tuple[dict, dict]:
    """The volume `source` names (a claim, or a host path) and its mount: of the directory `sub` of a claim."""
    if "host_path" in source:
        return ({"name": name, "hostPath": {"path": source["host_path"], "type": "Directory"}},
                {"name": name, "readOnly": read_only})
    mount = {"name": name, "readOnly": read_only, **({"subPath": sub} if sub else {})}
    return {"name": name, "persistentVolumeClaim": {"claimName": source["volume"], "readOnly": read_only}}, mount


def output_source(spec: dict, settings: Distrain) -> dict:
    """Where the job writes its output: the spec's `output`, else its own directory on the output claim."""
    return spec.get("output", {"volume": settings.output_claim})


def job_owner(root: dict) -> str:
    """Who submitted the job, as its ConfigMap `root` says ("" for a job made before jobs had owners)."""
    return (root["metadata"].get("annotations") or {}).get(OWNER, "")


def output_volume(spec: dict, settings: Distrain, root: dict, read_only: bool,
                  owners_directory: bool = False) -> tuple[dict, dict]:
    """The job's output volume, mounting the job's own directory of it (storage.output_path), or with
    `owners_directory` its owner's, which holds the job's and its trials' (a sweep's)."""
    owner = job_owner(root)
    sub = "/".join(storage.area(owner)) if owners_directory else storage.output_path(spec, owner)
    return _volume(output_source(spec, settings), "output", sub, read_only)


def _volumes(spec: dict, settings: Distrain, root: dict) -> tuple[list[dict], list[dict]]:
    volumes = [{"name": "workspace", "emptyDir": {}}]
    mounts: list[dict] = [{"name": "workspace", "mountPath": WORKSPACE}]
    wanted = [("/output", output_volume(spec, settings, root, read_only=False))]
    if "data" in spec:
        wanted.append(("/input", _volume(spec["data"], "input", spec["data"].get("path", ""), True)))
    if resume := json.loads(root["data"].get(RESUME, "null")):
        wanted.append(("/resume", _volume({"volume": resume["volume"]}, "resume", resume["path"], True)))
    for path, (volume, mount) in wanted:
        volumes.append(volume)
        mounts.append({**mount, "mountPath": path})
    return volumes, mounts


def tensorboard_name(job: str) -> str:
    return f"{job}{BOARD_SUFFIX}"  # replicas are <job>-<role>-<index>: no clash


def board_secret(spec: dict, settings: Distrain, owner: dict) -> dict:
    """The Secret holding what the job's TensorBoard asks of every request (incluster/tensorboard.py), made with
    the job and kept across its restarts, so a Jupyter server that read it once keeps it."""
    meta = metadata(tensorboard_name(spec["name"]), settings, {**labels(spec["name"]), COMPONENT: "tensorboard"},
                    owner)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {**meta, "annotations": {OWNER: job_owner(owner)}},
            "stringData": {BOARD_KEY: secrets.token_urlsafe(32)}}


def tensorboard(spec: dict, settings: Distrain, owner: dict) -> list[dict]:
    """The job's TensorBoard: its Secret (board_secret), a Deployment reading the output volume and asking
    every request for that secret, and its Service; none if disabled."""
    if not spec["tensorboard"]["enabled"]:
        return []
    name, tb_labels = tensorboard_name(spec["name"]), {**labels(spec["name"]), COMPONENT: "tensorboard",
                                                       **owner_label(owner)}
    sweep = is_sweep(spec)  # a sweep's reads its owner's directory, where its links to its trials' event files lead
    volume, mount = output_volume(spec, settings, owner, read_only=True, owners_directory=sweep)
    logdir = f"{spec['name']}/{spec['tensorboard']['logdir']}" if sweep else spec["tensorboard"]["logdir"]
    container = {
        "name": "tensorboard",
        # this product's image has TensorBoard (a TensorFlow image need not: TensorFlow no longer requires it)
        "image": settings.controller_image or settings.default_images["tensorflow"],
        "command": ["python", "-c", TENSORBOARD_PROGRAM, "--logdir", f"/output/{logdir}",
                    "--bind_all", "--port", str(TENSORBOARD_PORT)],
        "env": [{"name": board.SECRET_VARIABLE,
                 "valueFrom": {"secretKeyRef": {"name": name, "key": BOARD_KEY}}}],
        "ports": [{"name": "http", "containerPort": TENSORBOARD_PORT}],
        "readinessProbe": {"httpGet": {"path": board.PROBE_PATH, "port": TENSORBOARD_PORT}},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "volumeMounts": [{**mount, "mountPath": "/output"}],
    }
    selector = {JOB: spec["name"], COMPONENT: "tensorboard"}
    return [
        board_secret(spec, settings, owner),
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": metadata(name, settings, tb_labels, owner),
         "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                  "template": {"metadata": {"labels": tb_labels},
                               "spec": secured({"containers": [container], "volumes": [volume]}, settings)}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": metadata(name, settings, tb_labels, owner),
         "spec": {"selector": selector,
                  "ports": [{"name": "http", "port": TENSORBOARD_PORT, "targetPort": TENSORBOARD_PORT}]}},
    ]


def sweeper_name(sweep: str) -> str:
    return f"{sweep}-sweeper"


CONTROLLER_MAKING = {"serviceaccounts", "roles", "rolebindings", "cronjobs"}  # rbac.yaml's rules for making them


def controller_rules() -> list[dict]:
    """What this product's controllers in the cluster (a sweep's, the janitor) may do: what this server's Role
    grants, but make controllers."""
    documents = yaml.safe_load_all((files("jupyter_distrain") / "rbac.yaml").read_text())
    role = next(doc for doc in documents if doc["kind"] == "Role")
    return [rule for rule in role["rules"] if not CONTROLLER_MAKING & set(rule["resources"])]


def identity(meta: dict) -> list[dict]:
    """A controller's ServiceAccount, Role (controller_rules) and RoleBinding, each with metadata `meta`."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": controller_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
         "subjects": [{"kind": "ServiceAccount", "name": meta["name"], "namespace": meta["namespace"]}]},
    ]


def sweeper(spec: dict, settings: Distrain, owner: dict) -> list[dict]:
    """The sweep's controller: its identity and the Job that runs it, acting for the sweep's owner."""
    name, ns = sweeper_name(spec["name"]), settings.namespace
    own = {**labels(spec["name"]), COMPONENT: "sweeper"}
    volume, mount = output_volume(spec, settings, owner, read_only=False, owners_directory=True)
    container = {
        "name": "sweeper", "image": settings.controller_image,
        "command": ["python", "-m", "jupyter_distrain.incluster.sweep", spec["name"], "--namespace", ns,
                    "--owner", settings.owner, "--output", "/output"],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
        "volumeMounts": [{**mount, "mountPath": "/output"}],
    }
    pod = {"serviceAccountName": name, "restartPolicy": "Never", "containers": [container], "volumes": [volume]}
    return [*identity(metadata(name, settings, own, owner)),
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(name, settings, own, owner),
             "spec": {"backoffLimit": 10, "template": {"metadata": {"labels": {**own, **owner_label(owner)}},
                                                       "spec": secured(pod, settings)}}}]


JANITOR = "distrain-janitor"


def janitor(settings: Distrain) -> list[dict]:
    """The namespace's janitor, every owner's: its identity and the CronJob that runs incluster/janitor.py on
    `settings.janitor_schedule`, one run at a time, keeping the last run's pod of each outcome."""
    own = {**MANAGED, COMPONENT: "janitor"}
    meta = {"name": JANITOR, "namespace": settings.namespace, "labels": own}
    container = {"name": "janitor", "image": settings.controller_image,
                 "command": ["python", "-m", "jupyter_distrain.incluster.janitor",
                             "--namespace", settings.namespace],
                 "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}
    pod = {"serviceAccountName": JANITOR, "restartPolicy": "Never", "containers": [container]}
    return [*identity(meta),
            {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta, "spec": {
                "schedule": settings.janitor_schedule, "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1,
                "jobTemplate": {"metadata": {"labels": own}, "spec": {"backoffLimit": 0, "template": {
                    "metadata": {"labels": own}, "spec": secured(pod, settings)}}}}}]


def log_reader_name(job: str) -> str:
    return f"{job}-logs"


def volume_pod(spec: dict, settings: Distrain, owner: dict, name: str, component: str, container: dict,
               volume: tuple[dict, dict]) -> dict:
    """A pod the server makes for a while beside the job (a log reader, a purger) and then deletes, owned by
    the job's ConfigMap: `container`, in the job's image, with `volume` (and its mount) at /output; it ends by
    itself after 10 minutes."""
    source, mount = volume
    container = {**container, "image": image(spec, settings), "volumeMounts": [{**mount, "mountPath": "/output"}],
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": metadata(name, settings, {**labels(spec["name"]), COMPONENT: component}, owner),
            "spec": secured({"containers": [container], "volumes": [source], "restartPolicy": "Never",
                             "activeDeadlineSeconds": 600}, settings)}


def volume_logs(root: dict) -> str:
    """Where the replicas write their log files on the job's output volume, a directory per job (its ConfigMap's
    uid; UID where it is not made yet), so a job made under the name of one deleted with its output kept
    starts with none of the old one's lines."""
    return f"/output/{VOLUME_LOGS}/{root['metadata'].get('uid', 'UID')}"


def log_reader(spec: dict, settings: Distrain, owner: dict) -> dict:
    """A pod serving, read-only, the log files the job's replicas wrote to its output volume
    (incluster/logreader.py)."""
    container = {
        "name": "reader",
        "command": ["python", "-c", READER_PROGRAM, volume_logs(owner), str(LOG_READER_PORT)],
        "ports": [{"name": "http", "containerPort": LOG_READER_PORT}],
        "readinessProbe": {"httpGet": {"path": "/", "port": LOG_READER_PORT}, "periodSeconds": 1},
    }
    return volume_pod(spec, settings, owner, log_reader_name(spec["name"]), "log-reader", container,
                      output_volume(spec, settings, owner, read_only=True))


PURGE_PROGRAM = """import os, shutil, sys
root = os.path.realpath(sys.argv[1])
path = os.path.realpath(os.path.join(root, sys.argv[2]))  # links resolved: nothing outside the volume goes
if path.startswith(root + os.sep) and os.path.isdir(path):
    shutil.rmtree(path)
"""


def purger_name(job: str) -> str:
    return f"{job}-purge"


def purger(spec: dict, settings: Distrain, owner: dict) -> dict | None:
    """A pod deleting the job's own output directory on its volume (the volume's root mounted), owned by the
    job's ConfigMap; None where the output is no directory of the job's own (a host path, its owner's whole
    directory, or a whole volume: storage.purgeable), which stays."""
    source = output_source(spec, settings)
    parts = storage.output_parts(spec, job_owner(owner))
    if "host_path" in source or not storage.purgeable(parts, job_owner(owner)):
        return None
    directory = "/".join(parts)
    container = {"name": "purge", "command": ["python", "-c", PURGE_PROGRAM, "/output", directory]}
    return volume_pod(spec, settings, owner, purger_name(spec["name"]), "purger", container,
                      _volume({"volume": source["volume"]}, "output", "", read_only=False))


def engine_resource(spec: dict, engine: str) -> tuple[str, str]:
    """(API version, resource) of the one object that runs the job on an engine ("jobset" or "kubeflow")."""
    if engine == "jobset":
        return JOBSET_API, "jobsets"
    return KUBEFLOW_API, KUBEFLOW[spec["framework"]].plural


def workload(spec: dict, settings: Distrain, owner: dict, engine: str, run: int = 1) -> list[dict]:
    """What runs the job's replicas on `engine` (a sweep's: its controller)."""
    if engine == SWEEP:
        return sweeper(spec, settings, owner)
    if engine == "jobset":
        return [jobset(spec, settings, owner, run)]
    if engine == "kubeflow":
        runnable(spec, engine)
        return [kubeflow(spec, settings, owner, run)]
    objects = []
    for role, index in replicas(spec):
        objects += [service(spec, role, index, settings, owner), pod(spec, role, index, settings, owner, run=run)]
    return objects


def render(spec: dict, settings: Distrain, engine: str, bundle: bytes | None = None) -> list[dict]:
    """Every object of the job, the ConfigMap first (the others are owned by it once it exists), with the
    Secret of its snapshot's `bundle` if it has one."""
    owner = root(spec, settings, engine)
    secret = [snapshot_secret(spec, settings, owner, bundle)] if bundle is not None else []
    return [owner, *secret, *workload(spec, settings, owner, engine), *tensorboard(spec, settings, owner)]
